"""What the guard trusts on disk besides journals: the `jetson_clocks --store` file a journal
names, and the board's pin marker (read as a file beside the lock: no link, no FIFO).

A journal may name a jetson_clocks store file to restore from; that file is handed to
`jetson_clocks --restore` (run as root), so it is used only when it is ours: a
`jetson_clocks-<pid>.store` file directly in our state dir, a regular file owned by us that
nobody else may write. Anything else is ignored (logged) and the snapshot alone is restored.
"""

from __future__ import annotations

import json
import logging
import os
import re
import stat
from pathlib import Path

from engine.core import paths
from engine.core.errors import DeviceError
from engine.device.guard.lock import read_small

log = logging.getLogger(__name__)

_STORE_NAME = re.compile(r"jetson_clocks-\d+\.store")


def trusted_store(store: str | os.PathLike[str]) -> Path | None:
    """The jetson_clocks store to restore from, or None (logged) when it is gone or not ours."""
    path = Path(store)
    state = Path(os.path.realpath(paths.state_dir()))
    why = None
    if Path(os.path.realpath(path.parent)) != state or not _STORE_NAME.fullmatch(path.name):
        why = f"it is not a jetson_clocks-<pid>.store file in our state dir {state}"
    else:
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            log.warning("jetson_clocks state %s is gone: restoring from the snapshot alone", path)
            return None
        except OSError as exc:
            why = f"it cannot be read ({exc.strerror})"
        else:
            if not stat.S_ISREG(st.st_mode):
                why = "it is not a regular file"
            elif st.st_uid != os.geteuid():
                why = f"it is owned by uid {st.st_uid}"
            elif st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
                why = f"its mode {stat.S_IMODE(st.st_mode):o} lets others write it"
    if why:
        log.warning("not using the jetson_clocks state %s (%s): restoring from the snapshot alone", path, why)
        return None
    return state / path.name


def pin_marker(lock_dir: Path, key: str) -> Path:
    """The file beside the board lock that says the board is left pinned (and by which journal),
    so a run from any user or state dir sees the pin."""
    return lock_dir / f"{key}.pinned"


def read_pin_marker(lock_dir: Path, key: str) -> dict[str, object] | None:
    """What the board's pin marker says (`journal`, `uid`, ...), None when there is none or it
    cannot be read (never through a link, never waiting on a FIFO)."""
    try:
        data = json.loads(read_small(pin_marker(lock_dir, key)))
    except (OSError, DeviceError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def pinned_journal(lock_dir: Path, key: str) -> tuple[str, object] | None:
    """(journal, uid) of the pin the board's marker names, None when there is none. A marker whose
    journal is gone (restored, deleted) is removed; one whose journal cannot be seen (another
    user's private state dir) still counts."""
    data = read_pin_marker(lock_dir, key)
    if data is None:
        return None
    journal = Path(str(data.get("journal")))
    if not journal.exists() and os.access(journal.parent, os.X_OK):
        pin_marker(lock_dir, key).unlink(missing_ok=True)
        return None
    return str(journal), data.get("uid")


def in_folder(path: str | os.PathLike[str], folder: Path) -> bool:
    """Whether `path` lies directly in `folder` (the same folder through any path)."""
    parent = Path(path).parent
    try:
        return os.path.samefile(parent, folder)
    except OSError:
        return os.path.realpath(parent) == os.path.realpath(folder)
