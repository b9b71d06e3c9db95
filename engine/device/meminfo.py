"""The memory a board's Linux sees, from /proc/meminfo under its root (a board's `/`, a twin's tree).

Jetson memory is unified: one LPDDR pool that the CPU, the GPU and the OS share, so MemTotal
is what a fine-tuning process (its tensors on the GPU and its host side alike) competes for.
MemTotal is the module's DRAM less the carve-outs firmware reserves before Linux starts
(tegrastats' `RAM used/totalMB` shows the same figure): 62,841 MiB on an AGX Orin 64GB.
A twin renders the file from its profile's `memory_total_mb` (engine.device.treegen).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from engine.core.errors import DeviceError
from engine.device.sysfs import SysfsTree

log = logging.getLogger(__name__)

MEMINFO = "proc/meminfo"
KIB = 1024


@dataclass(frozen=True)
class MemInfo:
    """/proc/meminfo's figures that sizing needs, in bytes."""

    total_bytes: int  # MemTotal
    available_bytes: int | None = None  # MemAvailable (a board's; a twin renders none)

    @property
    def used_bytes(self) -> int | None:
        return None if self.available_bytes is None else self.total_bytes - self.available_bytes


def parse_meminfo(text: str) -> MemInfo | None:
    """The figures of a /proc/meminfo text (`MemTotal:  64349184 kB` lines); None without a
    usable MemTotal."""
    values: dict[str, int] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        words = rest.split()
        if not words or not words[0].isdigit():
            continue
        unit = words[1].lower() if len(words) > 1 else ""
        values[key.strip()] = int(words[0]) * (KIB if unit == "kb" else 1)
    total = values.get("MemTotal")
    if not total:
        return None
    return MemInfo(total_bytes=total, available_bytes=values.get("MemAvailable"))


def read_meminfo(root: str | os.PathLike[str]) -> MemInfo | None:
    """/proc/meminfo under `root` (read as every tree file is: never through a link out of the
    tree); None where it is missing or holds no MemTotal."""
    tree = SysfsTree(Path(root))
    if not tree.exists(MEMINFO):
        return None
    try:
        info = parse_meminfo(tree.read_str(MEMINFO))
    except DeviceError as exc:
        log.warning("cannot read %s: %s", tree.path(MEMINFO), exc.what)
        return None
    if info is None:
        log.warning("%s holds no MemTotal", tree.path(MEMINFO))
    return info


def mem_total_bytes(root: str | os.PathLike[str]) -> int | None:
    """MemTotal under `root` in bytes; None where it cannot be read."""
    info = read_meminfo(root)
    return None if info is None else info.total_bytes


def render_meminfo(total_bytes: int, available_bytes: int | None = None) -> str:
    """A /proc/meminfo text with MemTotal (what a twin knows of its memory) and, for a board's
    tree in tests, MemAvailable."""
    text = f"MemTotal:       {int(total_bytes) // KIB:>8} kB\n"
    if available_bytes is not None:
        text += f"MemAvailable:   {int(available_bytes) // KIB:>8} kB\n"
    return text
