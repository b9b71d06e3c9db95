"""The clock guard: whatever we change on the board, we put back, however we stop.

Before the first change the guard snapshots every setting it may touch
(`Device.read_settings`) and writes a journal to the state directory. It restores
on normal exit, on an exception, on SIGINT/SIGTERM/SIGHUP and at interpreter exit.
A SIGKILL cannot be caught, so the journal stays behind: the next start of the
tool finds journals whose process is gone and restores them (`recover_stale`),
and `slm-dvfs restore` does it by hand.

One session at a time per device: the guard holds an exclusive lock
(`journals/<device key>.lock`, flock) for its life, so two runs cannot pin the same
board's clocks over each other; the kernel drops the lock of a process that dies.

A journal that cannot be used (corrupt, or naming a device root that has gone) never
blocks other work: it is logged, kept, and reported by `slm-dvfs restore`.

Two kinds of journal:
- `session`: owned by a live process; stale once that process is gone.
- `pinned`: left on purpose by `slm-dvfs pin`; only `slm-dvfs restore` undoes it.
"""

from __future__ import annotations

import atexit
import errno
import fcntl
import hashlib
import json
import logging
import os
import re
import signal
import socket
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, Iterator

from engine.core import paths
from engine.device.base import Device, DeviceSettings
from engine.core.errors import DeviceError, SlmDvfsError

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


@dataclass(frozen=True)
class JournalProblem:
    """A journal that was kept because it could not be used now, and what to do about it."""

    path: Path
    root: str | None  # the device root the journal names, when that could be read
    what: str
    remedy: str

    def describe(self) -> str:
        return f"{self.path} (device {self.root or 'unknown'}): {self.what}\n  What to do: {self.remedy}"


@dataclass(frozen=True)
class RestoreReport:
    """What `slm-dvfs restore` did: the journals it restored and the ones it had to keep."""

    restored: tuple[Journal, ...] = ()
    problems: tuple[JournalProblem, ...] = field(default=())


class DeviceBusyError(DeviceError):
    """Another live session is changing the same device's clocks."""

    def __init__(self, what: str, remedy: str, pid: int | None) -> None:
        super().__init__(what, remedy)
        self.pid = pid


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


# --- one session per device ----------------------------------------------------------------
_HELD_LOCK = threading.Lock()
_HELD: dict[Path, "DeviceLock"] = {}  # device locks this process holds, by lock file
_ACTIVE: dict[str, "ClockGuard"] = {}  # started guards of this process, by device key


class DeviceLock:
    """An exclusive flock on `<journal dir>/<device key>.lock`, with the owner's pid written in
    it for the refusal message. The kernel drops it when the owning process dies."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, directory: Path, key: str, root: str | None = None) -> "DeviceLock":
        directory.mkdir(parents=True, exist_ok=True)
        path = Path(os.path.abspath(directory / f"{key}.lock"))
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)  # not inherited by the tools we run
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise DeviceError(
                    f"cannot lock {path} ({exc.strerror})", "check that the state directory is writable"
                ) from None
            pid, cmd = _lock_owner(path)
            who = f"pid {pid}" + (f": {cmd}" if cmd else "") if pid is not None else "pid unknown"
            stop = f"`kill {pid}` restores its clocks as it stops" if pid is not None else "`ps aux | grep slm-dvfs`"
            raise DeviceBusyError(
                f"another slm-dvfs session ({who}) is changing the clocks of {root or 'this device'}",
                f"wait for it to finish, or stop it ({stop}), then try again",
                pid,
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n{_cmdline(os.getpid())}\n".encode())
        lock = cls(path, fd)
        with _HELD_LOCK:
            _HELD[path] = lock
        return lock

    def release(self) -> None:
        with _HELD_LOCK:
            if _HELD.get(self.path) is self:
                del _HELD[self.path]
        fd, self._fd = self._fd, None
        if fd is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)


@contextmanager
def _device_locked(directory: Path, key: str, root: str | None) -> Iterator[None]:
    """Hold the device's lock while restoring it, unless this process already does (a guard
    recovering its own device's dead sessions before it starts)."""
    path = Path(os.path.abspath(directory / f"{key}.lock"))
    with _HELD_LOCK:
        ours = path in _HELD
    if ours:
        yield
        return
    lock = DeviceLock.acquire(directory, key, root)
    try:
        yield
    finally:
        lock.release()


def active_guard(device: Device) -> "ClockGuard | None":
    """The active guard of this process for `device` (started, not yet restored or kept), if any."""
    try:
        key = device_key(device.describe())
    except (AttributeError, TypeError):
        return None
    with _HELD_LOCK:
        guard = _ACTIVE.get(key)
    return guard if guard is not None and guard.active else None


