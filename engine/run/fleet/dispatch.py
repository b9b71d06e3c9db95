"""The fleet driver's sweep loop: units (one workload's sweep each) handed to free boards.

The driver is the store's single writer. For each unit it asks a board for the unit's records
(device, workload, settings), finds or creates the sweep in the store, hands the board only the
points not yet stored (`completed_points`), and stores each point as it streams back (a Ray
streaming generator). A board that dies mid-unit (its actor or node lost) is dropped; the unit
goes back to the queue for another board of the same module, which measures only what is still
missing. A cancel (the event, or Ctrl-C in the caller) stops every board at its next step
boundary (its clock guard restores its clocks), and the sweeps are left cancelled: resumable.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping, Sequence

from engine.core.errors import ConfigError
from engine.results.errors import StoreError
from engine.run.fleet.board import END
from engine.run.fleet.model import FleetEvent, FleetSweepResult, StreamedPoint, SweepOutcome, SweepPlan

log = logging.getLogger(__name__)

CANCEL_WAIT_S = 120.0  # how long cancelled boards get to stop at a step boundary and restore
POLL_S = 0.2


@dataclass
class _Unit:
    spec: SweepPlan
    module: str | None = None  # set by the first board that plans it: retries stay on that module
    sweep_id: int | None = None
    total: int = 0
    stored: int = 0
    boards: list[str] = field(default_factory=list)
    retries: int = 0
    source: Any = None  # engine.core.provenance.Source of the sweep
    status: str = "pending"  # pending | running | finished | cancelled | failed
    error: str = ""

    @property
    def label(self) -> str:
        return f"{self.spec.model}/{self.spec.task}"


class FleetSweep:
    """One `Fleet.sweep` call; see the module's docstring. `boards` maps serial -> (actor, module)."""

    def __init__(self, ray: Any, boards: Mapping[str, tuple[Any, str]], plans: Sequence[SweepPlan], *, store: Any,
                 on_event: Callable[[FleetEvent], None] | None, cancel: threading.Event | None,
                 lost: Callable[[str], None] = lambda serial: None) -> None:
        self.ray = ray
        self.boards = dict(boards)
        self.units = [_Unit(plan) for plan in plans]
        self.store = store
        self.on_event = on_event
        self.cancel = cancel or threading.Event()
        self.lost = lost
        self.per_board: dict[str, int] = {serial: 0 for serial in self.boards}
        self._lock = threading.Lock()  # the store's sweep creation, the units' counters, events
        self._done: queue.Queue[tuple[str, _Unit, str, str]] = queue.Queue()  # (serial, unit, outcome, error)
        self._active: dict[str, tuple[_Unit, threading.Thread]] = {}

    # ------------------------------------------------------------------ the loop
    def run(self) -> FleetSweepResult:
        for unit in self.units:  # what needs no board (the board checks the rest: --fast on a twin)
            replace(unit.spec, fast=False).validate()
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
                    serial, unit, outcome, error = self._done.get(timeout=POLL_S)
                except queue.Empty:
                    continue
                self._settle(serial, unit, outcome, error)
        except KeyboardInterrupt:
            self._stop("cancelled")
            raise
        for unit in self.units:
            if unit.status == "pending":
                unit.status, unit.error = "failed", unit.error or self._why_unplaced(unit)
        statuses = {u.status for u in self.units}
        status = ("cancelled" if "cancelled" in statuses or self.cancel.is_set() else
                  "failed" if "failed" in statuses else "finished")
        outcomes = tuple(SweepOutcome(u.sweep_id, u.spec.model, u.spec.task, u.status, u.stored, u.total,
                                      tuple(u.boards), u.retries, u.error) for u in self.units)
        return FleetSweepResult(outcomes, dict(self.per_board), time.monotonic() - start, status)

    def _assign(self) -> None:
        busy = set(self._active)
        for unit in self.units:
            if unit.status != "pending":
                continue
            free = [s for s, (_a, module) in self.boards.items()
                    if s not in busy and (unit.module is None or module == unit.module)]
            if not free:
                continue
            serial = free[0]
            busy.add(serial)
            unit.status = "running"
            thread = threading.Thread(target=self._run_unit, args=(serial, unit), name=f"fleet-{serial}", daemon=True)
            self._active[serial] = (unit, thread)
            thread.start()

    def _settle(self, serial: str, unit: _Unit, outcome: str, error: str) -> None:
        _unit, thread = self._active.pop(serial)
        thread.join()
        if outcome == "lost":
            self.boards.pop(serial, None)
            self.lost(serial)
            self._emit("board_lost", serial, unit, f"board {serial} lost during {unit.label}: {error}")
            if self.cancel.is_set():
                unit.status = "cancelled"
                if unit.sweep_id is not None:
                    self.store.finish_sweep(unit.sweep_id, "cancelled")
                return
            unit.retries += 1
            unit.status = "pending"
            if any(module == unit.module for _a, module in self.boards.values()):
                self._emit("retried", serial, unit, f"{unit.label}: {unit.total - unit.stored} points left, "
                                                    f"retried on another {unit.module} board")
            return
        unit.status, unit.error = outcome, error
        if unit.sweep_id is not None:
            self.store.finish_sweep(unit.sweep_id, outcome)
        kind = "cancelled" if outcome == "cancelled" else "finished"
        self._emit(kind, serial, unit, f"{unit.label}: {outcome} with {unit.stored}/{unit.total} points"
                                       + (f" ({error})" if error else ""))

    def _stop(self, why: str) -> None:
        """Cancel every running unit and wait for the boards to stop and restore their clocks."""
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
                serial, unit, outcome, error = self._done.get(timeout=POLL_S)
            except queue.Empty:
                continue
            self._settle(serial, unit, outcome, error)
        for unit, _thread in self._active.values():
            unit.status = why
            if unit.sweep_id is not None:
                self.store.finish_sweep(unit.sweep_id, why)
        for unit in self.units:
            if unit.status == "pending":
                unit.status = why

    # ------------------------------------------------------------------ one unit on one board (a thread)
    def _run_unit(self, serial: str, unit: _Unit) -> None:
        from ray.exceptions import GetTimeoutError, RayActorError

        actor, module = self.boards[serial]
        outcome, error = "failed", ""
        try:
            plan = self.ray.get(actor.prepare.remote(unit.spec))
            todo = self._open_sweep(unit, plan, module)
            self._emit("started", serial, unit, f"{unit.label} on {serial}: {len(todo)} of {unit.total} points to "
                                                f"measure (sweep s{unit.sweep_id})")
            outcome = "finished" if len(todo) == 0 else "cancelled"
            if todo and not self.cancel.is_set():
                outcome, error = self._stream(serial, unit, actor, todo)
        except RayActorError as exc:  # ActorDiedError, ActorUnavailableError: the board (or its node) is gone
            outcome, error = "lost", type(exc).__name__
        except GetTimeoutError as exc:
            outcome, error = "lost", str(exc)
        except Exception as exc:  # noqa: BLE001 - the unit fails; the others go on
            log.exception("fleet unit %s on %s", unit.label, serial)
            error = f"{type(exc).__name__}: {getattr(exc, 'what', exc)}"
        self._done.put((serial, unit, outcome, error))

    def _open_sweep(self, unit: _Unit, plan: Any, module: str) -> list[Any]:
        from engine.results.store import setting_key

        spec = unit.spec
        with self._lock:
            if unit.sweep_id is None:
                device_id = self.store.ensure_device(plan.device)
                workload_id = self.store.ensure_workload(plan.workload)
                sweep = self.store.find_or_create_sweep(
                    device=device_id, workload=workload_id, space=dict(plan.space), warmup_steps=spec.warmup_steps,
                    steps=spec.steps, repeats=spec.repeats, source=plan.source)
                unit.sweep_id, unit.module, unit.source = sweep.id, module, plan.source
                unit.total = len(plan.settings) * spec.repeats
            done = self.store.completed_points(unit.sweep_id)
            unit.stored = len(done)
        return [(s, r) for r in range(spec.repeats) for s in plan.settings if (setting_key(s), r) not in done]

    def _stream(self, serial: str, unit: _Unit, actor: Any, todo: list[Any]) -> tuple[str, str]:
        unit.boards.append(serial)
        stream = actor.measure.options(num_returns="streaming").remote(unit.spec, todo)
        told = False
        for ref in stream:
            item = self.ray.get(ref)
            if self.cancel.is_set() and not told:  # a cancel sent before the board's run began found nothing to stop
                actor.cancel.remote()
                told = True
            if isinstance(item, tuple) and item and item[0] == END:
                _end, status, error = item
                return status, error
            self._store_point(serial, unit, item)
        raise ConfigError(f"board {serial} ended {unit.label} without a status", "run the sweep again to resume it")

    def _store_point(self, serial: str, unit: _Unit, p: StreamedPoint) -> None:
        from engine.results.store import SweepPoint, setting_key

        assert unit.sweep_id is not None
        point = SweepPoint(sweep_id=unit.sweep_id, setting=p.setting.to_json(), repeat=p.repeat, time_s=p.time_s,
                           energy_j=p.energy_j, samples=p.samples, rail_energy_j=dict(p.rail_energy_j),
                           avg_power_w=p.avg_power_w)
        with self._lock:
            try:
                self.store.add_point(point)
            except StoreError:
                if (setting_key(p.setting), p.repeat) not in self.store.completed_points(unit.sweep_id):
                    raise
                log.warning("sweep %d already holds %s repeat %d: skipped", unit.sweep_id, p.setting.label(), p.repeat)
                return
            unit.stored += 1
            self.per_board[serial] = self.per_board.get(serial, 0) + 1
            stored = unit.stored
        self._emit("point", serial, unit, f"{p.setting.label()} (repeat {p.repeat + 1})", setting=p.setting,
                   repeat=p.repeat, time_s=p.time_s, energy_j=p.energy_j, avg_power_w=p.avg_power_w, done=stored,
                   total=unit.total, source=unit.source)

    # ------------------------------------------------------------------ helpers
    def _emit(self, kind: str, serial: str, unit: _Unit, text: str, **figures: Any) -> None:
        if self.on_event is None:
            return
        event = FleetEvent(kind, serial, unit.sweep_id, text, **figures)
        with self._lock:
            try:
                self.on_event(event)
            except Exception:  # noqa: BLE001 - a listener's bug must not lose points
                log.exception("fleet event listener failed on %s", event)

    def _why_unplaced(self, unit: _Unit) -> str:
        if unit.module is not None:
            return f"no board of module {unit.module} is left to finish it: join one and run the sweep again"
        return "no board is left in the fleet: join one and run the sweep again"
