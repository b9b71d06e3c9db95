"""A stored power trace agrees with its run: the trapezoid of its samples, over the run's rails,
is the run's stored energy, whatever the policy, padding, rails, simulated or trained, on the
twin; on a board by the monitor's construction (the samples inside the run's window, its edges
included); and down-sampling keeps it.

Issue 20 asks for 2%; the twin's trace is exact but for the hairs between its flat steps (a part
in a million), and a board's is exact by construction, so these hold them to far less.
"""

from __future__ import annotations

import csv
import io
import json
import math
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.cli import main
from engine.core.provenance import Source
from engine.core.stats import trapezoid_j
from engine.device.monitor import PowerMonitor, resolve_rails
from engine.device.power import DeviceRailSource, PowerSample
from engine.results.store import Store
from engine.results.traces import downsample
from engine.run.recorder import RunRecorder
from engine.workload.events import RunStarted, StepEnd
from engine.workload.spec import WorkloadSpec

REL = 1e-5  # the twin's traces; issue 20's bound is 2%
GPU_MHZ = ("306", "408", "612", "918", "1300.5")  # steps the AGX Orin 64GB twin lists
WORKLOAD = ["--model", "bert-tiny", "--task", "sst2", "--batch-size", "8", "--max-seq-len", "64", "--twin"]


def trace_energy_j(samples: list[PowerSample], rails: tuple[str, ...]) -> float:
    return trapezoid_j([s.t for s in samples], [sum(s.rails_mw[r] for r in rails) for s in samples])


def assert_trace_is_the_runs_energy(db: Path, run_id: int, rel: float = REL) -> None:
    with Store(db) as store:
        run, samples = store.get_run(run_id), store.power_samples(run_id)
    assert run.status == "finished" and run.energy_j and samples, (run.status, run.energy_j, len(samples))
    rails = resolve_rails(run.rails or "all", tuple(run.rail_energy_j))
    assert trace_energy_j(samples, rails) == pytest.approx(run.energy_j, rel=rel)
    assert samples[-1].t - samples[0].t == pytest.approx(run.time_s, rel=1e-9)  # the window, edges included


def run_ids(out: dict[str, Any]) -> list[int]:
    return [r["run_id"] for r in (out["run"], out["baseline"]) if r is not None and not r.get("reused")]


