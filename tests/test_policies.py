"""Policies: specs, fixed choices, the oracle, the ml plug point, the online search logic.

Applying policies to the twin's files is in test_controller.py; here the twin only
lends its clock tables and modes.
"""

from __future__ import annotations

import pytest

from engine.device.base import ClockDomain
from engine.device.twin.orin import VirtualOrin
from engine.core.measurement import Measurement
from engine.dvfs.objectives import parse_objective
from engine.dvfs.online import OnlinePolicy, parse_online_options
from engine.dvfs.policies import (
    BUILTIN_POLICIES,
    FixedPolicy,
    Policy,
    PolicyContext,
    PolicyFactory,
    make_policy,
)
from engine.device.setting import MAXN, MAXN_PINNED, DvfsSetting
from engine.core.errors import ConfigError, DeviceError, UnsupportedFrequencyError

MHZ = 1_000_000
TABLE_MHZ = (306, 408, 510, 612, 714, 816, 918, 1020, 1122, 1224, 1300.5)


def gpu(mhz: float) -> DvfsSetting:
    return DvfsSetting(gpu_hz=int(mhz * MHZ), nvpmodel=0)


@pytest.fixture(scope="module")
def device():
    with VirtualOrin() as twin:
        yield twin.device()


def ctx(device, objective="energy", points=()):
    return PolicyContext(device, parse_objective(objective), tuple(points))


# --------------------------------------------------------------------------- fixed policies


@pytest.mark.parametrize(
    "spec, name, setting",
    [
        ("maxn", "maxn", MAXN),
        ("MAXN", "maxn", MAXN),
        ("maxn-pinned", "maxn-pinned", MAXN_PINNED),
        ("mode:2", "mode", DvfsSetting(nvpmodel=2)),
        ("static:gpu=816,emc=3199", "static", DvfsSetting(gpu_hz=816 * MHZ, emc_hz=3199 * MHZ, nvpmodel=0)),
        ("static:gpu=1300.5", "static", DvfsSetting(gpu_hz=1_300_500_000, nvpmodel=0)),
        ("static: cpu=2201.6MHz , gpu=612", "static", DvfsSetting(gpu_hz=612 * MHZ, cpu_hz=2_201_600_000, nvpmodel=0)),
        ("static:gpu=408,mode=1", "static", DvfsSetting(gpu_hz=408 * MHZ, nvpmodel=1)),
    ],
)
def test_fixed_policies(device, spec, name, setting):
    policy = make_policy(spec)
    assert isinstance(policy, Policy) and policy.name == name
    assert policy.initial(ctx(device)) == setting
    assert not policy.profiling
    assert policy.on_step_end(1, Measurement(1.0, 1.0, 1)) is None
    d = policy.describe()
    assert d["policy"] == name and DvfsSetting.from_json(d["setting"]) == setting and d["reason"]


def test_static_from_a_setting(device):
    s = DvfsSetting(gpu_hz=714 * MHZ, emc_hz=2133 * MHZ, nvpmodel=0)
    policy = make_policy("static", setting=s)
    assert policy.initial(ctx(device)) == s
    assert policy.describe()["spec"] == "static:gpu=714,emc=2133"


def test_static_unlisted_clock_names_the_nearest(device):
    policy = make_policy("static:gpu=850")
    with pytest.raises(UnsupportedFrequencyError) as err:
        policy.initial(ctx(device))
    assert err.value.nearest_hz == (816 * MHZ, 918 * MHZ)
    assert "816 MHz" in err.value.remedy


def test_static_above_the_mode_cap_is_refused(device):
    with pytest.raises(ConfigError) as err:
        make_policy("static:gpu=816,mode=1").initial(ctx(device))
    assert "cap" in err.value.what


def test_undefined_mode_is_refused(device):
    with pytest.raises(ConfigError) as err:
        make_policy("mode:7").initial(ctx(device))
    assert "MODE_30W" in err.value.remedy


@pytest.mark.parametrize(
    "spec",
    ["", "fast", "mode", "mode:x", "mode:", "static", "static:", "static:gpu", "static:gpu=fast", "static:fan=3",
     "static:gpu=816,gpu=918", "static:mode=1", "maxn:1", "oracle:3", "online:bogus=1", "online:warmup=x"],
)
def test_bad_specs(spec):
    with pytest.raises(ConfigError) as err:
        make_policy(spec)
    assert err.value.remedy


