"""One session at a time per device: an exclusive flock on `<journal dir>/<device key>.lock`.

The lock file holds the owner's pid and command line, so a refusal can say who has the
board and how to stop it. The kernel drops the lock of a process that dies, so a crash
never leaves a device locked.
"""

from __future__ import annotations

import errno
import fcntl
import os
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from engine.core.errors import DeviceError

_HELD_LOCK = threading.Lock()
_HELD: dict[Path, "DeviceLock"] = {}  # device locks this process holds, by lock file


class DeviceBusyError(DeviceError):
    """Another live session is changing the same device's clocks."""

    def __init__(self, what: str, remedy: str, pid: int | None) -> None:
        super().__init__(what, remedy)
        self.pid = pid


class DeviceLock:
    """An exclusive flock on `<journal dir>/<device key>.lock`, with the owner's pid written in
    it for the refusal message. The kernel drops it when the owning process dies."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, directory: Path, key: str, root: str | None = None) -> "DeviceLock":
        directory.mkdir(parents=True, exist_ok=True)
        path = _lock_path(directory, key)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)  # not inherited by the tools we run
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise DeviceError(
                    f"cannot lock {path} ({exc.strerror})", "check that the state directory is writable"
                ) from None
            pid, cmd = lock_owner(path)
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
def device_locked(directory: Path, key: str, root: str | None) -> Iterator[None]:
    """Hold the device's lock while restoring it, unless this process already does (a guard
    recovering its own device's dead sessions before it starts)."""
    path = _lock_path(directory, key)
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


def lock_owner(path: Path) -> tuple[int | None, str]:
    """The pid and command line written in a lock file, (None, "") when unreadable."""
    try:
        lines = path.read_text().splitlines()
        return int(lines[0]), (lines[1] if len(lines) > 1 else "")
    except (OSError, ValueError, IndexError):
        return None, ""


def _lock_path(directory: Path, key: str) -> Path:
    return Path(os.path.abspath(directory / f"{key}.lock"))


def _cmdline(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return " ".join(a.decode(errors="replace") for a in raw.split(b"\0") if a)[:200]
