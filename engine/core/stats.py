"""Statistics in one place: means with confidence intervals, and trapezoid energy integration."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Sequence

from engine.core.errors import ConfigError
from engine.core.jsontypes import JsonObject


CONFIDENCE = 0.95


# --------------------------------------------------------------------------- statistics
@dataclass(frozen=True)
class Stat:
    """A mean over repetitions and its 95% confidence half-width (None with one value)."""

    mean: float
    ci95: float | None
    n: int

    def to_json(self) -> JsonObject:
        return {"mean": self.mean, "ci95": self.ci95, "n": self.n}


def mean_ci(values: Sequence[float], confidence: float = CONFIDENCE) -> Stat:
    """Mean and the half-width of its confidence interval from Student's t distribution."""
    vals = [float(v) for v in values]
    if not vals:
        raise ConfigError("no values to average", "measure at least one repetition")
    mean = statistics.fmean(vals)
    if len(vals) < 2:
        return Stat(mean, None, 1)
    from scipy.stats import t

    sd = statistics.stdev(vals)
    half = float(t.ppf(0.5 + confidence / 2.0, len(vals) - 1)) * sd / math.sqrt(len(vals))
    return Stat(mean, half, len(vals))


def trapezoid_j(times_s: Sequence[float], powers_mw: Sequence[float]) -> float:
    """Energy in joules of a power signal (mW) sampled at `times_s`, by the trapezoid rule."""
    return cumulative_trapezoid_j(times_s, powers_mw)[-1] if len(times_s) else 0.0


def cumulative_trapezoid_j(times_s: Sequence[float], powers_mw: Sequence[float]) -> list[float]:
    """Energy in joules from the first sample up to each sample (trapezoid rule; 0.0 at the first)."""
    out = [0.0] * len(times_s)
    energy_mj = 0.0
    for i in range(1, len(times_s)):
        energy_mj += (powers_mw[i] + powers_mw[i - 1]) * 0.5 * (times_s[i] - times_s[i - 1])
        out[i] = energy_mj / 1000.0
    return out


class RunningTrapezoid:
    """cumulative_trapezoid_j over samples given one at a time, for several signals (rails) at once: the
    same sums in the same order, so the same joules bit for bit, in memory that does not grow with the
    samples (a long log is integrated as it is read)."""

    def __init__(self, signals: int) -> None:
        self.energy_mj = [0.0] * signals  # up to the last sample given
        self.count = 0
        self._t = 0.0
        self._powers: Sequence[float] = ()

    def add(self, t: float, powers_mw: Sequence[float]) -> None:
        if self.count:
            dt = t - self._t
            self.energy_mj = [e + (p + q) * 0.5 * dt for e, p, q in zip(self.energy_mj, powers_mw, self._powers)]
        self._t, self._powers = t, powers_mw
        self.count += 1

    def joules(self) -> list[float]:
        """Each signal's energy so far, J (trapezoid_j's; 0.0 before a second sample)."""
        return [e / 1000.0 for e in self.energy_mj]
