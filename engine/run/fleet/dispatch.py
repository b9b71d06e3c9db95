"""The fleet driver's sweep loop: each workload's points spread over the free boards of its module.

The driver is the store's single writer. The first board free for a workload plans it (its
records and settings: `BoardWorker.prepare`); the driver finds or opens the workload's sweep
(any board's unfinished sweep of the same module and parameters is resumed) and puts the points
not yet stored (`completed_points`) in the workload's pool. A free board then takes a *chunk* of
points from the workload with the most points left, measures it through the local sweep's path
and streams each point back (a Ray streaming generator); the driver stores each point as it
comes, naming the board that measured it. Chunks shrink as the pool drains (guided
self-scheduling: a share of what is left, over twice the module's boards), so the boards finish
together instead of one board measuring a whole last sweep alone.

A board that dies mid-chunk (its actor or node lost) is dropped; the chunk's unstored points go
back to the pool for the module's other boards. A cancel (the event, or Ctrl-C in the caller)
stops every board at its next step boundary (its clock guard restores its clocks); the sweeps
are left cancelled: resumable.
"""

from __future__ import annotations

import logging
import math
import queue
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping, Sequence

from engine.core.errors import ConfigError
from engine.results.errors import StoreError
from engine.run.fleet.board import END
from engine.run.fleet.model import FleetEvent, FleetSweepResult, StreamedPoint, SweepOutcome, SweepPlan, plan_label

log = logging.getLogger(__name__)

CANCEL_WAIT_S = 120.0  # how long cancelled boards get to stop at a step boundary and restore
POLL_S = 0.2
CHUNK_SHARE = 2  # a chunk is what is left over (boards of the module x this), at least one point

Point = Any  # (DvfsSetting, repeat)


@dataclass
class _Work:
    """One workload's sweep as the driver spreads it."""

    spec: SweepPlan
    module: str | None = None  # set by the board that plans it: its points stay on that module
    sweep_id: int | None = None
    total: int = 0
    stored: int = 0
    todo: list[Point] = field(default_factory=list)  # neither stored nor handed to a board
    in_flight: dict[str, list[Point]] = field(default_factory=dict)  # serial -> its chunk's unstored points
    planning: bool = False
    failing: bool = False  # a board failed on it: nothing more is handed out; closed once its boards stop
    boards: list[str] = field(default_factory=list)  # serials that measured points of it, in order
    retries: int = 0  # chunks handed back after their board was lost
    source: Any = None  # engine.core.provenance.Source of the sweep
    status: str = "pending"  # pending (not planned) | running | finished | cancelled | failed
    error: str = ""

    @property
    def label(self) -> str:
        return plan_label(self.spec)

    @property
    def open(self) -> bool:
        return self.status in ("pending", "running")


