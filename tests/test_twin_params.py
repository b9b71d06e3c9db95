"""Uncertain twin parameters: paths into a profile, overlay (calibrated) profiles, ensembles."""

from __future__ import annotations

import pytest

from engine.core.errors import ProfileError
from engine.device.twin.params import get_param, sample_profiles, with_params
from engine.device.twin.profile import available_profiles, load_profile, user_profiles_dir
from engine.workload.spec import WorkloadSpec


@pytest.fixture
def shipped():
    return load_profile("agx-orin-64gb")


def test_paths_read_and_replace_nested_and_rail_numbers(shipped) -> None:
    assert get_param(shipped, "gpu.vf.max_v") == 0.83
    assert get_param(shipped, "rails.VDD_CPU_CV.static_mw") == 305.0
    moved = with_params(shipped, {"gpu.vf.max_v": 1.0, "rails.VDD_CPU_CV.static_mw": 400, "gpu.idle_hz": 408e6})
    assert moved.gpu.vf.max_v == 1.0 and moved.rail("VDD_CPU_CV").static_mw == 400.0
    assert moved.gpu.idle_hz == 408_000_000 and isinstance(moved.gpu.idle_hz, int)
    assert moved.rail("VDD_GPU_SOC") == shipped.rail("VDD_GPU_SOC")  # the other rails untouched
    assert shipped.gpu.vf.max_v == 0.83  # frozen: a copy, not a change
    for bad in ("gpu.nope", "rails.VDD_NOPE.static_mw", "gpu.governor", "identity"):
        with pytest.raises(ProfileError):
            with_params(shipped, {bad: 1.0})


def test_ensemble_stays_in_bounds_starts_nominal_and_is_reproducible(shipped) -> None:
    members = sample_profiles(shipped, 20, seed=3)
    assert members[0] is shipped and len(members) == 20
    for spread in shipped.uncertainty:
        values = [get_param(m, spread.path) for m in members]
        assert all(spread.lower <= v <= spread.upper for v in values)
        assert len(set(values)) > 1
    again = sample_profiles(shipped, 20, seed=3)
    assert [m.gpu.capacitance_f for m in again] == [m.gpu.capacitance_f for m in members]


def test_a_calibrated_overlay_in_the_data_dir_loads_by_name(isolated_env, shipped) -> None:
    folder = user_profiles_dir()
    folder.mkdir(parents=True)
    (folder / "agx-orin-64gb-calibrated.toml").write_text(
        'name = "agx-orin-64gb-calibrated"\nbase = "agx-orin-64gb"\n'
        '[params]\n"gpu.capacitance_f" = 2.5e-8\n"gpu.podgov_load_seen" = 0.8\n'
        '[[uncertainty]]\npath = "gpu.capacitance_f"\nlower = 2.0e-8\nupper = 3.0e-8\nsd = 1.0e-9\n')
    assert "agx-orin-64gb-calibrated" in available_profiles()
    cal = load_profile("agx-orin-64gb-calibrated")
    assert cal.name == "agx-orin-64gb-calibrated" and cal.base == "agx-orin-64gb"
    assert cal.gpu.capacitance_f == 2.5e-8 and cal.gpu.podgov_load_seen == 0.8
    assert [s.path for s in cal.uncertainty] == ["gpu.capacitance_f"]
    assert cal.gpu.table_hz == shipped.gpu.table_hz


@pytest.mark.parametrize("text, message", [
    ('base = "agx-orin-64gb"\n[params]\n"gpu.nope" = 1.0\n', "no field 'nope'"),
    ('base = "agx-orin-64gb"\n[params]\n"gpu.capacitance_f" = "big"\n', "should be a number"),
    ('base = "no-such-board"\n', "no device profile 'no-such-board'"),
    ('base = "loop"\n', "leads back"),
    ('base = "agx-orin-64gb"\n[params]\n"gpu.vf.max_v" = 5.0\n', "outside its bounds"),
])
def test_bad_overlays_are_profile_errors_naming_the_file(isolated_env, text, message) -> None:
    folder = user_profiles_dir()
    folder.mkdir(parents=True)
    (folder / "loop.toml").write_text(text)
    with pytest.raises(ProfileError, match=message):
        load_profile("loop")


def test_default_podgov_load_seen_keeps_the_steady_state_model(shipped, isolated_env) -> None:
    from engine.device.setting import MAXN
    from engine.device.twin.fast import setting_control
    from engine.device.twin.governors import resolve
    from engine.workload.resolve import resolve_workload

    trace = resolve_workload(WorkloadSpec("bert-base-uncased", "sst2", batch_size=16, seq_len=128, padding="max_length")).trace
    full, _ = resolve(trace, setting_control(MAXN, shipped), shipped)
    lower, _ = resolve(trace, setting_control(MAXN, shipped), with_params(shipped, {"gpu.podgov_load_seen": 0.6}))
    assert full.gpu_hz == shipped.gpu.table_hz[-1]
    assert lower.gpu_hz < full.gpu_hz
