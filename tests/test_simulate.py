"""Twin-only execution: the trainer's event stream without training, through the trainer's
step loop; the run harness's hook advances the twin and its monitor costs each step."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
from traces import BERT_BASE_LIKE as TRACE
from traces import bert_base_workload

from engine.device.base import ClockDomain
from engine.device.session import DeviceSession
from engine.device.twin.orin import VirtualOrin
from engine.device.setting import MAXN, DvfsSetting
from engine.core.errors import ConfigError
from engine.core.provenance import Source
from engine.results.records import WorkloadRecord
from engine.run.harness import RunHarness
from engine.workload.resolve import resolve_workload
from engine.workload.spec import WorkloadSpec
from engine.workload.trace.simulate import SIMULATED_DEVICE, simulate_run
from engine.device.twin.fast import fast_sweep
from engine.workload.events import (
    Paused,
    Resumed,
    RunCancelled,
    RunFinished,
    RunStarted,
    StepBegin,
    StepEnd,
    StepEnergy,
)
from engine.workload.training.loop import TrainControl

WORKLOAD = bert_base_workload()


@pytest.fixture(scope="module", autouse=True)
def env(tmp_path_factory: pytest.TempPathFactory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SLM_DVFS_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        mp.setenv("SLM_DVFS_STATE_DIR", str(tmp_path_factory.mktemp("state")))
        mp.setenv("SLM_DVFS_TWIN_DIR", str(tmp_path_factory.mktemp("twin")))
        mp.setenv("HF_HUB_OFFLINE", "1")
        yield


@pytest.fixture
def twin():
    with VirtualOrin() as t:
        t.device()  # starts the sync thread, as a session does
        yield t


@pytest.fixture
def session(twin):
    return DeviceSession(twin.device(), twin=twin)


def test_event_stream_matches_the_trainers(twin, session) -> None:
    events: list = []
    calls: list = []
    advance = session.step_hook(lambda rows, seq_len: calls.append((rows, seq_len)) or TRACE)
    result = simulate_run(WORKLOAD, steps=4, seed=3, step_hook=advance, callbacks=[events.append])
    kinds = [type(e).__name__ for e in events]
    assert kinds == ["RunStarted"] + ["StepBegin", "StepEnd"] * 4 + ["RunFinished"]
    started = events[0]
    assert isinstance(started, RunStarted) and not hasattr(started, "twin")
    assert started.device == SIMULATED_DEVICE
    assert started.total_steps == 4 and started.seed == 3 and started.batch_size == 32
    ends = [e for e in events if isinstance(e, StepEnd)]
    assert [e.step for e in ends] == [1, 2, 3, 4]
    assert all(math.isnan(e.loss) and e.samples == 32 for e in ends)
    assert [e.step for e in events if isinstance(e, StepBegin)] == [1, 2, 3, 4]
    finished = events[-1]
    assert isinstance(finished, RunFinished) and finished.final_loss is None
    assert result.simulated and result.samples == 128 and not result.cancelled
    assert calls == [(TRACE.batch_size, TRACE.seq_len)] * 4
    (_s, m), = fast_sweep(TRACE, twin.profile, [MAXN], steps=4)
    assert twin.now() == pytest.approx(m.time_s, rel=1e-12)  # the hook advanced the twin by exactly the steps


def test_step_costs_are_the_twins_model_at_the_current_clocks(twin, session) -> None:
    """MAXN on a fresh twin: every step window costs what the fast sweep computes for MAXN."""
    energy: list = []
    harness = RunHarness(session, listeners=[energy.append])
    with harness.monitored():
        harness.simulate(WORKLOAD, steps=3)
        (_s, m), = fast_sweep(TRACE, twin.profile, [MAXN], steps=3)
        steps = [e for e in energy if isinstance(e, StepEnergy)]
        assert len(steps) == 3 and all(e.source is Source.TWIN for e in steps)
        assert sum(e.total_energy_j for e in steps) == pytest.approx(m.energy_j, rel=1e-12)
        assert sum(e.time_s for e in steps) == pytest.approx(m.time_s, rel=1e-12)
        # a pinned GPU changes the cost of the next steps, as on a board
        twin.device().pin(ClockDomain.GPU, 612_000_000)
        energy.clear()
        harness.simulate(WORKLOAD, steps=3)
    (_s, m612), = fast_sweep(TRACE, twin.profile, [DvfsSetting(gpu_hz=612_000_000, nvpmodel=0)], steps=3)
    slow = [e for e in energy if isinstance(e, StepEnergy)]
    assert sum(e.total_energy_j for e in slow) == pytest.approx(m612.energy_j, rel=1e-12)
    assert sum(e.time_s for e in slow) > m.time_s


def test_cancel_and_pause_at_step_boundaries(session) -> None:
    """The shared step loop: a cancel takes effect at the next boundary, a pause waits there."""
    control = TrainControl()
    events: list = []
    hook_calls: list = []

    def listener(event) -> None:
        events.append(event)
        if isinstance(event, StepEnd) and event.step == 2:
            control.cancel("enough")

    result = simulate_run(WORKLOAD, steps=10, step_hook=lambda r, s: hook_calls.append(r), callbacks=[listener],
                          control=control)
    assert result.cancelled and result.steps == 2 and len(hook_calls) == 2
    assert isinstance(events[-1], RunCancelled) and events[-1].reason == "enough" and events[-1].step == 2

    control = TrainControl()
    control.pause()
    seen: list = []

    def resume_on_pause(event) -> None:
        seen.append(event)
        if isinstance(event, Paused):
            control.resume()

    assert simulate_run(WORKLOAD, steps=1, step_hook=None, callbacks=[resume_on_pause], control=control).steps == 1
    assert [type(e) for e in seen[:4]] == [RunStarted, Paused, Resumed, StepBegin]

    # through the harness: a cancelled simulation leaves no step window open
    control = TrainControl()
    harness = RunHarness(session, control=control)
    with harness.monitored():
        assert harness.monitor is not None
        out = harness.simulate(WORKLOAD, steps=10, callbacks=[listener])
        assert out.cancelled and harness.monitor.open_windows() == ()


def test_the_simulate_path_does_not_import_torch() -> None:
    code = ("import sys, engine.workload.trace.simulate, engine.workload.training.loop, engine.run.harness; "
            "assert 'torch' not in sys.modules, 'torch was imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_bad_step_count_is_refused() -> None:
    with pytest.raises(ConfigError, match="at least one step"):
        simulate_run(WORKLOAD, steps=0, step_hook=None)


def test_resolve_workload_traces_a_big_model_on_meta_tensors() -> None:
    """pythia-410m (zoo defaults: batch 4, fp16) is traced without allocating it."""
    w = resolve_workload(WorkloadSpec("pythia-410m", "SST-2", padding="max_length"))
    assert (w.model, w.task, w.family, w.batch_size, w.seq_len, w.precision) == \
        ("pythia-410m", "sst2", "pythia", 4, 128, "fp16")
    assert w.trace.flops > 5e11 and w.trace.params > 3e8
    assert w.key == "pythia-410m|sst2|4|128|fp16|full"
    assert WorkloadRecord.from_workload(w).key == w.key
    bitfit = resolve_workload(WorkloadSpec("bert-tiny", "sst2", mode="bitfit", batch_size=8, seq_len=32, padding="max_length"))
    assert bitfit.trace.params < resolve_workload(WorkloadSpec("bert-tiny", "sst2", batch_size=8, seq_len=32, padding="max_length")).trace.params
    with pytest.raises(ConfigError, match="exceeds"):
        resolve_workload(WorkloadSpec("bert-tiny", "sst2", seq_len=4096, padding="max_length"))
