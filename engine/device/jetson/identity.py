"""Who a Jetson is: board and module names, the L4T and JetPack releases, and whether the
tree under the root is a digital twin (it carries a `.slm-dvfs-twin` marker file)."""

from __future__ import annotations

import logging
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from engine.core.errors import DeviceError
from engine.device.base import DeviceIdentity
from engine.device.meminfo import mem_total_bytes
from engine.device.sysfs import TWIN_MARKER, SysfsTree

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 (JetPack 6)
    import tomli as tomllib

log = logging.getLogger(__name__)

@dataclass(frozen=True)
class ModuleMatch:
    """What the device tree's `compatible` says the module is."""

    part: str | None  # "p3767-0003"; None when no module part is named
    name: str  # "P3767-0003 (Orin Nano 8GB)", or "unknown module ..." naming what was found
    profile: str  # the shipped device profile of that module, or the one an unknown module falls back to
    known: bool


# Module part numbers as they appear in the device tree's `compatible`, with their device profile
# (profiles/devices/<profile>.toml). Parts: jetson-stats' module table (jtop/core/jetson_variables.py,
# MODULE_NAME_TABLE, https://github.com/rbonghi/jetson_stats) and NVIDIA's Jetson Linux Quick Start
# (https://docs.nvidia.com/jetson/archives/r36.4.3/DeveloperGuide/IN/QuickStart.html, "Jetson Modules
# and Configurations"). The carriers (p3737 AGX devkit, p3768 Orin Nano/NX devkit, p3509) are never the module.
MODULES: dict[str, tuple[str, str]] = {
    "p3701-0000": ("P3701-0000 (AGX Orin 64GB)", "agx-orin-64gb"),
    "p3701-0004": ("P3701-0004 (AGX Orin 32GB)", "agx-orin-32gb"),
    "p3701-0005": ("P3701-0005 (AGX Orin 64GB)", "agx-orin-64gb"),
    "p3701-0008": ("P3701-0008 (AGX Orin Industrial 64GB)", "agx-orin-industrial-64gb"),
    "p3767-0000": ("P3767-0000 (Orin NX 16GB)", "orin-nx-16gb"),
    "p3767-0001": ("P3767-0001 (Orin NX 8GB)", "orin-nx-8gb"),
    "p3767-0003": ("P3767-0003 (Orin Nano 8GB)", "orin-nano-8gb"),
    "p3767-0004": ("P3767-0004 (Orin Nano 4GB)", "orin-nano-4gb"),
    "p3767-0005": ("P3767-0005 (Orin Nano 8GB, developer kit module)", "orin-nano-8gb"),
}
CARRIERS = ("p3737", "p3768", "p3509")  # developer-kit carrier boards: never the module
# An unknown module of a known family falls back to that family's profile; anything else to the AGX 64GB's.
FAMILY_FALLBACK = {"p3701": "agx-orin-64gb", "p3767": "orin-nano-8gb"}
FALLBACK_PROFILE = "agx-orin-64gb"

# L4T release -> JetPack, exact first, then by major.minor, then by major. Sources: NVIDIA's JetPack
# archive (https://developer.nvidia.com/embedded/jetpack-archive) as jetson-stats tabulates it
# (jtop/core/jetson_variables.py, NVIDIA_JETPACK): r36.4.3 is 6.2, r36.4.4/36.4.7 6.2.1, r38.2 7.0,
# r38.4 7.1, r39 7.2 (r38 runs on Thor only; r39 on the Orin too).
_JETPACK_EXACT = {
    "39.2.0": "7.2", "39.0.0": "7.2 EA", "38.4.0": "7.1", "38.2.2": "7.0", "38.2.1": "7.0", "38.2.0": "7.0",
    "36.5.0": "6.2.2", "36.4.7": "6.2.1",
    "36.4.4": "6.2.1", "36.4.3": "6.2", "36.4.2": "6.1 (rev1)", "36.4.0": "6.1", "36.3.0": "6.0", "36.2.0": "6.0 DP",
    "35.6.1": "5.1.5", "35.6.0": "5.1.4", "35.5.0": "5.1.3", "35.4.1": "5.1.2", "35.3.1": "5.1.1",
    "35.2.1": "5.1", "35.1.0": "5.0.2", "34.1.1": "5.0.1 DP", "34.1.0": "5.0 DP",
    "32.7.6": "4.6.6", "32.7.5": "4.6.5", "32.7.4": "4.6.4", "32.7.3": "4.6.3", "32.7.2": "4.6.2",
    "32.7.1": "4.6.1", "32.6.1": "4.6", "32.5.1": "4.5.1", "32.5.0": "4.5",
}  # fmt: skip
_JETPACK_MINOR = {"39.2": "7.2", "39.0": "7.2 EA", "38.4": "7.1", "38.2": "7.0",
                  "36.4": "6.1/6.2", "36.3": "6.0", "35.6": "5.1.4", "35.5": "5.1.3", "35.4": "5.1.2", "32.7": "4.6.x"}
