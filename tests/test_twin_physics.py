"""The twin's curves are physical (issue 22): one energy minimum over the pinned GPU clocks, a time
per sample that never rises with the clock, BERT-tiny flat, MAXN below the top pin on a large model,
MAXN continuous in the governor's parameters, and the hf loop's host side. Fast sweeps only."""

from __future__ import annotations

import sys
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

import pytest

from engine.device.setting import MAXN, DvfsSetting
from engine.device.twin.fast import FastPoint, fast_points
from engine.device.twin.params import with_params
from engine.device.twin.profile import TwinProfile, load_profile
from engine.selector.dataset import profile_settings
from engine.workload.resolve import Workload, resolve_workload
from engine.workload.spec import WorkloadSpec
from engine.workload.zoo import load_zoo

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
try:
    from bench_selector import OUT_OF_ZOO  # the selector's held-out shapes
finally:
    sys.path.pop(0)

pytestmark = pytest.mark.usefixtures("selector_trace_cache")

PROFILE = load_profile("agx-orin-64gb")
RAILS = {"gpu+cpu": ("VDD_GPU_SOC", "VDD_CPU_CV"), "all": None}  # the published measurements' rails, and every rail
FAST_ZOO = ("bert-tiny", "bert-mini", "pythia-14m")  # the default run; the rest of the zoo is marked slow
HELD_OUT_SHAPES = ((16, 96, "fp32"), (48, 192, "fp16"))  # corners of bench_selector's held-out grid
ROBERTA_LARGE = {"model_type": "roberta", "vocab_size": 50265, "hidden_size": 1024, "num_hidden_layers": 24,
                 "num_attention_heads": 16, "intermediate_size": 4096, "max_position_embeddings": 514,
                 "type_vocab_size": 1, "hidden_act": "gelu", "layer_norm_eps": 1e-5, "pad_token_id": 1,
                 "bos_token_id": 0, "eos_token_id": 2}


def _workload(model: str, *, config: Mapping[str, Any] | None = None, **shape: Any) -> Workload:
    # the twin alone computes these steps: the published runs' loop (a WorkloadSpec alone is lean)
    return resolve_workload(WorkloadSpec(model, "sst2", padding="max_length", config=config, loop="hf", **shape))


@lru_cache(maxsize=None)
def _zoo_sweep(model: str) -> tuple[FastPoint, ...]:
    """A zoo model at its zoo shape (batch, length, precision), every step at that length, hf loop."""
    return tuple(fast_points(_workload(model).steps, PROFILE, profile_settings(PROFILE, "gpu")))


@lru_cache(maxsize=None)
def _held_out_sweep(name: str, batch: int, seq: int, precision: str) -> tuple[FastPoint, ...]:
    w = _workload(name, config=OUT_OF_ZOO[name], batch_size=batch, seq_len=seq, precision=precision)
    return tuple(fast_points(w.steps, PROFILE, profile_settings(PROFILE, "gpu")))


def _energy(p: FastPoint, rails: tuple[str, ...] | None) -> float:
    return sum(p.rail_energy_j[r] for r in (p.rail_energy_j if rails is None else rails)) / p.measurement.samples


def _pinned(points: tuple[FastPoint, ...]) -> list[FastPoint]:
    return sorted((p for p in points if p.setting != MAXN), key=lambda p: p.gpu_hz)


def _strict_minima(values: list[float]) -> list[int]:
    n = len(values)
    return [i for i in range(n)
            if (i == 0 or values[i] < values[i - 1]) and (i == n - 1 or values[i] < values[i + 1])]


def _assert_physical(points: tuple[FastPoint, ...], rails: tuple[str, ...] | None, what: str) -> None:
    pinned = _pinned(points)
    assert [p.gpu_hz for p in pinned] == sorted(PROFILE.gpu.table_hz)
    energy = [_energy(p, rails) for p in pinned]
    minima = _strict_minima(energy)
    assert len(minima) == 1, (
        f"{what}: energy minima at {[pinned[i].gpu_hz / 1e6 for i in minima]} MHz; "
        f"J/sample by clock: {[round(e, 5) for e in energy]}")
    times = [p.measurement.seconds_per_sample for p in pinned]
    rises = [(a.gpu_hz / 1e6, b.gpu_hz / 1e6) for a, b, ta, tb in zip(pinned, pinned[1:], times, times[1:]) if tb > ta]
    assert not rises, f"{what}: time per sample rises from one clock to the next at {rises} MHz"


def _zoo_params() -> list[Any]:
    return [pytest.param(m, marks=() if m in FAST_ZOO else pytest.mark.slow) for m in load_zoo()]


