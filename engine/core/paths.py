"""Every location the tool reads or writes, in one place (XDG, with env overrides)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

ENV_PREFIX = "SLM_DVFS_"


def _xdg(var: str, default: str) -> Path:
    value = os.environ.get(var)
    return Path(value) if value else Path.home() / default


def state_dir() -> Path:
    """Journals and the persistent twin tree: things that must survive a crash."""
    override = os.environ.get(ENV_PREFIX + "STATE_DIR")
    return Path(override) if override else _xdg("XDG_STATE_HOME", ".local/state") / "slm-dvfs"


def memory_dir() -> Path | None:
    """A memory-backed folder (tmpfs) this user may write, where there is one: /dev/shm."""
    shm = "/dev/shm"
    return Path(shm) if os.path.isdir(shm) and os.access(shm, os.W_OK | os.X_OK) else None


def twin_dir() -> Path:
    """The digital twins' trees, one folder per profile, kept from one command to the next (a pin
    in one is seen by the next): $SLM_DVFS_TWIN_DIR; else a folder of this user's and this state
    dir's on a memory-backed file system (/dev/shm, where a twin's files cost no disk writes; gone at
    reboot, as a board's clocks are); else the state dir's `twin`."""
    override = os.environ.get(ENV_PREFIX + "TWIN_DIR")
    if override:
        return Path(override)
    shm = memory_dir()
    if shm is None:
        return state_dir() / "twin"
    tag = hashlib.sha256(os.fsencode(os.path.abspath(state_dir()))).hexdigest()[:12]
    return shm / f"slm-dvfs-twin-{os.geteuid()}-{tag}"


def data_dir() -> Path:
    """The results store and trained selectors."""
    override = os.environ.get(ENV_PREFIX + "DATA_DIR")
    return Path(override) if override else _xdg("XDG_DATA_HOME", ".local/share") / "slm-dvfs"


def reports_dir() -> Path:
    """Where `slm-dvfs report` writes when no --out is given (never the current folder)."""
    return data_dir() / "reports"


def cache_dir() -> Path:
    """Step traces and trained tokenizers: safe to delete."""
    override = os.environ.get(ENV_PREFIX + "CACHE_DIR")
    return Path(override) if override else _xdg("XDG_CACHE_HOME", ".cache") / "slm-dvfs"


def profiles_dir() -> Path:
    """Shipped data. `profiles/` sits beside `engine/` both in a checkout and in site-packages."""
    return Path(__file__).resolve().parents[2] / "profiles"


def sysfs_root(explicit: str | os.PathLike[str] | None = None) -> Path:
    """The root every device path is relative to: `/` on a board."""
    if explicit:
        return Path(explicit)
    env = os.environ.get(ENV_PREFIX + "SYSFS_ROOT")
    return Path(env) if env else Path("/")
