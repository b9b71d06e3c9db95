"""Root-relative file access for sysfs/debugfs: one code path for a board and a fake tree."""

from __future__ import annotations

import contextlib
import errno
import glob
import os
import threading
from pathlib import Path

from engine.core.errors import DeviceError, NodeNotFoundError, PermissionDeniedError


class SysfsTree:
    """Reads and writes kernel files below `root` (`/` on a board).

    Paths given to the methods are relative ("sys/class/devfreq"); a leading
    slash is tolerated so spec paths can be pasted as they are.
    """

    def __init__(self, root: str | os.PathLike[str] = "/") -> None:
        self.root = Path(root)

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
        return self.path(rel).exists()

    def glob(self, pattern: str) -> list[str]:
        """Root-relative matches, sorted."""
        base = os.fspath(self.root)
        hits = glob.glob(os.path.join(base, pattern.lstrip("/")))
        return sorted(self.rel(h) for h in hits)

    def read_str(self, rel: str | os.PathLike[str]) -> str:
        p = self.path(rel)
        try:
            return p.read_text().strip()
        except FileNotFoundError:
            raise NodeNotFoundError(
                f"{p} does not exist",
                "check that this is a Jetson running L4T r35/r36 (or pass --sysfs-root / "
                "--twin); `slm-dvfs device` lists what was found",
            ) from None
        except PermissionError:
            raise DeviceError(
                f"no permission to read {p}",
                "run as root or add your user to the group that owns it",
            ) from None
        except OSError as exc:
            if exc.errno == errno.ENODATA:
                raise NodeNotFoundError(f"{p} has no data (disabled channel)", "skip this channel") from None
            raise DeviceError(f"cannot read {p}: {exc.strerror}", "check the board's kernel and drivers") from None

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
        p = self.path(rel)
        try:
            with open(p, "w") as fh:
                fh.write(f"{value}\n")
        except FileNotFoundError:
            raise NodeNotFoundError(
                f"{p} does not exist", "check the board's L4T release; `slm-dvfs device` lists what was found"
            ) from None
        except PermissionError as exc:
            raise PermissionDeniedError(str(p), exc.errno) from None
        except OSError as exc:
            if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
                raise PermissionDeniedError(str(p), exc.errno) from None
            raise DeviceError(
                f"the kernel refused {value!r} for {p}: {exc.strerror}",
                "the value may be outside the current limits or the nvpmodel mode's cap",
            ) from None


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
            fd = os.open(p, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            raise NodeNotFoundError(f"{p} is gone (the sensor's driver unbound or the tree was rebuilt)",
                                    "check the board's INA3221 driver (`slm-dvfs device`) and restart the run") from None
        except PermissionError:
            raise DeviceError(f"no permission to read {p}",
                              "run as root or add your user to the group that owns it") from None
        except OSError as exc:
            raise DeviceError(f"cannot open {p}: {exc.strerror}", "check the board's kernel and drivers") from None
        self._fds[rel] = fd
        return fd