@pytest.mark.parametrize("rails", sorted(RAILS))
@pytest.mark.parametrize("model", _zoo_params())
def test_a_zoo_model_has_one_energy_minimum_and_a_time_that_never_rises(model: str, rails: str) -> None:
    _assert_physical(_zoo_sweep(model), RAILS[rails], f"{model} at its zoo shape, rails {rails}")


@pytest.mark.parametrize("rails", sorted(RAILS))
@pytest.mark.parametrize("shape", [pytest.param(s, marks=() if i == 0 else pytest.mark.slow)
                                   for i, s in enumerate(HELD_OUT_SHAPES)])
@pytest.mark.parametrize("name", sorted(OUT_OF_ZOO))
def test_a_held_out_shape_has_one_energy_minimum_and_a_time_that_never_rises(
        name: str, shape: tuple[int, int, str], rails: str) -> None:
    _assert_physical(_held_out_sweep(name, *shape), RAILS[rails], f"{name} b{shape[0]} L{shape[1]} {shape[2]}, rails {rails}")


def test_the_minimum_count_sees_a_second_dip() -> None:
    """The check above can fail: a curve with two dips has two strict minima, an end point counts."""
    assert _strict_minima([3.0, 2.0, 2.5, 2.4, 2.6]) == [1, 3]
    assert _strict_minima([3.0, 2.0, 2.5, 2.6, 2.5]) == [1, 4]
    assert _strict_minima([3.0, 2.0, 2.5]) == [1]


def test_bert_tiny_is_nearly_flat_in_gpu_clock() -> None:
    """BERT-tiny (batch 32, length 128, fp32) is launch- and host-bound: its GPU clock matters little."""
    w = _workload("bert-tiny", batch_size=32, seq_len=128, precision="fp32")
    pinned = _pinned(tuple(fast_points(w.steps, PROFILE, profile_settings(PROFILE, "gpu"))))
    assert (pinned[0].gpu_hz, pinned[-1].gpu_hz) == (306_000_000, 1_300_500_000)
    ratio = pinned[0].measurement.seconds_per_sample / pinned[-1].measurement.seconds_per_sample
    assert 1.0 <= ratio < 1.3


def test_maxn_costs_less_than_the_top_pin_on_a_large_model() -> None:
    """RoBERTa-large's shape (batch 16, length 256, fp32): podgov drops the clock while the host works."""
    w = _workload("roberta-large-shape", config=ROBERTA_LARGE, batch_size=16, seq_len=256, precision="fp32")
    top = DvfsSetting(gpu_hz=max(PROFILE.gpu.table_hz))
    maxn, pin = fast_points(w.steps, PROFILE, [MAXN, top])
    for rails in RAILS.values():
        assert _energy(maxn, rails) < _energy(pin, rails)


@pytest.mark.parametrize("model", ["bert-tiny", "bert-mini", "pythia-14m"])
def test_maxn_is_continuous_in_the_governors_target_load(model: str) -> None:
    """A small change of podgov's target load moves MAXN's energy a little, never by a table step."""
    steps = _workload(model).steps
    target = PROFILE.gpu.podgov_target_load

    def maxn_j(profile: TwinProfile) -> float:
        (p,) = fast_points(steps, profile, [MAXN])
        return _energy(p, None)

    lo = maxn_j(with_params(PROFILE, {"gpu.podgov_target_load": target - 0.001}))
    hi = maxn_j(with_params(PROFILE, {"gpu.podgov_target_load": target + 0.001}))
    mid = maxn_j(PROFILE)
    assert lo != hi  # the governor's parameter reaches the figure
    # A threshold governor moves MAXN by a whole table step (~100 MHz: percents of a step's energy) when
    # the target load crosses its point; a controller in expectation over the load noise, by a sliver.
    assert abs(hi - lo) / mid < 5e-3


def _loop_points(loop: str, settings: list[DvfsSetting]) -> list[FastPoint]:
    w = resolve_workload(WorkloadSpec("bert-tiny", "sst2", padding="max_length", loop=loop))  # type: ignore[arg-type]
    return fast_points(w.steps, PROFILE, settings)


