"""Putting a board back: from a snapshot, from a journal, and after a crash.

`recover_stale` restores the journals of sessions that are gone (their session lock is free);
`restore_report` is `slm-dvfs restore`: pins and dead sessions, oldest snapshot per board first,
each under the board lock. A journal that cannot be used never blocks the others.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from engine.core.errors import DeviceError, SlmDvfsError
from engine.device.base import Device, DeviceSettings
from engine.device.guard.journal import (
    PINNED,
    SESSION,
    Journal,
    JournalProblem,
    device_key,
    device_root,
    drop_reset_twins,
    journal_dir,
    list_journals,
    reopen_device,
    scan_journals,
)
from engine.device.guard.lock import DeviceBusyError, board_key, board_lock_dir, device_locked
from engine.device.guard.trust import in_folder, pin_marker, pinned_journal, trusted_store

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RestoreReport:
    """What `slm-dvfs restore` did: the journals it restored and the ones it had to keep."""

    restored: tuple[Journal, ...] = ()
    problems: tuple[JournalProblem, ...] = field(default=())
    dropped: tuple[Journal, ...] = ()  # a twin's, its tree gone (reset at reboot): nothing to restore




# --- restoring -----------------------------------------------------------------------------
def restore_settings(device: Device, settings: DeviceSettings, jetson_clocks_store: str | None = None) -> None:
    """`jetson_clocks --restore` first where a store was noted (it also gives back what our
    snapshot does not hold, such as the fan), then the snapshot. Both are tried; one
    DeviceError lists what failed. The store file is deleted once all worked."""
    failed: list[str] = []
    store = trusted_store(jetson_clocks_store) if jetson_clocks_store else None
    if store is not None:
        try:
            device.jetson_clocks_restore(store)
        except SlmDvfsError as exc:
            log.warning("jetson_clocks --restore %s failed: %s", store, exc.what)
            failed.append(f"`jetson_clocks --restore {store}`: {exc.what}")
    try:
        device.apply_settings(settings)
    except DeviceError as exc:
        failed.append(exc.what)
    if failed:
        raise DeviceError(
            "restoring the clocks failed: " + "; ".join(failed),
            "fix the cause, then run `slm-dvfs restore` (the journal is kept); `sudo nvpmodel -m <id>` "
            "resets a mode's clocks, a reboot resets everything",
        )
    if store is not None:
        store.unlink(missing_ok=True)


def restore_journal(journal: Journal, device: Device | None = None) -> None:
    """Apply a journal's snapshot and delete it (only once the apply worked), with the board's
    pin marker when it was a pin."""
    device = device or reopen_device(journal.device)
    restore_settings(device, journal.settings, journal.jetson_clocks_store)
    journal.path.unlink(missing_ok=True)
    if journal.kind == PINNED:
        _unmark_pin(journal)
    log.info("restored clocks from %s", journal.path.name)


def _lock_dir(directory: Path, root: str | None) -> Path:
    """The board lock's folder for a device root (the state dir for a device without one)."""
    return board_lock_dir(root) if root else directory


def _unmark_pin(journal: Journal) -> None:
    root = device_root(journal.device)
    try:
        marker = pin_marker(_lock_dir(journal.path.parent, root), device_key(journal.device))
    except SlmDvfsError:
        return
    marker.unlink(missing_ok=True)


def _by_device(journals: Iterator[Journal] | list[Journal]) -> dict[str, list[Journal]]:
    out: dict[str, list[Journal]] = {}
    for j in journals:
        out.setdefault(device_key(j.device), []).append(j)
    return out


def _still_dead(journal: Journal) -> Journal | None:
    """`journal` as it is on disk now, if it is still there and its owner still gone."""
    try:
        current = Journal.read(journal.path)
    except (SlmDvfsError, OSError, ValueError):
        return None
    return None if current.owner_alive() else current


def recover_stale(directory: Path | None = None) -> list[Journal]:
    """Restore every session journal whose process is gone. Returns what it restored.

    The oldest snapshot of a device wins: it is the state from before any of us. A journal
    that cannot be restored is logged and kept, and the other devices are still recovered.
    """
    directory = directory or journal_dir()
    restored: list[Journal] = []
    dead = [j for j in list_journals(directory) if j.kind == SESSION and not j.owner_alive()]
    dead, _ = drop_reset_twins(dead)  # a twin's tree gone at reboot: nothing to restore, not a warning
    for key, journals in _by_device(dead).items():
        oldest, *newer = journals  # list_journals sorts by creation time
        root = device_root(oldest.device)
        try:
            with device_locked(_lock_dir(directory, root), key, root):
                # Decided dead before the lock: another process may have recovered this journal
                # and pinned since; read it again under the lock, and leave it if it changed hands.
                current = _still_dead(oldest)
                if current is None:
                    continue
                restore_journal(current)
        except DeviceBusyError as exc:
            log.info("left %s for later: %s", oldest.path.name, exc.what)
            continue
        except (SlmDvfsError, OSError) as exc:
            log.warning(
                "cannot restore clock journal %s (device %s): %s; kept for `slm-dvfs restore`",
                oldest.path, root, getattr(exc, "what", exc),
            )
            continue
        for j in newer:
            j.path.unlink(missing_ok=True)
        log.warning(
            "restored clocks left changed by process %d (it did not exit cleanly)", oldest.pid
        )
        restored.append(oldest)
    return restored


