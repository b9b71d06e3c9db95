"""What the guard trusts on disk besides journals: the `jetson_clocks --store` file a journal
names, and the board's pin marker.

A journal may name a jetson_clocks store file to restore from; that file is handed to
`jetson_clocks --restore` (run as root), so it is used only when it is ours: a
`jetson_clocks-<pid>.store` file directly in our state dir, a regular file owned by us that
nobody else may write. Anything else is ignored (logged) and the snapshot alone is restored.
"""

from __future__ import annotations

import logging
import os
import re
import stat
from pathlib import Path

from engine.core import paths

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