def test_the_hf_loop_adds_its_serial_host_work_to_the_step() -> None:
    """Every clock pinned: the hf step is the lean step plus the loop's serial cycles on the CPU's clock."""
    from engine.workload.trace.loop import loop_serial_cycles

    fc = max(PROFILE.cpu.table_hz)
    setting = DvfsSetting(gpu_hz=max(PROFILE.gpu.table_hz), cpu_hz=fc, emc_hz=max(PROFILE.emc.table_hz))
    (hf,), (lean,) = _loop_points("hf", [setting]), _loop_points("lean", [setting])
    w = resolve_workload(WorkloadSpec("bert-tiny", "sst2", padding="max_length"))
    per_step = loop_serial_cycles("hf", w.batch_size, w.seq_len) * PROFILE.cpu.serial_scale / fc
    steps = hf.measurement.samples / w.batch_size
    assert per_step > 0
    assert (hf.measurement.time_s - lean.measurement.time_s) / steps == pytest.approx(per_step, rel=1e-6)


def test_a_host_bound_model_is_flatter_in_gpu_clock_under_the_hf_loop() -> None:
    """The hf loop's serial work does not speed up with the GPU, so the GPU clock matters less."""
    ends = [DvfsSetting(gpu_hz=min(PROFILE.gpu.table_hz)), DvfsSetting(gpu_hz=max(PROFILE.gpu.table_hz))]

    def spread(loop: str) -> float:
        slow, fast = _loop_points(loop, ends)
        return slow.measurement.seconds_per_sample / fast.measurement.seconds_per_sample

    assert 1.0 <= spread("hf") < spread("lean")


def test_a_step_longer_than_the_simulation_covers_is_refused_with_a_remedy() -> None:
    """A step the governors' simulation cannot play whole (minutes at the top clocks) is a ConfigError naming
    its length and what to do, not a figure from a part of a step."""
    from engine.core.errors import ConfigError
    from engine.core.trace import OpCost, StepTrace

    huge = StepTrace("huge", 1, 1, "fp32", (OpCost("matmul", 1e18, 1e9, 10),), host_cycles=0.0)
    with pytest.raises(ConfigError) as err:
        fast_points(huge, load_profile("agx-orin-64gb"), [MAXN])
    assert "longer than the twin's governors are simulated for" in err.value.what
    assert "smaller batch" in err.value.remedy


def _cli_curve(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[list[tuple[int, float, float]], dict[str, Any]]:
    """`slm-dvfs sweep --fast --json` as a user runs it: (GPU Hz, J/sample, s/sample) of each pinned GPU clock, and
    the MAXN point."""
    import json

    from engine.cli import main

    assert main(["sweep", "--twin", "agx-orin-64gb", "--fast", "--json", *argv]) == 0
    out = json.loads(capsys.readouterr().out)
    points = out["points"]
    pinned = sorted((p["setting"]["gpu_hz"], p["joules_per_sample"]["mean"], p["seconds_per_sample"]["mean"])
                    for p in points if p["setting"]["gpu_hz"] is not None)
    (maxn,) = [p for p in points if p["setting"]["gpu_hz"] is None]
    return pinned, maxn


def test_the_sweep_command_gives_bert_tiny_a_flat_single_minimum_curve(isolated_env: Any,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """The issue's BERT-tiny check through `slm-dvfs sweep --fast` (the twin-only default loop, hf): one energy
    minimum, a time per sample that never rises with the GPU clock, under 1.3x from 306 to 1300.5 MHz."""
    pinned, _maxn = _cli_curve(capsys, "--model", "bert-tiny", "--task", "sst2", "--batch-size", "32",
                               "--max-seq-len", "128", "--precision", "fp32", "--pad", "max")
    energy, times = [e for _f, e, _t in pinned], [t for _f, _e, t in pinned]
    assert len(_strict_minima(energy)) == 1
    assert all(b <= a * (1 + 1e-12) for a, b in zip(times, times[1:]))
    assert times[0] / times[-1] < 1.3 and pinned[0][0] == 306_000_000 and pinned[-1][0] == 1_300_500_000


@pytest.mark.slow  # traces a RoBERTa-large shape on meta tensors (~10 s)
def test_the_sweep_command_has_maxn_below_the_top_pin_on_a_large_model(isolated_env: Any, tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """The issue's large-model check through `slm-dvfs sweep --fast --model CONFIG.json`: MAXN costs less energy
    than the 1300.5 MHz pin."""
    import json

    config = tmp_path / "roberta-large-shape.json"
    config.write_text(json.dumps(ROBERTA_LARGE))
    pinned, maxn = _cli_curve(capsys, "--model", str(config), "--task", "sst2", "--batch-size", "16",
                              "--max-seq-len", "256", "--precision", "fp32", "--pad", "max")
    assert pinned[-1][0] == 1_300_500_000
    assert maxn["joules_per_sample"]["mean"] < pinned[-1][1]
