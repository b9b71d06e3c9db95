"""Locks: one writer per board, and the liveness of a session.

The board lock is an exclusive flock on `<lock dir>/<board key>.lock`. The key is the board's
identity: for a tree, the device and inode of its resolved root (so `T/../T`, a link to `T` and
a bind mount of `T` are all `T`), for the real root `/` itself; and its device-tree serial where
it has one. The folder is `/run/slm-dvfs` for the real root and `ROOT/run/slm-dvfs` for any other
tree (made inside the tree, never through a link out of it), so every user, state dir and
container on the host meets the same lock. The file holds the owner's pid and command line, so a
refusal can say who has the board.

The session lock is a flock each process holds on its own file under the state dir for its
life; journals and runs name it, and a free one means its writer is gone. Liveness comes
from flocks alone (the kernel drops them when a process dies), never from a pid and a host.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import re
import stat
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from engine.core import paths
from engine.core.errors import DeviceError, errno_text
from engine.device.jetson.identity import read_serial
from engine.device.sysfs import SysfsTree
from engine.device.treefs import UnsafeTreeError, not_regular, read_fd, resolve_at

SYSTEM_LOCK_DIR = Path("/run/slm-dvfs")

_HELD_LOCK = threading.Lock()
_HELD: dict[tuple[int, int], "DeviceLock"] = {}  # device locks this process holds, by lock file (st_dev, st_ino)
_SMALL = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # never through a link, never waiting on a FIFO


class DeviceBusyError(DeviceError):
    """Another live session is changing the same device's clocks."""

    def __init__(self, what: str, remedy: str, pid: int | None) -> None:
        super().__init__(what, remedy)
        self.pid = pid


class DeviceLock:
    """An exclusive flock on `<journal dir>/<device key>.lock`, with the owner's pid written in
    it for the refusal message. The kernel drops it when the owning process dies."""

    def __init__(self, path: Path, fd: int, ident: tuple[int, int]) -> None:
        self.path = path
        self._fd: int | None = fd
        self._ident = ident

    @classmethod
    def acquire(cls, directory: Path, key: str, root: str | None = None) -> "DeviceLock":
        path = _lock_path(directory, key)
        try:
            _make_lock_dir(directory, root)
            try:
                # Under /run/slm-dvfs only root opens the lock (0600): flock needs no write access, so a
                # readable lock file would let any local user hold the board. Not inherited by tools we run.
                mode = 0o600 if directory == SYSTEM_LOCK_DIR else 0o644
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode)
            except PermissionError:
                fd = os.open(path, _SMALL)  # another user's lock file: flock works read-only
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                os.close(fd)
                raise not_regular(path, st.st_mode)
        except OSError as exc:
            raise DeviceError(
                f"cannot open the board lock in {directory} ({errno_text(exc.errno, exc.strerror)})",
                "only a user who may write the clocks can lock the board: run as root, or through "
                "the clock service",
            ) from None
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
        try:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n{_cmdline(os.getpid())}\n".encode())
        except OSError:
            pass  # a read-only lock file: held all the same, only unnamed
        lock = cls(path, fd, (st.st_dev, st.st_ino))
        with _HELD_LOCK:
            _HELD[lock._ident] = lock
        return lock

    def release(self) -> None:
        with _HELD_LOCK:
            if _HELD.get(self._ident) is self:
                del _HELD[self._ident]
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
    try:
        st = os.stat(_lock_path(directory, key))
        ident: tuple[int, int] | None = (st.st_dev, st.st_ino)
    except OSError:
        ident = None
    with _HELD_LOCK:
        ours = ident is not None and ident in _HELD  # the same file through any path (a bind mount too)
    if ours:
        yield
        return
    lock = DeviceLock.acquire(directory, key, root)
    try:
        yield
    finally:
        lock.release()


def read_small(path: Path) -> str:
    """A small file slm-dvfs keeps beside a lock (the lock itself, a pin marker): never read through
    a link, never waiting on a FIFO someone put there. Raises OSError or DeviceError."""
    fd = os.open(path, _SMALL)
    try:
        return read_fd(fd, path).decode(errors="replace")
    finally:
        os.close(fd)


def lock_owner(path: Path) -> tuple[int | None, str]:
    """The pid and command line written in a lock file, (None, "") when unreadable."""
    try:
        lines = read_small(path).splitlines()
        return int(lines[0]), (lines[1] if len(lines) > 1 else "")
    except (OSError, DeviceError, ValueError, IndexError):
        return None, ""


def board_lock_dir(root: str) -> Path:
    """Where a board's lock lives: /run/slm-dvfs for the real root, ROOT/run/slm-dvfs for a tree
    (a twin, a test tree), never in a user's state dir. A root that is gone is an error (we must
    not create it)."""
    resolved = Path(os.path.realpath(root))
    if resolved == Path("/"):
        return SYSTEM_LOCK_DIR
    if not resolved.is_dir():
        raise DeviceError(f"the device root {root} no longer exists", "nothing is left to lock or restore there")
    return resolved / "run" / "slm-dvfs"