def test_unknown_spec_lists_the_policies():
    with pytest.raises(ConfigError) as err:
        make_policy("turbo")
    for name in ("maxn", "maxn-pinned", "mode:N", "static:", "oracle", "ml", "online"):
        assert name in err.value.remedy


def test_fixed_policies_take_no_options():
    with pytest.raises(ConfigError):
        make_policy("maxn", warmup_steps=2)


# --------------------------------------------------------------------------- oracle


SWEEP = [
    (MAXN, Measurement(10.0, 200.0, 100)),
    (gpu(612), Measurement(13.0, 140.0, 100)),
    (gpu(714), Measurement(11.6, 150.0, 100)),
    (gpu(918), Measurement(10.4, 165.0, 100)),
    (gpu(1300.5), Measurement(9.9, 205.0, 100)),
]


def test_oracle_picks_the_argmin(device):
    policy = make_policy("oracle")
    assert policy.initial(ctx(device, "energy", SWEEP)) == gpu(612)
    d = policy.describe()
    assert d["points"] == 5 and d["cost"] == pytest.approx(1.4)
    assert d["energy_saving_vs_maxn"] == pytest.approx(0.3)


def test_oracle_respects_a_slowdown_limit(device):
    assert make_policy("oracle").initial(ctx(device, "energy@5%", SWEEP)) == gpu(918)
    assert make_policy("oracle").initial(ctx(device, "energy@20%", SWEEP)) == gpu(714)
    assert make_policy("oracle").initial(ctx(device, "eta:0", SWEEP)) == gpu(1300.5)  # time only


def test_oracle_without_a_sweep(device):
    with pytest.raises(ConfigError) as err:
        make_policy("oracle").initial(ctx(device))
    assert "slm-dvfs sweep" in err.value.remedy


# --------------------------------------------------------------------------- ml plug point


def test_ml_is_a_plug_point_a_factory_fills(device):
    with pytest.raises(ConfigError) as err:
        make_policy("ml")  # the built-in factory: dvfs never imports the selector
    assert "not among this run's policies" in err.value.what and "policy_factory()" in err.value.remedy

    seen = {}

    def factory(arg, **options):
        seen.update(arg=arg, **options)
        return FixedPolicy("ml", "ml", gpu(816), "predicted by a test selector")

    filled = BUILTIN_POLICIES.with_policy("ml", factory)
    policy = filled.make("ml:forest", threshold=3)
    assert policy.initial(ctx(device)) == gpu(816)
    assert seen == {"arg": "forest", "threshold": 3}
    with pytest.raises(ConfigError):
        make_policy("ml")  # the factory it was made from is unchanged


def test_a_factory_guards_its_builtins_and_is_a_value():
    with pytest.raises(ConfigError):
        BUILTIN_POLICIES.with_policy("maxn", lambda arg, **o: None)
    with pytest.raises(ConfigError):
        BUILTIN_POLICIES.with_policy("bad name!", lambda arg, **o: None)
    custom = BUILTIN_POLICIES.with_policy("custom", lambda arg, **o: FixedPolicy("custom", "custom", MAXN, "test"))
    assert "custom" in custom.names() and custom.make("custom").name == "custom"
    assert "custom" not in BUILTIN_POLICIES.names() and "custom" not in PolicyFactory().names()
    with pytest.raises(ConfigError) as err:
        BUILTIN_POLICIES.make("custom")
    assert err.value.remedy.startswith("use one of: maxn, maxn-pinned")
    with pytest.raises(ConfigError) as err:
        custom.make("nope")
    assert err.value.remedy.endswith("online, custom")  # the names it has beyond the built-in ones


# --------------------------------------------------------------------------- online, with synthetic costs


def synthetic(setting: DvfsSetting, samples: int = 32) -> Measurement:
    """A bowl-shaped energy curve with its minimum at 714 MHz; time falls with the clock.
    MAXN behaves as the top clock with its governors."""
    mhz = 1300.5 if setting.gpu_hz is None else setting.gpu_hz / MHZ
    energy = 19.0 + ((mhz - 714.0) / 300.0) ** 2
    time_s = 0.75 * 1300.5 / mhz
    return Measurement(time_s, energy, samples)


