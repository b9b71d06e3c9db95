"""Experiments on the twin: every policy through run_experiment, MAXN comparisons and reuse,
the store's records, clocks restored, and the comparison maths."""

from __future__ import annotations

from pathlib import Path

import pytest
from traces import BERT_BASE_LIKE as TRACE
from traces import bert_base_workload

from engine.device.base import TemperatureReading
from engine.device.session import DeviceSession
from engine.device.twin.orin import VirtualOrin
from engine.device.twin.profile import load_profile
from engine.device.setting import MAXN, MAXN_PINNED, DvfsSetting
from engine.core.errors import ConfigError, NoRecordedSweepError
from engine.run.experiment import (
    BASELINE_COOL_MARGIN_C,
    ExperimentPhase,
    ExperimentSpec,
    cool_before_baseline,
    run_experiment,
)
from engine.workload.spec import WorkloadSpec
from engine.results.compare import Comparison, RunFigures, Side, comparison, flatten_metrics
from engine.device.monitor import PowerMonitor
from engine.device.power import PowerSample
from engine.core.provenance import Source
from engine.core.stats import trapezoid_j
from engine.results.store import Store
from engine.results.totals import RunTotals
from engine.run.recorder import RunRecorder
from engine.run.sweep import SweepSpec, run_sweep
from engine.device.twin.fast import fast_points
from engine.run.thermal import ThermalAbortError, ThermalGuard, ThermalLimits
from engine.workload.events import RunStarted, StepEnd
from engine.core.trace import StepTrace
from engine.workload.training.loop import TrainControl

MHZ = 1_000_000
PROFILE = load_profile("agx-orin-64gb")
WORKLOAD = bert_base_workload()
TINY = dict(workload=WorkloadSpec("bert-tiny", "sst2", batch_size=4, seq_len=16), train_samples=16, eval_samples=8)
TWIN = "agx-orin-64gb"


pytestmark = pytest.mark.usefixtures("isolated_env")  # conftest: state, data and a module's trace cache in tmp


@pytest.fixture
def store(tmp_path: Path):
    with Store(tmp_path / "results.sqlite") as s:
        yield s


def per_step(setting: DvfsSetting, trace: StepTrace = TRACE, rails=None):
    (p,) = fast_points(trace, PROFILE, [setting], steps=1, rails=rails)
    return p


def gpu_files(root: Path) -> tuple[str, str, str]:
    g = root / "sys/class/devfreq/17000000.gpu"
    return tuple((g / n).read_text().strip() for n in ("min_freq", "max_freq", "governor"))  # type: ignore[return-value]


def sim(policy: str, **kw) -> ExperimentSpec:
    return ExperimentSpec(WorkloadSpec("bert-base-like", "sst2"), policy=policy, twin=TWIN, simulate=True, **kw)


# --------------------------------------------------------------------------- the maths
def figures(run_id: int, energy: float, time_s: float, rails: dict[str, float], preset: str = "all",
            policy: str = "maxn") -> RunFigures:
    totals = RunTotals(time_s=time_s, rail_energy_j=rails, rails=tuple(rails), rails_preset=preset, samples=320,
                       steps=10, energy_j=energy)
    return RunFigures(run_id, "policy", policy, Source.TWIN, totals)


def compare(run: RunFigures, baseline: RunFigures) -> Comparison:
    """The comparison's arithmetic and checks on two runs' figures (the store's compare_runs applies
    them to the stored runs)."""
    return comparison(Side.of(run), Side.of(baseline))


def test_saving_and_slowdown_maths() -> None:
    run = figures(1, 80.0, 12.0, {"A": 50.0, "B": 30.0}, policy="static")
    base = figures(2, 100.0, 10.0, {"A": 75.0, "B": 25.0})
    c = compare(run, base)
    assert c.saving_pct == pytest.approx(20.0)
    assert c.slowdown_pct == pytest.approx(20.0)
    assert c.rail_saving_pct == pytest.approx({"A": 100 / 3, "B": -20.0})
    assert c.power_change_pct == pytest.approx(100 * ((80 / 12) / (100 / 10) - 1))
    faster = figures(3, 80.0, 12.0, {"A": 50.0, "B": 30.0})  # MAXN against a MAXN run that took 20% longer
    assert compare(base, base).saving_pct == 0.0 and compare(base, faster).slowdown_pct == pytest.approx(-100 / 6)
    with pytest.raises(ConfigError, match="same --rails"):
        compare(run, figures(2, 100.0, 10.0, {"A": 75.0}, preset="gpu+cpu"))
    with pytest.raises(ConfigError, match="not the baseline .*: a saving is against the baseline only"):
        compare(base, run)  # the baseline is the static run


