"""Clock journals: the snapshot the guard writes to disk before touching a clock.

A journal is a small JSON file in `<state dir>/journals`, named after the device it
belongs to (`device_key`). This module reads, writes and lists them, and tells whether
the process that wrote one is still alive; restoring them is the guard's job.

Two kinds of journal:
- `session`: owned by a live process; stale once that process is gone.
- `pinned`: left on purpose by `slm-dvfs pin`; only `slm-dvfs restore` undoes it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from engine.core import paths
from engine.core.errors import DeviceError, SlmDvfsError
from engine.device.base import Device, DeviceSettings

log = logging.getLogger(__name__)

SESSION = "session"
PINNED = "pinned"


@dataclass(frozen=True)
class Journal:
    """What the guard writes before touching a clock."""

    kind: str  # SESSION | PINNED
    pid: int
    pid_start: str | None  # the process's start time, so a reused pid is not mistaken for ours
    host: str
    created: float
    device: dict[str, Any]  # Device.describe(): how to reopen it from another process
    settings: DeviceSettings
    path: Path
    jetson_clocks_store: str | None = None  # `jetson_clocks --store` file to restore from first

    def to_json(self) -> dict[str, Any]:
        return {
            "version": 1,
            "kind": self.kind,
            "pid": self.pid,
            "pid_start": self.pid_start,
            "host": self.host,
            "created": self.created,
            "device": self.device,
            "settings": self.settings.to_json(),
            "jetson_clocks_store": self.jetson_clocks_store,
        }

    @classmethod
    def read(cls, path: Path) -> "Journal":
        try:
            data = json.loads(path.read_text())
            return cls(
                kind=str(data["kind"]),
                pid=int(data["pid"]),
                pid_start=data.get("pid_start"),
                host=str(data.get("host", "")),
                created=float(data.get("created", 0.0)),
                device=dict(data["device"]),
                settings=DeviceSettings.from_json(data["settings"]),
                path=path,
                jetson_clocks_store=None if data.get("jetson_clocks_store") is None
                else str(data["jetson_clocks_store"]),
            )
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise SlmDvfsError(
                f"clock journal {path} is unreadable ({exc})",
                "restore the clocks by hand (`sudo nvpmodel -m 0` resets the mode's clocks; or "
                "reboot), then delete the file",
            ) from None

    def owner_alive(self) -> bool:
        if self.host != socket.gethostname():
            return True  # a shared state dir: never steal another machine's journal
        return process_alive(self.pid, self.pid_start)


def journal_dir() -> Path:
    return paths.state_dir() / "journals"


def device_key(description: dict[str, Any]) -> str:
    """A short stable name for one device (a board root or a twin root)."""
    raw = json.dumps(description, sort_keys=True).encode()
    return hashlib.sha256(raw).hexdigest()[:12]


def reopen_device(description: dict[str, Any]) -> Device:
    """Open the device a journal names, in this process."""
    kind = description.get("kind")
    if kind == "jetson":
        from engine.device.jetson import JetsonDevice

        return JetsonDevice.from_description(description)
    raise DeviceError(
        f"journal names a device of unknown kind {kind!r}",
        "this journal was written by a newer slm-dvfs; restore with that version",
    )


@dataclass(frozen=True)
class JournalProblem:
    """A journal that was kept because it could not be used now, and what to do about it."""

    path: Path
    root: str | None  # the device root the journal names, when that could be read
    what: str
    remedy: str

    def describe(self) -> str:
        return f"{self.path} (device {self.root or 'unknown'}): {self.what}\n  What to do: {self.remedy}"


def scan_journals(directory: Path | None = None) -> tuple[list[Journal], list[JournalProblem]]:
    """Every journal, oldest first, and the files that could not be read as one."""
    directory = directory or journal_dir()
    if not directory.is_dir():
        return [], []
    found: list[Journal] = []
    bad: list[JournalProblem] = []
    for p in sorted(directory.glob("*.json")):
        try:
            found.append(Journal.read(p))
        except SlmDvfsError as exc:
            bad.append(JournalProblem(p, _root_hint(p), exc.what, exc.remedy))
    return sorted(found, key=lambda j: j.created), bad


def list_journals(directory: Path | None = None) -> list[Journal]:
    """The readable journals, oldest first; an unreadable one is logged and left in place."""
    journals, bad = scan_journals(directory)
    for b in bad:
        log.warning("skipping clock journal %s (device %s): %s", b.path, b.root or "unknown", b.what)
    return journals


def describe_journals(journals: list[Journal] | tuple[Journal, ...]) -> Iterator[str]:
    for j in journals:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(j.created))
        yield f"{j.kind} journal from pid {j.pid} at {when} for {j.device.get('root', '?')}"


def atomic_write(path: Path, data: dict[str, Any]) -> None:
    """Write a journal so that a crash leaves the old file or the new one, never half of one."""
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w") as fh:
        json.dump(data, fh, indent=1)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _root_hint(path: Path) -> str | None:
    """The device root a damaged journal names, if its text still shows it."""
    try:
        m = re.search(r'"root"\s*:\s*"([^"]*)"', path.read_text(errors="replace"))
    except OSError:
        return None
    return m.group(1) if m else None


# --- process liveness ----------------------------------------------------------------------
def process_start(pid: int) -> str | None:
    """Start time of a process in clock ticks since boot (Linux), None elsewhere."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name may hold spaces and parentheses: split after the last ')'.
    fields = stat.rsplit(")", 1)[1].split()
    return fields[19] if len(fields) > 19 else None


def process_alive(pid: int, start: str | None) -> bool:
    """Whether `pid` still runs the process that started at `start` (None: any process)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, owned by someone else
    if start is not None:
        now = process_start(pid)
        if now is not None and now != start:
            return False  # the pid was reused by another process
        if now is None:
            return False
    # A zombie (killed, not yet reaped) is gone for our purposes.
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        if state == "Z":
            return False
    except (OSError, IndexError):
        pass
    return True