def drive(policy, device, objective="energy", warmup_garbage=True, limit=200):
    """Run the policy over synthetic steps; returns (settings per step, steps until it stopped profiling)."""
    setting = policy.initial(ctx(device, objective))
    applied = [setting]
    step = 0
    while policy.profiling and step < limit:
        step += 1
        cost = synthetic(setting)
        in_window = (policy.profiling_steps % policy.steps_per_window) + 1
        if warmup_garbage and in_window <= policy.warmup_steps:
            # Must be ignored: counted, it would make the optimum (714) look worst and the rest cheap.
            cost = Measurement(cost.time_s, cost.energy_j * (50 if setting == gpu(714) else 0.01), cost.samples)
        new = policy.on_step_end(step, cost)
        if new is not None:
            setting = new
            applied.append(new)
    return applied, step


def test_online_coarse_to_fine(device):
    policy = make_policy("online")
    assert isinstance(policy, OnlinePolicy)
    applied, steps = drive(policy, device)
    # Coarse: every 2nd step from the top down (6 windows), then the two neighbours of 714.
    coarse = [1300.5, 1122, 918, 714, 510, 306]
    fine = [816, 612]
    assert [s.gpu_hz / MHZ for s in applied[:8]] == coarse + fine
    assert steps == 8 * 3 == policy.profiling_steps
    assert applied[-1] == gpu(714) and policy.chosen == gpu(714)
    assert not policy.profiling
    assert policy.on_step_end(steps + 1, synthetic(gpu(714))) is None  # keeps it for the rest of the run
    d = policy.describe()
    assert len(d["profiled"]) == 8 and d["profiling_steps"] == 24
    assert d["profiling_cost"]["samples"] == 24 * 32  # warm-up steps count in the run's cost
    assert DvfsSetting.from_json(d["setting"]) == gpu(714)


def test_online_sweep_and_order(device):
    policy = make_policy("online:search=sweep,order=ascending,warmup=2,measure=1")
    applied, steps = drive(policy, device)
    assert [s.gpu_hz / MHZ for s in applied[:11]] == list(TABLE_MHZ)
    assert steps == 11 * 3 and policy.chosen == gpu(714)


def test_online_candidates_and_counts(device):
    policy = make_policy("online", candidates_hz=[510 * MHZ, 918 * MHZ, 612 * MHZ], warmup_steps=0,
                         measure_steps=1, search="sweep")
    applied, steps = drive(policy, device, warmup_garbage=False)
    assert [s.gpu_hz / MHZ for s in applied[:3]] == [918, 612, 510]
    assert steps == 3 and policy.chosen == gpu(612)
    with pytest.raises(UnsupportedFrequencyError):
        make_policy("online", candidates_hz=[800 * MHZ]).initial(ctx(device))


def test_online_with_a_slowdown_limit_profiles_maxn_first(device):
    policy = make_policy("online")
    applied, steps = drive(policy, device, objective="energy@25%")
    assert applied[0] == MAXN
    # time = 0.75*1300.5/f: 25% slower than MAXN means f >= 1040.4 MHz; the cheapest of those is 1122.
    assert policy.chosen == gpu(1122)
    assert steps == policy.describe()["profiling_steps"]
    assert policy.describe()["baseline"] is not None


def test_online_needs_costs(device):
    policy = make_policy("online", warmup_steps=1)
    policy.initial(ctx(device))
    assert policy.on_step_end(1, None) is None  # a warm-up step needs none
    with pytest.raises(DeviceError):
        policy.on_step_end(2, None)


def test_online_option_parsing():
    text = "warmup=0,measure=3,search=sweep,stride=3,order=ascending,min=408,candidates=408/612"
    assert parse_online_options(text) == {
        "warmup_steps": 0, "measure_steps": 3, "search": "sweep", "coarse_stride": 3, "order": "ascending",
        "min_hz": 408 * MHZ, "candidates_hz": (408 * MHZ, 612 * MHZ),
    }
    for bad in (dict(search="random"), dict(order="sideways"), dict(measure_steps=0), dict(coarse_stride=0),
                dict(candidates_hz=[])):
        with pytest.raises(ConfigError):
            OnlinePolicy(**bad)
    with pytest.raises(ConfigError):
        make_policy("online", nonsense=1)


def test_online_min_clock(device):
    policy = OnlinePolicy(min_hz=700 * MHZ, search="sweep")
    policy.initial(ctx(device))
    assert policy.candidates_hz == tuple(int(f * MHZ) for f in TABLE_MHZ if f >= 700)
    assert device.clock_table(ClockDomain.GPU)[-1] == policy.candidates_hz[-1]