# --------------------------------------------------------------------------- the reported case
def test_a_simulated_maxn_runs_exported_trace_reads_its_own_power(isolated_env: Any,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """`run --simulate --compare maxn` with dynamic padding: the MAXN run's export read 28.09 W at
    every sample (the last, rarest padded length's power) while the run averaged 14.02 W."""
    assert main(["run", "--twin", "--simulate", "--model", "bert-tiny", "--task", "sst2", "--policy", "static:gpu=612",
                 "--compare", "maxn", "--steps", "40", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    base = out["baseline"]
    assert main(["export", str(base["run_id"]), "--out", "-"]) == 0
    rows = list(csv.DictReader(line for line in io.StringIO(capsys.readouterr().out) if not line.startswith("#")))
    watts = [float(r["total_mw"]) / 1000.0 for r in rows]
    assert watts and all(w == pytest.approx(base["avg_power_w"], rel=1e-4) for w in watts)  # each step alike
    times = [float(r["t_s"]) for r in rows]
    assert trapezoid_j(times, [1000.0 * w for w in watts]) == pytest.approx(base["energy_j"], rel=1e-4)
    db = isolated_env.data_dir / "results.sqlite"
    for run_id in run_ids(out):
        assert_trace_is_the_runs_energy(db, run_id)


# --------------------------------------------------------------------------- every run, through the CLI
POLICIES = st.one_of(
    st.just("maxn"), st.just("online"), st.just("oracle"), st.just("mode:2"),
    st.sampled_from(GPU_MHZ).map(lambda mhz: f"static:gpu={mhz}"),
    st.tuples(st.sampled_from(GPU_MHZ), st.sampled_from(("665.6", "3199"))).map(
        lambda p: f"static:gpu={p[0]},emc={p[1]}"),
)
RUNS = st.fixed_dictionaries({
    "policy": POLICIES, "steps": st.integers(1, 12), "pad": st.sampled_from(("dynamic", "max")),
    "rails": st.sampled_from(("all", "gpu+cpu")), "compare": st.booleans(), "thermal": st.booleans(),
})


def _run_case(db: Path, case: dict[str, Any], extra: list[str], swept: set[tuple[str, str, str]],
              capsys: pytest.CaptureFixture[str]) -> None:
    common = [*WORKLOAD, "--pad", case["pad"], "--rails", case["rails"], "--db", str(db)]
    # the oracle needs a sweep of the run's workload: its loop is the run's (a run that trains is lean)
    loop = "hf" if "--simulate" in extra else "lean"
    if case["policy"] == "oracle" and (case["pad"], case["rails"], loop) not in swept:
        assert main(["sweep", *common, "--fast", "--loop", loop, "--steps", "2", "--json"]) == 0
        swept.add((case["pad"], case["rails"], loop))
    argv = ["run", *common, *extra, "--policy", case["policy"], "--steps", str(case["steps"]), "--json"]
    if case["compare"]:
        argv += ["--compare", "maxn"]
    if case["thermal"]:  # the twin's thermal model: a hotter board draws more, and may throttle mid-run
        argv += ["--thermal"]
    capsys.readouterr()
    assert main(argv) == 0, capsys.readouterr().err
    for run_id in run_ids(json.loads(capsys.readouterr().out)):
        assert_trace_is_the_runs_energy(db, run_id)


@settings(max_examples=4, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(case=RUNS)
def test_every_simulated_runs_trace_integrates_to_its_energy(case: dict[str, Any], isolated_env: Any,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    db = isolated_env.data_dir / "traces.sqlite"
    _run_case(db, case, ["--simulate"], _SWEPT.setdefault(db, set()), capsys)


_SWEPT: dict[Path, set[tuple[str, str, str]]] = {}


@pytest.mark.slow
@settings(max_examples=40, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(case=RUNS)
def test_many_simulated_runs_traces_integrate_to_their_energy(case: dict[str, Any], isolated_env: Any,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    db = isolated_env.data_dir / "traces.sqlite"
    _run_case(db, case, ["--simulate"], _SWEPT.setdefault(db, set()), capsys)


@pytest.mark.slow
@settings(max_examples=6, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(case=RUNS.map(lambda c: {**c, "steps": min(c["steps"], 4)}))
def test_every_trained_runs_trace_integrates_to_its_energy(case: dict[str, Any], isolated_env: Any,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """Training a random-initialised bert-tiny on generated data: with dynamic padding every step
    has its own length, so its power moves from step to step."""
    db = isolated_env.data_dir / "traces.sqlite"
    _run_case(db, case, ["--train-samples", "32", "--eval-samples", "8"], _SWEPT.setdefault(db, set()), capsys)


# --------------------------------------------------------------------------- a board: integrated samples
class _Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


class _Rails:
    """An INA3221-like source: instant readings of a power the test sets, on the test's clock."""

    def __init__(self, clock: _Clock) -> None:
        self.clock = clock
        self.mw = {"VDD_GPU_SOC": 5000.0, "VDD_CPU_CV": 1000.0}
        self.source = Source.MEASURED
        self.min_interval_s = 0.0

    def now(self) -> float:
        return self.clock()

    def read(self) -> PowerSample:
        return PowerSample(self.clock(), dict(self.mw))

    def energy_counter(self) -> None:
        return None


def _started(steps: int) -> RunStarted:
    return RunStarted(model="m", task="sst2", mode="full", precision="fp32", device="cpu", batch_size=4,
                      total_steps=steps, steps_per_epoch=steps, seed=0, trainable_params=1, total_params=1)


def _step(step: int) -> StepEnd:
    return StepEnd(step=step, epoch=0, loss=1.0, samples=4, tokens=64, lr=1e-3, wall_s=1.0, elapsed_s=float(step))


@settings(max_examples=60, deadline=None, database=None)
@given(before=st.integers(0, 3), steps=st.lists(st.lists(st.tuples(st.floats(0.001, 0.5), st.floats(0.0, 30000.0)),
                                                         max_size=4), min_size=1, max_size=6),
       lag=st.floats(0.0, 0.3))
def test_a_boards_run_trace_integrates_to_its_window(before: int, steps: list[list[tuple[float, float]]],
                                                     lag: float) -> None:
    """Samples come when the sensor has them, not at the run's edges: the trace carries the start
    edge (interpolated) and the end edge (the last power held), so it is the window's energy."""
    clock = _Clock()
    src = _Rails(clock)
    monitor = PowerMonitor(src, clock=clock)
    for _ in range(before):  # an earlier run's tail in the ring buffer
        clock.t += 0.1
        monitor.sample_once()
    clock.t += lag
    recorder = RunRecorder(monitor)
    recorder(_started(len(steps)))
    for i, samples in enumerate(steps, start=1):
        for dt, mw in samples:  # the sampler's readings inside the step
            clock.t += dt
            src.mw = {"VDD_GPU_SOC": mw, "VDD_CPU_CV": 0.1 * mw}
            monitor.sample_once()
        clock.t += 0.01  # the step's end comes after its last reading
        recorder(_step(i))
    totals = recorder.totals()
    assert totals is not None and totals.power_samples == tuple(recorder.samples)  # the trace travels with them
    time_s, rail_j = totals.time_s, totals.rail_energy_j
    rails = ("VDD_GPU_SOC", "VDD_CPU_CV")
    assert recorder.samples[0].t == pytest.approx(recorder.samples[-1].t - time_s, abs=1e-12)
    assert all(b.t > a.t for a, b in zip(recorder.samples, recorder.samples[1:]))
    assert trace_energy_j(recorder.samples, rails) == pytest.approx(sum(rail_j.values()), rel=1e-9, abs=1e-12)


def test_a_run_trace_from_the_sampler_thread_over_rail_files(twin_session: Any) -> None:
    """The board's path for real: the sampler thread reads the twin's INA3221 files (which play a
    step's phases back while it is driven) on the wall clock, and the run's window and trace come
    from those samples; whenever the samples fell, the trace is the window's energy."""
    from engine.workload.resolve import resolve_workload

    twin = twin_session.twin
    steps = resolve_workload(WorkloadSpec("bert-tiny", "sst2", batch_size=8, seq_len=64, padding="dynamic")).steps
    source = DeviceRailSource(twin_session.device)
    assert source.source is Source.TWIN and source.energy_counter() is None  # integrated, as on a board
    monitor = PowerMonitor(source, rate_hz=200.0).start()
    recorder = RunRecorder(monitor)
    try:
        with twin.driven():
            recorder(_started(6))
            for i in range(1, 7):
                twin.run_step(steps)
                time.sleep(0.03)  # the host's time per step, over which the files play the phases
                recorder(_step(i))
    finally:
        monitor.stop()
    totals = recorder.totals()
    assert totals is not None
    time_s, rail_j = totals.time_s, totals.rail_energy_j
    rails = tuple(rail_j)
    assert len(recorder.samples) >= 3 and recorder.samples[-1].t - recorder.samples[0].t == pytest.approx(time_s)
    assert trace_energy_j(recorder.samples, rails) == pytest.approx(sum(rail_j.values()), rel=1e-9)


# --------------------------------------------------------------------------- down-sampling, the store
@st.composite
def flat_step_traces(draw: st.DrawFn) -> list[PowerSample]:
    """Traces as the twin's runs store them: flat steps, each a hair after the one before."""
    t, out = draw(st.floats(0.0, 1e4)), []
    for _ in range(draw(st.integers(2, 400))):
        dt = draw(st.floats(1e-4, 2.0))
        mw = draw(st.floats(0.0, 60000.0))
        left = t + dt * 1e-6 if out else t
        out += [PowerSample(left, {"A": mw, "B": 0.2 * mw})] if left > t or not out else []
        t += dt
        out.append(PowerSample(t, {"A": mw, "B": 0.2 * mw}))
    return out


@settings(max_examples=80, deadline=None, database=None)
@given(trace=flat_step_traces(), cap=st.integers(3, 300))
def test_down_sampling_keeps_a_traces_energy(trace: list[PowerSample], cap: int) -> None:
    small = downsample(trace, cap)
    assert len(small) <= cap and small[0].t == trace[0].t and small[-1].t == trace[-1].t
    assert all(b.t > a.t for a, b in zip(small, small[1:]))
    for rails in (("A", "B"), ("A",)):
        assert trace_energy_j(small, rails) == pytest.approx(trace_energy_j(trace, rails), rel=1e-9, abs=1e-9)


@settings(max_examples=20, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(trace=flat_step_traces(), cap=st.integers(3, 300))
def test_the_store_keeps_a_traces_energy(trace: list[PowerSample], cap: int, tmp_path: Path) -> None:
    with Store(tmp_path / "store.sqlite") as store:
        run_id = store.start_run(policy="maxn", source="twin")
        store.add_power_samples(run_id, trace, max_samples=cap)
        stored = store.power_samples(run_id)
    assert len(stored) <= cap and not math.isnan(stored[0].total_mw)
    assert trace_energy_j(stored, ("A", "B")) == pytest.approx(trace_energy_j(trace, ("A", "B")), rel=1e-9, abs=1e-9)
