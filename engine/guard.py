"""The clock guard: whatever we change on the board, we put back, however we stop.

Before the first change the guard snapshots every setting it may touch
(`Device.read_settings`) and writes a journal to the state directory. It restores
on normal exit, on an exception, on SIGINT/SIGTERM/SIGHUP and at interpreter exit.
A SIGKILL cannot be caught, so the journal stays behind: the next start of the
tool finds journals whose process is gone and restores them (`recover_stale`),
and `slm-dvfs restore` does it by hand.

Two kinds of journal:
- `session`: owned by a live process; stale once that process is gone.
- `pinned`: left on purpose by `slm-dvfs pin`; only `slm-dvfs restore` undoes it.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import logging
import os
import signal
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, Iterator

from engine import paths
from engine.device.base import Device, DeviceSettings
from engine.errors import DeviceError, SlmDvfsError

log = logging.getLogger(__name__)

SESSION = "session"
PINNED = "pinned"
_SIGNALS = tuple(s for s in (getattr(signal, n, None) for n in ("SIGINT", "SIGTERM", "SIGHUP")) if s)


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
        return _process_alive(self.pid, self.pid_start)


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


def list_journals(directory: Path | None = None) -> list[Journal]:
    directory = directory or journal_dir()
    if not directory.is_dir():
        return []
    found = [Journal.read(p) for p in sorted(directory.glob("*.json"))]
    return sorted(found, key=lambda j: j.created)


def restore_journal(journal: Journal, device: Device | None = None) -> None:
    """Apply a journal's snapshot and delete it (only once the apply worked)."""
    device = device or reopen_device(journal.device)
    device.apply_settings(journal.settings)
    journal.path.unlink(missing_ok=True)
    log.info("restored clocks from %s", journal.path.name)


def recover_stale(directory: Path | None = None) -> list[Journal]:
    """Restore every session journal whose process is gone. Returns what it restored.

    The oldest snapshot of a device wins: it is the state from before any of us.
    """
    restored: list[Journal] = []
    by_device: dict[str, list[Journal]] = {}
    for j in list_journals(directory):
        if j.kind == SESSION and not j.owner_alive():
            by_device.setdefault(device_key(j.device), []).append(j)
    for journals in by_device.values():
        oldest, *newer = journals  # list_journals sorts by creation time
        restore_journal(oldest)
        for j in newer:
            j.path.unlink(missing_ok=True)
        log.warning(
            "restored clocks left changed by process %d (it did not exit cleanly)", oldest.pid
        )
        restored.append(oldest)
    return restored


def restore_all(directory: Path | None = None) -> list[Journal]:
    """`slm-dvfs restore`: undo pins and dead sessions, oldest snapshot per device first.

    Journals of live sessions are left to their owners.
    """
    restored: list[Journal] = []
    done: set[str] = set()
    for j in list_journals(directory):
        key = device_key(j.device)
        if j.kind == SESSION and j.owner_alive():
            continue
        if key in done:
            j.path.unlink(missing_ok=True)  # a later snapshot of a device already restored
            continue
        restore_journal(j)
        done.add(key)
        restored.append(j)
    return restored


