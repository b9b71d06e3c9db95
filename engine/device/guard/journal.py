"""Clock journals: the snapshot the guard writes to disk before touching a clock.

A journal is a small JSON file in `<state dir>/journals`, named after the board it
belongs to (`device_key`: the resolved root and the device-tree serial). This module reads,
writes and lists them, and tells whether the session that wrote one is still alive (its
session lock, `lock.session_alive`); restoring them is the guard's job.

A journal is trusted only as we wrote it (docs/security.md, "Journals"): a regular file
owned by us in a folder owned by us, writable by nobody else; it holds settings to put
back and never a command to run. One that cannot be parsed is moved aside
(`*.corrupt-<time>`) and reported, never reused.

Two kinds of journal:
- `session`: owned by a live session; stale once its session lock is free.
- `pinned`: left on purpose by `slm-dvfs pin`; only `slm-dvfs restore` undoes it.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import logging
import os
import re
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Mapping

from engine.core import paths
from engine.core.errors import DeviceError, SlmDvfsError, errno_text
from engine.core.jsontypes import JsonObject
from engine.device.base import Device, DeviceSettings
from engine.device.guard.lock import board_key, read_small, session_alive
from engine.device.treefs import TWIN_MARKER

log = logging.getLogger(__name__)

SESSION = "session"
PINNED = "pinned"


@dataclass(frozen=True)
class Journal:
    """What the guard writes before touching a clock."""

    kind: str  # SESSION | PINNED
    pid: int
    pid_start: str | None  # the process's start time, so a reused pid is not mistaken for ours
    host: str
    created: float
    device: JsonObject  # Device.describe(): how to reopen it from another process
    settings: DeviceSettings
    path: Path
    jetson_clocks_store: str | None = None  # `jetson_clocks --store` file to restore from first
    session_lock: str | None = None  # the writer's session lock: free once it is gone
    runs: tuple[int, ...] = ()  # results-store run ids the session was recording
    twin: bool = False  # the root was a digital twin's tree (its marker file): gone at reboot, nothing to restore

    @property
    def twin_reset(self) -> bool:
        """A twin's tree that is gone (reset by a reboot, /dev/shm, or deleted): nothing is left to
        restore, the twin starts from its defaults. Told by the marker recorded when it was written
        or, for a journal from before that, by a root under the twins' folder. A board's root (`/`,
        any other tree) that is gone is not this: its journal is kept and reported."""
        root = device_root(self.device)
        if root is None or os.path.realpath(root) == "/" or os.path.exists(root):
            return False
        return self.twin or in_twin_dir(root)

    def to_json(self) -> JsonObject:
        return {
            "version": 2,
            "kind": self.kind,
            "pid": self.pid,
            "pid_start": self.pid_start,
            "host": self.host,
            "created": self.created,
            "device": self.device,
            "settings": self.settings.to_json(),
            "jetson_clocks_store": self.jetson_clocks_store,
            "session_lock": self.session_lock,
            "runs": list(self.runs),
            "twin": self.twin,
        }

    @classmethod
    def read(cls, path: Path) -> "Journal":
        check_trusted(path)
        try:
            data = json.loads(read_small(path))
            device = dict(data["device"])
            if not isinstance(device.get("root", "/"), str):
                raise TypeError("the device root is not a string")
            return cls(
                kind=str(data["kind"]),
                pid=int(data["pid"]),
                pid_start=data.get("pid_start"),
                host=str(data.get("host", "")),
                created=float(data.get("created", 0.0)),
                device={k: device[k] for k in ("kind", "root") if k in device},  # never a tool path
                settings=DeviceSettings.from_json(data["settings"]),
                path=path,
                jetson_clocks_store=None if data.get("jetson_clocks_store") is None
                else str(data["jetson_clocks_store"]),
                session_lock=None if data.get("session_lock") is None else str(data["session_lock"]),
                runs=tuple(int(r) for r in data.get("runs") or ()),
                twin=data.get("twin") is True,
            )
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise UnreadableJournal(
                f"clock journal {path} is unreadable ({exc})",
                "restore the clocks by hand (`sudo nvpmodel -m <id>` resets a mode's clocks: `nvpmodel -q` "
                "names the board's mode, `slm-dvfs device` lists them; or reboot), then delete the file",
            ) from None

    def owner_alive(self) -> bool:
        """Whether the session that wrote this is still running: its session lock is held.
        Never judged by pid and host (a container or renamed host would keep it alive forever);
        a journal from before session locks counts as alive only while its pid runs here."""
        if self.session_lock is not None:
            return session_alive(Path(self.session_lock))
        return process_alive(self.pid, self.pid_start)


class UnreadableJournal(SlmDvfsError):
    """A journal file that is not a journal (truncated, not JSON, missing fields)."""


class UntrustedJournal(SlmDvfsError):
    """A journal file we did not write (another owner, a link, or writable by others)."""


def check_trusted(path: Path) -> None:
    """Refuse a journal that we did not write: it must be a regular file owned by us in a folder
    owned by us, neither writable by group or others (a crafted journal must not make us
    write clocks, or name files for us to touch)."""
    uid = os.geteuid()
    try:
        st, dst = os.lstat(path), os.stat(path.parent)
    except OSError as exc:
        raise UnreadableJournal(f"clock journal {path} cannot be read ({exc.strerror})",
                                "check the state directory's permissions") from None
    why = None
    if not stat.S_ISREG(st.st_mode):
        why = "it is not a regular file (a link?)"
    elif st.st_uid != uid:
        why = f"it is owned by uid {st.st_uid}, not by us (uid {uid})"
    elif st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        why = f"its mode {stat.S_IMODE(st.st_mode):o} lets others write it"
    elif dst.st_uid != uid:
        why = f"its folder {path.parent} is owned by uid {dst.st_uid}, not by us"
    elif dst.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        # Our own folder, left group-writable by a umask of 002: each file's owner is still checked,
        # so tighten it rather than refuse every journal in it.
        try:
            os.chmod(path.parent, 0o700)
            log.info("made the journal folder %s private (it was %o)", path.parent, stat.S_IMODE(dst.st_mode))
        except OSError as exc:
            why = f"its folder {path.parent} is writable by others and cannot be made private ({exc.strerror})"
    if why:
        raise UntrustedJournal(
            f"clock journal {path} is not trusted: {why}",
            "slm-dvfs only restores journals it wrote itself; check who wrote this file, restore the "
            "clocks by hand if needed (`sudo nvpmodel -m <id>` with the board's mode from `nvpmodel -q`, or "
            "reboot), then delete it (if you wrote it, "
            f"with an older slm-dvfs under umask 002, `chmod 600 {path}` and run `slm-dvfs restore` again)",
        )


def move_aside(path: Path) -> Path | None:
    """Rename an unreadable journal to `<name>.corrupt-<time>` so it is never reused; None if that failed."""
    target = path.with_name(f"{path.name}.corrupt-{time.strftime('%Y%m%dT%H%M%S')}-{time.time_ns() % 10**9}")
    try:
        os.replace(path, target)
    except OSError as exc:
        log.warning("cannot move the unreadable journal %s aside: %s", path, exc.strerror)
        return None
    return target


def journal_dir() -> Path:
    return paths.state_dir() / "journals"


def device_root(description: Mapping[str, object]) -> str | None:
    """The root a device description names (None: a device without one)."""
    root = description.get("root")
    return None if root is None else str(root)


def is_twin_tree(root: str | None) -> bool:
    """Whether a device root is a digital twin's tree (it holds the twin's marker file)."""
    return root is not None and os.path.realpath(root) != "/" and os.path.isfile(os.path.join(root, TWIN_MARKER))


def in_twin_dir(root: str) -> bool:
    """Whether a root lies in the twins' folder (engine.core.paths.twin_dir)."""
    folder = os.path.realpath(paths.twin_dir())
    try:
        return os.path.commonpath([folder, os.path.realpath(root)]) == folder
    except ValueError:
        return False


