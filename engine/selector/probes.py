"""Probes: a few short measured windows on the target that correct the predictions for it.

With K probes (K <= 3) the selector measures the workload at K settings it picks: its
predicted best, then the nearest GPU clocks below and above it (with a slowdown limit in
the objective, MAXN comes second: whether a setting is feasible hangs on MAXN's time). The residuals correct
every prediction for this workload:

- time:  t'(s) = t(s) * exp(a_t + b_t * x(s))
- power: P'(s) = P(s) * exp(a_p + b_p * x(s))

with x(s) the log of the setting's nominal GPU clock (relative to the best's). With one probe
the slopes b are 0: constant factors leave the ranking as it was, and the probed setting takes its
measured figures. With two or three probes the slopes are fitted by least squares with a ridge
penalty (the predictions' own slopes are trusted unless the probes disagree). Power is corrected
whole: one probe cannot tell a mispredicted idle floor from mispredicted dynamic power, and scaling
the part above a fixed floor (as this did before) multiplied a host-bound workload's predicted
clock dependence 3.4x (leave-one-family-out, bench/bench_selector.py: 11% regret with one probe,
more than with none). Probed settings take
their measured figures; the choice is then made again, among the probed GPU clocks and their
neighbours in the table first (`trusted_first`): a correction fitted at a few clocks says little
about the far ends of the table. One probe's dynamic-power factor, carried from 816 to 408 MHz,
chose 408 at 11% regret for a host-bound Pythia the selector had not seen (bench/bench_selector.py,
leave-one-family-out); within a step of the probe it chose the oracle's 714. Last, a predicted setting
is taken over the best probed one only when it promises at least MEASURED_MARGIN less (`measured_first`):
the correction keeps the model's own shape between the probes' clocks, and a held-out Pythia's predicted
power dipped at 510 MHz, one step below three probes, which chose it at 4.9% regret over a measured 816.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, replace
from typing import Callable, Sequence

import numpy as np

from engine.core.jsontypes import JsonObject
from engine.core.measurement import Measurement
from engine.dvfs.objectives import Objective
from engine.device.setting import MAXN, DvfsSetting
from engine.core.errors import ConfigError
from engine.core.provenance import Source

log = logging.getLogger(__name__)

MAX_PROBES = 3
# A predicted gain smaller than this (relative cost) is not taken over a probe's measured figure: the
# selector's energy error on held-out workloads is 2-3% (MAPE), so a 1% edge is within its noise.
MEASURED_MARGIN = 0.01
SLOPE_PENALTY = 0.005  # ridge penalty on the slopes, in squared log units (3 neighbouring probes: ~10% shrinkage)
Measure = Callable[[DvfsSetting], Measurement]


@dataclass(frozen=True)
class Prediction:
    """The selector's figures for one setting, per sample; labelled `predicted` (or, after
    a probe, the probe's own source)."""

    setting: DvfsSetting
    time_per_sample: float  # s
    power_w: float  # W
    energy_per_sample: float  # J
    source: Source = Source.PREDICTED

    def measurement(self) -> Measurement:
        return Measurement(self.time_per_sample, self.energy_per_sample, 1, None, self.source)

    def to_json(self) -> JsonObject:
        return {"setting": self.setting.to_json(), "label": self.setting.label(),
                "time_per_sample_s": self.time_per_sample, "power_w": self.power_w,
                "energy_per_sample_j": self.energy_per_sample, "source": self.source.value}


@dataclass(frozen=True)
class Correction:
    a_time: float
    b_time: float
    a_power: float
    b_power: float
    x0: float  # log GHz of the reference setting
    # Where the slopes hold, relative to x0: the probed clocks' span, widened by its own width
    # on each side; beyond, the correction at the nearer bound. A line through two or three
    # neighbouring clocks carried on to the lowest GPU step chose 306 MHz at 21% regret for a
    # family the selector had not seen (bench/bench_selector.py, leave-one-family-out).
    dx_lo: float = -math.inf
    dx_hi: float = math.inf

    def to_json(self) -> dict[str, float]:
        return {"time_factor": math.exp(self.a_time), "time_slope": self.b_time,
                "power_factor": math.exp(self.a_power), "power_slope": self.b_power}


def plan_probes(ranked: Sequence[Prediction], k: int, gpu_ghz: Callable[[DvfsSetting], float], *,
                baseline: bool = False) -> list[DvfsSetting]:
    """The settings to probe: the predicted best, then its GPU-clock neighbours (below, above).
    With `baseline` (an objective with a slowdown limit against MAXN) and two probes or more,
    MAXN is the second: feasibility hangs on its time. `gpu_ghz` may be any increasing
    function of the GPU clock (its log, say)."""
    if k < 0 or k > MAX_PROBES:
        raise ConfigError(f"{k} probes asked for", f"use 0 to {MAX_PROBES} probes")
    if k == 0 or not ranked:
        return []
    pinned = [p.setting for p in ranked if p.setting != MAXN]
    if not pinned:
        return [MAXN]
    best = pinned[0]
    f0 = gpu_ghz(best)
    others = [s for s in pinned[1:] if gpu_ghz(s) != f0]
    below = sorted((s for s in others if gpu_ghz(s) < f0), key=lambda s: f0 - gpu_ghz(s))
    above = sorted((s for s in others if gpu_ghz(s) > f0), key=lambda s: gpu_ghz(s) - f0)
    plan = [best] + ([MAXN] if baseline and k >= 2 and any(p.setting == MAXN for p in ranked) else [])
    for pool in (below, above):
        if pool:
            plan.append(pool[0])
    # Fewer neighbours than asked (an edge of the table): the next-ranked settings fill in.
    plan += [s for s in pinned if s not in plan]
    return plan[:k]