def board_key(root: str) -> str:
    """The board's identity as a short name: for a tree, the device and inode of its resolved root
    (a bind mount of the tree is the same board), for the real root `/`; and its device-tree serial."""
    resolved = os.path.realpath(root)
    ident = resolved
    if resolved != "/":
        try:
            st = os.stat(resolved)
            ident = f"dev {st.st_dev} ino {st.st_ino}"
        except OSError:
            pass  # a root that is gone: its path is all that is left to name it by
    try:
        serial = read_serial(SysfsTree(resolved)) or ""
    except (OSError, DeviceError):
        serial = ""
    return hashlib.sha256(f"{ident}\0{serial}".encode()).hexdigest()[:12]


def _make_lock_dir(directory: Path, root: str | None) -> None:
    """Create the lock folder: inside a tree, never through a link out of it (a link put there must
    not have us create lock files elsewhere); `/run/slm-dvfs` or the state dir as they are."""
    resolved = os.path.realpath(root) if root else "/"
    if resolved == "/" or Path(os.path.abspath(directory)) != Path(resolved) / "run" / "slm-dvfs":
        directory.mkdir(parents=True, exist_ok=True, mode=0o755)
        return
    dir_fd, name = resolve_at(resolved, "run/slm-dvfs", make_dirs=True, follow_last=False)
    try:
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, 0o755, dir_fd=dir_fd)
        if not stat.S_ISDIR(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode):
            raise UnsafeTreeError(f"{directory} is not a folder (a link?)",
                                  "the board lock's folder in a tree must be a folder: remove what is there")
    finally:
        os.close(dir_fd)


# --- the session lock -------------------------------------------------------------------------
_SESSION: dict[tuple[int, Path], tuple[Path, int]] = {}  # (pid, folder) -> (lock file, fd)


def session_lock() -> Path:
    """This process's session lock (taken on first use, held until exit): the file that
    journals and runs name so others can tell whether we are alive."""
    directory = paths.state_dir() / "sessions"
    with _HELD_LOCK:
        held = _SESSION.get((os.getpid(), directory))
        if held is not None:
            return held[0]
        path = directory / f"{os.getpid()}-{time.time_ns()}.lock"
        try:
            directory.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        except OSError as exc:
            raise DeviceError(
                f"cannot create the session lock in {directory} ({errno_text(exc.errno, exc.strerror)})",
                "nothing was changed on the board; make the state directory writable "
                "($SLM_DVFS_STATE_DIR or $XDG_STATE_HOME/slm-dvfs) and retry",
            ) from None
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with contextlib.suppress(OSError):  # who we are, for a person reading it; the flock is what counts (a full disk)
            os.write(fd, f"{os.getpid()}\n{_cmdline(os.getpid())}\n".encode())
        _SESSION[(os.getpid(), directory)] = (path, fd)
        return path


_SESSION_NAME = re.compile(r"[0-9]+-[0-9]+\.lock")


def session_alive(path: Path) -> bool:
    """Whether the session that holds `path` still runs: its flock is held (a missing file: gone).
    A free lock file of ours is deleted, its session being over.

    The path comes from a journal or a results database, so it is not trusted: anything that
    is not a session lock file (`.../sessions/<pid>-<ns>.lock`, a regular file owned by us or
    root) counts as "cannot tell", that is alive, and is neither locked nor deleted."""
    with _HELD_LOCK:
        if any(p == path for (pid, _d), (p, _fd) in _SESSION.items() if pid == os.getpid()):
            return True
    path = Path(path)
    if path.parent.name != "sessions" or not _SESSION_NAME.fullmatch(path.name):
        return True
    try:
        # O_NONBLOCK: a FIFO planted under that name must not hang us.
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return False
    except OSError:
        return True  # cannot tell: never steal a session we cannot see
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid not in (os.getuid(), 0):
            return True
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return True  # held (EWOULDBLOCK), or cannot tell: alive either way
        if st.st_uid == os.getuid():
            path.unlink(missing_ok=True)
        return False
    finally:
        os.close(fd)


def board_busy(directory: Path, key: str) -> tuple[int | None, str] | None:
    """(pid, command line) of whoever holds the board's lock now, None when it is free."""
    path = _lock_path(directory, key)
    try:
        fd = os.open(path, _SMALL)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return lock_owner(path)
    else:
        return None
    finally:
        os.close(fd)


def _lock_path(directory: Path, key: str) -> Path:
    return Path(os.path.abspath(directory / f"{key}.lock"))


def _cmdline(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return " ".join(a.decode(errors="replace") for a in raw.split(b"\0") if a)[:200]