def test_spec_validation() -> None:
    with pytest.raises(ConfigError, match="compare"):
        ExperimentSpec(WorkloadSpec("m", "t"), compare="maxn-pinned").validate()
    with pytest.raises(ConfigError, match="reuse-baseline"):
        ExperimentSpec(WorkloadSpec("m", "t"), reuse_baseline=True).validate()
    with pytest.raises(ConfigError, match="twin"):
        ExperimentSpec(WorkloadSpec("m", "t"), simulate=True).validate()
    with pytest.raises(ConfigError):
        ExperimentSpec(WorkloadSpec("m", "t"), objective="speed").validate()
    assert flatten_metrics({"validation": {"accuracy": 0.5}}) == {"accuracy": 0.5}
    assert flatten_metrics({"m": {"accuracy": 0.5}, "mm": {"accuracy": 0.6}}) == {"m/accuracy": 0.5,
                                                                                   "mm/accuracy": 0.6}


# --------------------------------------------------------------------------- trained runs
def test_static_policy_against_maxn_with_training(store: Store, tmp_path: Path) -> None:
    """Both runs fine-tune bert-tiny for real (same seed, data order, steps); the twin
    charges each step, so the saving is exactly the per-step one of the two settings."""
    events: list = []
    spec = ExperimentSpec(policy="static:gpu=612", compare="maxn", steps=4, twin=TWIN, **TINY)
    result = run_experiment(spec, store=store, callbacks=[events.append])
    run, base, c = result.run, result.baseline, result.comparison
    assert base is not None and c is not None and result.source is Source.TWIN and not result.simulated
    assert run.setting == DvfsSetting(gpu_hz=612 * MHZ, nvpmodel=0) and base.setting == MAXN
    assert run.metric == "accuracy" and 0.0 <= run.metric_value <= 1.0 and base.metric == "accuracy"
    assert run.steps == base.steps == 4 and run.samples == base.samples == 16
    trace = result.workload.trace
    e612, emax = per_step(run.setting, trace), per_step(MAXN, trace)
    assert run.energy_j == pytest.approx(4 * e612.measurement.energy_j, rel=1e-9)
    assert base.time_s == pytest.approx(4 * emax.measurement.time_s, rel=1e-9)
    assert c.saving_pct == pytest.approx(100 * (1 - e612.measurement.energy_j / emax.measurement.energy_j), rel=1e-6)
    assert c.slowdown_pct == pytest.approx(100 * (e612.measurement.time_s / emax.measurement.time_s - 1), rel=1e-6)
    assert [e.role for e in events if isinstance(e, ExperimentPhase)] == ["policy", "baseline"]
    assert sum(isinstance(e, StepEnd) for e in events) == 8
    # everything is in the store, labelled twin
    rec, brec = store.get_run(run.run_id), store.get_run(base.run_id)
    assert (rec.status, rec.policy, rec.source, rec.rails) == ("finished", "static", Source.TWIN, "all")
    assert rec.energy_j == pytest.approx(run.energy_j) and rec.metrics["accuracy"] == run.metric_value
    assert rec.setting["gpu_hz"] == 612 * MHZ and brec.policy == "maxn" and brec.seed == rec.seed == 0
    trace = store.power_samples(run.run_id)  # the run's start and each step's end (one power: flat)
    assert len(trace) == 5 and trace[-1].t - trace[0].t == pytest.approx(run.time_s, rel=1e-12)
    assert trapezoid_j([s.t for s in trace], [s.total_mw for s in trace]) == pytest.approx(run.energy_j, rel=1e-9)
    # offline: bert-tiny starts from random weights on generated data, so its accuracy means nothing
    assert (rec.weights, rec.synthetic, rec.data_source) == ("random", True, "synthetic") == (
        brec.weights, brec.synthetic, brec.data_source)
    assert run.metric_provenance.meaningful is False and result.to_json()["run"]["metric"]["meaningful"] is False
    from engine.cli.experiment_cmds import format_experiment

    (line,) = [x for x in format_experiment(result).splitlines() if x.startswith("accuracy (eval)")]
    assert line.endswith("  not meaningful (random weights / generated data)") and "[measured" not in line
    (cmp_rec,) = store.comparisons_for(run.run_id)
    assert cmp_rec.saving_pct == pytest.approx(c.saving_pct) and c.record_id == cmp_rec.id
    # the guard put the twin's clocks back
    assert gpu_files(tmp_path / "state/twin" / TWIN) == (str(306 * MHZ), str(1_300_500_000), "nvhost_podgov")