# --- restoring -----------------------------------------------------------------------------
def restore_settings(device: Device, settings: DeviceSettings, jetson_clocks_store: str | None = None) -> None:
    """`jetson_clocks --restore` first where a store was noted (it also gives back what our
    snapshot does not hold, such as the fan), then the snapshot. Both are tried; one
    DeviceError lists what failed. The store file is deleted once all worked."""
    failed: list[str] = []
    store = Path(jetson_clocks_store) if jetson_clocks_store else None
    if store is not None and not store.is_file():
        log.warning("jetson_clocks state %s is gone: restoring from the snapshot alone", store)
        store = None
    if store is not None:
        try:
            device.jetson_clocks_restore(store)
        except SlmDvfsError as exc:
            log.warning("jetson_clocks --restore %s failed: %s", store, exc.what)
            failed.append(f"`jetson_clocks --restore {store}`: {exc.what}")
    try:
        device.apply_settings(settings)
    except DeviceError as exc:
        failed.append(exc.what)
    if failed:
        raise DeviceError(
            "restoring the clocks failed: " + "; ".join(failed),
            "fix the cause, then run `slm-dvfs restore` (the journal is kept); `sudo nvpmodel -m <id>` "
            "resets a mode's clocks, a reboot resets everything",
        )
    if store is not None:
        store.unlink(missing_ok=True)


def restore_journal(journal: Journal, device: Device | None = None) -> None:
    """Apply a journal's snapshot and delete it (only once the apply worked)."""
    device = device or reopen_device(journal.device)
    restore_settings(device, journal.settings, journal.jetson_clocks_store)
    journal.path.unlink(missing_ok=True)
    log.info("restored clocks from %s", journal.path.name)


def _by_device(journals: Iterator[Journal] | list[Journal]) -> dict[str, list[Journal]]:
    out: dict[str, list[Journal]] = {}
    for j in journals:
        out.setdefault(device_key(j.device), []).append(j)
    return out


def recover_stale(directory: Path | None = None) -> list[Journal]:
    """Restore every session journal whose process is gone. Returns what it restored.

    The oldest snapshot of a device wins: it is the state from before any of us. A journal
    that cannot be restored is logged and kept, and the other devices are still recovered.
    """
    directory = directory or journal_dir()
    restored: list[Journal] = []
    dead = [j for j in list_journals(directory) if j.kind == SESSION and not j.owner_alive()]
    for key, journals in _by_device(dead).items():
        oldest, *newer = journals  # list_journals sorts by creation time
        root = oldest.device.get("root")
        try:
            with _device_locked(directory, key, root):
                restore_journal(oldest)
        except DeviceBusyError as exc:
            log.info("left %s for later: %s", oldest.path.name, exc.what)
            continue
        except (SlmDvfsError, OSError) as exc:
            log.warning(
                "cannot restore clock journal %s (device %s): %s; kept for `slm-dvfs restore`",
                oldest.path, root, getattr(exc, "what", exc),
            )
            continue
        for j in newer:
            j.path.unlink(missing_ok=True)
        log.warning(
            "restored clocks left changed by process %d (it did not exit cleanly)", oldest.pid
        )
        restored.append(oldest)
    return restored


def restore_report(directory: Path | None = None) -> RestoreReport:
    """`slm-dvfs restore`: undo pins and dead sessions, oldest snapshot per device first.

    A device with a live session is refused (restoring under it would leave the board
    pinned once it exits and puts its own snapshot back); journals that cannot be used
    are kept and reported with what to do."""
    directory = directory or journal_dir()
    journals, bad = scan_journals(directory)
    problems = list(bad)
    live = _by_device([j for j in journals if j.kind == SESSION and j.owner_alive()])
    todo = _by_device([j for j in journals if not (j.kind == SESSION and j.owner_alive())])
    restored: list[Journal] = []
    for key, group in todo.items():
        oldest, *newer = group
        root = oldest.device.get("root")
        if key in live:
            pid = live[key][0].pid
            problems.append(JournalProblem(
                oldest.path, root,
                f"a live slm-dvfs session (pid {pid}) is using this device; restoring now would be undone "
                f"when it exits, leaving the board pinned",
                f"wait for pid {pid} to finish, or stop it (`kill {pid}` restores its clocks at once), "
                f"then run `slm-dvfs restore` again",
            ))
            continue
        try:
            with _device_locked(directory, key, root):
                restore_journal(oldest)
        except DeviceBusyError as exc:
            problems.append(JournalProblem(oldest.path, root, exc.what, exc.remedy))
            continue
        except (SlmDvfsError, OSError) as exc:
            what = getattr(exc, "what", str(exc))
            if root and not Path(root).exists():
                remedy = (f"the device root {root} no longer exists (a deleted twin?): nothing is left to "
                          f"restore there; delete {oldest.path}")
            else:
                remedy = getattr(exc, "remedy", "") or "fix the cause and run `slm-dvfs restore` again"
            problems.append(JournalProblem(oldest.path, root, what, remedy))
            continue
        for j in newer:
            j.path.unlink(missing_ok=True)  # a later snapshot of a device already restored
        restored.append(oldest)
    return RestoreReport(tuple(restored), tuple(problems))


