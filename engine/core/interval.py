"""An interval on a predicted figure: how far the figure may be from the truth, and why.

    Interval(0.091, 0.150, 0.9, "twin ensemble of 32 profiles")
    format_with(0.123, iv, pct=True)  -> "12.3% (9.1–15.0%, 90%)"

The level is the share of plausible outcomes the interval holds (its quantiles: 0.9 = the 5th to
the 95th percentile); `basis` names where the spread comes from (an ensemble of plausible twin
profiles, the selector's cross-validated regret, or both), so a reader can judge it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from engine.core.errors import ConfigError
from engine.core.jsontypes import JsonObject, as_float, as_object

LEVEL = 0.9  # every interval the tool quotes holds 90% of its basis's outcomes unless it says otherwise


@dataclass(frozen=True)
class Interval:
    """[low, high] at `level`, from `basis`."""

    low: float
    high: float
    level: float = LEVEL
    basis: str = ""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.low) and math.isfinite(self.high)) or self.low > self.high:
            raise ConfigError(f"an interval needs finite low <= high, got [{self.low}, {self.high}]",
                              "this is a bug in whatever computed the interval")
        if not 0.0 < self.level < 1.0:
            raise ConfigError(f"an interval's level lies in (0, 1), got {self.level}", "e.g. 0.9")

    @property
    def width(self) -> float:
        return self.high - self.low

    def contains(self, value: float) -> bool:
        return self.low <= value <= self.high

    def shifted(self, by: float) -> "Interval":
        return Interval(self.low + by, self.high + by, self.level, self.basis)

    def scaled(self, factor: float) -> "Interval":
        lo, hi = sorted((self.low * factor, self.high * factor))
        return Interval(lo, hi, self.level, self.basis)

    def hull(self, value: float) -> "Interval":
        """The interval widened to hold `value` (a point figure always lies in its own interval)."""
        return Interval(min(self.low, value), max(self.high, value), self.level, self.basis)

    def text(self, *, pct: bool = False, digits: int = 1, level: bool = True) -> str:
        """`9.1–15.0%, 90%` (pct: fractions shown as percentages) or `0.181–0.207, 90%`."""
        lo, hi = (100 * self.low, 100 * self.high) if pct else (self.low, self.high)
        unit = "%" if pct else ""
        body = f"{lo:.{digits}f}–{hi:.{digits}f}{unit}" if pct else f"{lo:.{digits}g}–{hi:.{digits}g}"
        return f"{body}, {self.level:.0%}" if level else body

    def to_json(self) -> JsonObject:
        return {"low": self.low, "high": self.high, "level": self.level, "basis": self.basis}

    @classmethod
    def from_json(cls, data: object) -> "Interval":
        try:
            d = as_object(data)
            return cls(as_float(d["low"]), as_float(d["high"]), as_float(d.get("level", LEVEL)),
                       str(d.get("basis", "")))
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"not an interval: {data!r} ({exc})", "give low, high, level and basis") from None


def format_with(value: float, interval: Interval | None, *, pct: bool = False, digits: int = 1,
                level: bool = True) -> str:
    """`12.3% (9.1–15.0%, 90%)`; the bare value when there is no interval."""
    head = f"{100 * value:.{digits}f}%" if pct else f"{value:.{max(digits, 1) + 2}g}"
    if interval is None:
        return head
    return f"{head} ({interval.text(pct=pct, digits=digits, level=level)})"


def compact_pct(value: float, interval: Interval | None, *, signed: bool = False) -> str:
    """A fraction as a short percentage with its interval, for narrow screens: `12% (9–15%)`."""
    sign = "+" if signed else ""
    head = f"{100 * value:{sign}.0f}%"
    if interval is None:
        return head
    return f"{head} ({100 * interval.low:.0f}–{100 * interval.high:.0f}%)"


def quantile_interval(values: Sequence[float], level: float = LEVEL, basis: str = "") -> Interval:
    """The central `level` of `values` (linear interpolation between order statistics)."""
    vals = sorted(float(v) for v in values)
    if not vals:
        raise ConfigError("no values to take an interval of", "give at least one value")
    tail = (1.0 - level) / 2.0
    return Interval(quantile(vals, tail), quantile(vals, 1.0 - tail), level, basis)


def quantile(sorted_values: Sequence[float], q: float) -> float:
    """The q-quantile of already sorted values (numpy's default, linear)."""
    n = len(sorted_values)
    if n == 1:
        return float(sorted_values[0])
    pos = min(max(q, 0.0), 1.0) * (n - 1)
    i = int(math.floor(pos))
    j = min(i + 1, n - 1)
    return float(sorted_values[i] + (sorted_values[j] - sorted_values[i]) * (pos - i))


def extrapolated(done: float, remaining: int, n: int, mean: float, variance: float, *, level: float = LEVEL,
                 basis: str = "the run's step-to-step spread so far") -> Interval | None:
    """The interval of `done + remaining x (a step's figure)` when `n` steps so far had this mean and
    variance: steps taken as independent, so the remaining sum varies by remaining x variance and
    the mean itself is uncertain by variance / n. None before two steps (no spread to go by)."""
    if n < 2 or remaining < 0 or not (math.isfinite(mean) and math.isfinite(variance)):
        return None
    from statistics import NormalDist

    z = NormalDist().inv_cdf(0.5 + level / 2.0)
    half = z * math.sqrt(max(variance, 0.0) * (remaining + remaining * remaining / n))
    centre = done + remaining * mean
    return Interval(max(done, centre - half), centre + half, level, basis)

