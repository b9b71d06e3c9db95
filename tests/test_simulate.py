"""Twin-only execution: the trainer's event stream without training, costed by the twin."""

from __future__ import annotations

import math

import pytest
from traces import BERT_BASE_LIKE as TRACE
from traces import bert_base_workload

from engine.device.base import ClockDomain
from engine.device.twin.orin import VirtualOrin
from engine.device.setting import MAXN, DvfsSetting
from engine.core.errors import ConfigError
from engine.core.provenance import Source
from engine.results.records import WorkloadRecord
from engine.workload.resolve import SIMULATED_DEVICE, resolve_workload, simulate_run
from engine.device.twin.fast import fast_sweep
from engine.workload.events import (
    Paused,
    Resumed,
    RunCancelled,
    RunFinished,
    RunStarted,
    StepBegin,
    StepEnd,
)
from engine.workload.trainer import TrainControl

WORKLOAD = bert_base_workload()


@pytest.fixture(scope="module", autouse=True)
def env(tmp_path_factory: pytest.TempPathFactory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SLM_DVFS_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        mp.setenv("SLM_DVFS_STATE_DIR", str(tmp_path_factory.mktemp("state")))
        mp.setenv("HF_HUB_OFFLINE", "1")
        yield


@pytest.fixture
def twin():
    with VirtualOrin() as t:
        t.device()  # starts the sync thread, as a session does
        yield t


def test_event_stream_matches_the_trainers(twin) -> None:
    events: list = []
    result = simulate_run(WORKLOAD, twin, steps=4, seed=3, callbacks=[events.append])
    kinds = [type(e).__name__ for e in events]
    assert kinds == ["RunStarted"] + ["StepBegin", "StepEnd"] * 4 + ["RunFinished"]
    started = events[0]
    assert isinstance(started, RunStarted)
    assert started.device == SIMULATED_DEVICE and started.twin == "agx-orin-64gb"
    assert started.total_steps == 4 and started.seed == 3 and started.batch_size == 32
    ends = [e for e in events if isinstance(e, StepEnd)]
    assert [e.step for e in ends] == [1, 2, 3, 4]
    assert all(math.isnan(e.loss) and e.samples == 32 and e.twin is not None for e in ends)
    assert [e.step for e in events if isinstance(e, StepBegin)] == [1, 2, 3, 4]
    finished = events[-1]
    assert isinstance(finished, RunFinished) and finished.final_loss is None
    total_j = sum(e.twin.total_energy_j for e in ends)
    assert finished.twin.total_energy_j == pytest.approx(total_j)
    assert result.simulated and result.source is Source.TWIN and result.samples == 128 and not result.cancelled
    assert result.twin.time_s == pytest.approx(sum(e.twin.time_s for e in ends))
    assert twin.now() == pytest.approx(result.twin.time_s)  # the twin advanced by exactly the steps


def test_step_costs_are_the_twins_model_at_the_current_clocks(twin) -> None:
    """MAXN on a fresh twin: every step costs what the fast sweep computes for MAXN."""
    result = simulate_run(WORKLOAD, twin, steps=3)
    (_s, m), = fast_sweep(TRACE, twin.profile, [MAXN], steps=3)
    assert result.twin.total_energy_j == pytest.approx(m.energy_j, rel=1e-12)
    assert result.twin.time_s == pytest.approx(m.time_s, rel=1e-12)
    # a pinned GPU changes the cost of the next steps, as on a board
    twin.device().pin(ClockDomain.GPU, 612_000_000)
    slow = simulate_run(WORKLOAD, twin, steps=3)
    (_s, m612), = fast_sweep(TRACE, twin.profile, [DvfsSetting(gpu_hz=612_000_000, nvpmodel=0)], steps=3)
    assert slow.twin.total_energy_j == pytest.approx(m612.energy_j, rel=1e-12)
    assert slow.twin.time_s > result.twin.time_s


def test_cancel_and_pause_at_step_boundaries(twin) -> None:
    control = TrainControl()
    events: list = []

    def listener(event) -> None:
        events.append(event)
        if isinstance(event, StepEnd) and event.step == 2:
            control.cancel("enough")

    result = simulate_run(WORKLOAD, twin, steps=10, callbacks=[listener], control=control)
    assert result.cancelled and result.steps == 2
    assert isinstance(events[-1], RunCancelled) and events[-1].reason == "enough" and events[-1].step == 2

    control = TrainControl()
    control.pause()
    seen: list = []

    def resume_on_pause(event) -> None:
        seen.append(event)
        if isinstance(event, Paused):
            control.resume()

    assert simulate_run(WORKLOAD, twin, steps=1, callbacks=[resume_on_pause], control=control).steps == 1
    assert [type(e) for e in seen[:3]] == [RunStarted, Paused, Resumed]


def test_bad_step_count_is_refused(twin) -> None:
    with pytest.raises(ConfigError, match="at least one step"):
        simulate_run(WORKLOAD, twin, steps=0)


def test_resolve_workload_traces_a_big_model_on_meta_tensors() -> None:
    """pythia-410m (zoo defaults: batch 4, fp16) is traced without allocating it."""
    w = resolve_workload("pythia-410m", "SST-2")
    assert (w.model, w.task, w.family, w.batch_size, w.seq_len, w.precision) == \
        ("pythia-410m", "sst2", "pythia", 4, 128, "fp16")
    assert w.trace.flops > 5e11 and w.trace.params > 3e8
    assert w.key == "pythia-410m|sst2|4|128|fp16|full"
    assert WorkloadRecord.from_workload(w).key == w.key
    bitfit = resolve_workload("bert-tiny", "sst2", mode="bitfit", batch_size=8, seq_len=32)
    assert bitfit.trace.params < resolve_workload("bert-tiny", "sst2", batch_size=8, seq_len=32).trace.params
    with pytest.raises(ConfigError, match="exceeds"):
        resolve_workload("bert-tiny", "sst2", seq_len=4096)
