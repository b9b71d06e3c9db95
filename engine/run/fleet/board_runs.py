"""A board's side of `fleet run`: one experiment through the local experiment path, recorded in a
store of the board's own and shipped back as values (the driver is the real store's single writer).

The board's store is a fresh SQLite file in a temporary folder: seeded with what the policy needs
(the oracle's sweeps of the workload on this module, sent by the driver, stored under this board),
then `run_experiment` records the policy run, the MAXN baseline and their comparison into it as a
local experiment does into the user's store. When it ends (finished, cancelled or failed) every run
it holds is read back as frozen values (`export_runs`) and handed to the driver; the folder goes.
A board lost mid-experiment takes its store with it: nothing of that experiment reaches the driver.
"""

from __future__ import annotations

import logging
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

from engine.core.errors import one_line
from engine.dvfs.policies import PolicyFactory
from engine.run.events import ExperimentPhase, RunControl, RunListener, StepEnergy
from engine.run.experiment import ExperimentSpec, run_experiment
from engine.run.fleet.model import ExperimentPlan, ExperimentRecords, RunProgress, SelectorFiles
from engine.workload.resolve import Workload
from engine.workload.spec import WorkloadSpec

if TYPE_CHECKING:
    from engine.results.compare import RunRole
    from engine.device.base import DeviceIdentity
    from engine.device.session import DeviceSession
    from engine.results.store.sweep_tables import FinishedSweep
    from engine.workload.training.loop import TrainControl

log = logging.getLogger(__name__)

PROGRESS_EVERY = 10  # a run reports its progress about this many times (and at its last step)


def board_spec(spec: ExperimentSpec, session: DeviceSession) -> ExperimentSpec:
    """The experiment on this board: its device (its twin's profile, or none on a board), checked."""
    spec = replace(spec, twin=session.profile_name, sysfs_root=None, fallback_to_twin=False)
    spec.validate()
    return spec


def plan_experiment(spec: ExperimentSpec, session: DeviceSession, identity: DeviceIdentity,
                    workload_of: Callable[[WorkloadSpec], Workload]) -> ExperimentPlan:
    """The records this experiment's runs will carry on this board (what the driver's checks need);
    `workload_of` is the board's (cached) workload resolution."""
    from engine.results.records import DeviceRecord, WorkloadRecord

    spec = board_spec(spec, session)
    workload = workload_of(spec.workload)
    return ExperimentPlan(DeviceRecord.from_identity(identity),
                          WorkloadRecord.from_workload(workload, None if spec.simulate else spec.workload.data),
                          identity.source)


def with_selector(spec: ExperimentSpec, files: SelectorFiles, folder: Path) -> ExperimentSpec:
    """The spec with the `ml` policy given the driver's selector, loaded here from the bytes sent.

    The driver checked the file's origin (its trusted folders or --trust) and its digest; here the
    bytes are written into this run's private folder and verified again before they are loaded."""
    from engine.selector.persistence import load_selector
    from engine.selector.policy import parse_ml_arg

    folder.mkdir(mode=0o700)
    path = folder / files.name
    path.write_bytes(files.joblib)
    path.with_suffix(".json").write_bytes(files.sidecar)
    if files.compact is not None:
        path.with_suffix(".npz").write_bytes(files.compact)
    selector = load_selector(path, trust=True)
    _name, _colon, arg = spec.policy.partition(":")
    parsed = parse_ml_arg(arg.strip() or None)
    options = {**dict(spec.policy_options), "selector": selector}
    if "selector" not in parsed:  # the policy's text (what its runs' notes say) stays as given
        return replace(spec, policy_options=tuple(options.items()))
    # it named the driver's file, which means nothing here: its other options become keywords
    return replace(spec, policy="ml", policy_options=tuple({**parsed, **options}.items()))


class _Progress(RunListener):
    """The experiment's events -> RunProgress items: each run's start, and its steps every few."""

    def __init__(self, spec: ExperimentSpec, put: Callable[[RunProgress], None], running: Callable[[str], None],
                 pause: Callable[[float], None]) -> None:
        self.spec, self.put, self.running, self.pause = spec, put, running, pause
        self.every = max(1, spec.steps // PROGRESS_EVERY)
        self.role: RunRole = "policy"
        self.policy = spec.policy
        self.step, self.time_s, self.energy_j = 0, 0.0, 0.0

    def on_phase(self, event: ExperimentPhase) -> RunControl | None:
        self.role, self.policy = event.role, event.policy
        self.step, self.time_s, self.energy_j = 0, 0.0, 0.0
        self.running(f"{self.role} 0/{self.spec.steps}")
        self.put(RunProgress("phase", self.role, self.policy, 0, self.spec.steps))
        return None

    def on_step_energy(self, event: StepEnergy) -> RunControl | None:
        self.pause(event.time_s)
        self.step += 1
        self.time_s += event.time_s
        self.energy_j += event.total_energy_j
        self.running(f"{self.role} {self.step}/{self.spec.steps}")
        if self.step % self.every == 0 or self.step == self.spec.steps:
            self.put(RunProgress("step", self.role, self.policy, self.step, self.spec.steps, self.time_s,
                                 self.energy_j, event.source))
        return None


def run_on_board(spec: ExperimentSpec, session: DeviceSession, identity: DeviceIdentity, *,
                 seeds: Sequence[FinishedSweep],
                 selector: SelectorFiles | None, workload_of: Callable[[WorkloadSpec], Workload],
                 control: TrainControl | None, put: Callable[[RunProgress], None],
                 running: Callable[[str], None], pause: Callable[[float], None],
                 policies: PolicyFactory | None = None) -> ExperimentRecords:
    """Run the experiment into a temporary store of this board's; return everything it recorded."""
    from engine.results.records import DeviceRecord
    from engine.results.store.run_import import export_runs
    from engine.results.store import Store

    spec = board_spec(spec, session)
    with tempfile.TemporaryDirectory(prefix="slm-dvfs-fleet-run-") as tmp:
        with Store(Path(tmp) / "board.sqlite") as store:
            result, status, error = None, "failed", ""
            try:
                workload = workload_of(spec.workload)
                if seeds:  # the oracle's sweeps, under this board: stored_points finds them as local ones
                    store.add_finished_sweeps(DeviceRecord.from_identity(identity), list(seeds))
                run_spec = with_selector(spec, selector, Path(tmp) / "selector") if selector is not None else spec
                result = run_experiment(run_spec, store=store, callbacks=[_Progress(spec, put, running, pause)],
                                        control=control, session=session, workload=workload, policies=policies)
                cancelled = result.cancelled or (result.baseline is not None and result.baseline.cancelled)
                status = "cancelled" if cancelled else "finished"
            except Exception as exc:  # noqa: BLE001 - the failed runs are shipped too, with the error
                log.exception("experiment %s/%s (%s) failed on this board", spec.workload.model, spec.workload.task,
                              spec.policy)
                error = one_line(exc)
            runs = sorted(r.id for r in store.list_runs(limit=None))
            bundle = export_runs(store, runs)
    if result is None:  # it failed: its runs in the order they began (the policy run, then MAXN's)
        run_id, base = (runs + [None, None])[:2]
    else:
        run_id, base = result.run.run_id, None if result.baseline is None else result.baseline.run_id
    return ExperimentRecords(
        bundle=bundle, run_id=run_id, baseline_run_id=base,
        comparison_id=None if result is None or result.comparison is None else result.comparison.record_id,
        notes=() if result is None else tuple(result.notes), status=status, error=error)