class ClockGuard:
    """Context manager that journals a device's settings and restores them on any exit.

    `keep()` turns the session into a pin that outlives the process (for `slm-dvfs pin`).
    """

    def __init__(
        self,
        device: Device,
        *,
        directory: Path | None = None,
        handle_signals: bool = True,
        recover: bool = True,
    ) -> None:
        self.device = device
        self.directory = directory or journal_dir()
        self.handle_signals = handle_signals
        self.recover = recover
        self.snapshot: DeviceSettings | None = None
        self.recovered: list[Journal] = []
        self._journal_path: Path | None = None
        self._lock = threading.RLock()
        self._restored = False
        self._kept = False
        self._old_handlers: dict[int, Any] = {}

    # --- lifecycle -------------------------------------------------------------------
    def __enter__(self) -> "ClockGuard":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        if self.recover:
            self.recovered = recover_stale(self.directory)
        self.snapshot = self.device.read_settings()
        self.directory.mkdir(parents=True, exist_ok=True)
        description = self.device.describe()
        path = self.directory / f"{device_key(description)}-{SESSION}-{os.getpid()}-{time.time_ns()}.json"
        journal = Journal(
            kind=SESSION,
            pid=os.getpid(),
            pid_start=_process_start(os.getpid()),
            host=socket.gethostname(),
            created=time.time(),
            device=description,
            settings=self.snapshot,
            path=path,
        )
        _atomic_write(path, journal.to_json())
        self._journal_path = path
        atexit.register(self.restore)
        if self.handle_signals:
            self._install_handlers()

    def restore(self) -> None:
        """Put every setting back as it was at start (idempotent)."""
        with self._lock:
            if self._restored or self._kept or self.snapshot is None:
                return
            self.device.apply_settings(self.snapshot)
            self._restored = True
            if self._journal_path is not None:
                self._journal_path.unlink(missing_ok=True)
            log.info("clocks restored")

    def keep(self) -> Path:
        """Leave the changes in place when we exit, journalled as a pin for `slm-dvfs restore`."""
        with self._lock:
            if self._journal_path is None or self.snapshot is None:
                raise SlmDvfsError("the guard was not started", "use the guard as a context manager")
            description = self.device.describe()
            pinned = self.directory / f"{device_key(description)}-{PINNED}.json"
            if pinned.exists():
                # An earlier pin holds the true original state: keep it, drop ours.
                self._journal_path.unlink(missing_ok=True)
            else:
                data = json.loads(self._journal_path.read_text())
                data["kind"] = PINNED
                _atomic_write(pinned, data)
                self._journal_path.unlink(missing_ok=True)
            self._journal_path = pinned
            self._kept = True
            return pinned

    def close(self) -> None:
        try:
            self.restore()
        finally:
            self._uninstall_handlers()
            atexit.unregister(self.restore)

    @property
    def active(self) -> bool:
        return self.snapshot is not None and not self._restored and not self._kept

    # --- signals ---------------------------------------------------------------------
    def _install_handlers(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            log.debug("not the main thread: signal handlers left alone (atexit still restores)")
            return
        for sig in _SIGNALS:
            self._old_handlers[sig] = signal.signal(sig, self._on_signal)

    def _uninstall_handlers(self) -> None:
        for sig, old in self._old_handlers.items():
            try:
                signal.signal(sig, old)
            except (ValueError, TypeError):  # pragma: no cover - not main thread at exit
                pass
        self._old_handlers.clear()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        log.warning("signal %s: restoring clocks", signal.Signals(signum).name)
        try:
            self.restore()
        except Exception:  # noqa: BLE001 - a failed restore leaves the journal for next start
            log.exception("restoring clocks failed; the journal stays for `slm-dvfs restore`")
        old = self._old_handlers.get(signum)
        if signum == signal.SIGINT:
            if callable(old) and old is not signal.default_int_handler:
                old(signum, frame)
            raise KeyboardInterrupt
        if callable(old):
            old(signum, frame)
        raise SystemExit(128 + signum)


def guarded(device: Device, **kwargs: Any) -> ClockGuard:
    """Shorthand: `with guarded(device): ...`."""
    return ClockGuard(device, **kwargs)


def describe_journals(journals: list[Journal]) -> Iterator[str]:
    for j in journals:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(j.created))
        yield f"{j.kind} journal from pid {j.pid} at {when} for {j.device.get('root', '?')}"


# --- helpers -----------------------------------------------------------------------------
def _atomic_write(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w") as fh:
        json.dump(data, fh, indent=1)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _process_start(pid: int) -> str | None:
    """Start time of a process in clock ticks since boot (Linux), None elsewhere."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name may hold spaces and parentheses: split after the last ')'.
    fields = stat.rsplit(")", 1)[1].split()
    return fields[19] if len(fields) > 19 else None


def _process_alive(pid: int, start: str | None) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, owned by someone else
    if start is not None:
        now = _process_start(pid)
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

