"""The fleet driver's sweep loop (`fleet sweep`): each workload's points shared out among the free
boards of one kind (one module; twins of one profile: engine.run.fleet.loop.board_kind).

The driver is the store's single writer. The first board free for a workload plans it (its
records and settings: `BoardWorker.prepare`); the driver finds or opens the workload's sweep
(an unfinished sweep of the same parameters on any board of the module is resumed) and puts the
points not yet stored (`completed_points`) in the workload's pool. A free board then takes a
*share* of the pool of the workload with the most points left, measures it through the local
sweep's path and streams each point back (a Ray streaming generator); the driver stores each
point as it comes, naming the board that measured it. Shares shrink as the pools drain (guided
self-scheduling: what is left over twice the boards of the kind), so the boards finish together
instead of one board measuring a whole last sweep alone.

The boards are balanced by what each has done, in board time (its stored points' measured time,
and the points in its hands at their sweep's mean so far): the free board that has done least
takes first, the moment a pool opens, and a board that has done more than a busy board of its
kind (planning, or measuring a share) has done and holds waits for it. A board's first share
carries its setup (loading, resolving the workload); without this, a board that had finished a
share before the others had even started theirs took the next, and fast twins left one board
with most of the points.

A board that dies mid-share (its actor or node lost) is dropped; the share's unstored points go
back to the pool for the other boards of its kind. A cancel (the event, or Ctrl-C in the caller)
stops every board at its next step boundary (its clock guard restores its clocks); the sweeps
are left cancelled: resumable.
"""
from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence, Tuple

from engine.core.provenance import Source
from engine.device.setting import DvfsSetting
from engine.results.errors import StoreError
from engine.run.fleet.loop import BoardLoop
from engine.run.fleet.model import (BoardActor, FleetEvent, FleetSweepResult, StreamedPoint, SweepOutcome, SweepPlan,
                                    UnitPlan, plan_label)

if TYPE_CHECKING:
    from engine.results.records import RunStatus
    from engine.results.store import Store

log = logging.getLogger(__name__)

SHARE_DIVISOR = 2  # a share is what is left over (boards of the kind x this), at least one point

Point = Tuple[DvfsSetting, int]  # (setting, repeat)


@dataclass
class _Work:
    """One workload's sweep as the driver spreads it."""

    spec: SweepPlan
    kind: str | None = None  # set by the board that plans it: its points stay on boards of that kind
    sweep_id: int | None = None
    total: int = 0
    stored: int = 0
    todo: list[Point] = field(default_factory=list)  # neither stored nor handed to a board
    in_flight: dict[str, list[Point]] = field(default_factory=dict)  # serial -> its share's unstored points
    planning: bool = False
    failing: bool = False  # a board failed on it: nothing more is handed out; closed once its boards stop
    boards: list[str] = field(default_factory=list)  # serials that measured points of it, in order
    measured: int = 0  # points measured in this call, and their time: the sweep's mean point time
    measured_s: float = 0.0
    retries: int = 0  # shares handed back after their board was lost
    source: Source | None = None  # of the sweep
    status: str = "pending"  # pending (not planned) | running | finished | cancelled | failed
    error: str = ""

    @property
    def label(self) -> str:
        return plan_label(self.spec)

    @property
    def open(self) -> bool:
        return self.status in ("pending", "running")