def test_board_code_path_measures_with_the_power_monitor(store: Store, tmp_path: Path) -> None:
    """A session without a twin object is treated as a board: energy comes from monitor
    windows over the rails (here the twin's tree, kept current in real time). The baseline's
    stored trace starts after the policy run's (the monitor's buffer still holds that), and
    the baseline waits for the board to be as cool as the policy run found it."""
    orin = VirtualOrin(TWIN, root=tmp_path / "board")
    orin.start(tick_s=0.01, realtime=True)
    try:
        session = DeviceSession(orin.device())  # no twin: the monitor path
        # 20 steps: enough that the 20 Hz monitor samples inside each run even on an idle host.
        result = run_experiment(ExperimentSpec(policy="maxn-pinned", compare="maxn", steps=20, rails="gpu+cpu",
                                               **TINY), store=store, session=session)
    finally:
        orin.close()
    run, base = result.run, result.baseline
    assert run.rails == ("VDD_GPU_SOC", "VDD_CPU_CV") and run.rails_preset == "gpu+cpu"
    assert run.time_s > 0 and run.energy_j > 0 and run.setting == MAXN_PINNED
    assert run.energy_j == pytest.approx(run.rail_energy_j["VDD_GPU_SOC"] + run.rail_energy_j["VDD_CPU_CV"])
    assert store.get_run(run.run_id).rails == "gpu+cpu" and len(store.power_samples(run.run_id)) >= 2
    run_trace, base_trace = store.power_samples(run.run_id), store.power_samples(base.run_id)
    assert base_trace and min(s.t for s in base_trace) > max(s.t for s in run_trace)
    assert any(n.startswith("MAXN baseline ran second") for n in result.notes)
    assert gpu_files(tmp_path / "board")[:2] == (str(306 * MHZ), str(1_300_500_000))


class _Clock:
    t = 0.0

    def __call__(self) -> float:
        return self.t


class _Rails:
    """A power source on a hand-driven clock: 1 W on one rail."""

    source = Source.MEASURED
    min_interval_s = 0.0

    def __init__(self, clock: _Clock) -> None:
        self.now = clock

    def read(self) -> PowerSample:
        return PowerSample(self.now(), {"VDD_GPU_SOC": 1000.0})

    def energy_counter(self) -> None:
        return None


def _started(total_steps: int) -> RunStarted:
    return RunStarted(model="m", task="sst2", mode="full", precision="fp32", device="cpu", batch_size=4,
                      total_steps=total_steps, steps_per_epoch=total_steps, seed=0, trainable_params=1,
                      total_params=1)


def _step(step: int) -> StepEnd:
    return StepEnd(step=step, epoch=0, loss=1.0, samples=4, tokens=64, lr=1e-3, wall_s=1.0, elapsed_s=float(step))


def test_a_runs_trace_holds_no_samples_from_before_it() -> None:
    """The monitor's ring buffer holds the previous run's tail; the recorder keeps only the window."""
    clock = _Clock()
    monitor = PowerMonitor(_Rails(clock), rails="all", clock=clock)
    for t in range(51):  # 50 s of an earlier run, still in the buffer
        clock.t = float(t)
        monitor.sample_once()
    recorder = RunRecorder(monitor)
    clock.t = 50.5
    recorder(_started(2))
    for step in (1, 2):
        for k in range(5):
            clock.t = 50.5 + (step - 1) * 5 + k + 1
            monitor.sample_once()
        recorder(_step(step))
    times = [s.t for s in recorder.samples]
    assert times[0] >= 50.5 and times == sorted(times) and len(times) >= 10
    totals = recorder.totals()
    assert totals is not None and totals.source is Source.MEASURED  # the monitor's source labels them
    assert totals.time_s == pytest.approx(10.0) and totals.rail_energy_j["VDD_GPU_SOC"] == pytest.approx(10.0)
    assert totals.steps == 2


