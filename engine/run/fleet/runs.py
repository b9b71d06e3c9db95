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
import threading
import time
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from engine.core.errors import ConfigError
from engine.results.format import versus_text
from engine.run.experiment import ExperimentSpec
from engine.run.fleet.loop import BoardLoop, board_kind as kind_of
from engine.run.fleet.model import (
    BoardActor,
    BoardInfo,
    ExperimentEvent,
    ExperimentOutcome,
    ExperimentPlan,
    ExperimentRecords,
    FleetRunResult,
    RunProgress,
    SelectorFiles,
)

if TYPE_CHECKING:
    from engine.results.records import RunStatus
    from engine.results.store import Store
    from engine.results.store.sweep_tables import FinishedSweep

# run_checks.oracle_seeds: the store's sweeps of a plan's workload that the oracle on a board needs
SeedsOf = Callable[["Store", ExperimentPlan, ExperimentSpec], "tuple[FinishedSweep, ...]"]

log = logging.getLogger(__name__)


def board_kind(info: BoardInfo) -> str:
    """Which boards may stand in for one another (engine.run.fleet.loop.board_kind)."""
    return kind_of(info.module, info.is_twin, info.profile)


def experiment_label(spec: ExperimentSpec) -> str:
    w = spec.workload
    batch = f" b{w.batch_size}" if w.batch_size is not None else ""
    objective = f" ({spec.objective})" if spec.objective != "energy" else ""
    return f"{w.model}/{w.task}{batch} {spec.policy}{objective}"


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