class FleetSweep(BoardLoop[_Work, FleetEvent]):
    """One `Fleet.sweep` call; see the module's docstring. `boards` maps serial -> (actor, kind):
    engine.run.fleet.loop.board_kind, boards of one module (twins of one profile) share sweeps."""

    def __init__(self, ray: ModuleType, boards: Mapping[str, tuple[BoardActor, str]], plans: Sequence[SweepPlan], *,
                 store: Store,
                 on_event: Callable[[FleetEvent], None] | None, cancel: threading.Event | None,
                 lost: Callable[[str], None] = lambda serial: None) -> None:
        super().__init__(ray, boards, on_event=on_event, cancel=cancel, lost=lost)
        self.works = [_Work(plan) for plan in plans]
        self.store = store
        self.per_board: dict[str, int] = {serial: 0 for serial in self.boards}
        self.done_s: dict[str, float] = {}  # serial -> the measured time of the points it stored
        self._device_ids: dict[str, int] = {}  # serial -> its device row

    # ------------------------------------------------------------------ the loop
    def run(self) -> FleetSweepResult:
        for work in self.works:  # what needs no board (the board checks the rest: --fast on a twin)
            work.spec.validate_work()
        start = time.monotonic()
        self._loop()
        for work in self.works:  # left open: no board of its kind is left
            if work.open:
                self._close(work, "failed", work.error or self._why_unplaced(work))
        statuses = {w.status for w in self.works}
        status = ("cancelled" if "cancelled" in statuses or self.cancel.is_set() else
                  "failed" if "failed" in statuses else "finished")
        outcomes = tuple(SweepOutcome(w.sweep_id, w.spec.workload.model, w.spec.workload.task, w.status, w.stored, w.total,
                                      tuple(dict.fromkeys(w.boards)), w.retries, w.error, w.label) for w in self.works)
        return FleetSweepResult(outcomes, dict(self.per_board), time.monotonic() - start, status)

    def _assign(self) -> None:
        with self._lock:
            for serial in sorted(self._free(), key=self._load):  # the board that has done least first
                job = self._pick(serial, self.boards[serial][1])
                if job is not None:
                    work, share = job

                    def run_job(serial: str, work: _Work, share: list[Point] | None = share) -> None:
                        self._report(serial, work, lambda: self._run_job(serial, work, share), f"sweep {work.label}")

                    self._start(serial, work, run_job)

    def _pick(self, serial: str, kind: str) -> tuple[_Work, list[Point] | None] | None:
        """The next job of a free board: plan a workload nobody planned yet (its share is taken once
        planned), else a share of the workload of its kind with the most points left."""
        for work in self.works:
            if work.status == "pending" and not work.planning and not work.failing and work.kind in (None, kind):
                work.planning = True
                return work, None
        ready = [w for w in self.works if w.status == "running" and w.kind == kind and w.todo]
        if not ready:
            return None
        work = max(ready, key=lambda w: len(w.todo))
        if self._ahead(serial, kind):
            return None  # it waits: the boards behind it take the pool, or it does once they catch up
        return work, self._take(work, serial, self._share_size(work))

    def _share_size(self, work: _Work) -> int:
        """Guided self-scheduling: what is left of the kind's pools over twice its boards (at least one point)."""
        n_boards = sum(1 for _a, k in self.boards.values() if k == work.kind)
        planned = [w for w in self.works if w.status == "running" and w.kind == work.kind]
        left: float = sum(len(w.todo) for w in planned)
        unplanned = [w for w in self.works if w.status == "pending" and w.kind in (None, work.kind)]
        if unplanned:  # not planned yet: as many points as the planned ones have on average
            left += len(unplanned) * sum(w.total for w in planned) / max(1, len(planned))
        return max(1, math.ceil(left / (SHARE_DIVISOR * max(1, n_boards))))

    def _take(self, work: _Work, serial: str, size: int) -> list[Point]:
        """A share of `size` points of the work's pool for this board."""
        share, work.todo = work.todo[:size], work.todo[size:]
        work.in_flight[serial] = list(share)
        return share

    # ------------------------------------------------------------------ balance: what each board has done
    def _point_s(self, work: _Work) -> float:
        """A point's time in this sweep: its mean so far, else the mean of every point measured in this
        call, else 1 (nothing measured yet: every board's points count alike)."""
        if work.measured:
            return work.measured_s / work.measured
        n = sum(w.measured for w in self.works)
        return sum(w.measured_s for w in self.works) / n if n else 1.0

    def _load(self, serial: str) -> float:
        """What a board has done in this call, in board time: its stored points' measured time, and
        the points in its hands (of its share) at their sweep's mean so far."""
        held = sum(len(w.in_flight.get(serial, ())) * self._point_s(w) for w in self.works)
        return self.done_s.get(serial, 0.0) + held

    def _ahead(self, serial: str, kind: str) -> bool:
        """Whether this board has done more than a busy board of its kind (planning, or measuring a
        share) has done and holds: then it waits for that board rather than run ahead of it."""
        busy = [s for s in self._active if s != serial and self.boards.get(s, (None, None))[1] == kind]
        return bool(busy) and self._load(serial) > min(self._load(s) for s in busy) * (1 + 1e-9)

    def _settle(self, serial: str, work: _Work, outcome: str, error: str) -> None:
        with self._lock:
            left = work.in_flight.pop(serial, [])
            work.planning = False
            if outcome == "cancelled" and not self.cancel.is_set():  # not ours: do not hand it out again
                outcome, error = "failed", error or f"board {serial} stopped its share"
            if outcome == "failed" and work.open:
                work.error, work.failing = error or f"board {serial} failed", True
                work.todo.clear()
            if left and work.open and not work.failing:  # unstored points of the share: back to the pool, first
                work.todo[:0] = left
            if outcome == "lost" and left and work.status == "running":
                work.retries += 1
        if outcome == "lost":
            self._say("board_lost", serial, work, f"board {serial} lost during {work.label}: {error}")
            if left and not self.cancel.is_set() and any(k == work.kind for _a, k in self.boards.values()):
                self._say("retried", serial, work, f"{work.label}: {len(left)} points of {serial}'s share "
                                                   f"go to another {work.kind} board")
        self._maybe_close(work)

    def _maybe_close(self, work: _Work) -> None:
        """A workload whose pool is empty and whose boards are done is finished (or failed)."""
        if work.in_flight or work.planning or self.cancel.is_set():
            return
        if work.failing:
            self._close(work, "failed", work.error)
        elif work.status == "running" and not work.todo:
            self._close(work, "finished" if work.stored >= work.total else "failed", work.error)

    def _close(self, work: _Work, status: RunStatus, error: str = "") -> None:
        with self._lock:
            if not work.open:
                return
            if work.sweep_id is not None:
                self.store.finish_sweep(work.sweep_id, status)
            work.status, work.error = status, error
        self._say("cancelled" if status == "cancelled" else "finished", "", work,
                  f"{work.label}: {status} with {work.stored}/{work.total} points" + (f" ({error})" if error else ""))

    def _stopped(self, why: RunStatus) -> None:
        for work in self.works:
            if work.open:
                self._close(work, why)

    # ------------------------------------------------------------------ one job on one board (a thread)
    def _run_job(self, serial: str, work: _Work, share: list[Point] | None) -> tuple[str, str]:
        actor, kind = self.boards[serial]
        if share is None:
            plan = self.ray.get(actor.prepare.remote(work.spec))
            share = self._open_sweep(work, plan, kind, serial)
        if not share:
            return "finished", ""
        if self.cancel.is_set():
            return "cancelled", ""
        device_id = self._device_id(serial, actor)
        self._say("started", serial, work, f"{work.label} on {serial}: {len(share)} of the sweep's "
                                           f"{work.total} points (sweep s{work.sweep_id})")
        work.boards.append(serial)
        stream = actor.measure.options(num_returns="streaming").remote(work.spec, share)
        def take(point: StreamedPoint) -> None:
            self._store_point(serial, work, point, device_id)

        outcome, error = self._read(serial, actor, stream, take, f"its share of {work.label}")
        self._say("done", serial, work, f"{work.label}: {serial}'s share of {len(share)} points {outcome}"
                                        + (f" ({error})" if error else ""))
        return outcome, error

    def _open_sweep(self, work: _Work, plan: UnitPlan, kind: str, serial: str) -> list[Point]:
        """Find or open the workload's sweep (any board's of the module), fill its pool; this board's share."""
        from engine.device.guard.lock import session_lock
        from engine.results.store import setting_key

        spec = work.spec
        with self._lock:
            device_id = self.store.ensure_device(plan.device)
            self._device_ids[serial] = device_id
            workload_id = self.store.ensure_workload(plan.workload)
            sweep = self.store.find_or_create_sweep(
                device=device_id, workload=workload_id, space=dict(plan.space), warmup_steps=spec.warmup_steps,
                steps=spec.steps, repeats=spec.repeats, source=plan.source, scope="module",
                planned=len(plan.settings) * spec.repeats, owner_lock=str(session_lock()))
            done = self.store.completed_points(sweep.id)
            work.sweep_id, work.kind, work.source = sweep.id, kind, plan.source
            work.total = len(plan.settings) * spec.repeats
            work.stored = len(done)
            work.todo = [(s, r) for r in range(spec.repeats) for s in plan.settings if (setting_key(s), r) not in done]
            work.status, work.planning = "running", False
            share = self._take(work, serial, self._share_size(work))
        self._nudge()  # the pool is open: the other free boards take their shares now
        return share

    def _device_id(self, serial: str, actor: BoardActor) -> int:
        with self._lock:
            if serial in self._device_ids:
                return self._device_ids[serial]
        record = self.ray.get(actor.device_record.remote())
        with self._lock:
            self._device_ids[serial] = self.store.ensure_device(record)
            return self._device_ids[serial]

    def _store_point(self, serial: str, work: _Work, p: StreamedPoint, device_id: int) -> None:
        from engine.results.store import SweepPoint, setting_key

        assert work.sweep_id is not None
        point = SweepPoint(sweep_id=work.sweep_id, setting=p.setting.to_json(), repeat=p.repeat, time_s=p.time_s,
                           energy_j=p.energy_j, samples=p.samples, rail_energy_j=dict(p.rail_energy_j),
                           avg_power_w=p.avg_power_w, device_id=device_id)
        with self._lock:
            mine = work.in_flight.get(serial, [])
            if (p.setting, p.repeat) in mine:
                mine.remove((p.setting, p.repeat))
            try:
                self.store.add_point(point)
            except StoreError:
                if (setting_key(p.setting), p.repeat) not in self.store.completed_points(work.sweep_id):
                    raise
                log.warning("sweep %d already holds %s repeat %d: skipped", work.sweep_id, p.setting.label(), p.repeat)
                return
            work.stored += 1
            work.measured += 1
            work.measured_s += p.time_s
            self.done_s[serial] = self.done_s.get(serial, 0.0) + p.time_s
            self.per_board[serial] = self.per_board.get(serial, 0) + 1
            self._say("point", serial, work, f"{p.setting.label()} (repeat {p.repeat + 1})", setting=p.setting,
                      repeat=p.repeat, time_s=p.time_s, energy_j=p.energy_j, avg_power_w=p.avg_power_w,
                      done=work.stored, total=work.total, source=work.source)

    # ------------------------------------------------------------------ helpers
    def _say(self, kind: str, serial: str, work: _Work, text: str, **figures: Any) -> None:
        self._emit(FleetEvent(kind, serial, work.sweep_id, text, **figures))

    def _why_unplaced(self, work: _Work) -> str:
        if work.kind is not None:
            return f"no board of {work.kind} is left to finish it: join one and run the sweep again"
        return "no board is left in the fleet: join one and run the sweep again"