def drop_reset_twins(journals: list[Journal]) -> tuple[list[Journal], list[Journal]]:
    """(kept, dropped): the journals of a twin whose tree is gone (`Journal.twin_reset`) are
    deleted, with an info line, unless their session still runs; the others are kept."""
    kept: list[Journal] = []
    dropped: list[Journal] = []
    for j in journals:
        if j.twin_reset and not (j.kind == SESSION and j.owner_alive()):
            j.path.unlink(missing_ok=True)
            log.info("dropped clock journal %s: the twin's tree %s is gone (reset at reboot?); nothing to "
                     "restore, the twin starts from its defaults", j.path.name, device_root(j.device))
            dropped.append(j)
        else:
            kept.append(j)
    return kept, dropped


def device_key(description: Mapping[str, object]) -> str:
    """A short stable name for one board: its resolved root and device-tree serial (`lock.board_key`),
    so `T/../T` and `T` share journals and the lock."""
    if "root" in description:
        return board_key(str(description["root"]))
    raw = json.dumps(description, sort_keys=True).encode()
    return hashlib.sha256(raw).hexdigest()[:12]


def reopen_device(description: Mapping[str, object]) -> Device:
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
    fresh: bool = True  # found now (False: a file moved aside by an earlier scan, still there)

    def describe(self) -> str:
        return f"{self.path} (device {self.root or 'unknown'}): {self.what}\n  What to do: {self.remedy}"