class _Board:
    """Temperatures as a list the test drives (the hottest zone only)."""

    def __init__(self, temps: list[float]) -> None:
        self.temps = temps

    def temperatures(self) -> list[TemperatureReading]:
        celsius = self.temps.pop(0) if len(self.temps) > 1 else self.temps[0]
        return [TemperatureReading("gpu-thermal", celsius)] if celsius is not None else []


def _guard(temps: list, **limits) -> tuple[ThermalGuard, list[float]]:
    slept: list[float] = []
    return ThermalGuard(_Board(temps), ThermalLimits(**limits), sleep=slept.append), slept


def test_the_baseline_waits_until_the_board_is_as_cool_as_the_policy_run_found_it() -> None:
    limits = ThermalLimits(poll_s=5.0)
    guard, slept = _guard([61.0, 61.0, 58.0, 55.0, 52.5, 50.0], poll_s=5.0)
    note = cool_before_baseline(guard, 50.0)
    assert slept == [5.0, 5.0, 5.0] and "cooled from 61.0 to 52.5" in note and "50.0 degC" in note
    assert guard.limits == limits  # the guard's own limits are back
    (wait,) = guard.waits
    assert wait.end_c <= 50.0 + BASELINE_COOL_MARGIN_C and "baseline" in wait.label

    guard, slept = _guard([52.0])  # already within the margin
    assert "no cool-down needed" in cool_before_baseline(guard, 50.0) and slept == [] and not guard.waits
    guard, slept = _guard([90.0])  # past the abort limit: stop, as on any step
    with pytest.raises(ThermalAbortError):
        cool_before_baseline(guard, 50.0)
    guard, slept = _guard([70.0], poll_s=5.0, max_wait_s=20.0)  # never cools: run anyway, and say so
    note = cool_before_baseline(guard, 50.0)
    assert "did not cool to 53.0 degC" in note and sum(slept) == 20.0 and guard.limits.max_wait_s == 20.0
    guard, slept = _guard([None])  # no thermal zones
    assert "no temperatures" in cool_before_baseline(guard, guard.hottest()[1]) and slept == []


# --------------------------------------------------------------------------- every policy, simulated
@pytest.mark.parametrize("policy, setting", [
    ("maxn", MAXN),
    ("maxn-pinned", MAXN_PINNED),
    ("mode:2", DvfsSetting(nvpmodel=2)),
    ("static:gpu=816,emc=3199", DvfsSetting(gpu_hz=816 * MHZ, emc_hz=3_199_000_000, nvpmodel=0)),
])
def test_fixed_policies_run_at_their_setting(store: Store, policy: str, setting: DvfsSetting) -> None:
    result = run_experiment(sim(policy, steps=5), store=store, workload=WORKLOAD)
    run = result.run
    assert result.simulated and run.simulated and run.metric is None and run.setting == setting
    expected = per_step(setting).measurement
    assert run.energy_j == pytest.approx(5 * expected.energy_j, rel=1e-9)
    assert run.time_s == pytest.approx(5 * expected.time_s, rel=1e-9)
    rec = store.get_run(run.run_id)
    assert rec.status == "finished" and rec.notes.startswith("simulated") and rec.metrics == {}


def test_oracle_takes_the_optimum_of_a_fast_sweep(store: Store) -> None:
    with pytest.raises(NoRecordedSweepError, match="no recorded sweep"):
        run_experiment(sim("oracle", steps=5), store=store, workload=WORKLOAD)
    sweep = run_sweep(SweepSpec(WorkloadSpec("bert-base-like", "sst2"), fast=True, twin=TWIN), store=store,
                      workload=WORKLOAD)
    result = run_experiment(sim("oracle", steps=5, compare="maxn"), store=store, workload=WORKLOAD)
    assert result.run.setting == sweep.optimum.setting != MAXN
    assert result.run.detail["points"] == 12
    assert result.run.joules_per_sample == pytest.approx(sweep.optimum.joules_per_sample.mean, rel=1e-9)
    expected = 100 * (1 - sweep.optimum.joules_per_sample.mean / sweep.maxn.joules_per_sample.mean)
    assert result.comparison.saving_pct == pytest.approx(expected, rel=1e-9) and expected > 5
    # a sweep over other rails is not the oracle's data for this preset
    with pytest.raises(ConfigError, match="other rails"):
        run_experiment(sim("oracle", steps=5, rails="gpu+cpu"), store=store, workload=WORKLOAD)


