"""The clock guard: whatever we change on the board, we put back, however we stop.

Before the first change the guard snapshots every setting it may touch
(`Device.read_settings`) and writes a journal to the state directory (`journal.py`).
It restores on normal exit, on an exception, on SIGINT/SIGTERM/SIGHUP and at
interpreter exit. A SIGKILL cannot be caught, so the journal stays behind: the next
start of the tool finds journals whose process is gone and restores them
(`recover_stale`), and `slm-dvfs restore` does it by hand.

One session at a time per device: the guard holds the device's lock (`lock.py`) for
its life, so two runs cannot pin the same board's clocks over each other.

A journal that cannot be used (corrupt, or naming a device root that has gone) never
blocks other work: it is logged, kept, and reported by `slm-dvfs restore`.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import signal
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, Iterator

from engine.core.errors import DeviceError, SlmDvfsError
from engine.device.base import Device, DeviceSettings, ServiceWriter
from engine.device.guard.journal import (
    PINNED,
    SESSION,
    Journal,
    JournalProblem,
    atomic_write,
    device_key,
    journal_dir,
    list_journals,
    process_start,
    reopen_device,
    scan_journals,
)
from engine.device.guard.lock import DeviceBusyError, DeviceLock, device_locked

log = logging.getLogger(__name__)

_SIGNALS = tuple(s for s in (getattr(signal, n, None) for n in ("SIGINT", "SIGTERM", "SIGHUP")) if s)


@dataclass(frozen=True)
class RestoreReport:
    """What `slm-dvfs restore` did: the journals it restored and the ones it had to keep."""

    restored: tuple[Journal, ...] = ()
    problems: tuple[JournalProblem, ...] = field(default=())



# --- the active guards of this process ---------------------------------------------------
_ACTIVE_LOCK = threading.Lock()
_ACTIVE: dict[str, "ClockGuard"] = {}  # started guards of this process, by device key


def active_guard(device: Device) -> "ClockGuard | None":
    """The active guard of this process for `device` (started, not yet restored or kept), if any."""
    try:
        key = device_key(device.describe())
    except (AttributeError, TypeError):
        return None
    with _ACTIVE_LOCK:
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
            with device_locked(directory, key, root):
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
            with device_locked(directory, key, root):
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
        if isinstance(self.device, ServiceWriter):
            return self._start_through_service()
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
                pid_start=process_start(os.getpid()),
                host=socket.gethostname(),
                created=time.time(),
                device=description,
                settings=self.snapshot,
                path=path,
            )
            atomic_write(path, journal.to_json())
        except BaseException:
            self.snapshot = None
            self._release()
            raise
        self._journal_path = path
        self._key = key
        with _ACTIVE_LOCK:
            _ACTIVE[key] = self
        atexit.register(self.restore)
        if self.handle_signals:
            self._install_handlers()

    def _start_through_service(self) -> None:
        """The clock service snapshots, journals, holds the board lock and restores for this
        device (engine/device/clockd): no journal or lock of ours, the same restore path."""
        self.snapshot = self.device.service_snapshot()  # type: ignore[attr-defined]
        self._key = device_key(self.device.describe())
        with _ACTIVE_LOCK:
            _ACTIVE[self._key] = self
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
            if isinstance(self.device, ServiceWriter):
                raise DeviceError("the clock service restores a client's clocks when it disconnects: a pin cannot "
                                  "outlive this command through it", "run the work under `slm-dvfs run ... "
                                  "static:gpu=MHZ` (the pin lasts the run), or pin as root with the service stopped")
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
                atomic_write(pinned, data)
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
            if self.active and isinstance(self.device, ServiceWriter):
                return  # the clock service keeps jetson_clocks' store and restores from it
            if not self.active or self._journal_path is None:
                raise SlmDvfsError("the clock guard is not active", "note the store inside the guard's `with` block")
            self._jetson_clocks_store = os.fspath(path)
            data = json.loads(self._journal_path.read_text())
            data["jetson_clocks_store"] = self._jetson_clocks_store
            atomic_write(self._journal_path, data)

    def _release(self) -> None:
        with _ACTIVE_LOCK:
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