def scan_journals(directory: Path | None = None) -> tuple[list[Journal], list[JournalProblem]]:
    """Every journal, oldest first, and the files that could not be used as one: an unreadable
    file is moved aside (`*.corrupt-<time>`), one we did not write is left where it is."""
    directory = directory or journal_dir()
    if not directory.is_dir():
        return [], []
    found: list[Journal] = []
    bad: list[JournalProblem] = []
    for p in sorted(directory.glob("*.json")):
        try:
            found.append(Journal.read(p))
        except UnreadableJournal as exc:
            hint = _root_hint(p)
            moved = move_aside(p)
            where = f"; moved aside to {moved}" if moved else ""
            bad.append(JournalProblem(moved or p, hint, exc.what + where, exc.remedy))
        except SlmDvfsError as exc:
            bad.append(JournalProblem(p, _root_hint(p), exc.what, exc.remedy))
    bad += stale_temp_files(directory)
    for p in sorted(directory.glob("*.json.corrupt-*")):
        if all(b.path != p for b in bad):
            bad.append(JournalProblem(
                p, _root_hint(p), "an unreadable clock journal, moved aside (never reused)",
                "check that board's clocks (`slm-dvfs device`; `sudo nvpmodel -m <id>` with its mode from "
                "`nvpmodel -q`, or a reboot, resets them), "
                f"then delete {p}", fresh=False,
            ))
    return sorted(found, key=lambda j: j.created), bad


_TMP_NAME = re.compile(r"\..+\.json\.[0-9]+\.[0-9]+\.tmp")


def stale_temp_files(directory: Path) -> list[JournalProblem]:
    """Temporary journals left by a writer that died before its rename (`atomic_write`): deleted
    when provably ours and dead (a regular file we own whose writer's flock is free), reported
    otherwise (not ours, a link, not a regular file). One being written now is left alone."""
    problems: list[JournalProblem] = []
    uid = os.geteuid()
    for p in sorted(directory.glob(".*.tmp")):
        if not _TMP_NAME.fullmatch(p.name):
            continue
        try:
            st = os.lstat(p)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != uid:
                why = "not a regular file" if not stat.S_ISREG(st.st_mode) else f"owned by uid {st.st_uid}, not by us"
                problems.append(JournalProblem(p, None, f"a temporary clock journal that we did not write ({why})",
                                               f"check who put it there, then delete {p}"))
                continue
            fd = os.open(p, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            continue  # renamed or cleaned meanwhile
        except OSError as exc:
            problems.append(JournalProblem(p, None, f"a temporary clock journal that cannot be checked ({exc.strerror})",
                                           f"check its permissions, then delete {p}"))
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # its writer holds it: being written now
            if os.path.samestat(os.fstat(fd), os.lstat(p)):
                p.unlink()
                log.info("deleted %s, a temporary clock journal left by a writer that died before its rename", p)
        except OSError:
            pass  # gone meanwhile
        finally:
            os.close(fd)
    return problems


def list_journals(directory: Path | None = None) -> list[Journal]:
    """The readable journals, oldest first; an unreadable one is logged and left in place."""
    journals, bad = scan_journals(directory)
    for b in (b for b in bad if b.fresh):
        log.warning("skipping clock journal %s (device %s): %s", b.path, b.root or "unknown", b.what)
    return journals


def describe_journals(journals: list[Journal] | tuple[Journal, ...]) -> Iterator[str]:
    for j in journals:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(j.created))
        yield f"{j.kind} journal from pid {j.pid} at {when} for {j.device.get('root', '?')}"


def ensure_dir(directory: Path) -> Path:
    """The journal folder, made private to us (0700) when we create it."""
    try:
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:
        raise DeviceError(
            f"cannot create the journal folder {directory} ({errno_text(exc.errno, exc.strerror)})",
            "nothing was changed on the board; make the state directory writable "
            "($SLM_DVFS_STATE_DIR or $XDG_STATE_HOME/slm-dvfs) and retry",
        ) from None
    return directory


def atomic_write(path: Path, data: JsonObject) -> None:
    """Write a journal so that a crash leaves the old file or the new one, never half of one:
    a fresh 0600 file beside it (O_EXCL: never through someone's link), fsync, rename, fsync
    the folder. A refused write names the file and the errno."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{time.time_ns()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # held while it is written: a scan tells a live writer from a dead one
            with os.fdopen(fd, "w") as fh:
                json.dump(data, fh, indent=1)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError as exc:
        raise DeviceError(
            f"cannot write the clock journal {path} ({errno_text(exc.errno, exc.strerror)})",
            f"nothing was changed on the board; free space on the disk that holds {path.parent} "
            f"(`df {path.parent}`) and retry" if exc.errno in (errno.ENOSPC, errno.EDQUOT) else
            "nothing was changed on the board; make the state directory writable "
            "($SLM_DVFS_STATE_DIR or $XDG_STATE_HOME/slm-dvfs) and retry",
        ) from None


def _root_hint(path: Path) -> str | None:
    """The device root a damaged journal names, if its text still shows it."""
    try:
        m = re.search(r'"root"\s*:\s*"([^"]*)"', read_small(path))
    except (OSError, DeviceError):
        return None
    return m.group(1) if m else None


# --- process liveness ----------------------------------------------------------------------
def process_start(pid: int) -> str | None:
    """Start time of a process in clock ticks since boot (Linux), None elsewhere."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name may hold spaces and parentheses: split after the last ')'.
    fields = stat.rsplit(")", 1)[1].split()
    return fields[19] if len(fields) > 19 else None


def process_alive(pid: int, start: str | None) -> bool:
    """Whether `pid` still runs the process that started at `start` (None: any process)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, owned by someone else
    if start is not None:
        now = process_start(pid)
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
