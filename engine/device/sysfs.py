"""Root-relative file access for sysfs/debugfs: one code path for a board and a fake tree."""

from __future__ import annotations

import errno
import glob
import os
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
