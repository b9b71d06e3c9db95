"""Root-relative file access for sysfs/debugfs: one code path for a board and a fake tree.

On the board's own root (`/`) the kernel's files are opened as they are: sysfs has links (the
devfreq class, `cpuN/cpufreq`, L4T's `/etc/nvpmodel.conf`) that the spec says to follow, and
only the kernel and root make them; its attributes are written in place. Under any other root
(a twin's tree, a test tree, a copy of a board's files) every path goes through
`engine.device.treefs`: links only inside the tree, regular files only, and a tree of ours
written by atomic replaces. Nothing is read from a FIFO (reads open with O_NONBLOCK and refuse
anything but a regular file).
"""

from __future__ import annotations

import contextlib
import errno
import glob
import logging
import os
import stat
import threading
import weakref
from pathlib import Path
from typing import Protocol, Sequence

from engine.core.errors import DeviceError, NodeNotFoundError, PermissionDeniedError, errno_text
from engine.device.treefs import (  # noqa: F401 - the markers and the error are re-exported for the modules that read trees
    FAKE_L4T_MARKER,
    TWIN_MARKER,
    UnsafeTreeError,
    not_regular,
    own_tree,
    read_fd,
    resolve_at,
    replace_at,
    write_fd,
)

log = logging.getLogger(__name__)

# Flags of every open: O_NONBLOCK so that opening a FIFO never waits for a writer.
_READ = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC
_WRITE = os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC


class TreeWatcher(Protocol):
    """Whoever renders a tree's files from state it keeps in memory (the twin): told before this
    process reads files of it, so it can render them first, and after it writes one."""

    def tree_read(self, rels: Sequence[str]) -> None: ...

    def tree_written(self, rel: str) -> None: ...


# A tree's real path -> its watcher, held weakly (a twin dropped without close() leaves nothing)
_watchers: dict[str, "weakref.ReferenceType[TreeWatcher]"] = {}


def watch_tree(root: str | os.PathLike[str], watcher: TreeWatcher) -> None:
    """Have this process's reads and writes of files under `root` (through SysfsTree and
    OpenFiles) reported to `watcher` until `unwatch_tree`."""
    for gone in [r for r, ref in _watchers.items() if ref() is None]:  # twins dropped without close()
        _watchers.pop(gone, None)
    _watchers[os.path.realpath(root)] = weakref.ref(watcher)


def unwatch_tree(root: str | os.PathLike[str], watcher: TreeWatcher) -> None:
    """Stop reporting `root` to `watcher` (another watcher since is left in place)."""
    real = os.path.realpath(root)
    ref = _watchers.get(real)
    if ref is not None and ref() in (None, watcher):
        _watchers.pop(real, None)


def _watcher(real: str) -> TreeWatcher | None:
    ref = _watchers.get(real) if _watchers else None
    return ref() if ref is not None else None