def test_online_policy_pays_for_its_profiling(store: Store) -> None:
    # Long enough for its profiling (24 steps, some at clocks far from the optimum) to be paid back by
    # the optimum's saving over every rail (about 5% on this workload).
    steps = 120
    result = run_experiment(sim("online", steps=steps, compare="maxn"), store=store, workload=WORKLOAD)
    run = result.run
    history = list(run.history)
    assert len(history) > 5 and run.detail["profiling"] is False
    # the run's energy is every segment at its own setting: profiling steps included
    bounds = [step for step, _s in history] + [steps + 1]
    expected = sum((bounds[i + 1] - bounds[i]) * per_step(s).measurement.energy_j for i, (_b, s) in enumerate(history))
    assert run.energy_j == pytest.approx(expected, rel=1e-9)
    best = min((per_step(DvfsSetting(gpu_hz=f, nvpmodel=0)) for f in PROFILE.gpu.table_hz),
               key=lambda p: p.measurement.joules_per_sample)
    assert run.setting == best.setting  # coarse-to-fine found the twin's optimum
    assert result.comparison.saving_pct > 0


def test_maxn_baseline_is_reused_not_rerun(store: Store) -> None:
    first = run_experiment(sim("static:gpu=816", steps=6, compare="maxn", reuse_baseline=True), store=store,
                           workload=WORKLOAD)
    assert not first.baseline.reused and any("ran one" in n for n in first.notes)
    second = run_experiment(sim("static:gpu=612", steps=6, compare="maxn", reuse_baseline=True), store=store,
                            workload=WORKLOAD)
    assert second.baseline.reused and second.baseline.run_id == first.baseline.run_id
    assert len(store.list_runs(policy="maxn")) == 1
    assert second.comparison.saving_pct == pytest.approx(
        100 * (1 - second.run.energy_j / first.baseline.energy_j))
    # another step count, seed or rail preset is not the same baseline
    third = run_experiment(sim("static:gpu=612", steps=7, compare="maxn", reuse_baseline=True), store=store,
                           workload=WORKLOAD)
    assert not third.baseline.reused and len(store.list_runs(policy="maxn")) == 2


def test_cancel_stops_the_run_and_skips_the_baseline(store: Store) -> None:
    control = TrainControl()

    def stop(event) -> None:
        if isinstance(event, StepEnd) and event.step == 3:
            control.cancel("user")

    result = run_experiment(sim("maxn", steps=50, compare="maxn"), store=store, workload=WORKLOAD,
                            callbacks=[stop], control=control)
    assert result.cancelled and result.baseline is None and result.comparison is None
    assert result.run.steps == 3 and store.get_run(result.run.run_id).status == "cancelled"


# --------------------------------------------------------------------------- one energy path
def test_twin_run_energy_is_the_sum_of_its_step_windows_and_the_run_window(store: Store) -> None:
    """On the twin the run's figures, its StepEnergy events and the controller's costs all come
    from the same monitor windows over the twin's exact counter."""
    from engine.workload.events import StepEnergy

    events: list = []
    result = run_experiment(sim("online", steps=12, compare="maxn"), store=store, workload=WORKLOAD,
                            callbacks=[events.append])
    phases = [i for i, e in enumerate(events) if isinstance(e, ExperimentPhase)]
    policy_events, base_events = events[phases[0]:phases[1]], events[phases[1]:]
    for run, evs in ((result.run, policy_events), (result.baseline, base_events)):
        steps = [e for e in evs if isinstance(e, StepEnergy)]
        assert [e.step for e in steps] == list(range(1, 13))
        assert all(e.source is Source.TWIN and e.rails == run.rails and e.samples == TRACE.batch_size for e in steps)
        assert sum(e.total_energy_j for e in steps) == pytest.approx(run.energy_j, rel=1e-12)
        assert sum(e.time_s for e in steps) == pytest.approx(run.time_s, rel=1e-12)
        for rail, joules in run.rail_energy_j.items():
            assert sum(e.energy_j[rail] for e in steps) == pytest.approx(joules, rel=1e-12)
        # each step window is that step at the setting in force (the twin's per-step cost)
        settings = dict(run.history)
        current = None
        for e in steps:
            current = settings.get(e.step, current)
            assert e.total_energy_j == pytest.approx(per_step(current).measurement.energy_j, rel=1e-9)
        # the stored trace holds each step flat at its average power (a sample at its end), and so
        # integrates to the run's energy
        trace = store.power_samples(run.run_id)
        end = trace[0].t
        for e in steps:
            end += e.time_s
            at_end = min(trace, key=lambda s: abs(s.t - end))
            assert at_end.t == pytest.approx(end, rel=1e-12) and at_end.total_mw / 1000.0 == pytest.approx(
                e.avg_power_w, rel=1e-9)
        assert trapezoid_j([s.t for s in trace], [s.total_mw for s in trace]) == pytest.approx(run.energy_j, rel=1e-6)


