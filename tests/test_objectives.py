"""Objectives: the maths of each cost, slowdown feasibility, choosing, parsing."""

from __future__ import annotations

import logging

import pytest

from engine.device.base import DeviceIdentity
from engine.core.measurement import Measurement
from engine.dvfs.objectives import Objective, module_power_limit_w, parse_objective
from engine.device.setting import MAXN, DvfsSetting
from engine.core.errors import ConfigError
from engine.core.provenance import Source

MHZ = 1_000_000


def gpu(mhz: float) -> DvfsSetting:
    return DvfsSetting(gpu_hz=int(mhz * MHZ), nvpmodel=0)


def test_measurement_derived_figures():
    m = Measurement(time_s=2.0, energy_j=50.0, samples=100, peak_power_w=31.0, source=Source.MEASURED)
    assert m.avg_power_w == pytest.approx(25.0)
    assert m.joules_per_sample == pytest.approx(0.5)
    assert m.seconds_per_sample == pytest.approx(0.02)
    assert m.samples_per_s == pytest.approx(50.0)
    assert Measurement.from_json(m.to_json()) == m
    assert m.to_json()["source"] == "measured"


def test_measurement_addition_and_checks():
    a = Measurement(1.0, 10.0, 8, peak_power_w=12.0)
    b = Measurement(3.0, 20.0, 24, peak_power_w=15.0)
    s = a + b
    assert (s.time_s, s.energy_j, s.samples, s.peak_power_w, s.source) == (4.0, 30.0, 32, 15.0, Source.TWIN)
    with pytest.raises(ConfigError):
        a + Measurement(1.0, 1.0, 1, source=Source.MEASURED)
    for bad in ((0.0, 1.0, 1), (1.0, -1.0, 1), (1.0, 1.0, 0), (float("nan"), 1.0, 1)):
        with pytest.raises(ConfigError):
            Measurement(*bad)


def test_energy_cost_is_joules_per_sample():
    obj = parse_objective("energy")
    assert obj.cost(Measurement(2.0, 50.0, 100)) == pytest.approx(0.5)
    # Per sample: twice the samples for twice the energy is the same cost.
    assert obj.cost(Measurement(4.0, 100.0, 200)) == pytest.approx(0.5)


def test_edp_cost():
    obj = parse_objective("edp")
    m = Measurement(2.0, 50.0, 100)
    assert obj.cost(m) == pytest.approx(0.5 * 0.02)


@pytest.mark.parametrize("eta", [0.0, 0.25, 0.5, 1.0])
def test_eta_cost_is_zeus_cost(eta):
    m = Measurement(2.0, 50.0, 100)
    obj = parse_objective(f"eta:{eta}", max_power_w=40.0)
    assert obj.max_power_w == 40.0
    assert obj.cost(m) == pytest.approx(eta * 0.5 + (1 - eta) * 40.0 * 0.02)


def test_objectives_rank_differently():
    # Slow and frugal vs fast and hungry: energy picks the first, a time-heavy eta the second.
    slow = (gpu(510), Measurement(10.0, 100.0, 100))
    fast = (gpu(1300.5), Measurement(5.0, 120.0, 100))
    assert parse_objective("energy").best([slow, fast], None)[0] == gpu(510)
    assert parse_objective("edp").best([slow, fast], None)[0] == gpu(1300.5)  # 1.0*0.1 vs 1.2*0.05
    assert parse_objective("eta:0.1").best([slow, fast], None)[0] == gpu(1300.5)
    assert parse_objective("eta:1").best([slow, fast], None)[0] == gpu(510)


def test_slowdown_feasibility():
    obj = parse_objective("energy@5%")
    assert obj.max_slowdown == pytest.approx(0.05)
    base = Measurement(10.0, 200.0, 100)
    assert obj.feasible(Measurement(10.5, 150.0, 100), base)  # exactly 5% slower
    assert not obj.feasible(Measurement(10.6, 150.0, 100), base)
    assert obj.feasible(Measurement(21.0, 300.0, 200), base)  # per sample: 5% slower
    assert parse_objective("energy").feasible(Measurement(99.0, 1.0, 1), None)
    with pytest.raises(ConfigError) as err:
        obj.feasible(Measurement(10.0, 1.0, 100), None)
    assert "MAXN" in err.value.what


def test_best_respects_the_slowdown_limit():
    base = Measurement(10.0, 200.0, 100)
    points = [
        (MAXN, base),
        (gpu(612), Measurement(13.0, 140.0, 100)),  # cheapest, 30% slower
        (gpu(918), Measurement(10.4, 160.0, 100)),  # 4% slower
        (gpu(1122), Measurement(10.1, 180.0, 100)),
    ]
    assert parse_objective("energy").best(points, None)[0] == gpu(612)
    setting, m = parse_objective("energy@5%").best(points, base)
    assert setting == gpu(918) and m.energy_j == 160.0
    # No baseline given: the MAXN point among the candidates is the baseline.
    assert parse_objective("energy@5%").best(points, None)[0] == gpu(918)


def test_best_falls_back_to_maxn_when_nothing_is_feasible(caplog):
    base = Measurement(10.0, 200.0, 100)
    points = [(gpu(306), Measurement(30.0, 150.0, 100)), (gpu(510), Measurement(20.0, 160.0, 100))]
    with caplog.at_level(logging.WARNING, logger="engine.dvfs.objectives"):
        setting, m = parse_objective("energy@1%").best(points, base)
    assert setting == MAXN and m is base
    assert "falling back to MAXN" in caplog.text
    with pytest.raises(ConfigError):
        parse_objective("energy@1%").best(points, None)  # no baseline anywhere


def test_best_ties_and_empty():
    m = Measurement(1.0, 1.0, 1)
    assert parse_objective("energy").best([(gpu(816), m), (gpu(714), m)], None)[0] == gpu(816)
    with pytest.raises(ConfigError):
        parse_objective("energy").best([], None)


@pytest.mark.parametrize(
    "text, name, slowdown, eta",
    [
        ("energy", "energy", None, None),
        (" Energy ", "energy", None, None),
        ("energy@5%", "energy", 0.05, None),
        ("energy@2.5%", "energy", 0.025, None),
        ("edp", "edp", None, None),
        ("edp@10%", "edp", 0.10, None),
        ("eta:0.5", "eta", None, 0.5),
        ("eta:0.3@5%", "eta", 0.05, 0.3),
    ],
)
def test_parse_objective(text, name, slowdown, eta):
    obj = parse_objective(text)
    assert obj.name == name and obj.eta == eta and obj.max_power_w == 60.0
    assert obj.max_slowdown == (pytest.approx(slowdown) if slowdown is not None else None)
    assert parse_objective(obj.spec) == obj


@pytest.mark.parametrize("bad", ["", "power", "energy@5", "energy@x%", "eta", "eta:", "eta:1.5", "eta:-0.1",
                                 "eta:half", "edp:2", "energy@-5%"])
def test_parse_objective_errors(bad):
    with pytest.raises(ConfigError) as err:
        parse_objective(bad)
    assert err.value.remedy


def test_objective_checks_its_fields():
    with pytest.raises(ConfigError):
        Objective("energy", max_power_w=0.0)
    with pytest.raises(ConfigError):
        Objective("edp", eta=0.5)


def test_module_power_limit():
    ident = DeviceIdentity("devkit", "P3701-0004 (AGX Orin 32GB)", None, None, is_twin=True)
    assert module_power_limit_w(ident) == 40.0
    assert module_power_limit_w(DeviceIdentity("devkit", "P3701-0000 (AGX Orin 64GB)", None, None, False)) == 60.0