class SysfsTree:
    """Reads and writes kernel files below `root` (`/` on a board).

    Paths given to the methods are relative ("sys/class/devfreq"); a leading
    slash is tolerated so spec paths can be pasted as they are.
    """

    def __init__(self, root: str | os.PathLike[str] = "/") -> None:
        self.root = Path(root)
        self._real = os.path.realpath(self.root)
        # The board's own root: its links are the kernel's (and root's), followed as the spec says.
        self.system = self._real == "/"

    def before_read(self, rels: Sequence[str]) -> None:
        """Let the tree's watcher (a twin rendering from memory) bring these files up to date."""
        if not self.system:
            watcher = _watcher(self._real)
            if watcher is not None:
                watcher.tree_read(rels)

    def path(self, rel: str | os.PathLike[str]) -> Path:
        rel_s = os.fspath(rel)
        p = Path(rel_s)
        if p.is_absolute() and self.root != Path("/"):
            try:
                p = p.relative_to(self.root)
            except ValueError:
                p = Path(rel_s.lstrip("/"))
        return self.root / p if not p.is_absolute() else p

    def rel(self, path: str | os.PathLike[str]) -> str:
        """The path relative to the root, for messages and for globbing results."""
        p = Path(path)
        try:
            return str(p.relative_to(self.root))
        except ValueError:
            return str(p)

    def exists(self, rel: str | os.PathLike[str]) -> bool:
        """Whether the file or folder is there (under another root than `/`: inside the tree;
        one reached only through a link out of the tree is not)."""
        if self.system:
            return self.path(rel).exists()
        try:
            fd, name = resolve_at(self.root, self.rel(self.path(rel)))
        except UnsafeTreeError as exc:
            log.warning("%s", exc.what)
            return False
        except OSError:
            return False
        try:
            os.stat(name, dir_fd=fd, follow_symlinks=False)
            return True
        except OSError:
            return False
        finally:
            os.close(fd)

    def glob(self, pattern: str) -> list[str]:
        """Root-relative matches, sorted (under another root than `/`: only those inside the tree,
        as `exists` sees them; a name reached through a link out of the tree is not listed)."""
        base = os.fspath(self.root)
        hits = sorted(self.rel(h) for h in glob.glob(os.path.join(base, pattern.lstrip("/"))))
        return hits if self.system else [h for h in hits if self.exists(h)]

    def open_read(self, rel: str | os.PathLike[str]) -> int:
        """An fd to read one file (the caller closes it): O_NONBLOCK, a regular file only, reached
        through links inside the tree only (see the module's docstring). Raises OSError or
        UnsafeTreeError."""
        if self.system:
            fd = os.open(self.path(rel), _READ)
        else:
            rel_s = self.rel(self.path(rel))
            self.before_read((rel_s,))
            dir_fd, name = resolve_at(self.root, rel_s)
            try:
                fd = os.open(name, _READ | os.O_NOFOLLOW, dir_fd=dir_fd)
            finally:
                os.close(dir_fd)
        try:
            mode = os.fstat(fd).st_mode
            if not stat.S_ISREG(mode):
                raise not_regular(self.path(rel), mode)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def read_bytes(self, rel: str | os.PathLike[str]) -> bytes:
        p = self.path(rel)
        try:
            fd = self.open_read(rel)
            try:
                return read_fd(fd, p)
            finally:
                os.close(fd)
        except OSError as exc:
            raise read_error(p, exc) from None

    def read_str(self, rel: str | os.PathLike[str]) -> str:
        data = self.read_bytes(rel)
        try:
            return data.decode().strip()
        except UnicodeDecodeError:
            raise DeviceError(f"{self.path(rel)} is not text", "check the driver; this file should hold text") from None

    def read_int(self, rel: str | os.PathLike[str]) -> int:
        text = self.read_str(rel)
        try:
            return int(text.split()[0])
        except (ValueError, IndexError):
            raise DeviceError(
                f"{self.path(rel)} holds {text!r}, not a number", "check the driver; this file should hold an integer"
            ) from None

    def read_ints(self, rel: str | os.PathLike[str]) -> tuple[int, ...]:
        text = self.read_str(rel)
        try:
            return tuple(int(tok) for tok in text.split())
        except ValueError:
            raise DeviceError(
                f"{self.path(rel)} holds {text!r}, not a list of numbers",
                "check the driver; this file should hold integers separated by spaces",
            ) from None

    def write(self, rel: str | os.PathLike[str], value: int | str) -> None:
        """Write one value: in place on a board (a sysfs attribute takes one write), replaced
        atomically in a tree of ours (a twin's or a test tree), never through a link out of a tree.
        The file's own permissions decide, as the kernel's do."""
        p = self.path(rel)
        data = f"{value}\n".encode()
        try:
            if self.system:
                fd = _open_write(p, p, _WRITE | os.O_TRUNC | os.O_NOFOLLOW)
                try:
                    write_fd(fd, data, p)
                finally:
                    os.close(fd)
                return
            dir_fd, name = resolve_at(self.root, self.rel(p))
            try:
                if own_tree(self.root):
                    # Opened (not truncated) first: the file's own permissions refuse as the kernel's would.
                    fd = _open_write(p, name, _WRITE | os.O_NOFOLLOW, dir_fd)
                    try:
                        mode = os.fstat(fd).st_mode
                    finally:
                        os.close(fd)
                    if not stat.S_ISREG(mode):
                        raise not_regular(p, mode)
                    replace_at(dir_fd, name, data, p)
                else:
                    fd = _open_write(p, name, _WRITE | os.O_TRUNC | os.O_NOFOLLOW, dir_fd)
                    try:
                        write_fd(fd, data, p)
                    finally:
                        os.close(fd)
            finally:
                os.close(dir_fd)
            watcher = _watcher(self._real)
            if watcher is not None:  # a twin answers the new control value on its next read, not a tick later
                watcher.tree_written(self.rel(p))
        except FileNotFoundError:
            raise NodeNotFoundError(
                f"{p} does not exist", "check the board's L4T release; `slm-dvfs device` lists what was found"
            ) from None
        except OSError as exc:
            raise write_error(p, value, exc) from None


def _open_write(path: Path, name: str | os.PathLike[str], flags: int, dir_fd: int | None = None) -> int:
    """Open the tree file `path` (`name` in the folder `dir_fd`) for writing: one place, so that a
    test can refuse it as the kernel refuses a user who may not write clocks."""
    return os.open(name, flags, dir_fd=dir_fd)


def read_error(path: str | os.PathLike[str], exc: OSError) -> DeviceError:
    """A failed read of a tree file, as the error a user can act on."""
    if isinstance(exc, (FileNotFoundError, NotADirectoryError)):
        return NodeNotFoundError(
            f"{path} does not exist",
            "check that this is a Jetson running L4T r35 to r39 (or pass --sysfs-root / "
            "--twin); `slm-dvfs device` lists what was found",
        )
    if exc.errno in (errno.EACCES, errno.EPERM):
        return DeviceError(f"no permission to read {path}", "run as root or add your user to the group that owns it")
    if exc.errno == errno.ENODATA:
        return NodeNotFoundError(f"{path} has no data (disabled channel)", "skip this channel")
    if exc.errno == errno.ELOOP:
        return _unsafe_link_now(path)
    return DeviceError(f"cannot read {path}: {exc.strerror}", "check the board's kernel and drivers")


