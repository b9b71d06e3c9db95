"""Experiments: fine-tune under a DVFS policy and, if asked, under the baseline to compare (the board's
uncapped mode by name: MAXN, mode 0, on an AGX Orin; MAXN_SUPER on an Orin Nano / NX).

    spec = ExperimentSpec(WorkloadSpec("bert-tiny", "sst2"), policy="online", compare="maxn",
                          steps=200, twin="agx-orin-64gb")
    with Store() as store:
        result = run_experiment(spec, store=store, callbacks=[progress])

The experiment goes through the run harness (engine.run.harness): it opens the device
(a board, or the twin), snapshots its clocks in the clock guard before anything changes,
starts the power monitor, and runs the policy's run and then the baseline (same seed,
data order and step count), each with a DVFS controller applying the policy at step
boundaries. Where runs warm the device (a board), the baseline would start on silicon
the policy run has warmed, so the thermal guard first idles until it is back within
`BASELINE_COOL_MARGIN_C` of the policy run's starting temperature (a note says so).
Figures come from the power monitor's window over the training steps (exact on the
twin, integrated on a board); the energy total is over the monitor's rail preset (`all`
or `gpu+cpu`), named in the result. Every run, its down-sampled power trace and the
comparison are recorded in the store. `simulate` (twin only) replaces training with
`engine.workload.trace.simulate.simulate_run`.

Events of both runs go to `callbacks` (the trainer's events, `StepEnergy` per step,
`ExperimentPhase` and the thermal guard's `ThermalWait`); a `TrainControl` pauses or
cancels at step boundaries.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Iterable, Mapping

from engine.device.base import DeviceIdentity
from engine.dvfs.policies import PolicyFactory
from engine.dvfs.objectives import Objective, module_power_limit_w, parse_objective
from engine.core.errors import ConfigError
from engine.core.jsontypes import JsonObject, JsonValue
from engine.core.provenance import Source
from engine.results.errors import StoreError
from engine.device.baseline import board_baseline
from engine.results.baseline import MODE_NAME_KEY
from engine.results.compare import BASELINE_POLICY, Comparison, RunFigures, RunRole, flatten_metrics, stored_baseline
from engine.results.estimates import board_estimate
from engine.run.events import ExperimentPhase as ExperimentPhase  # defined with every event of a run
from engine.run.harness import ListenerLike, RunHarness, open_harness
from engine.run.recorder import RunRecorder
from engine.results.sweeps import stored_points
from engine.results.totals import RunTotals
from engine.workload.resolve import Workload
from engine.workload.spec import WorkloadSpec
from engine.workload.trace.loop import check_loop_for

if TYPE_CHECKING:
    from engine.results.records import RunStatus
    from engine.device.session import DeviceSession
    from engine.device.setting import DvfsSetting
    from engine.dvfs.policies import Policy, PolicyContext
    from engine.results.store import Store
    from engine.run.thermal import ThermalGuard
    from engine.workload.training.loop import TrainControl

log = logging.getLogger(__name__)

COMPARE_CHOICES = ("maxn",)
SIMULATED_NOTE = "simulated: twin only, no training (no loss, no eval metric)"
BASELINE_COOL_MARGIN_C = 3.0  # on a board, the baseline starts within this of the policy run's start


@dataclass(frozen=True)
class ExperimentSpec:
    """Everything one experiment needs; immutable (the TUI's setup screen builds one)."""

    workload: WorkloadSpec  # what both runs fine-tune: model, task, shape, mode, padding, data, seed
    policy: str = "maxn"
    objective: str = "energy"
    compare: str | None = None  # "maxn": also run (or reuse) the board's baseline, its uncapped mode by name
    reuse_baseline: bool = False  # use a stored MAXN run of the same workload, device, steps, seed
    steps: int = 100
    train_samples: int | None = None
    eval_samples: int | None = None
    twin: str | None = None  # twin profile; None: the board at sysfs_root
    sysfs_root: str | None = None
    fallback_to_twin: bool = False  # no board found: use the default twin (and say so)
    rails: str = "all"  # the monitor preset the energy total is over
    simulate: bool = False  # twin only: no training, just the twin's step costs
    thermal: bool = False  # the twin's thermal model
    thermal_overrides: tuple[tuple[str, float], ...] = ()  # e.g. (("wait_c", 70.0),)
    policy_options: tuple[tuple[str, object], ...] = ()  # keyword options of the policy (online; ml's selector)
    label: str | None = None
    output_dir: str | None = None  # the policy run's trained model (a LoRA run: its adapter; default: data dir)

    @property
    def trains(self) -> bool:
        """Whether the run trains (slm-dvfs's own loop), or only the twin computes its steps (--simulate)."""
        return not self.simulate

    def validate(self) -> None:
        self.validate_work()
        if self.simulate and not self.twin and not self.fallback_to_twin:
            raise ConfigError("--simulate runs on the digital twin only", "add --twin (e.g. --twin agx-orin-64gb)")

    def validate_work(self) -> None:
        """Every check but where it runs (a fleet checks that on the board it gives the run)."""
        self.workload.validate()
        check_loop_for(self.trains, self.workload.loop)
        if self.compare is not None and self.compare not in COMPARE_CHOICES:
            raise ConfigError(f"cannot compare against {self.compare!r}", f"use --compare {' or '.join(COMPARE_CHOICES)}")
        if self.reuse_baseline and self.compare is None:
            raise ConfigError("--reuse-baseline without --compare maxn", "add --compare maxn, or drop --reuse-baseline")
        if isinstance(self.steps, bool) or not isinstance(self.steps, int) or self.steps < 1:
            raise ConfigError(f"steps must be at least 1, not {self.steps!r}", "give --steps 1 or more")
        parse_objective(self.objective)

    def to_json(self) -> JsonObject:
        out: JsonObject = dict(self.__dict__)
        out["workload"] = self.workload.to_json()
        out["thermal_overrides"] = dict(self.thermal_overrides)
        # an option given as text stays as given; one loaded on a fleet board (ml's selector) by its repr
        out["policy_options"] = {k: v if v is None or isinstance(v, (str, int, float)) else repr(v)
                                 for k, v in self.policy_options}
        return out


@dataclass(frozen=True)
class ExperimentResult:
    spec: ExperimentSpec
    identity: DeviceIdentity
    source: Source
    workload: Workload
    objective: Objective
    run: RunFigures
    baseline: RunFigures | None = None
    comparison: Comparison | None = None
    notes: tuple[str, ...] = ()
    thermal: Mapping[str, JsonValue] = field(default_factory=dict)

    @property
    def simulated(self) -> bool:
        return self.spec.simulate

    @property
    def cancelled(self) -> bool:
        return self.run.cancelled

    def to_json(self) -> JsonObject:
        return {
            "source": self.source.value, "simulated": self.simulated, "cancelled": self.cancelled,
            "spec": self.spec.to_json(), "objective": self.objective.spec, "workload": self.workload.to_json(),
            "device": {"board": self.identity.board, "module": self.identity.module, "l4t": self.identity.l4t,
                       "profile": self.identity.profile, "twin": self.identity.is_twin},
            "energy_rails": {"preset": self.run.rails_preset, "rails": list(self.run.rails)},
            "run": self.run.to_json(), "baseline": None if self.baseline is None else self.baseline.to_json(),
            "comparison": None if self.comparison is None else self.comparison.to_json(),
            "notes": list(self.notes), "thermal": dict(self.thermal),
        }


def run_experiment(
    spec: ExperimentSpec,
    *,
    store: Store,
    callbacks: Iterable[ListenerLike] = (),
    control: TrainControl | None = None,
    session: DeviceSession | None = None,
    workload: Workload | None = None,
    policies: PolicyFactory | None = None,
) -> ExperimentResult:
    """Run the policy (and the MAXN baseline, with `compare`), record all, return the figures.

    `session` (an open DeviceSession) and `workload` (spec.workload resolved) may be passed by a
    caller that has them; otherwise they are opened / resolved here, once for both runs.
    `policies`: the factory that makes `spec.policy` (the client's, with `ml`: engine.selector.
    policy_factory(); default the dvfs layer's built-in policies)."""
    from engine.device.session import DEFAULT_TWIN
    from engine.dvfs.policies import PolicyContext
    from engine.results.store import DeviceRecord, WorkloadRecord

    spec.validate()
    if not spec.simulate:  # a data folder that holds no such task, say: refused before any run is recorded
        from engine.workload.data.text import check_source  # torch, as training needs anyway

        check_source(spec.workload.task, spec.workload.data, train_samples=spec.train_samples,
                     eval_samples=spec.eval_samples)
    twin = spec.twin or (DEFAULT_TWIN if spec.simulate and spec.fallback_to_twin else None)
    with open_harness(session=session, twin=twin, sysfs_root=spec.sysfs_root, fallback_to_twin=spec.fallback_to_twin,
                      thermal=spec.thermal, rails=spec.rails, listeners=callbacks, control=control,
                      policies=policies) as harness:
        # once for both runs, against this board's memory: refused before a store row or a model
        workload = harness.workload(spec.workload, workload)
        if spec.simulate and not harness.session.can_simulate:
            raise ConfigError("--simulate needs the digital twin: there is no training to measure on a board",
                              "add --twin, or drop --simulate")
        device, identity, source, emit = harness.device, harness.identity, harness.source, harness.emit
        objective = parse_objective(spec.objective, max_power_w=module_power_limit_w(identity))
        # --compare's baseline mode, found now: a conf with no uncapped mode is refused before the policy runs
        board_base = board_baseline(device.power_modes()) if spec.compare else None
        device_id = store.ensure_device(DeviceRecord.from_identity(identity))
        workload_id = store.ensure_workload(WorkloadRecord.from_workload(workload, None if spec.simulate
                                                                         else spec.workload.data))
        policy = harness.policies.make(spec.policy, **dict(spec.policy_options))
        points = stored_points(store, device_id, workload_id, source=source, rails=spec.rails) \
            if policy.name == "oracle" else ()
        if policy.name == "oracle" and not points and stored_points(store, device_id, workload_id, source=source):
            raise ConfigError(
                f"the store's sweeps of {workload.model}/{workload.task} on this device total other rails "
                f"than --rails {spec.rails}",
                f"sweep again with --rails {spec.rails}, or run with the sweep's --rails",
            )
        objective.check_times([m for _s, m in points])  # energy-only sweeps rank by energy alone
        guard = harness.thermal_guard(spec.thermal_overrides)
        ctx = PolicyContext(device, objective, tuple(points), workload=workload)
        notes = list(harness.session.notes)
        if spec.simulate:
            notes.append(SIMULATED_NOTE)
        runner = _Runner(spec, harness, workload, store, device_id, workload_id, objective, guard)

        baseline: RunFigures | None = None
        with harness.guarded():  # the clock snapshot comes before any change; restored whatever happens
            total = 2 if spec.compare and not spec.reuse_baseline else 1
            emit(ExperimentPhase("policy", spec.policy, 1, total))
            run = runner.execute("policy", spec.policy, policy, ctx)
            if spec.compare and not run.cancelled:
                if spec.reuse_baseline:
                    baseline = stored_baseline(
                        store, workload_key=workload.key, task=workload.task, device_id=device_id, source=source,
                        steps=spec.steps, seed=workload.spec.seed, rails_preset=spec.rails, rails=harness.rails,
                        simulated=spec.simulate, exclude=run.run_id)
                    if baseline is None:
                        notes.append("no stored MAXN run of this workload, device, steps and seed: ran one")
                if baseline is None:
                    if harness.session.warms_up:  # the policy run has warmed the silicon
                        notes.append(cool_before_baseline(guard, runner.policy_start_c))
                    assert board_base is not None  # found above, with spec.compare
                    emit(ExperimentPhase("baseline", BASELINE_POLICY, 2, 2, board_base.label))
                    base_ctx = PolicyContext(device, objective, (), workload=workload)
                    baseline = runner.execute("baseline", BASELINE_POLICY, harness.policies.make(BASELINE_POLICY),
                                              base_ctx)
                else:
                    notes.append(f"MAXN baseline reused from run {baseline.run_id}")
        if runner.saved_to:
            notes.append(f"{'LoRA adapter' if workload.mode == 'lora' else 'model'} saved in {runner.saved_to}")
        comparison = None
        if baseline is not None and not baseline.cancelled:
            # the results API's comparison, computed once from the stored runs and recorded; the twin's
            # interval is added here, where the workload's steps and the profile are at hand
            comparison = store.compare_runs(run.run_id, baseline.run_id)
            if not baseline.reused and len(run.history) <= 1 and run.setting is not None:
                comparison = replace(comparison, interval=board_estimate(
                    source, workload.steps, identity.profile, run.setting, comparison.saving_pct))
        return ExperimentResult(spec=spec, identity=identity, source=source, workload=workload, objective=objective,
                                run=run, baseline=baseline, comparison=comparison, notes=tuple(notes),
                                thermal=guard.describe())


def _named_setting(setting: DvfsSetting | None, detail: Mapping[str, object]) -> object:
    """The setting to store: a baseline run's carries its mode's name (MAXN_SUPER is no mode 0 to be
    named by id alone); any other run's is the setting as it is."""
    name = detail.get("mode_name")
    if setting is None or not isinstance(name, str):
        return setting
    return {**setting.to_json(), MODE_NAME_KEY: name}


class _Runner:
    """Executes one run of an experiment: store record, controller, recorder, training."""

    def __init__(self, spec: ExperimentSpec, harness: RunHarness, workload: Workload, store: Store, device_id: int,
                 workload_id: int, objective: Objective, guard: ThermalGuard) -> None:
        self.spec, self.harness, self.workload, self.store = spec, harness, workload, store
        self.device_id, self.workload_id, self.objective, self.guard = device_id, workload_id, objective, guard
        self.rails = harness.rails
        self.source = harness.source
        self.policy_start_c: float | None = None  # hottest zone as the policy run began
        self.saved_to: str | None = None  # where the policy run's model (a LoRA adapter) was saved

    def execute(self, role: RunRole, policy_spec: str, policy: Policy, ctx: PolicyContext) -> RunFigures:
        from engine.run.thermal import ThermalCheck
        from engine.workload.finetune import FinetuneSpec

        spec, harness = self.spec, self.harness
        self.guard.before_point(f"the {role} run ({policy_spec})")
        if role == "policy" and harness.session.warms_up:  # what the baseline cools back to
            self.policy_start_c = self.guard.hottest()[1]
        from engine.device.guard.lock import session_lock

        controller = harness.controller(policy, ctx)  # handed the run's clock guard
        controller.prepare()  # a setting the board refuses stops here: no run is recorded
        run_id = self.store.start_run(
            owner_lock=str(session_lock()),  # free once we are gone: the run is then marked abandoned
            policy=policy.name, source=self.source, device=self.device_id, workload=self.workload_id,
            objective=self.objective.spec, seed=self.workload.spec.seed, steps=spec.steps, rails=spec.rails,
            synthetic=None if spec.simulate else (self.workload.spec.data == "synthetic" or None),
            simulated=spec.simulate,
            label=spec.label, notes=SIMULATED_NOTE if spec.simulate else f"policy {policy_spec}",
        )
        assert harness.monitor is not None
        recorder = RunRecorder(harness.monitor)
        callbacks = [controller, recorder, ThermalCheck(self.guard)]  # an overheated board: the run's stop
        metric = metric_value = None
        metrics: dict[str, float] = {}
        # what the run learnt from (whether the metric means anything): none on a simulated run
        weights: str | None = None
        synthetic: bool | None = None
        data_source: str | None = None
        try:  # from here on, whatever stops the run leaves it stored as failed
            clock_guard = harness.clock_guard
            if clock_guard is not None:
                clock_guard.note_run(run_id)  # a recovery of our journal names the runs it ended
            if spec.simulate:
                sim = harness.simulate(self.workload, steps=spec.steps, seed=self.workload.spec.seed,
                                       callbacks=callbacks)
                cancelled, wall_s = sim.cancelled, sim.wall_s
                notes = SIMULATED_NOTE
            else:
                ft = FinetuneSpec(
                    workload=self.workload.spec, steps=spec.steps, train_samples=spec.train_samples,
                    eval_samples=spec.eval_samples,
                    # the policy run's model is kept (the baseline trains the same steps from the same seed)
                    output_dir=spec.output_dir if role == "policy" else None, save_model=role == "policy",
                )
                res = harness.train(ft, callbacks=callbacks, workload=self.workload)
                if res.saved_to:
                    self.saved_to = res.saved_to
                cancelled, wall_s = res.cancelled, res.wall_s
                metrics = flatten_metrics(res.eval)
                first = next(iter(res.eval.values()), {})
                if res.primary_metric in first:
                    metric, metric_value = res.primary_metric, float(first[res.primary_metric])
                weights, synthetic, data_source = res.weights, res.synthetic, res.data_source
                notes = (f"policy {policy_spec}; weights {res.weights}"
                         + ("; synthetic data (accuracy not meaningful)" if res.synthetic else ""))
            totals = recorder.totals(rails=self.rails, rails_preset=spec.rails)
        except BaseException as exc:
            try:
                self.store.fail_run(run_id, exc)
            except StoreError as store_exc:  # the run's own error is the one to report
                log.error("run %d could not be marked failed: %s", run_id, store_exc.what)
            raise
        measured = totals is not None and totals.time_s > 0
        if totals is None:  # cancelled before the first step: nothing measured, nothing stored
            totals = RunTotals(time_s=0.0, rails=self.rails, rails_preset=spec.rails, samples=0, steps=0,
                               source=self.source)
        detail = policy.describe()
        if measured:
            self._finish(run_id, "finished" if not cancelled else "cancelled", totals, notes=notes, weights=weights,
                         synthetic=synthetic, data_source=data_source, wall_s=wall_s, metrics=metrics,
                         setting=_named_setting(controller.current, detail))
        else:
            self._finish(run_id, "cancelled", None, notes=notes, weights=weights, synthetic=synthetic,
                         data_source=data_source)
        log.info("%s run %d (%s): %.3f s, %.2f J over %s [%s]", role, run_id, policy_spec, totals.time_s,
                 totals.total_j, spec.rails, self.source)
        return RunFigures(
            run_id=run_id, role=role, policy=policy_spec, source=self.source, totals=totals,
            host_wall_s=wall_s, metric=metric, metric_value=metric_value, setting=controller.current,
            history=tuple(controller.history), detail=detail, simulated=spec.simulate,
            cancelled=cancelled, weights=weights, synthetic=synthetic,
        )

    def _finish(self, run_id: int, status: RunStatus, totals: RunTotals | None, *, notes: str,
                weights: str | None, synthetic: bool | None, data_source: str | None, wall_s: float | None = None,
                metrics: Mapping[str, float] | None = None, setting: object = None) -> None:
        """Store the run's end: its totals with its power trace, in one transaction. When the store
        cannot take them (a full disk), the run is marked failed and the error says what was kept."""
        try:
            self.store.finish_run(run_id, totals, status=status, notes=notes, weights=weights, synthetic=synthetic,
                                  data_source=data_source, wall_s=wall_s, metrics=metrics, setting=setting)
        except StoreError as exc:
            try:
                self.store.fail_run(run_id, f"its figures and power trace could not be stored: {exc.what}")
                kept = "the run, marked failed, without its figures and power trace"
            except StoreError:  # not even that much fits
                kept = ("the run as running, until the next slm-dvfs command marks it abandoned (it could not be "
                        "marked failed either)")
            if totals is not None and totals.time_s:
                kept += (f"; it measured {totals.total_j:.2f} J in {totals.time_s:.3f} s "
                         f"[{self.source.value}], said here only")
            raise StoreError(f"run {run_id} ran, but its figures and power trace could not be stored ({exc.what}). "
                             f"Stored: {kept}",
                             f"free space on the disk that holds {self.store.path} (or pass another --db), then run "
                             f"again; the runs stored before it are intact") from None


def cool_before_baseline(guard: ThermalGuard, start_c: float | None, margin_c: float = BASELINE_COOL_MARGIN_C) -> str:
    """Before the MAXN baseline on a board: let the thermal guard idle until the hottest
    zone is back within `margin_c` of where it was when the policy run began (or at the
    guard's wait limit, if that is lower), so the baseline does not start on a board the
    policy run has warmed (hotter silicon leaks more and may throttle, biasing the saving).
    Returns the note that says what was done. Over the abort limit it raises, as on any step;
    a board that does not cool within the guard's maximum wait runs the baseline anyway."""
    from engine.run.thermal import ThermalAbortError

    if start_c is None or not math.isfinite(start_c):
        return "MAXN baseline ran second without a cool-down: the board reports no temperatures"
    limits = guard.limits
    target = min(start_c + margin_c, limits.wait_c)
    # The guard's own wait, with its threshold and its end both at the target.
    guard.limits = replace(limits, wait_c=target, cooldown_c=target)
    try:
        wait = guard.before_point(f"the baseline run ({BASELINE_POLICY})")
    except ThermalAbortError:
        guard.limits = limits
        guard.check()  # over the abort limit: stop (the clock guard restores the clocks)
        zone, now = guard.hottest()
        return (f"MAXN baseline ran second; the board did not cool to {target:.1f} degC (the policy run began "
                f"at {start_c:.1f}) within {limits.max_wait_s:.0f} s: it began at {now:.1f} degC ({zone})")
    finally:
        guard.limits = limits
    if wait is None:
        return (f"MAXN baseline ran second, the board within {margin_c:g} degC of the {start_c:.1f} degC "
                f"the policy run began at (no cool-down needed)")
    return (f"MAXN baseline ran second, after the board cooled from {wait.start_c:.1f} to {wait.end_c:.1f} degC "
            f"in {wait.waited_s:.0f} s (within {margin_c:g} degC of the {start_c:.1f} degC the policy run began at)")