class FleetSweep:
    """One `Fleet.sweep` call; see the module's docstring. `boards` maps serial -> (actor, module)."""

    def __init__(self, ray: Any, boards: Mapping[str, tuple[Any, str]], plans: Sequence[SweepPlan], *, store: Any,
                 on_event: Callable[[FleetEvent], None] | None, cancel: threading.Event | None,
                 lost: Callable[[str], None] = lambda serial: None) -> None:
        self.ray = ray
        self.boards = dict(boards)
        self.works = [_Work(plan) for plan in plans]
        self.store = store
        self.on_event = on_event
        self.cancel = cancel or threading.Event()
        self.lost = lost
        self.per_board: dict[str, int] = {serial: 0 for serial in self.boards}
        self._device_ids: dict[str, int] = {}  # serial -> its device row
        self._lock = threading.RLock()  # the works' pools and counters, the store's writes, events
        self._done: queue.Queue[tuple[str, _Work, str, str]] = queue.Queue()  # (serial, work, outcome, error)
        self._active: dict[str, tuple[_Work, threading.Thread]] = {}

    # ------------------------------------------------------------------ the loop
    def run(self) -> FleetSweepResult:
        for work in self.works:  # what needs no board (the board checks the rest: --fast on a twin)
            replace(work.spec, fast=False).validate()
        start = time.monotonic()
        try:
            while True:
                if self.cancel.is_set():
                    self._stop("cancelled")
                    break
                self._assign()
                if not self._active:
                    break  # nothing runs and nothing more can start
                try:
                    serial, work, outcome, error = self._done.get(timeout=POLL_S)
                except queue.Empty:
                    continue
                self._settle(serial, work, outcome, error)
        except KeyboardInterrupt:
            self._stop("cancelled")
            raise
        for work in self.works:  # left open: no board of its module is left
            if work.open:
                self._close(work, "failed", work.error or self._why_unplaced(work))
        statuses = {w.status for w in self.works}
        status = ("cancelled" if "cancelled" in statuses or self.cancel.is_set() else
                  "failed" if "failed" in statuses else "finished")
        outcomes = tuple(SweepOutcome(w.sweep_id, w.spec.model, w.spec.task, w.status, w.stored, w.total,
                                      tuple(dict.fromkeys(w.boards)), w.retries, w.error, w.label) for w in self.works)
        return FleetSweepResult(outcomes, dict(self.per_board), time.monotonic() - start, status)

    def _assign(self) -> None:
        with self._lock:
            for serial, (_actor, module) in self.boards.items():
                if serial in self._active:
                    continue
                job = self._pick(serial, module)
                if job is None:
                    continue
                work, chunk = job
                thread = threading.Thread(target=self._run_job, args=(serial, work, chunk), name=f"fleet-{serial}",
                                          daemon=True)
                self._active[serial] = (work, thread)
                thread.start()

    def _pick(self, serial: str, module: str) -> tuple[_Work, list[Point] | None] | None:
        """The next job of a free board: plan a workload nobody planned yet (its chunk is taken once
        planned), else a chunk of the workload of its module with the most points left."""
        for work in self.works:
            if work.status == "pending" and not work.planning and not work.failing and work.module in (None, module):
                work.planning = True
                return work, None
        ready = [w for w in self.works if w.status == "running" and w.module == module and w.todo]
        if not ready:
            return None
        work = max(ready, key=lambda w: len(w.todo))
        return work, self._take(work, serial)

    def _take(self, work: _Work, serial: str) -> list[Point]:
        """A chunk of the work's pool for this board (guided self-scheduling over the module's boards)."""
        n_boards = sum(1 for _a, m in self.boards.values() if m == work.module)
        planned = [w for w in self.works if w.status == "running" and w.module == work.module]
        left = sum(len(w.todo) for w in planned)
        unplanned = [w for w in self.works if w.status == "pending" and w.module in (None, work.module)]
        if unplanned:  # not planned yet: as many points as the planned ones have on average
            left += len(unplanned) * sum(w.total for w in planned) / max(1, len(planned))
        size = max(1, math.ceil(left / (CHUNK_SHARE * max(1, n_boards))))
        chunk, work.todo = work.todo[:size], work.todo[size:]
        work.in_flight[serial] = list(chunk)
        return chunk

    def _settle(self, serial: str, work: _Work, outcome: str, error: str) -> None:
        _work, thread = self._active.pop(serial)
        thread.join()
        with self._lock:
            left = work.in_flight.pop(serial, [])
            work.planning = False
            if outcome == "cancelled" and not self.cancel.is_set():  # not ours: do not hand it out again
                outcome, error = "failed", error or f"board {serial} stopped its share"
            if outcome == "lost":
                self.boards.pop(serial, None)
                self.lost(serial)
            elif outcome == "failed" and work.open:
                work.error, work.failing = error or f"board {serial} failed", True
                work.todo.clear()
            if left and work.open and not work.failing:  # unstored points of the chunk: back to the pool, first
                work.todo[:0] = left
            if outcome == "lost" and left and work.status == "running":
                work.retries += 1
        if outcome == "lost":
            self._emit("board_lost", serial, work, f"board {serial} lost during {work.label}: {error}")
            if left and not self.cancel.is_set():
                if any(module == work.module for _a, module in self.boards.values()):
                    self._emit("retried", serial, work, f"{work.label}: {len(left)} points of {serial}'s share "
                                                        f"go to another {work.module} board")
        self._maybe_close(work)

    def _maybe_close(self, work: _Work) -> None:
        """A workload whose pool is empty and whose boards are done is finished (or failed)."""
        if work.in_flight or work.planning or self.cancel.is_set():
            return
        if work.failing:
            self._close(work, "failed", work.error)
        elif work.status == "running" and not work.todo:
            self._close(work, "finished" if work.stored >= work.total else "failed", work.error)

    def _close(self, work: _Work, status: str, error: str = "") -> None:
        with self._lock:
            if not work.open:
                return
            if work.sweep_id is not None:
                self.store.finish_sweep(work.sweep_id, status)
            work.status, work.error = status, error
        kind = "cancelled" if status == "cancelled" else "finished"
        self._emit(kind, "", work, f"{work.label}: {status} with {work.stored}/{work.total} points"
                                   + (f" ({error})" if error else ""))

    def _stop(self, why: str) -> None:
        """Cancel every running chunk and wait for the boards to stop and restore their clocks."""
        self.cancel.set()
        for serial in list(self._active):
            actor, _module = self.boards[serial]
            try:
                actor.cancel.remote()
            except Exception as exc:  # noqa: BLE001 - a dead board has nothing left to stop
                log.debug("cancel on %s: %s", serial, exc)
        deadline = time.monotonic() + CANCEL_WAIT_S
        while self._active and time.monotonic() < deadline:
            try:
                serial, work, outcome, error = self._done.get(timeout=POLL_S)
            except queue.Empty:
                continue
            self._settle(serial, work, outcome, error)
        for work in self.works:
            if work.open:
                self._close(work, why)

    # ------------------------------------------------------------------ one job on one board (a thread)
    def _run_job(self, serial: str, work: _Work, chunk: list[Point] | None) -> None:
        from ray.exceptions import GetTimeoutError, RayActorError

        actor, module = self.boards[serial]
        outcome, error = "failed", ""
        try:
            if chunk is None:
                plan = self.ray.get(actor.prepare.remote(work.spec))
                chunk = self._open_sweep(work, plan, module, serial)
            if not chunk:
                outcome = "finished"
            elif self.cancel.is_set():
                outcome = "cancelled"
            else:
                device_id = self._device_id(serial, actor)
                self._emit("started", serial, work, f"{work.label} on {serial}: {len(chunk)} of the sweep's "
                                                    f"{work.total} points (sweep s{work.sweep_id})")
                outcome, error = self._stream(serial, work, actor, chunk, device_id)
                self._emit("done", serial, work, f"{work.label}: {serial}'s share of {len(chunk)} points {outcome}"
                                                 + (f" ({error})" if error else ""))
        except RayActorError as exc:  # ActorDiedError, ActorUnavailableError: the board (or its node) is gone
            outcome, error = "lost", type(exc).__name__
        except GetTimeoutError as exc:
            outcome, error = "lost", str(exc)
        except Exception as exc:  # noqa: BLE001 - the workload fails; the others go on
            log.exception("fleet sweep %s on %s", work.label, serial)
            error = f"{type(exc).__name__}: {getattr(exc, 'what', exc)}"
        self._done.put((serial, work, outcome, error))

    def _open_sweep(self, work: _Work, plan: Any, module: str, serial: str) -> list[Point]:
        """Find or open the workload's sweep (any board of the module's), fill its pool; this board's chunk."""
        from engine.results.store import setting_key

        spec = work.spec
        with self._lock:
            device_id = self.store.ensure_device(plan.device)
            self._device_ids[serial] = device_id
            workload_id = self.store.ensure_workload(plan.workload)
            sweep = self.store.find_or_create_sweep(
                device=device_id, workload=workload_id, space=dict(plan.space), warmup_steps=spec.warmup_steps,
                steps=spec.steps, repeats=spec.repeats, source=plan.source, scope="module")
            done = self.store.completed_points(sweep.id)
            work.sweep_id, work.module, work.source = sweep.id, module, plan.source
            work.total = len(plan.settings) * spec.repeats
            work.stored = len(done)
            work.todo = [(s, r) for r in range(spec.repeats) for s in plan.settings if (setting_key(s), r) not in done]
            work.status, work.planning = "running", False
            return self._take(work, serial)

    def _device_id(self, serial: str, actor: Any) -> int:
        with self._lock:
            if serial in self._device_ids:
                return self._device_ids[serial]
        record = self.ray.get(actor.device_record.remote())
        with self._lock:
            self._device_ids[serial] = self.store.ensure_device(record)
            return self._device_ids[serial]

    def _stream(self, serial: str, work: _Work, actor: Any, chunk: list[Point], device_id: int) -> tuple[str, str]:
        work.boards.append(serial)
        stream = actor.measure.options(num_returns="streaming").remote(work.spec, chunk)
        told = False
        for ref in stream:
            item = self.ray.get(ref)
            if self.cancel.is_set() and not told:  # a cancel sent before the board's run began found nothing to stop
                actor.cancel.remote()
                told = True
            if isinstance(item, tuple) and item and item[0] == END:
                _end, status, error = item
                return status, error
            self._store_point(serial, work, item, device_id)
        raise ConfigError(f"board {serial} ended its share of {work.label} without a status",
                          "run the sweep again to resume it")

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
            self.per_board[serial] = self.per_board.get(serial, 0) + 1
            stored = work.stored
            self._emit("point", serial, work, f"{p.setting.label()} (repeat {p.repeat + 1})", setting=p.setting,
                       repeat=p.repeat, time_s=p.time_s, energy_j=p.energy_j, avg_power_w=p.avg_power_w,
                       done=stored, total=work.total, source=work.source)

    # ------------------------------------------------------------------ helpers
    def _emit(self, kind: str, serial: str, work: _Work, text: str, **figures: Any) -> None:
        if self.on_event is None:
            return
        event = FleetEvent(kind, serial, work.sweep_id, text, **figures)
        with self._lock:
            try:
                self.on_event(event)
            except Exception:  # noqa: BLE001 - a listener's bug must not lose points
                log.exception("fleet event listener failed on %s", event)

    def _why_unplaced(self, work: _Work) -> str:
        if work.module is not None:
            return f"no board of module {work.module} is left to finish it: join one and run the sweep again"
        return "no board is left in the fleet: join one and run the sweep again"
