"""Probes: which settings are probed, and how their residuals correct the predictions."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from engine.core.measurement import Measurement
from engine.dvfs.objectives import parse_objective
from engine.device.setting import MAXN, DvfsSetting
from engine.core.errors import ConfigError
from engine.core.provenance import Source
from engine.selector.probes import (MEASURED_MARGIN, Prediction, apply_correction, fit_correction, measured_first,
                                   plan_probes, rank, run_probes, trusted_first)

MHZ = 1_000_000
CLOCKS = (306, 408, 510, 612, 714, 816, 918, 1020, 1122, 1224, 1300.5)


def gpu(mhz: float) -> DvfsSetting:
    return DvfsSetting(gpu_hz=int(mhz * MHZ), nvpmodel=0)


def x_of(s: DvfsSetting) -> float:
    return math.log((s.gpu_hz or 1_300_500_000) / 1e9)


def predictions(best_mhz: float = 714) -> list[Prediction]:
    """A convex energy curve with its minimum at best_mhz; MAXN as fast as the top clock."""
    out = []
    for f in CLOCKS:
        t = 0.01 * (1300.5 / f) ** 0.6
        e = 0.2 * (1 + 0.5 * (math.log(f / best_mhz)) ** 2)
        out.append(Prediction(gpu(f), t, e / t, e))
    top = out[-1]
    out.append(Prediction(MAXN, top.time_per_sample, top.power_w * 1.02, top.energy_per_sample * 1.02))
    return out


def ranked(preds, objective="energy"):
    return rank(preds, parse_objective(objective), next(p for p in preds if p.setting == MAXN))


def test_rank_puts_maxn_after_the_feasible_pinned_settings():
    preds = predictions(714)
    cheap_maxn = [p if p.setting != MAXN else Prediction(MAXN, p.time_per_sample, 1.0, p.time_per_sample)
                  for p in preds]  # MAXN predicted cheapest of all
    r = ranked(cheap_maxn)
    assert r[11].setting == MAXN and r[0].setting == gpu(714)  # pinned first: MAXN is the baseline
    limited = ranked(preds, "energy@10%")
    feasible = [p.setting for p in limited[:limited.index(next(p for p in limited if p.setting == MAXN))]]
    assert feasible == [gpu(1122), gpu(1224), gpu(1300.5)]  # within 10% of MAXN's time, by cost
    assert all(p.setting.gpu_hz < 1122 * MHZ for p in limited[4:])  # too slow: after MAXN


def test_plan_is_the_best_then_its_neighbours():
    r = ranked(predictions(714))
    assert plan_probes(r, 1, x_of) == [gpu(714)]
    assert plan_probes(r, 3, x_of) == [gpu(714), gpu(612), gpu(816)]
    assert plan_probes(r, 0, x_of) == []
    # At the bottom of the table there is no lower neighbour: the next-ranked setting fills in.
    low = plan_probes(ranked(predictions(306)), 3, x_of)
    assert low[:2] == [gpu(306), gpu(408)] and len(set(low)) == 3 and MAXN not in low
    # With a slowdown limit, MAXN's time decides feasibility: it is probed second.
    limited = ranked(predictions(714), "energy@10%")  # 1122 MHz: the lowest clock within 10% of MAXN
    assert plan_probes(limited, 3, x_of, baseline=True) == [gpu(1122), MAXN, gpu(1020)]
    with pytest.raises(ConfigError):
        plan_probes(r, 4, x_of)


def truth_of(p: Prediction, a_t: float, a_p: float, b_t: float = 0.0, b_p: float = 0.0, x0: float = 0.0) -> Measurement:
    dx = x_of(p.setting) - x0
    t = p.time_per_sample * math.exp(a_t + b_t * dx)
    power = p.power_w * math.exp(a_p + b_p * dx)
    return Measurement(t * 10, t * power * 10, 10, None, Source.TWIN)


def test_one_probe_recovers_constant_factors_and_keeps_the_ranking():
    preds = predictions(714)
    by = {p.setting: p for p in preds}
    # The workload runs 20% slower and draws 40% more power than predicted.
    truth = {p.setting: truth_of(p, math.log(1.2), math.log(1.4)) for p in preds}
    corr = fit_correction(by, [(gpu(714), truth[gpu(714)])], x_of)
    assert math.exp(corr.a_time) == pytest.approx(1.2) and math.exp(corr.a_power) == pytest.approx(1.4)
    assert corr.b_time == 0.0 and corr.b_power == 0.0
    for p in preds:
        fixed = apply_correction(p, corr, x_of(p.setting))
        assert fixed.energy_per_sample == pytest.approx(truth[p.setting].joules_per_sample)
        assert fixed.power_w == pytest.approx(truth[p.setting].avg_power_w)
    # One probe cannot tell a mispredicted floor from mispredicted dynamic power: factors alone keep the order.
    out, _probed, _corr = run_probes(ranked(preds), 1, truth.__getitem__, x_of)
    order = [p.setting for p in sorted(preds, key=lambda p: p.energy_per_sample)]
    assert [p.setting for p in sorted(out, key=lambda p: p.energy_per_sample)] == order


def test_one_probe_of_a_host_bound_step_does_not_move_the_choice_far():
    """A host-bound step (the HF loop's idle CPU): the selector predicted 9 W where the board draws 12, at
    every clock alike. Scaling the predicted power above a fixed 8 W floor to the probe multiplied the
    clock dependence 4x and chose 408 MHz at 11% regret (bench_selector, leave-one-family-out)."""
    preds = predictions(816)
    preds = [Prediction(p.setting, p.time_per_sample, 9.0 + (p.power_w - preds[7].power_w) * 0.05,
                        p.time_per_sample * (9.0 + (p.power_w - preds[7].power_w) * 0.05)) for p in preds]
    truth = {p.setting: Measurement(p.time_per_sample * 10, p.time_per_sample * (p.power_w + 3.0) * 10, 10, None,
                                    Source.TWIN) for p in preds}
    out, probed, _corr = run_probes(ranked(preds), 1, truth.__getitem__, x_of)
    assert [s for s, _m in probed] == [min(preds, key=lambda p: p.energy_per_sample).setting]
    best = min(out, key=lambda p: p.energy_per_sample).setting
    assert abs(CLOCKS.index(best.gpu_hz / MHZ) - CLOCKS.index(probed[0][0].gpu_hz / MHZ)) <= 1


def test_the_choice_after_probes_stays_near_the_probed_clocks():
    preds = predictions(714)
    cheap_low = [p if p.setting != gpu(306) else Prediction(p.setting, p.time_per_sample, 0.1, p.time_per_sample * 0.1)
                 for p in preds]  # a far setting a correction made look cheapest
    probed = [gpu(714), gpu(612), gpu(816)]
    first = trusted_first(ranked(cheap_low), probed, x_of)
    assert first[0].setting == gpu(714)  # 306 MHz is three steps from any probe: after the trusted ones
    near = {s.gpu_hz for s in (gpu(510), gpu(612), gpu(714), gpu(816), gpu(918))}
    trusted = [p.setting for p in first[:6]]
    assert MAXN in trusted and {s.gpu_hz for s in trusted if s != MAXN} == near
    assert trusted_first(ranked(cheap_low), [], x_of)[0].setting == gpu(306)  # no probe: the ranking as it was


def probed_at(p: Prediction, energy: float) -> Prediction:
    """`p` as a probe measured it: its time, the energy given, source twin."""
    return Prediction(p.setting, p.time_per_sample, energy / p.time_per_sample, energy, Source.TWIN)


def test_a_measured_setting_wins_over_a_predicted_one_that_is_barely_cheaper():
    """pythia-70m's head step (hf loop), its family held out: the predicted power dips at 510 MHz, one step
    below the probes, and 510 chosen over the measured 816 cost 4.9% (bench_selector, leave-one-family-out)."""
    preds = predictions(510)
    by = {p.setting: p for p in preds}
    low = by[gpu(510)].energy_per_sample  # measured a little above the predicted 510 MHz
    measured = {s: probed_at(by[s], low * k) for s, k in ((gpu(612), 1.006), (gpu(714), 1.01), (gpu(816), 1.02))}
    r = ranked([measured.get(p.setting, p) for p in preds])
    assert r[0].setting == gpu(510) and r[0].source == Source.PREDICTED
    objective = parse_objective("energy")
    maxn = by[MAXN]
    first = measured_first(r, objective, maxn)
    assert first[0].setting == gpu(612)  # the best measured, within the margin of the predicted 510
    assert sorted(p.setting.gpu_hz or 0 for p in first) == sorted(p.setting.gpu_hz or 0 for p in r)
    # A predicted gain beyond the margin stands.
    far = [measured.get(p.setting, p) if p.setting != gpu(510)
           else replace(p, energy_per_sample=p.energy_per_sample * 0.5) for p in preds]
    assert measured_first(ranked(far), objective, maxn)[0].setting == gpu(510)
    # A measured setting already first, or nothing measured: the ranking as it was.
    assert measured_first(ranked(preds), objective, maxn) == ranked(preds)
    assert 0 < MEASURED_MARGIN < 0.05
    # With a slowdown limit a measured setting beyond it is not taken.
    slow = ranked([measured.get(p.setting, p) for p in preds], "energy@10%")
    assert measured_first(slow, parse_objective("energy@10%"), maxn)[0].setting == slow[0].setting


def test_three_probes_fit_slopes():
    preds = predictions(714)
    by = {p.setting: p for p in preds}
    x0 = x_of(gpu(714))
    truth = {p.setting: truth_of(p, 0.1, 0.2, b_t=0.5, b_p=-0.8, x0=x0) for p in preds}
    plan = [gpu(714), gpu(612), gpu(816)]
    corr = fit_correction(by, [(s, truth[s]) for s in plan], x_of)
    assert corr.b_time == pytest.approx(0.5, rel=0.15) and corr.b_power == pytest.approx(-0.8, rel=0.15)
    out, probed, _corr = run_probes(ranked(preds), 3, truth.__getitem__, x_of)
    assert [s for s, _ in probed] == plan
    fixed = {p.setting: p for p in out}
    for s in plan:  # probed settings carry the measurement itself, labelled with its source
        assert fixed[s].source == Source.TWIN and fixed[s].energy_per_sample == truth[s].joules_per_sample
    for s in (gpu(510), gpu(918)):  # near neighbours: corrected close to the truth
        assert fixed[s].source == Source.PREDICTED
        assert fixed[s].energy_per_sample == pytest.approx(truth[s].joules_per_sample, rel=0.03)


def test_slopes_are_not_carried_far_beyond_the_probed_clocks():
    preds = predictions(714)
    by = {p.setting: p for p in preds}
    x0 = x_of(gpu(714))
    truth = {p.setting: truth_of(p, 0.1, 0.2, b_t=0.5, b_p=-0.8, x0=x0) for p in preds}
    corr = fit_correction(by, [(s, truth[s]) for s in (gpu(714), gpu(612), gpu(816))], x_of)
    span = x_of(gpu(816)) - x_of(gpu(612))
    assert corr.dx_lo == pytest.approx(x_of(gpu(612)) - x0 - span)
    assert corr.dx_hi == pytest.approx(x_of(gpu(816)) - x0 + span)
    # 306 MHz lies beyond the widened span: it gets the correction at the span's lower bound.
    edge = apply_correction(by[gpu(306)], corr, x0 + corr.dx_lo)
    assert apply_correction(by[gpu(306)], corr, x_of(gpu(306))) == edge
    assert apply_correction(by[gpu(306)], corr, x_of(gpu(408))) == edge  # 408 MHz too
    assert apply_correction(by[gpu(306)], corr, x_of(gpu(510))) != edge  # 510 MHz: within, the slope holds
    one = fit_correction(by, [(gpu(714), truth[gpu(714)])], x_of)
    assert one.b_time == one.b_power == 0.0  # one probe: factors only, nothing to carry


def test_probes_must_measure():
    preds = predictions(714)

    def predicted(s):
        return Measurement(1.0, 1.0, 1, None, Source.PREDICTED)

    with pytest.raises(ConfigError, match="must measure"):
        run_probes(ranked(preds), 1, predicted, x_of)