class FleetRun(BoardLoop[_Exp, ExperimentEvent]):
    """One `Fleet.run` call; see the module's docstring. `boards` maps serial -> (actor, BoardInfo)."""

    def __init__(self, ray: ModuleType, boards: Mapping[str, tuple[BoardActor, BoardInfo]],
                 specs: Sequence[ExperimentSpec], *, store: Store, on_event: Callable[[ExperimentEvent], None] | None,
                 cancel: threading.Event | None,
                 lost: Callable[[str], None] = lambda serial: None) -> None:
        super().__init__(ray, {s: (a, board_kind(info)) for s, (a, info) in boards.items()}, on_event=on_event,
                         cancel=cancel, lost=lost)
        self.infos = {s: info for s, (_a, info) in boards.items()}
        self.specs = list(specs)
        self.store = store
        self.units: list[_Exp] = []
        self.per_board: dict[str, int] = {serial: 0 for serial in self.boards}
        self._seeds: dict[tuple[int, str], tuple[FinishedSweep, ...]] = {}  # (index, kind) -> the oracle's sweeps
        self._selectors: dict[int, SelectorFiles] = {}

    # ------------------------------------------------------------------ before anything starts
    def _check(self) -> None:
        """Refuse what cannot run, with the remedy, before any board starts (see the module's docstring)."""
        from engine.dvfs.policies import make_policy
        from engine.run.fleet.run_checks import oracle_seeds, selector_files

        modules = {board_kind(info) for info in self.infos.values()}
        twin_modules = {board_kind(info) for info in self.infos.values() if info.is_twin}
        for i, spec in enumerate(self.specs):
            spec.validate_work()  # the board checks --simulate (on a twin)
            if spec.reuse_baseline:
                raise ConfigError("a fleet experiment runs its own MAXN baseline on its board",
                                  "drop --reuse-baseline (reusing a stored baseline is for a local `slm-dvfs run`)")
            allowed = frozenset(twin_modules if spec.simulate else modules)
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

    def _seed_oracle(self, index: int, spec: ExperimentSpec, module: str, seeds_of: SeedsOf) -> bool:
        """Whether the store holds the oracle's sweep of this workload on this module (kept, to send)."""
        actor = next(a for a, kind in self.boards.values() if kind == module)
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
                raise missing_oracle_error(unit.spec, sorted({kind for _a, kind in self.boards.values()}))
        self._loop()
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
        for unit in self.units:
            if unit.status != "pending":
                continue
            free = [s for s in self._free() if self.boards[s][1] in unit.modules
                    and unit.module in (None, self.boards[s][1])]
            if free:
                unit.status = "running"
                self._start(free[0], unit, lambda serial, unit: self._report(
                    serial, unit, lambda: self._run_unit(serial, unit), f"experiment {unit.label}"))

    def _settle(self, serial: str, unit: _Exp, outcome: str, error: str) -> None:
        if outcome == "lost" and unit.outcome is not None:
            outcome = unit.outcome.status  # its records arrived (and are stored) before the board went
        if outcome == "lost":
            self._say("board_lost", serial, unit, f"board {serial} lost during {unit.label}: {error}; nothing of "
                                                   "it was stored")
            if self.cancel.is_set():
                unit.status = "cancelled"
                return
            unit.retries += 1
            unit.status = "pending"
            if any(kind == unit.module for _a, kind in self.boards.values()):
                self._say("retried", serial, unit, f"{unit.label}: retried from the start on another "
                                                    f"{unit.module} board")
            return
        unit.status = outcome
        unit.error = unit.error or error
        if unit.outcome is None:  # it ended without records (failed before its first run)
            unit.outcome = self._empty_outcome(unit)
        self._say(outcome if outcome in ("cancelled", "failed") else "finished", serial, unit,
                   _outcome_text(unit), time_s=unit.outcome.time_s, energy_j=unit.outcome.energy_j,
                   saving_pct=unit.outcome.saving_pct, slowdown_pct=unit.outcome.slowdown_pct,
                   source=unit.outcome.source)

    def _stopped(self, why: RunStatus) -> None:
        for unit, _thread in self._active.values():  # boards that did not report within the wait
            unit.status = why
        for unit in self.units:
            if unit.status == "pending":
                unit.status = why

    # ------------------------------------------------------------------ one experiment on one board (a thread)
    def _run_unit(self, serial: str, unit: _Exp) -> tuple[str, str]:
        actor, kind = self.boards[serial]
        unit.module = unit.module or kind
        unit.boards.append(serial)
        self._say("started", serial, unit, f"{unit.label} on {serial}")
        stream = actor.experiment.options(num_returns="streaming").remote(
            unit.spec, self._seeds.get((unit.index, kind), ()), self._selectors.get(unit.index))

        def take(item: object) -> None:
            if isinstance(item, RunProgress):
                self._progress(serial, unit, item)
            elif isinstance(item, ExperimentRecords):
                self._store(serial, unit, item)

        return self._read(serial, actor, stream, take, unit.label)

    def _progress(self, serial: str, unit: _Exp, p: RunProgress) -> None:
        if p.kind == "phase":
            self._say("phase", serial, unit, f"{p.role} run ({p.policy}) begins", role=p.role, step=0,
                       steps=p.steps)
            return
        self._say("progress", serial, unit, f"{p.role} step {p.step}/{p.steps}", role=p.role, step=p.step,
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
            index=unit.index, label=unit.label, model=spec.workload.model, task=spec.workload.task,
            batch_size=spec.workload.batch_size, policy=spec.policy, objective=spec.objective, status=records.status, board=serial,
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
    def _say(self, kind: str, serial: str, unit: _Exp, text: str, **figures: Any) -> None:
        self._emit(ExperimentEvent(kind, serial, unit.index, unit.label, text, **figures))

    def _empty_outcome(self, unit: _Exp) -> ExperimentOutcome:
        spec = unit.spec
        return ExperimentOutcome(index=unit.index, label=unit.label, model=spec.workload.model,
                                 task=spec.workload.task, batch_size=spec.workload.batch_size, policy=spec.policy,
                                 objective=spec.objective,
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
        text += f": {versus_text(o.saving_pct, o.slowdown_pct)} [{src}]"
    return text + (f" ({unit.error})" if unit.error else "")