def fit_correction(preds: dict[DvfsSetting, Prediction], probed: Sequence[tuple[DvfsSetting, Measurement]],
                   x_of: Callable[[DvfsSetting], float]) -> Correction:
    """Per-workload factors (and, with 2+ probes, slopes) from the probes' residuals."""
    # MAXN's clocks are its governors', not its nominal ones: its window is the baseline, not a residual.
    probed = [(s, m) for s, m in probed if s != MAXN] or list(probed)
    x0 = x_of(probed[0][0])
    xs, rt, rp = [], [], []
    for s, m in probed:
        p = preds[s]
        xs.append(x_of(s) - x0)
        rt.append(math.log(m.seconds_per_sample / p.time_per_sample))
        rp.append(math.log(m.avg_power_w / p.power_w))
    x = np.array(xs)
    a_t, b_t = _line(x, np.array(rt))
    a_p, b_p = _line(x, np.array(rp))
    span = float(np.ptp(x))
    return Correction(a_t, b_t, a_p, b_p, x0, float(x.min()) - span, float(x.max()) + span)


def _line(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Intercept and ridge-penalised slope of y against x (slope 0 with one point)."""
    if len(x) < 2 or np.ptp(x) == 0:
        return float(np.mean(y)), 0.0
    xm, ym = x.mean(), y.mean()
    b = float(np.sum((x - xm) * (y - ym)) / (np.sum((x - xm) ** 2) + SLOPE_PENALTY))
    return float(ym - b * xm), b


def apply_correction(pred: Prediction, c: Correction, x: float) -> Prediction:
    dx = min(max(x - c.x0, c.dx_lo), c.dx_hi)
    t = pred.time_per_sample * math.exp(c.a_time + c.b_time * dx)
    p = pred.power_w * math.exp(c.a_power + c.b_power * dx)
    return replace(pred, time_per_sample=t, power_w=p, energy_per_sample=t * p)


def run_probes(ranked: Sequence[Prediction], k: int, measure: Measure,
               x_of: Callable[[DvfsSetting], float], *,
               baseline: bool = False) -> tuple[list[Prediction], list[tuple[DvfsSetting, Measurement]],
                                                Correction | None]:
    """Probe, correct every prediction, and put the probes' own figures in for the probed settings."""
    plan = plan_probes(ranked, k, x_of, baseline=baseline)
    if not plan:
        return list(ranked), [], None
    probed = []
    for s in plan:
        m = measure(s)
        if m.source == Source.PREDICTED:
            raise ConfigError("a probe returned a predicted figure", "probes must measure (on the board or the twin)")
        probed.append((s, m))
        log.info("probe %s: %.4g s/sample, %.4g W (%s)", s.label(), m.seconds_per_sample, m.avg_power_w, m.source)
    by_setting = {p.setting: p for p in ranked}
    corr = fit_correction(by_setting, probed, x_of)
    measured = {s: m for s, m in probed}
    out = []
    for p in ranked:
        got = measured.get(p.setting)
        if got is not None:
            out.append(Prediction(p.setting, got.seconds_per_sample, got.avg_power_w, got.joules_per_sample,
                                  got.source))
        else:
            out.append(apply_correction(p, corr, x_of(p.setting)))
    return out, probed, corr


def trusted_first(ranked: Sequence[Prediction], probed: Sequence[DvfsSetting],
                  x_of: Callable[[DvfsSetting], float]) -> list[Prediction]:
    """`ranked` with the settings a probe's correction speaks for first (their GPU clock probed, or
    one table step from a probed one; and MAXN), in their order, then the rest in theirs."""
    if not probed:
        return list(ranked)
    xs = sorted({round(x_of(p.setting), 9) for p in ranked})
    step = {x: i for i, x in enumerate(xs)}
    near = {step[x] + d for x in (round(x_of(s), 9) for s in probed) if x in step for d in (-1, 0, 1)}
    inside = [p for p in ranked if p.setting == MAXN or step[round(x_of(p.setting), 9)] in near]
    seen = {p.setting for p in inside}
    return inside + [p for p in ranked if p.setting not in seen]


def measured_first(ranked: Sequence[Prediction], objective: Objective, baseline: Prediction | None,
                   margin: float = MEASURED_MARGIN) -> list[Prediction]:
    """`ranked` with its best probed pinned setting first when the predicted setting ahead of it promises
    less than `margin` (relative cost) below what the probe measured. A corrected prediction next to the
    probes still carries the model's own shape between table clocks (a predicted power that dips at one
    clock); a measured figure does not, so a small predicted gain is not worth leaving it for."""
    if not ranked or ranked[0].source != Source.PREDICTED:
        return list(ranked)
    base = baseline.measurement() if baseline is not None else None
    bound = objective.cost(ranked[0].measurement()) * (1 + margin)
    for i, p in enumerate(ranked[1:], 1):
        if p.source == Source.PREDICTED or p.setting == MAXN:
            continue
        m = p.measurement()
        if objective.cost(m) <= bound and (not objective.needs_baseline or objective.feasible(m, base)):
            return [p, *ranked[:i], *ranked[i + 1:]]
        break  # the best probed pinned setting is not close enough: the prediction stands
    return list(ranked)


def rank(preds: Sequence[Prediction], objective: Objective, baseline: Prediction | None) -> list[Prediction]:
    """Predictions best first for the objective: the feasible pinned settings, then MAXN (the
    baseline; see selection.choose), then those beyond the slowdown limit."""
    base = baseline.measurement() if baseline is not None else None

    def key(p: Prediction) -> tuple[int, int, float]:
        m = p.measurement()
        ok = True if not objective.needs_baseline or base is None else objective.feasible(m, base)
        return (0 if ok else 1, int(p.setting == MAXN), objective.cost(m))

    return sorted(preds, key=key)
