"""The clock guard: whatever we change on the board, we put back, however we stop.

Before the first change the guard snapshots every setting it may touch
(`Device.read_settings`) and writes a journal to the state directory (`journal.py`).
It restores on normal exit, on an exception, on SIGINT/SIGTERM/SIGHUP and at
interpreter exit. A SIGKILL cannot be caught, so the journal stays behind: the next
start of the tool finds journals whose process is gone and restores them
(`recover_stale`), and `slm-dvfs restore` does it by hand.

One writer per board: the guard holds the board lock (`lock.py`, under /run/slm-dvfs or the
tree's own run/slm-dvfs) for its life, so two sessions (two users, two state dirs, `T` and
`T/../T`) cannot pin the same board's clocks over each other; a board left pinned by
`slm-dvfs pin` refuses a run until `slm-dvfs restore`.

A journal that cannot be used never blocks other work: an unreadable one is moved aside
and reported, one we did not write (or naming a root that has gone) is kept and reported
by `slm-dvfs restore`.
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
from pathlib import Path
from types import FrameType
from typing import Callable, Union

from engine.core.errors import DeviceError, SlmDvfsError
from engine.device.base import Device, DeviceSettings, ServiceWriter
from engine.device.guard.journal import (
    PINNED,
    SESSION,
    Journal,
    UnreadableJournal,
    atomic_write,
    device_key,
    device_root,
    ensure_dir,
    is_twin_tree,
    journal_dir,
    move_aside,
    process_start,
)
from engine.device.guard.journal import JournalProblem, list_journals  # noqa: F401 - re-exported
from engine.device.guard.lock import DeviceBusyError, DeviceLock, session_lock
from engine.device.guard.restore import (  # noqa: F401 - the guard's public API, as before the split
    RestoreReport,
    _lock_dir,
    recover_stale,
    restore_all,
    restore_journal,
    restore_report,
    restore_settings,
)
from engine.device.guard.trust import in_folder, pin_marker, pinned_journal

log = logging.getLogger(__name__)

_SIGNALS = tuple(s for s in (getattr(signal, n, None) for n in ("SIGINT", "SIGTERM", "SIGHUP")) if s)
# What signal.signal returns and takes: a function, SIG_DFL/SIG_IGN, or None (set outside Python).
_SignalHandler = Union[Callable[[int, Union[FrameType, None]], object], int, signal.Handlers, None]


class BoardPinnedError(DeviceBusyError):
    """The board is left pinned by `slm-dvfs pin`; a run must not override it."""


class ClockGuard:
    """Context manager that journals a device's settings and restores them on any exit.

    No registry finds a guard: whoever needs it is handed it (the run harness passes its guard to
    the DVFS controller and the experiment), so two guards in one process never see each other.

    `keep()` turns the session into a pin that outlives the process (for `slm-dvfs pin`).
    """

    def __init__(
        self,
        device: Device,
        *,
        directory: Path | None = None,
        handle_signals: bool = True,
        recover: bool = True,
        over_pin: bool = False,
    ) -> None:
        self.device = device
        self.over_pin = over_pin  # `slm-dvfs pin` may pin over a pin; a run may not
        self.directory = directory or journal_dir()
        self.handle_signals = handle_signals
        self.recover = recover
        self.snapshot: DeviceSettings | None = None
        self.recovered: list[Journal] = []
        self._journal_path: Path | None = None
        self._lock = threading.RLock()
        self._restored = False
        self._kept = False
        self._old_handlers: dict[int, _SignalHandler] = {}
        self._device_lock: DeviceLock | None = None
        self._jetson_clocks_store: str | None = None

    # --- lifecycle -------------------------------------------------------------------
    def __enter__(self) -> "ClockGuard":
        self.start()
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc is None:
            self.close()
            return
        try:
            self.close()
        except SlmDvfsError as failed:
            # The error that stopped us is the one to show (e.g. the refused write itself); the
            # failed restore is logged and its journal stays for `slm-dvfs restore`.
            log.error("%s\n  What to do: %s", failed.what, failed.remedy)

    def start(self) -> None:
        """Lock the board (refusing if another session has it, or if it is left pinned), recover
        dead sessions, snapshot and journal, before anything changes. Through the clock service,
        the service holds the lock and the snapshot instead."""
        if isinstance(self.device, ServiceWriter):
            return self._start_through_service(self.device)
        description = self.device.describe()
        key = device_key(description)
        root = device_root(description)
        lock_dir = _lock_dir(self.directory, root)
        self._device_lock = DeviceLock.acquire(lock_dir, key, root)
        try:
            if self.recover:
                self.recovered = recover_stale(self.directory)
            self._refuse_if_pinned(lock_dir, key, root)
            self.snapshot = self.device.read_settings()
            ensure_dir(self.directory)
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
                session_lock=str(session_lock()),
                twin=is_twin_tree(root),  # so a restore after a reboot knows the gone tree was a twin's
            )
            atomic_write(path, journal.to_json())
        except BaseException:
            self.snapshot = None
            self._release()
            raise
        self._journal_path = path
        atexit.register(self.restore)
        if self.handle_signals:
            self._install_handlers()

    def _start_through_service(self, device: ServiceWriter) -> None:
        """The clock service snapshots, journals, holds the board lock and restores for this
        device (engine/device/clockd): no journal or lock of ours, the same restore path."""
        self.snapshot = device.service_snapshot()
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
            key = device_key(description)
            pinned = self.directory / f"{key}-{PINNED}.json"
            if pinned.exists():
                self._usable_pin(pinned)  # an unreadable one is moved aside: ours takes its place
            if pinned.exists():
                # An earlier pin holds the true original state: keep it, drop ours.
                self._journal_path.unlink(missing_ok=True)
            else:
                data = json.loads(self._journal_path.read_text())
                data["kind"] = PINNED
                data["session_lock"] = None  # a pin outlives us: only `slm-dvfs restore` ends it
                atomic_write(pinned, data)
                self._journal_path.unlink(missing_ok=True)
            root = device_root(description)
            try:  # beside the board lock, so a run from any user or state dir sees the pin
                atomic_write(pin_marker(_lock_dir(self.directory, root), key),
                             {"journal": str(pinned), "uid": os.geteuid(), "pid": os.getpid(), "created": time.time()})
            except SlmDvfsError as exc:
                log.warning("%s: only runs of this user will see the pin", exc.what)
            self._journal_path = pinned
            self._kept = True
            return pinned

    @staticmethod
    def _usable_pin(path: Path) -> None:
        """Check an earlier pin's journal: an unreadable one is moved aside (and reported) so it
        never swallows ours; one we did not write stops the pin (UntrustedJournal)."""
        try:
            Journal.read(path)
        except UnreadableJournal as exc:
            moved = move_aside(path)
            if moved is None:
                raise
            log.warning("%s; moved aside to %s (restore those clocks by hand if they were changed)", exc.what, moved)

    def _refuse_if_pinned(self, lock_dir: Path, key: str, root: str | None) -> None:
        """A board left pinned by `slm-dvfs pin` is not ours to change: a run over it would measure
        the pin and its restore would put back the pin, not the board's own state. A second `pin`
        (over_pin) may go over a pin journalled in our own state dir, whose snapshot it keeps, but
        not over one from another state dir or user: it would journal the pinned clocks as the
        board's own, and its restore would leave the board pinned."""
        mine = self.directory / f"{key}-{PINNED}.json"
        pinned = pinned_journal(lock_dir, key)
        journal = None if pinned is None else pinned[0]
        if pinned is not None and not in_folder(pinned[0], self.directory):
            journal, uid = pinned
            state = Path(journal).parent.parent
            raise BoardPinnedError(
                f"the clocks of {root or 'this device'} are pinned by `slm-dvfs pin` from another state dir "
                f"(journal {journal}, uid {uid}); a {'pin' if self.over_pin else 'run'} from here would take the "
                f"pinned clocks for the board's own, and its restore would leave the board pinned",
                f"restore that pin first, as uid {uid} with its state dir (`SLM_DVFS_STATE_DIR={state} slm-dvfs "
                f"restore --sysfs-root {root}`), then try again",
                None,
            )
        if self.over_pin:
            return  # over our own pin: keep() keeps its snapshot
        if journal is None and mine.exists():
            journal = str(mine)
        if journal is not None:
            raise BoardPinnedError(
                f"the clocks of {root or 'this device'} are pinned by `slm-dvfs pin` (journal {journal}); "
                f"a run over the pin would measure it and put it back afterwards",
                "run `slm-dvfs restore` first (as the user who pinned), then start the run again",
                None,
            )

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

    def note_run(self, run_id: int) -> None:
        """Name a results-store run in the journal, so a recovery can tell which runs it ended."""
        with self._lock:
            if not self.active or self._journal_path is None:
                return
            data = json.loads(self._journal_path.read_text())
            data["runs"] = sorted({*data.get("runs", []), int(run_id)})
            atomic_write(self._journal_path, data)

    @property
    def lock_path(self) -> Path | None:
        """The board lock this guard holds (None once released)."""
        return None if self._device_lock is None else self._device_lock.path

    def _release(self) -> None:
        lock, self._device_lock = self._device_lock, None
        if lock is not None:
            lock.release()

    # --- signals ---------------------------------------------------------------------
    def _install_handlers(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            log.debug("not the main thread: signal handlers left alone (atexit still restores)")
            return
        for sig in _SIGNALS:
            if sig == getattr(signal, "SIGHUP", None) and signal.getsignal(sig) is signal.SIG_IGN:
                continue  # nohup: the user asked the run to outlive the terminal
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