def test_simulated_comparison_matches_the_figures_of_the_old_twin_cost_path(store: Store) -> None:
    """`run --compare maxn --simulate` of bert-tiny under the online policy, 40 steps: the numbers first
    recorded from the engine before energy moved to monitor windows (TwinCost sums), recorded again when the
    twin's governors became controllers over time (issue 22; the lean loop, every batch at the maximum
    length: `--pad max` gives them exactly)."""
    spec = ExperimentSpec(WorkloadSpec("bert-tiny", "sst2", padding="max_length"), policy="online", compare="maxn",
                          steps=40, simulate=True, twin=TWIN)
    result = run_experiment(spec, store=store)
    assert result.run.time_s == pytest.approx(0.5584589605526086, rel=1e-9)
    assert result.run.energy_j == pytest.approx(9.659739076873365, rel=1e-9)
    assert result.baseline.time_s == pytest.approx(0.389713433504304, rel=1e-9)
    assert result.baseline.energy_j == pytest.approx(9.631177353735067, rel=1e-9)
    assert result.comparison.saving_pct == pytest.approx(-0.2965548456775225, rel=1e-9)  # profiling costs 40 steps
    assert result.run.rail_energy_j == pytest.approx({
        "VDD_GPU_SOC": 4.268394560975639, "VDD_CPU_CV": 0.8918776173793894,
        "VIN_SYS_5V0": 2.9274149769919773, "VDDQ_VDD2_1V8AO": 1.5720519215263595}, rel=1e-9)
    assert list(result.run.rail_energy_j) == ["VDD_GPU_SOC", "VDD_CPU_CV", "VIN_SYS_5V0", "VDDQ_VDD2_1V8AO"]


def test_a_runs_totals_are_one_value_the_store_and_the_result_both_hold(store: Store) -> None:
    """The recorder's RunTotals go to the store as they are (no figure derived twice): the stored run's
    watts, throughput and joules per sample are the totals' own, its power trace is theirs, and the experiment's RunFigures (the run and a reused baseline alike) read the same totals."""
    first = run_experiment(sim("static:gpu=612", steps=5, compare="maxn"), store=store, workload=WORKLOAD)
    again = run_experiment(sim("static:gpu=612", steps=5, compare="maxn", reuse_baseline=True), store=store,
                           workload=WORKLOAD)
    assert first.baseline is not None and again.baseline is not None and again.baseline.reused
    for figures in (first.run, first.baseline):
        rec = store.get_run(figures.run_id)
        totals = figures.totals
        assert totals.source is Source.TWIN and totals.rails_preset == "all" and totals.power_samples
        assert rec.totals is not None
        assert (rec.time_s, rec.energy_j, dict(rec.rail_energy_j), rec.samples, rec.steps, rec.rails) == (
            totals.time_s, totals.energy_j, dict(totals.rail_energy_j), totals.samples, totals.steps, "all")
        assert (rec.avg_power_w, rec.samples_per_s, rec.joules_per_sample) == (
            totals.avg_power_w, totals.samples_per_s, totals.joules_per_sample)
        assert store.power_samples(figures.run_id) == list(totals.power_samples)  # the trace, stored with them
    reused = again.baseline.totals
    assert (reused.time_s, reused.energy_j, reused.samples, reused.steps) == (
        first.baseline.time_s, first.baseline.energy_j, first.baseline.samples, first.baseline.steps)
