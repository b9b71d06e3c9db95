"""Calibrating the twin: the fit recovers a known perturbation (synthetic "measured" sweeps from a
perturbed twin), energy-only rows, the overlay profile round-trips and `--twin NAME` uses it, the
CLI end to end on a store of measured sweeps, and its refusals."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest

from engine.core.errors import ConfigError
from engine.device.setting import MAXN, DvfsSetting
from engine.device.twin.calibration import (
    Observation,
    calibrate_profile,
    loso_summary,
    predict,
    sweep_error,
)
from engine.workload.spec import WorkloadSpec
from engine.workload.trace.loop import with_loop
from engine.device.twin.calibration import overlay_toml
from engine.device.twin.params import get_param
from engine.device.twin.profile import available_profiles, load_profile, user_profiles_dir
from engine.device.twin.synthetic import PERTURBATION, gpu_sweep_settings, perturbed_profile, synthetic_sweep
from traces import BERT_BASE_LIKE

SHIPPED = load_profile("agx-orin-64gb")
TRUTH = perturbed_profile(SHIPPED)
SIX = (0, 2, 4, 6, 8, 10)


def variant(name: str, flops: float = 1.0, host: float = 1.0, precision: str = "fp32", batch: int = 32):
    """BERT_BASE_LIKE made lighter or heavier, more or less host-bound, in the HF-style loop (its serial
    host work per step, which cpu.serial_scale scales): workloads of other shapes."""
    ops = tuple(replace(o, flops=o.flops * flops, bytes=o.bytes * flops ** 0.7) for o in BERT_BASE_LIKE.ops)
    return with_loop(replace(BERT_BASE_LIKE, model=name, precision=precision, batch_size=batch, ops=ops,
                             host_cycles=BERT_BASE_LIKE.host_cycles * host), "hf")


# compute-bound fp32, host-bound fp16, in between: the training set spans the range
TRAIN = (variant("a"), variant("e", 0.2, 2.0, "fp16", 16), variant("c", 0.5, 1.0, "fp16"))
HELD_OUT = (variant("d", 2.0, 0.7), variant("b", 0.35, 1.5), variant("f", 0.3, 1.6, "fp16", 16))


def training_sweeps() -> list[Observation]:
    obs: list[Observation] = []
    for k, trace in enumerate(TRAIN):
        settings = gpu_sweep_settings(TRUTH, steps=SIX) if k == 2 else None
        obs += synthetic_sweep(trace, TRUTH, sweep=trace.model, settings=settings, noise=0.01,
                               energy_only=3 if k == 1 else 0)
    return obs


@pytest.fixture(scope="module")
def calibration():
    return calibrate_profile(SHIPPED, training_sweeps(), loso=False)


# --------------------------------------------------------------------------- the fit
def test_the_fit_recovers_the_perturbation_and_predicts_held_out_sweeps(calibration) -> None:
    cal = calibration
    assert cal.energy_mape_pct < 2.0 < cal.energy_mape_before_pct
    assert cal.time_mape_pct is not None and cal.time_mape_before_pct is not None
    assert cal.time_mape_pct < cal.time_mape_before_pct
    moves = {m.path: m for m in cal.params}
    for path in ("gpu.vf.knee_hz", "gpu.podgov_load_seen", "gpu.matmul_efficiency", "gpu.capacitance_f",
                 "gpu.vf.max_v", "cpu.serial_scale"):  # the numbers these sweeps pin down: MAXN's governor among them
        m, truth = moves[path], PERTURBATION[path]
        assert abs(m.after - truth) < 0.5 * abs(m.before - truth), path  # at least half way to the truth
    for m in cal.params:  # and the posterior spreads are honest: the truth within 3 of them, moved or not
        assert abs(m.after - get_param(TRUTH, m.path)) < 3 * m.sd_after, m.path
    for trace in HELD_OUT:  # other workloads, predicted against the noise-free truth: the targets
        truth_sweep = synthetic_sweep(trace, TRUTH, sweep=trace.model, noise=0.0)
        after, before = sweep_error(cal.profile, truth_sweep), sweep_error(SHIPPED, truth_sweep)
        assert after.optimum_step_error is not None and after.optimum_step_error <= 1, trace.model
        assert after.curve_rmse_pct < 5.0, trace.model
        assert after.saving_error_pts is not None and before.saving_error_pts is not None
        assert abs(after.saving_error_pts) < abs(before.saving_error_pts), trace.model
        # MAXN of a host-bound step sits where podgov's load crosses its target, and that load hardly moves
        # with the clock: the posterior's 2% on podgov_load_seen moves it by a few table steps ("f", fp16 with
        # 1.6x the host work). Elsewhere the saving is predicted to within 2 points.
        assert abs(after.saving_error_pts) < (6.0 if trace.model == "f" else 2.0), trace.model
        assert after.curve_rmse_pct < before.curve_rmse_pct
        assert abs(before.saving_error_pts) > 2.0  # the shipped twin misses


def test_posterior_spreads_shrink_where_the_data_speak_and_never_grow(calibration) -> None:
    for m in calibration.params:
        assert 0.0 <= m.sd_after <= m.sd_before, m.path
    moves = {m.path: m for m in calibration.params}
    assert moves["gpu.vf.knee_hz"].sd_after < 0.5 * moves["gpu.vf.knee_hz"].sd_before
    spreads = {s.path: s for s in calibration.profile.uncertainty}
    assert spreads["gpu.vf.knee_hz"].sd == moves["gpu.vf.knee_hz"].sd_after
    assert spreads["gpu.vf.knee_hz"].lower == 306e6  # the bounds stay the prior's
    assert calibration.profile.name == "agx-orin-64gb-calibrated" and calibration.profile.base == "agx-orin-64gb"
    # the profile holds the moved numbers only, and the report's figures are its own
    for m in calibration.params:
        assert get_param(calibration.profile, m.path) == pytest.approx(m.after if m.moved else m.before)


def test_energy_only_rows_count_for_energy_not_for_time(calibration) -> None:
    timeless = [p for p in calibration.points if p.measured_time_s is None]
    assert len(timeless) == 3 and all(p.time_error_pct is None for p in timeless)
    assert all(p.energy_error_pct is not None for p in timeless)
    timed = [abs(p.time_error_pct) for p in calibration.points if p.time_error_pct is not None]
    assert calibration.time_mape_pct == pytest.approx(sum(timed) / len(timed))
    # a sweep without any time fits on energy alone
    energy_only = [replace(ob, time_s_per_sample=None) for ob in training_sweeps() if ob.sweep == "a"]
    cal = calibrate_profile(SHIPPED, energy_only, paths=("gpu.vf.knee_hz", "gpu.capacitance_f"), loso=False)
    assert cal.time_mape_pct is None and cal.time_mape_before_pct is None
    assert cal.energy_mape_pct < cal.energy_mape_before_pct


def test_leave_one_sweep_out_refits_without_each_sweep() -> None:
    obs = training_sweeps()
    cal = calibrate_profile(SHIPPED, obs)
    assert [e.sweep for e in cal.loso] == ["a", "e", "c"] == [e.sweep for e in cal.loso_before]
    assert all(e.points == sum(1 for o in obs if o.sweep == e.sweep) for e in cal.loso)
    after, before = cal.loso_summary(), loso_summary(cal.loso_before)
    assert after["curve_rmse_pct"] < before["curve_rmse_pct"]
    assert after["saving_error_pts"] < before["saving_error_pts"]
    assert after["optimum_step_error_max"] is not None and after["optimum_step_error_max"] <= 1
    json.dumps(cal.to_json())  # serialisable


def test_only_the_named_parameters_move_and_unknown_ones_are_refused() -> None:
    obs = [ob for ob in training_sweeps() if ob.sweep == "a"]
    cal = calibrate_profile(SHIPPED, obs, paths=("gpu.vf.knee_hz",), loso=False)
    assert [m.path for m in cal.params] == ["gpu.vf.knee_hz"]
    for s in SHIPPED.uncertainty:
        if s.path != "gpu.vf.knee_hz":
            assert get_param(cal.profile, s.path) == get_param(SHIPPED, s.path)
    # MAXN's governor is fitted from MAXN points: without any it keeps its prior and its spread
    pinned_only = [ob for ob in obs if ob.setting != MAXN]
    cal = calibrate_profile(SHIPPED, pinned_only, paths=("gpu.vf.knee_hz", "gpu.podgov_load_seen"), loso=False)
    gov = next(m for m in cal.params if m.path == "gpu.podgov_load_seen")
    assert not gov.moved and gov.after == pytest.approx(gov.before, abs=1e-6)
    assert gov.sd_after == pytest.approx(gov.sd_before)
    assert get_param(cal.profile, "gpu.podgov_load_seen") == get_param(SHIPPED, "gpu.podgov_load_seen")  # not written
    assert cal.at_bounds == ()  # its prior sits on its upper bound, and no data push it there
    assert cal.profile.uncertainty == tuple(s if s.path != "gpu.vf.knee_hz" else cal.profile.uncertainty[i]
                                            for i, s in enumerate(SHIPPED.uncertainty))
    with pytest.raises(ConfigError, match="no uncertainty for gpu.sms"):
        calibrate_profile(SHIPPED, obs, paths=("gpu.sms",), loso=False)


def test_observations_refuse_what_cannot_be_fitted() -> None:
    with pytest.raises(ConfigError, match="energy per sample must be positive"):
        Observation("s", BERT_BASE_LIKE, MAXN, ("VDD_GPU_SOC",), 0.0)
    with pytest.raises(ConfigError, match="time per sample"):
        Observation("s", BERT_BASE_LIKE, MAXN, ("VDD_GPU_SOC",), 1.0, math.nan)
    with pytest.raises(ConfigError, match="not in profile"):
        predict(SHIPPED, [Observation("s", BERT_BASE_LIKE, MAXN, ("VDD_NOPE",), 1.0)])


def test_the_perturbed_truth_is_synthetic_and_known() -> None:
    assert TRUTH.name == "agx-orin-64gb-perturbed"
    assert all(get_param(TRUTH, p) == pytest.approx(v) for p, v in PERTURBATION.items())
    assert PERTURBATION["gpu.podgov_load_seen"] < 1.0
    # MAXN settles below the top clock for a host-heavier workload, at the top for a compute-bound one
    light = synthetic_sweep(TRAIN[2], TRUTH, sweep="c", noise=0.0)
    by = {ob.setting: ob.energy_j_per_sample for ob in light}
    assert by[MAXN] < by[DvfsSetting(gpu_hz=1300500000, nvpmodel=0)]
    noisy = synthetic_sweep(TRAIN[0], TRUTH, sweep="a", noise=0.02, seed=3, energy_only=2)
    assert sum(ob.time_s_per_sample is None for ob in noisy) == 2
    assert noisy == synthetic_sweep(TRAIN[0], TRUTH, sweep="a", noise=0.02, seed=3, energy_only=2)  # seeded


# --------------------------------------------------------------------------- the overlay profile
def test_the_overlay_round_trips_and_the_twin_runs_on_it(calibration, isolated_env, tmp_path: Path) -> None:
    from engine.results.store import Store
    from engine.run.sweep import SweepSpec, run_sweep
    from traces import bert_base_workload

    text = overlay_toml(calibration)
    assert all(line.startswith("#") or "#" in line or line in ("", "]", "[params]", "[calibration]")
               for line in text.splitlines()), "every value line says where it comes from"
    assert "# calibrated to 3 measured sweeps (a, e, c)" in text
    user_profiles_dir().mkdir(parents=True)
    (user_profiles_dir() / "agx-orin-64gb-calibrated.toml").write_text(text)
    assert "agx-orin-64gb-calibrated" in available_profiles()
    loaded = load_profile("agx-orin-64gb-calibrated")
    assert loaded.base == "agx-orin-64gb" and loaded.uncertainty == calibration.profile.uncertainty
    for s in SHIPPED.uncertainty:
        assert get_param(loaded, s.path) == get_param(calibration.profile, s.path), s.path
    # `--twin agx-orin-64gb-calibrated`: a fast sweep's figures are the calibrated model's
    settings = gpu_sweep_settings(SHIPPED, steps=(3, 6))
    with Store(tmp_path / "db.sqlite") as store:
        result = run_sweep(SweepSpec(WorkloadSpec("bert-base-like", "sst2"), fast=True,
                                     twin="agx-orin-64gb-calibrated", settings=settings, rails="gpu+cpu", steps=2),
                           store=store, workload=bert_base_workload())
    rails = ("VDD_GPU_SOC", "VDD_CPU_CV")
    expected = predict(calibration.profile, [Observation("x", BERT_BASE_LIKE, s, rails, 1.0) for s in settings])
    got = {p.setting: p.joules_per_sample.mean for p in result.points}
    for s, e in zip(settings, expected):
        assert got[s] == pytest.approx(e.energy_j_per_sample, rel=1e-9)
    # a calibration of the calibrated profile is written over the shipped one, not stacked
    again = calibrate_profile(loaded, [ob for ob in training_sweeps() if ob.sweep == "a"],
                              paths=("gpu.vf.knee_hz",), loso=False)
    with pytest.raises(ConfigError, match="root"):
        overlay_toml(again)
    text2 = overlay_toml(again, root=SHIPPED)
    assert 'base = "agx-orin-64gb"' in text2 and '"gpu.podgov_load_seen"' in text2  # kept from the first


def test_the_forward_model_is_the_fast_sweeps_for_traces_and_mixes() -> None:
    from engine.core.trace import StepMix
    from engine.device.twin.fast import fast_points

    mix = StepMix(((0.7, variant("short", 0.5, 1.0, batch=32)), (0.3, variant("long", 1.0, 1.0, batch=32))))
    settings = gpu_sweep_settings(SHIPPED, steps=(1, 5, 9))
    rails = ("VDD_GPU_SOC", "VDD_CPU_CV")
    for steps in (BERT_BASE_LIKE, mix):
        fast = fast_points(steps, SHIPPED, settings, steps=3, rails=rails)
        pred = predict(SHIPPED, [Observation("s", steps, s, rails, 1.0) for s in settings])
        for f, p in zip(fast, pred):
            assert p.energy_j_per_sample == pytest.approx(f.measurement.energy_j / f.measurement.samples, rel=1e-12)
            assert p.time_s_per_sample == pytest.approx(f.measurement.time_s / f.measurement.samples, rel=1e-12)


def test_a_fit_that_ends_at_a_bound_says_which_and_what_it_means() -> None:
    """A board whose podgov holds higher clocks than podgov_load_seen can give (its target load at the
    lower bound): fitted alone, load_seen ends on its upper bound 1.0, and the report says so in a
    typed field, with the governor's meaning (the twin's MAXN too cheap)."""
    from engine.results.calibration_report import format_calibration

    board = perturbed_profile(SHIPPED, {"gpu.podgov_target_load": 0.5})
    trace = TRAIN[1]  # host-bound: its MAXN settles below the top clock
    obs = synthetic_sweep(trace, board, sweep="e", settings=gpu_sweep_settings(board, steps=SIX), noise=0.005)
    cal = calibrate_profile(SHIPPED, obs, paths=("gpu.podgov_load_seen",), loso=False)
    assert [(h.path, h.bound, h.value, h.kind) for h in cal.at_bounds] == [
        ("gpu.podgov_load_seen", "upper", 1.0, "governor")]
    assert "too cheap" in cal.at_bounds[0].meaning
    data = cal.to_json()["at_bounds"]
    assert data == [{"path": "gpu.podgov_load_seen", "bound": "upper", "value": 1.0, "kind": "governor",
                     "meaning": cal.at_bounds[0].meaning}]
    for markdown in (False, True):
        assert cal.at_bounds[0].line() in format_calibration(cal, markdown=markdown)
    # the other bound of a number that moves the clock the other way means the same; its own other bound the opposite
    from engine.device.twin.calibration.bounds import bound_hit

    assert bound_hit("gpu.podgov_target_load", "lower", 0.5).meaning == cal.at_bounds[0].meaning
    assert "too dear" in bound_hit("gpu.podgov_target_load", "upper", 0.95).meaning
    assert "predicted too fast" in bound_hit("cpu.serial_scale", "upper", 3.0).meaning
    assert "too slow" in bound_hit("cpu.host_overlap", "upper", 0.95).meaning

def test_every_shipped_uncertain_number_has_a_kind_and_a_direction() -> None:
    from engine.device.twin.calibration import param_kind

    for s in SHIPPED.uncertainty:
        kind, sign = param_kind(s.path)
        assert kind != "other" and sign != 0, s.path
    assert param_kind("cpu.serial_scale") == ("host", 1) and param_kind("gpu.podgov_load_seen") == ("governor", 1)
