"""The fleet driver's experiment loop (`fleet run`): experiments handed to free boards, whole.

An experiment (model x task x batch size x policy) runs on one board from start to end: the policy
run, then the MAXN baseline on the same board, so each comparison is within one board. The board
records it in a store of its own (engine.run.fleet.board_runs) and streams its progress, then its
records; the driver, the real store's single writer, imports them in one transaction. Before
anything starts the driver checks what the policies need: the oracle a stored sweep of the
workload on the board's module (sent to the board with the experiment), `ml` a selector (sent by
value). A board lost mid-experiment stored nothing of it: the experiment starts again on another
board of the same module. A cancel stops every board at a step boundary (its clock guard restores
its clocks); the cancelled runs come back and are stored as cancelled, as a local run is.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping, Sequence

from engine.core.errors import ConfigError
from engine.run.experiment import ExperimentSpec
from engine.run.fleet.board import END
from engine.run.fleet.model import (
    BoardInfo,
    ExperimentEvent,
    ExperimentOutcome,
    ExperimentRecords,
    FleetRunResult,
    RunProgress,
    SelectorFiles,
)

log = logging.getLogger(__name__)

CANCEL_WAIT_S = 120.0  # how long cancelled boards get to stop at a step boundary, restore and report
POLL_S = 0.2


def board_kind(info: BoardInfo) -> str:
    """Which boards may stand in for one another: one module, boards or twins (their results' sources differ)."""
    return info.module + (" [twin]" if info.is_twin else "")


def experiment_label(spec: ExperimentSpec) -> str:
    batch = f" b{spec.batch_size}" if spec.batch_size is not None else ""
    objective = f" ({spec.objective})" if spec.objective != "energy" else ""
    return f"{spec.model}/{spec.task}{batch} {spec.policy}{objective}"


@dataclass
class _Exp:
    index: int
    spec: ExperimentSpec
    modules: frozenset[str]  # modules whose boards may run it (the oracle: those with a stored sweep)
    module: str | None = None  # set by the first board that starts it: a retry stays on that module
    status: str = "pending"  # pending | running | finished | cancelled | failed
    boards: list[str] = field(default_factory=list)
    retries: int = 0
    outcome: ExperimentOutcome | None = None
    error: str = ""

    @property
    def label(self) -> str:
        return experiment_label(self.spec)


class FleetRun:
    """One `Fleet.run` call; see the module's docstring. `boards` maps serial -> (actor, BoardInfo)."""

    def __init__(self, ray: Any, boards: Mapping[str, tuple[Any, BoardInfo]], specs: Sequence[ExperimentSpec], *,
                 store: Any, on_event: Callable[[ExperimentEvent], None] | None, cancel: threading.Event | None,
                 lost: Callable[[str], None] = lambda serial: None) -> None:
        self.ray = ray
        self.boards = dict(boards)
        self.specs = list(specs)
        self.store = store
        self.on_event = on_event
        self.cancel = cancel or threading.Event()
        self.lost = lost
        self.units: list[_Exp] = []
        self.per_board: dict[str, int] = {serial: 0 for serial in self.boards}
        self._seeds: dict[tuple[int, str], tuple[Any, ...]] = {}  # (index, module) -> the oracle's sweeps
        self._selectors: dict[int, SelectorFiles] = {}
        self._lock = threading.Lock()  # the store's writes, the counters, events
        self._done: queue.Queue[tuple[str, _Exp, str, str]] = queue.Queue()  # (serial, unit, outcome, error)
        self._active: dict[str, tuple[_Exp, threading.Thread]] = {}

    # ------------------------------------------------------------------ before anything starts
    def _check(self) -> None:
        """Refuse what cannot run, with the remedy, before any board starts (see the module's docstring)."""
        from engine.dvfs.policies import make_policy
        from engine.run.fleet.run_checks import oracle_seeds, selector_files

        modules = {board_kind(info) for _a, info in self.boards.values()}
        twin_modules = {board_kind(info) for _a, info in self.boards.values() if info.is_twin}
        for i, spec in enumerate(self.specs):
            replace(spec, simulate=False, twin=None, sysfs_root=None).validate()  # the board checks --simulate
            if spec.reuse_baseline:
                raise ConfigError("a fleet experiment runs its own MAXN baseline on its board",
                                  "drop --reuse-baseline (reusing a stored baseline is for a local `slm-dvfs run`)")
            allowed = twin_modules if spec.simulate else modules
            if not allowed:
                raise ConfigError("--simulate runs on twins only, and this fleet has no twin",
                                  "drop --simulate, or try it on a local fleet with --twins N")
            name = spec.policy.split(":", 1)[0].strip().lower()
            if name == "oracle":
                allowed = frozenset(m for m in allowed if self._seed_oracle(i, spec, m, oracle_seeds))
            elif name == "ml":
                self._selectors[i] = selector_files(spec)
            else:
                make_policy(spec.policy, **dict(spec.policy_options))  # its syntax, as a local run checks it
            self.units.append(_Exp(i, spec, frozenset(allowed)))

    def _seed_oracle(self, index: int, spec: ExperimentSpec, module: str, seeds_of: Any) -> bool:
        """Whether the store holds the oracle's sweep of this workload on this module (kept, to send)."""
        actor = next(a for a, info in self.boards.values() if board_kind(info) == module)
        seeds = seeds_of(self.store, self.ray.get(actor.plan_experiment.remote(spec)), spec)
        if seeds:
            self._seeds[(index, module)] = seeds
        return bool(seeds)

    # ------------------------------------------------------------------ the loop
    def run(self) -> FleetRunResult:
        from engine.run.fleet.run_checks import missing_oracle_error

        start = time.monotonic()
        self._check()
        for unit in self.units:
            if not unit.modules and unit.spec.policy.split(":", 1)[0].strip().lower() == "oracle":
                raise missing_oracle_error(unit.spec, sorted({board_kind(i) for _a, i in self.boards.values()}))
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
        outcomes = []
        for unit in self.units:
            if unit.status == "pending":
                unit.status, unit.error = "failed", unit.error or self._why_unplaced(unit)
            outcomes.append(unit.outcome if unit.outcome is not None else self._empty_outcome(unit))
        statuses = {u.status for u in self.units}
        status = ("cancelled" if "cancelled" in statuses or self.cancel.is_set() else
                  "failed" if "failed" in statuses else "finished")
        return FleetRunResult(tuple(outcomes), dict(self.per_board), time.monotonic() - start, status)

    def _assign(self) -> None:
        busy = set(self._active)
        for unit in self.units:
            if unit.status != "pending":
                continue
            free = [s for s, (_a, info) in self.boards.items() if s not in busy and board_kind(info) in unit.modules
                    and (unit.module is None or board_kind(info) == unit.module)]
            if not free:
                continue
            serial = free[0]
            busy.add(serial)
            unit.status = "running"
            thread = threading.Thread(target=self._run_unit, args=(serial, unit), name=f"fleet-run-{serial}",
                                      daemon=True)
            self._active[serial] = (unit, thread)
            thread.start()

    def _settle(self, serial: str, unit: _Exp, outcome: str, error: str) -> None:
        _unit, thread = self._active.pop(serial)
        thread.join()
        if outcome == "lost":
            self.boards.pop(serial, None)
            self.lost(serial)
            self._emit("board_lost", serial, unit, f"board {serial} lost during {unit.label}: {error}; nothing of "
                                                   "it was stored")
            if self.cancel.is_set():
                unit.status = "cancelled"
                return
            unit.retries += 1
            unit.status = "pending"
            if any(board_kind(info) == unit.module for _a, info in self.boards.values()):
                self._emit("retried", serial, unit, f"{unit.label}: retried from the start on another "
                                                    f"{unit.module} board")
            return
        unit.status = outcome
        unit.error = unit.error or error
        if unit.outcome is None:  # it ended without records (failed before its first run)
            unit.outcome = self._empty_outcome(unit)
        self._emit(outcome if outcome in ("cancelled", "failed") else "finished", serial, unit,
                   _outcome_text(unit), time_s=unit.outcome.time_s, energy_j=unit.outcome.energy_j,
                   saving_pct=unit.outcome.saving_pct, slowdown_pct=unit.outcome.slowdown_pct,
                   source=unit.outcome.source)

    def _stop(self, why: str) -> None:
        """Cancel every running experiment; wait for the boards to stop, restore and send their runs."""
        self.cancel.set()
        for serial in list(self._active):
            actor, _info = self.boards[serial]
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
        for unit in self.units:
            if unit.status == "pending":
                unit.status = why

    # ------------------------------------------------------------------ one experiment on one board (a thread)
    def _run_unit(self, serial: str, unit: _Exp) -> None:
        from ray.exceptions import GetTimeoutError, RayActorError

        actor, info = self.boards[serial]
        outcome, error = "failed", ""
        try:
            unit.module = unit.module or board_kind(info)
            unit.boards.append(serial)
            self._emit("started", serial, unit, f"{unit.label} on {serial}")
            stream = actor.experiment.options(num_returns="streaming").remote(
                unit.spec, self._seeds.get((unit.index, board_kind(info)), ()), self._selectors.get(unit.index))
            told = False
            for ref in stream:
                item = self.ray.get(ref)
                if self.cancel.is_set() and not told:  # a cancel sent before the board's run began found nothing
                    actor.cancel.remote()
                    told = True
                if isinstance(item, tuple) and item and item[0] == END:
                    _end, outcome, error = item
                    break
                if isinstance(item, RunProgress):
                    self._progress(serial, unit, item)
                elif isinstance(item, ExperimentRecords):
                    self._store(serial, unit, item)
            else:
                raise ConfigError(f"board {serial} ended {unit.label} without a status", "run it again")
        except RayActorError as exc:  # ActorDiedError, ActorUnavailableError: the board (or its node) is gone
            outcome, error = "lost", type(exc).__name__
        except GetTimeoutError as exc:
            outcome, error = "lost", str(exc)
        except Exception as exc:  # noqa: BLE001 - the experiment fails; the others go on
            log.exception("fleet experiment %s on %s", unit.label, serial)
            error = f"{type(exc).__name__}: {getattr(exc, 'what', exc)}"
        if outcome == "lost" and unit.outcome is not None:
            outcome = unit.outcome.status  # its records arrived (and are stored) before the board went
        self._done.put((serial, unit, outcome, error))

    def _progress(self, serial: str, unit: _Exp, p: RunProgress) -> None:
        if p.kind == "phase":
            self._emit("phase", serial, unit, f"{p.role} run ({p.policy}) begins", role=p.role, step=0,
                       steps=p.steps)
            return
        self._emit("progress", serial, unit, f"{p.role} step {p.step}/{p.steps}", role=p.role, step=p.step,
                   steps=p.steps, time_s=p.time_s, energy_j=p.energy_j, source=p.source)

    def _store(self, serial: str, unit: _Exp, records: ExperimentRecords) -> None:
        """Import the board's runs in one transaction; the outcome from what was stored."""
        with self._lock:
            imported = self.store.import_runs(records.bundle)
            ids = imported.run_ids
            run = None if records.run_id is None else self.store.get_run(ids[records.run_id])
            base = None if records.baseline_run_id is None else self.store.get_run(ids[records.baseline_run_id])
            comparison = next((c for c in records.bundle.comparisons if c.id == records.comparison_id), None)
            self.per_board[serial] = self.per_board.get(serial, 0) + 1
        if records.error:
            unit.error = records.error
        spec = unit.spec
        unit.outcome = ExperimentOutcome(
            index=unit.index, label=unit.label, model=spec.model, task=spec.task, batch_size=spec.batch_size,
            policy=spec.policy, objective=spec.objective, status=records.status, board=serial,
            boards=tuple(unit.boards), retries=unit.retries, run_id=None if run is None else run.id,
            baseline_run_id=None if base is None else base.id,
            comparison_id=None if comparison is None or comparison.id is None
            else imported.comparison_ids.get(comparison.id),
            source=None if run is None else run.source, time_s=None if run is None else run.time_s,
            energy_j=None if run is None else run.energy_j, baseline_time_s=None if base is None else base.time_s,
            baseline_energy_j=None if base is None else base.energy_j,
            saving_pct=None if comparison is None else comparison.saving_pct,
            slowdown_pct=None if comparison is None else comparison.slowdown_pct,
            notes=records.notes, error=records.error)

    # ------------------------------------------------------------------ helpers
    def _emit(self, kind: str, serial: str, unit: _Exp, text: str, **figures: Any) -> None:
        if self.on_event is None:
            return
        event = ExperimentEvent(kind, serial, unit.index, unit.label, text, **figures)
        with self._lock:
            try:
                self.on_event(event)
            except Exception:  # noqa: BLE001 - a listener's bug must not lose runs
                log.exception("fleet event listener failed on %s", event)

    def _empty_outcome(self, unit: _Exp) -> ExperimentOutcome:
        spec = unit.spec
        return ExperimentOutcome(index=unit.index, label=unit.label, model=spec.model, task=spec.task,
                                 batch_size=spec.batch_size, policy=spec.policy, objective=spec.objective,
                                 status=unit.status, boards=tuple(unit.boards), retries=unit.retries,
                                 error=unit.error)

    def _why_unplaced(self, unit: _Exp) -> str:
        if unit.module is not None:
            return f"no board of module {unit.module} is left to run it: join one and run it again"
        return "no board that can run it is left in the fleet: join one and run it again"


def _outcome_text(unit: _Exp) -> str:
    o = unit.outcome
    assert o is not None
    text = f"{unit.label}: {o.status}"
    if o.run_id is not None:
        text += f", run {o.run_id}" + (f" vs MAXN run {o.baseline_run_id}" if o.baseline_run_id is not None else "")
    if o.saving_pct is not None and o.slowdown_pct is not None:
        src = o.source.value if o.source is not None else "?"
        text += f": saving {o.saving_pct:+.1f}%, slowdown {o.slowdown_pct:+.1f}% [{src}]"
    return text + (f" ({unit.error})" if unit.error else "")