_JETPACK_MAJOR = {"39": "7.x", "38": "7.x", "36": "6.x", "35": "5.1.x", "34": "5.0 DP", "32": "4.x"}


def jetpack_for(l4t: str | None) -> str | None:
    """The JetPack release that ships an L4T release ("36.3.0" -> "6.0")."""
    if not l4t:
        return None
    parts = l4t.split(".")
    return (
        _JETPACK_EXACT.get(l4t)
        or _JETPACK_MINOR.get(".".join(parts[:2]))
        or _JETPACK_MAJOR.get(parts[0])
    )


def match_module(compatible: str) -> ModuleMatch:
    """The module a NUL-separated `compatible` names ("nvidia,p3768-0000+p3767-0005\0...") and its
    profile; an unknown module is named as found, with the profile it falls back to."""
    parts = re.findall(r"p\d{4}-\d{4}", compatible.replace("\0", " "))
    for part in parts:
        if part in MODULES:
            name, profile = MODULES[part]
            return ModuleMatch(part, name, profile, known=True)
    modules = [p for p in parts if not p.startswith(CARRIERS)]
    part = modules[0] if modules else None
    profile = FAMILY_FALLBACK.get(part.split("-")[0], FALLBACK_PROFILE) if part else FALLBACK_PROFILE
    found = f" {part.upper()}" if part else ""
    return ModuleMatch(part, f"unknown module{found} (treated as {profile})", profile, known=False)


def profile_of_module(module: str) -> str | None:
    """The shipped profile a stored module name (match_module's) stands for: a known module's, or the one an
    unknown module was treated as; None for a name neither gives (a record from before modules had profiles)."""
    for name, profile in MODULES.values():
        if module == name:
            return profile
    treated = re.search(r"\(treated as ([\w.-]+)\)", module)
    return treated.group(1) if treated else None


def module_for(compatible: str) -> str:
    """The module part from a NUL-separated `compatible` ("nvidia,p3737-0000+p3701-0000...")."""
    return match_module(compatible).name


def read_identity(tree: SysfsTree) -> DeviceIdentity:
    """The identity of the board (or twin) whose files are under `tree`."""
    board = tree.read_str("proc/device-tree/model").replace("\0", "").strip()
    try:
        match = match_module(tree.read_str("proc/device-tree/compatible"))
    except DeviceError:
        match = match_module("")
    if not match.known:
        log.warning("%s on %s: working generically with the %s profile's figures (power limit, memory) "
                    "where the board's own files do not say", match.name, board or "this board", match.profile)
    l4t = read_l4t(tree)
    profile = twin_profile(tree.root)
    return DeviceIdentity(
        board=board,
        module=match.name,
        l4t=l4t,
        jetpack=jetpack_for(l4t),
        is_twin=profile is not None,
        profile=profile or None,
        serial=read_serial(tree),
        module_profile=match.profile,
        module_known=match.known,
        memory_total_mb=read_memory_total_mb(tree),
    )


def read_memory_total_mb(tree: SysfsTree) -> float | None:
    """MemTotal of proc/meminfo in MiB (what tegrastats' `RAM used/totalMB` shows), None where unreadable
    (engine.device.meminfo: the one reader, which memory fit uses too)."""
    try:
        total = mem_total_bytes(tree.root)
    except UnicodeDecodeError:
        return None
    return None if total is None else round(total / 1024.0 / 1024.0, 1)


def read_serial(tree: SysfsTree) -> str | None:
    """The device tree's serial-number (NUL-terminated on a board), None where there is none."""
    try:
        serial = tree.read_str("proc/device-tree/serial-number").replace("\0", "").strip()
    except (DeviceError, UnicodeDecodeError):
        return None
    return serial or None


def read_l4t(tree: SysfsTree) -> str | None:
    """The L4T release from etc/nv_tegra_release ("36.3.0"), None when it cannot be read."""
    try:
        text = tree.read_str("etc/nv_tegra_release")
    except DeviceError:
        return None
    m = re.search(r"#\s*R(\d+)\s*\(release\),\s*REVISION:\s*([\d.]+)", text)
    if not m:
        log.warning("unrecognised etc/nv_tegra_release: %r", text[:120])
        return None
    rev = m.group(2).rstrip(".")
    return f"{m.group(1)}.{rev}" if rev.count(".") >= 1 else f"{m.group(1)}.{rev}.0"


def twin_profile(root: Path) -> str | None:
    """The twin's profile name from its marker; "" for a twin without a profile, None for a board.
    The marker is read as every tree file is (never through a link out of the tree)."""
    tree = SysfsTree(root)
    if not tree.exists(TWIN_MARKER):
        return None
    try:
        data = tomllib.loads(tree.read_str(TWIN_MARKER))
    except tomllib.TOMLDecodeError as exc:
        raise DeviceError(
            f"{tree.path(TWIN_MARKER)} is not valid TOML ({exc})",
            'it should hold one line like `profile = "agx-orin-64gb"`; re-create the twin',
        ) from None
    return str(data.get("profile", ""))
