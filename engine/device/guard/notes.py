"""What a command that only looks at a board should say about its clocks: a dead session's
journal is recovered, a pin left by `slm-dvfs pin` or a session running now is mentioned
(`slm-dvfs device`, `monitor`, `runs`)."""

from __future__ import annotations

import logging
from pathlib import Path

from engine.core.errors import SlmDvfsError
from engine.device.base import Device
from engine.core.text import clean_text
from engine.device.guard.journal import PINNED, device_key, drop_reset_twins, journal_dir, list_journals
from engine.device.guard.lock import board_busy, board_lock_dir
from engine.device.guard.restore import recover_stale
from engine.device.guard.trust import read_pin_marker

log = logging.getLogger(__name__)


def board_notes(device: Device, directory: Path | None = None) -> list[str]:
    """Recover this board's dead sessions, then one line per thing the user should know."""
    directory = directory or journal_dir()
    notes: list[str] = []
    try:
        restored = recover_stale(directory)
    except (SlmDvfsError, OSError) as exc:  # e.g. not allowed to lock a board at /
        log.info("no recovery now: %s", exc)
        restored = []
    for j in restored:
        notes.append(f"restored the clocks of {j.device.get('root', '?')} left changed by a run that "
                     f"did not exit cleanly (pid {j.pid})")
    description = device.describe()
    key, root = device_key(description), description.get("root")
    pins = [str(j.path) for j in drop_reset_twins(list_journals(directory))[0]
            if j.kind == PINNED and device_key(j.device) == key]
    lock_dir = board_lock_dir(str(root)) if root else directory
    marker = read_pin_marker(lock_dir, key)  # a pin made by another user or state dir (its journal is not in ours)
    if marker is not None and str(marker.get("journal")) not in pins:
        pins.append(f"{marker.get('journal')} (uid {marker.get('uid')})")
    try:
        busy = board_busy(lock_dir, key)
    except (SlmDvfsError, OSError):
        busy = None
    for pin in pins:
        notes.append(f"the clocks of {root or 'this board'} are left pinned by `slm-dvfs pin` "
                     f"(journal {pin}); `slm-dvfs restore` puts them back")
    if busy is not None:
        pid, cmd = busy
        cmd = clean_text(cmd) if cmd else cmd  # read from a lock file: printed, so stripped of escapes
        notes.append(f"another slm-dvfs session (pid {pid}{': ' + cmd if cmd else ''}) is changing the clocks "
                     f"of {root or 'this board'} now")
    return notes


def pinned_boards(directory: Path | None = None) -> list[str]:
    """One line per board left pinned by `slm-dvfs pin` in our state dir (for commands without a board)."""
    return [f"the clocks of {j.device.get('root', '?')} are left pinned by `slm-dvfs pin` (journal {j.path}); "
            f"`slm-dvfs restore` puts them back" for j in drop_reset_twins(list_journals(directory))[0]
            if j.kind == PINNED]  # a twin's pin whose tree is gone (reset at reboot) is dropped, not reported
