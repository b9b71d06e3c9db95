"""Writing an entry of a cache folder: atomically, and never failing the caller.

A cache (step traces, the twin ensemble's figures) is an optimisation: an entry that cannot be written
is computed again next time, so a failure logs and returns. A reader sees the old file or the new one,
never half of one (a temporary file beside it, then a rename).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from pathlib import Path

log = logging.getLogger(__name__)


def store_cache_json(path: Path, body: object, what: str, *, indent: int | None = None) -> bool:
    """Write `body` as JSON to `path` atomically; False (and a log line naming `what`) when it could not."""
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(body, indent=indent))
        tmp.replace(path)
        return True
    except (OSError, ValueError, TypeError) as exc:  # ValueError, TypeError: what JSON cannot hold
        log.info("could not cache the %s %s (%s)", what, path, exc)
        with contextlib.suppress(OSError):
            tmp.unlink()
        return False
