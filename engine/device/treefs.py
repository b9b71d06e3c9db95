"""Files inside a device tree other than the board's own `/`: links followed only inside it,
regular files only, atomic replaces.

A path is walked one folder at a time, each opened with O_NOFOLLOW: a link is followed only
when it is relative and stays inside the tree (treegen's links, a board's kernel links), never
out of it, so a link someone put in a tree cannot make us read or write a file elsewhere. A
file must be a regular file (a FIFO would block a read). A tree of ours (a twin's, a test
tree: its marker is ours) has its files replaced atomically, a temp file in the same folder
renamed over the old one, so a reader (or a signal handler restoring the clocks) never sees
one half-written. `engine.device.sysfs` is the API over this; the twin and treegen use it too.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import logging
import os
import stat
from pathlib import Path

from engine.core.errors import DeviceError

log = logging.getLogger(__name__)

TWIN_MARKER = ".slm-dvfs-twin"  # a digital twin's tree
FAKE_L4T_MARKER = ".slm-dvfs-fake-l4t"  # a test tree whose L4T tools are simulated in-process

_MAX_LINKS = 40  # as the kernel's own limit on links in one path
_O_PATH = getattr(os, "O_PATH", os.O_RDONLY)
_DIR = _O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_TMP_SEQ = itertools.count()


class UnsafeTreeError(DeviceError):
    """A path in a device tree that leads out of the tree through a link, or a file there that is
    not a regular file (a FIFO, a device): refused, never followed or opened."""


def _unsafe_link(root: str | os.PathLike[str], where: str, target: str) -> UnsafeTreeError:
    return UnsafeTreeError(
        f"{os.path.join(root, where)} is a link to {target}, out of the device tree {root}",
        "slm-dvfs follows a link in a tree other than the board's own / only when it is relative and "
        "stays inside the tree: replace the link by the file it should name (or a relative link inside "
        "the tree), or use a tree only you can change",
    )


def not_regular(path: str | os.PathLike[str], mode: int) -> UnsafeTreeError:
    kind = "a FIFO" if stat.S_ISFIFO(mode) else "a folder" if stat.S_ISDIR(mode) else "not a regular file"
    return UnsafeTreeError(
        f"{path} is {kind}, not a kernel attribute file",
        "a device tree holds regular files only (a FIFO would block every read): replace it with a file "
        "holding the value, or re-create the tree (a twin: delete its folder)",
    )


def resolve_at(root: str | os.PathLike[str], rel: str, *, make_dirs: bool = False,
               follow_last: bool = True) -> tuple[int, str]:
    """(an fd of the folder that holds `rel`, the file's name in it) under `root`, each folder
    opened with O_NOFOLLOW and each link followed only inside the tree; the caller closes the fd
    and opens the name with O_NOFOLLOW. `make_dirs` creates missing folders (0755);
    `follow_last=False` returns a link at the end of the path as it is (to replace it). Raises
    OSError as the kernel would (ENOENT, ENOTDIR, EACCES, ELOOP) and UnsafeTreeError for a link
    out of the tree (absolute, or `..` above the root)."""
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if not parts:
        raise IsADirectoryError(errno.EISDIR, "the tree's root is not a file", os.fspath(root))
    stack = [os.open(root, _O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)]  # the root as given (its own links too)
    walked: list[str] = []
    links = 0
    try:
        while parts:
            name = parts.pop(0)
            if name == "..":
                if len(stack) == 1:
                    raise _unsafe_link(root, "/".join(walked) or ".", "..")
                os.close(stack.pop())
                walked.pop()
                continue
            if not parts:  # the file itself: a link is followed (inside the tree), anything else is returned
                if not follow_last:
                    return stack.pop(), name
                try:
                    st = os.stat(name, dir_fd=stack[-1], follow_symlinks=False)
                except FileNotFoundError:
                    st = None
                if st is None or not stat.S_ISLNK(st.st_mode):
                    return stack.pop(), name
            else:
                try:
                    stack.append(os.open(name, _DIR, dir_fd=stack[-1]))
                    walked.append(name)
                    continue
                except FileNotFoundError:
                    if not make_dirs:
                        raise
                    with contextlib.suppress(FileExistsError):  # made meanwhile: walked as found
                        os.mkdir(name, 0o755, dir_fd=stack[-1])
                    parts.insert(0, name)
                    continue
                except NotADirectoryError:
                    pass  # a link (followed below) or a file where a folder belongs (readlink says EINVAL)
            try:
                target = os.readlink(name, dir_fd=stack[-1])
            except OSError as exc:
                if exc.errno == errno.EINVAL:
                    raise NotADirectoryError(errno.ENOTDIR, "not a folder", os.path.join(root, *walked, name)) from None
                raise
            links += 1
            if links > _MAX_LINKS:
                raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), os.path.join(root, rel))
            if target.startswith("/"):
                raise _unsafe_link(root, "/".join([*walked, name]), target)
            parts = [p for p in target.split("/") if p not in ("", ".")] + parts
            if not parts:
                raise IsADirectoryError(errno.EISDIR, "a link to the tree's root", os.path.join(root, rel))
        raise IsADirectoryError(errno.EISDIR, "not a file", os.path.join(root, rel))  # `..` ended the path
    finally:
        for fd in stack:
            os.close(fd)


def read_fd(fd: int, path: str | os.PathLike[str]) -> bytes:
    """All of an open file, refused unless it is a regular file."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise not_regular(path, st.st_mode)
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    return b"".join(chunks)


def write_fd(fd: int, data: bytes, path: str | os.PathLike[str]) -> None:
    """Write `data` at the start of an open regular file in one call, as a kernel attribute takes it."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise not_regular(path, st.st_mode)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def replace_at(dir_fd: int, name: str, data: bytes, path: str | os.PathLike[str], *,
               create: bool = False, mode: int | None = None) -> None:
    """Replace `name` in the folder `dir_fd` atomically: a fresh temp file beside it (O_EXCL,
    O_NOFOLLOW) with the old file's mode and owner (`mode` if given; 0644 for a new one), renamed
    over it. A reader sees the old text or the new, never an empty file, even if we are stopped
    half-way. The old file must be a regular file (or absent, with `create`)."""
    try:
        st: os.stat_result | None = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        if not create:
            raise
        st = None
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise not_regular(path, st.st_mode)
    while True:
        tmp = f".{name}.{os.getpid()}.{next(_TMP_SEQ)}.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                         dir_fd=dir_fd)
            break
        except FileExistsError:
            continue  # left by a dead process that had our pid: take the next name
    try:
        try:
            os.fchmod(fd, mode if mode is not None else stat.S_IMODE(st.st_mode) if st is not None else 0o644)
            if st is not None and os.geteuid() == 0 and (st.st_uid, st.st_gid) != (0, 0):
                os.fchown(fd, st.st_uid, st.st_gid)  # the tree's owner keeps its file
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise


def put_file(root: str | os.PathLike[str], rel: str, data: bytes, *, mode: int | None = None) -> None:
    """Write a file of a tree we render (treegen, the twin, its marker and scripts): its folders
    made as needed, anything but a regular file at its place (a link, a FIFO) removed first and
    never followed, the content replaced atomically."""
    dir_fd, name = resolve_at(root, rel, make_dirs=True, follow_last=False)
    try:
        with contextlib.suppress(FileNotFoundError):
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                raise IsADirectoryError(errno.EISDIR, "a folder where a file belongs", os.path.join(root, rel))
            if not stat.S_ISREG(st.st_mode):
                os.unlink(name, dir_fd=dir_fd)
        replace_at(dir_fd, name, data, os.path.join(root, rel), create=True, mode=mode)
    finally:
        os.close(dir_fd)


_WARNED: set[Path] = set()


def trusted_marker(path: Path) -> bool:
    """A tree's marker counts only as a regular file owned by us, in a folder owned by us, neither
    writable by anyone else: another user's tree must not choose how we treat it."""
    try:
        for p, st in ((path, os.lstat(path)), (path.parent, os.stat(path.parent))):
            if st.st_uid != os.getuid() or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
                if p not in _WARNED:  # once a path: asked at every write to such a tree
                    _WARNED.add(p)
                    log.warning("ignoring %s: not owned by uid %d or writable by others", p, os.getuid())
                return False
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def own_tree(root: str | os.PathLike[str]) -> bool:
    """Whether `root` is a tree we made (a twin's, or a test tree): its marker is ours."""
    resolved = Path(os.path.realpath(root))
    return resolved != Path("/") and any(trusted_marker(resolved / m) for m in (TWIN_MARKER, FAKE_L4T_MARKER))