def restore_all(directory: Path | None = None) -> list[Journal]:
    """`restore_report` for library callers: what it restored; a DeviceError listing every
    journal it had to keep (after restoring the others)."""
    report = restore_report(directory)
    if report.problems:
        raise DeviceError(
            f"{len(report.problems)} clock journal(s) not restored:\n"
            + "\n".join(p.describe() for p in report.problems),
            "see each journal's 'What to do' above",
        )
    return list(report.restored)


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
        self._device_lock: DeviceLock | None = None
        self._key: str | None = None
        self._jetson_clocks_store: str | None = None

    # --- lifecycle -------------------------------------------------------------------
    def __enter__(self) -> "ClockGuard":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        """Lock the device (refusing if another session has it), recover dead sessions,
        snapshot and journal, before anything changes."""
        description = self.device.describe()
        key = device_key(description)
        self._device_lock = DeviceLock.acquire(self.directory, key, description.get("root"))
        try:
            if self.recover:
                self.recovered = recover_stale(self.directory)
            self.snapshot = self.device.read_settings()
            path = self.directory / f"{key}-{SESSION}-{os.getpid()}-{time.time_ns()}.json"
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
        except BaseException:
            self.snapshot = None
            self._release()
            raise
        self._journal_path = path
        self._key = key
        with _HELD_LOCK:
            _ACTIVE[key] = self
        atexit.register(self.restore)
        if self.handle_signals:
            self._install_handlers()

    def restore(self) -> None:
        """Put every setting back as it was at start (idempotent)."""
        with self._lock:
            if self._restored or self._kept or self.snapshot is None:
                return
            restore_settings(self.device, self.snapshot, self._jetson_clocks_store)
            self._restored = True
            if self._journal_path is not None:
                self._journal_path.unlink(missing_ok=True)
            self._release()
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
            self._release()  # a kept pin, or a failed restore: its journal stays

    @property
    def active(self) -> bool:
        return self.snapshot is not None and not self._restored and not self._kept

    # --- jetson_clocks -----------------------------------------------------------------
    @property
    def jetson_clocks_store(self) -> str | None:
        """The `jetson_clocks --store` file restored from before the snapshot, if noted."""
        return self._jetson_clocks_store

    def note_jetson_clocks_store(self, path: str | os.PathLike[str]) -> None:
        """Record (in the journal too, for recovery after a SIGKILL) the file that
        `jetson_clocks --store` writes; call it before running jetson_clocks."""
        with self._lock:
            if not self.active or self._journal_path is None:
                raise SlmDvfsError("the clock guard is not active", "note the store inside the guard's `with` block")
            self._jetson_clocks_store = os.fspath(path)
            data = json.loads(self._journal_path.read_text())
            data["jetson_clocks_store"] = self._jetson_clocks_store
            _atomic_write(self._journal_path, data)

    def _release(self) -> None:
        with _HELD_LOCK:
            if self._key is not None and _ACTIVE.get(self._key) is self:
                del _ACTIVE[self._key]
        lock, self._device_lock = self._device_lock, None
        if lock is not None:
            lock.release()

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
        old = self._old_handlers.get(signum)
        if signum == signal.SIGINT and callable(old) and old is not signal.default_int_handler:
            # The caller handles Ctrl-C (e.g. "stop at the next step boundary"): let it, and
            # restore when the guard exits; a KeyboardInterrupt it raises unwinds through us.
            old(signum, frame)
            return
        log.warning("signal %s: restoring clocks", signal.Signals(signum).name)
        try:
            self.restore()
        except Exception:  # noqa: BLE001 - a failed restore leaves the journal for next start
            log.exception("restoring clocks failed; the journal stays for `slm-dvfs restore`")
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        if callable(old):
            old(signum, frame)
        raise SystemExit(128 + signum)


def guarded(device: Device, **kwargs: Any) -> ClockGuard:
    """Shorthand: `with guarded(device): ...`."""
    return ClockGuard(device, **kwargs)


def describe_journals(journals: list[Journal] | tuple[Journal, ...]) -> Iterator[str]:
    for j in journals:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(j.created))
        yield f"{j.kind} journal from pid {j.pid} at {when} for {j.device.get('root', '?')}"


# --- helpers -----------------------------------------------------------------------------
def _root_hint(path: Path) -> str | None:
    """The device root a damaged journal names, if its text still shows it."""
    try:
        m = re.search(r'"root"\s*:\s*"([^"]*)"', path.read_text(errors="replace"))
    except OSError:
        return None
    return m.group(1) if m else None


def _lock_owner(path: Path) -> tuple[int | None, str]:
    try:
        lines = path.read_text().splitlines()
        return int(lines[0]), (lines[1] if len(lines) > 1 else "")
    except (OSError, ValueError, IndexError):
        return None, ""


def _cmdline(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return " ".join(a.decode(errors="replace") for a in raw.split(b"\0") if a)[:200]


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