def write_error(path: str | os.PathLike[str], value: object, exc: OSError) -> DeviceError:
    """A failed write of a tree file, as the error a user can act on."""
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return PermissionDeniedError(str(path), exc.errno)
    if exc.errno == errno.ELOOP:
        return _unsafe_link_now(path)
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return DeviceError(f"cannot write {path} ({errno_text(exc.errno, exc.strerror)})",
                           f"free space on the disk that holds it (`df {os.path.dirname(path)}`), then try again")
    if exc.errno in (errno.ENXIO, errno.ENOTDIR, errno.EISDIR):
        return DeviceError(f"cannot write {path} ({errno_text(exc.errno, exc.strerror)})",
                           "check the tree: this should be a regular file")
    return DeviceError(
        f"the kernel refused {value!r} for {path}: {exc.strerror}",
        "the value may be outside the current limits or the nvpmodel mode's cap",
    )


def _unsafe_link_now(path: str | os.PathLike[str]) -> UnsafeTreeError:
    return UnsafeTreeError(f"{path} is a link", "a tree's files must be regular files, not links: re-create the tree")


# Errors after which an open kernel file must be opened again: a driver unbound and bound
# again (ENODEV), a stale handle on a network or overlay mount (ESTALE), a closed fd (EBADF).
_REOPEN_ERRNOS = (errno.ESTALE, errno.ENODEV, errno.EBADF)


class OpenFiles:
    """Kernel files read often (the INA3221 rails), kept open and read with `os.pread`.

    A read through a path opens, reads and closes the file each time (~15 us on a tmpfs,
    more through pathlib); `pread` on a kept descriptor is one system call. A file that
    the kernel stopped serving (ENODEV, ESTALE) is opened again once; one that is gone is a
    NodeNotFoundError naming it. Under a root other than `/` the files may be regular files
    that a writer replaces atomically (a rendered tree, e.g. the twin's): an open
    descriptor would keep reading the replaced inode, so there each read also checks that
    the file is still linked (a board's sysfs files are never replaced, so `/` skips it).
    Thread-safe: the sampler and a UI may read the same files.
    """

    def __init__(self, tree: SysfsTree) -> None:
        self.tree = tree
        self._fds: dict[str, int] = {}
        self._lock = threading.Lock()
        self._check_replaced = Path(tree.root) != Path("/")

    def read_ints(self, rels: tuple[str, ...] | list[str]) -> list[int]:
        """The integer each file holds (the first token), in order."""
        self.tree.before_read(rels)
        with self._lock:
            return [self._read_int(rel) for rel in rels]

    def close(self) -> None:
        with self._lock:
            fds, self._fds = self._fds, {}
        for fd in fds.values():
            with contextlib.suppress(OSError):
                os.close(fd)

    def __del__(self) -> None:  # a device dropped without close() must not leak descriptors
        with contextlib.suppress(Exception):
            self.close()

    def _read_int(self, rel: str) -> int:
        data = self._pread(rel)
        try:
            return int(data.split()[0])
        except (ValueError, IndexError):
            raise DeviceError(
                f"{self.tree.path(rel)} holds {data.decode(errors='replace')!r}, not a number",
                "check the driver; this file should hold an integer",
            ) from None

    def _pread(self, rel: str) -> bytes:
        fd = self._fds.get(rel)
        if fd is None:
            fd = self._open(rel)
        try:
            data = os.pread(fd, 64, 0)
        except OSError as exc:
            if exc.errno not in _REOPEN_ERRNOS:
                raise self._error(rel, exc) from None
            data = self._reread(rel)
        else:
            if self._check_replaced and os.fstat(fd).st_nlink == 0:
                data = self._reread(rel)  # a value replaced again meanwhile is still a recent one
        return data

    def _reread(self, rel: str) -> bytes:
        fd = self._open(rel)
        try:
            return os.pread(fd, 64, 0)
        except OSError as exc:
            raise self._error(rel, exc) from None

    def _error(self, rel: str, exc: OSError) -> DeviceError:
        p = self.tree.path(rel)
        if exc.errno == errno.ENODATA:
            return NodeNotFoundError(f"{p} has no data (disabled channel)", "skip this channel")
        return DeviceError(f"cannot read {p}: {exc.strerror}", "check the board's kernel and drivers")

    def _open(self, rel: str) -> int:
        old = self._fds.pop(rel, None)
        if old is not None:
            with contextlib.suppress(OSError):
                os.close(old)
        p = self.tree.path(rel)
        try:
            fd = self.tree.open_read(rel)
        except FileNotFoundError:
            raise NodeNotFoundError(f"{p} is gone (the sensor's driver unbound or the tree was rebuilt)",
                                    "check the board's INA3221 driver (`slm-dvfs device`) and restart the run") from None
        except OSError as exc:
            raise read_error(p, exc) from None
        self._fds[rel] = fd
        return fd