def restore_report(directory: Path | None = None, root: str | None = None) -> RestoreReport:
    """`slm-dvfs restore`: undo pins and dead sessions, oldest snapshot per device first; with
    `root`, that board's alone (`--sysfs-root` / `--twin`), and a pin of it made from another
    state dir is reported (its journal is not ours to restore).

    A device with a live session is refused (restoring under it would leave the board
    pinned once it exits and puts its own snapshot back); journals that cannot be used
    are kept and reported with what to do."""
    directory = directory or journal_dir()
    journals, bad = scan_journals(directory)
    if root is not None:
        only = board_key(root)
        journals = [j for j in journals if device_key(j.device) == only]
        bad = [b for b in bad if b.root is None or board_key(b.root) == only]
    journals, dropped = drop_reset_twins(journals)
    problems = list(bad)
    live = _by_device([j for j in journals if j.kind == SESSION and j.owner_alive()])
    todo = _by_device([j for j in journals if not (j.kind == SESSION and j.owner_alive())])
    restored: list[Journal] = []
    for key, group in todo.items():
        oldest, *newer = group
        root = device_root(oldest.device)
        if key in live:
            pid = live[key][0].pid
            problems.append(JournalProblem(
                oldest.path, root,
                f"a live slm-dvfs session (pid {pid}) is using this device; restoring now would be undone "
                f"when it exits, leaving the board pinned",
                f"wait for pid {pid} to finish, or stop it (`kill {pid}` restores its clocks at once), "
                f"then run `slm-dvfs restore` again",
            ))
            continue
        try:
            with device_locked(_lock_dir(directory, root), key, root):
                current = _still_dead(oldest) if oldest.kind == SESSION else oldest
                if current is None:
                    continue  # recovered (and maybe pinned again) by another process meanwhile
                restore_journal(current)
        except DeviceBusyError as exc:
            problems.append(JournalProblem(oldest.path, root, exc.what, exc.remedy))
            continue
        except (SlmDvfsError, OSError) as exc:
            what = getattr(exc, "what", str(exc))
            if root and not Path(root).exists():
                remedy = (f"the device root {root} no longer exists (a deleted twin?): nothing is left to "
                          f"restore there; delete {oldest.path}")
            else:
                remedy = getattr(exc, "remedy", "") or "fix the cause and run `slm-dvfs restore` again"
            problems.append(JournalProblem(oldest.path, root, what, remedy))
            continue
        for j in newer:
            j.path.unlink(missing_ok=True)  # a later snapshot of a device already restored
        restored.append(oldest)
    if root is not None:
        problems += _foreign_pin(root, directory)
    return RestoreReport(tuple(restored), tuple(problems), tuple(dropped))


def _foreign_pin(root: str, directory: Path) -> list[JournalProblem]:
    """The board's pin, when its journal lies in another state dir: not ours to restore, said so
    (rather than "nothing to restore" over a pinned board)."""
    try:
        pinned = pinned_journal(board_lock_dir(root), board_key(root))
    except SlmDvfsError:
        return []  # no such board (any more): nothing pinned there
    if pinned is None or in_folder(pinned[0], directory):
        return []
    journal, uid = pinned
    return [JournalProblem(
        Path(journal), root, f"the board is left pinned by `slm-dvfs pin` from another state dir (uid {uid}); "
        "its journal is not in ours",
        f"restore it as uid {uid} with that state dir: `SLM_DVFS_STATE_DIR={Path(journal).parent.parent} "
        f"slm-dvfs restore --sysfs-root {root}`",
    )]


def restore_all(directory: Path | None = None) -> list[Journal]:
    """`restore_report` for library callers: what it restored; a DeviceError listing every
    journal it had to keep (after restoring the others)."""
    report = restore_report(directory)
    if report.problems:
        raise DeviceError(
            f"{len(report.problems)} clock journal(s) not restored:\n"
            + "\n".join(p.describe() for p in report.problems),
            "see each journal's 'What to do' above",
        )
    return list(report.restored)
