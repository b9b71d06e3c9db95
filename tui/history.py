"""Bounded histories the live pages graph (no Textual here).

`DeviceHistory` keeps what the app's poll reads (about twice a second): each rail's power,
the total, each clock and every thermal zone, one point per reading, the last `points`.
The app owns it, so it fills while the Device or Run page is hidden, and feeding it is a
few deque appends per reading. The run's own power history (per step, in device time)
lives in the run tracker (`tui.runstate`); `time_columns` turns those spans into chart
columns: one per time bucket, each the energy-weighted mean power of what overlaps it, so
a chart has no empty columns however steps and columns line up.
"""

from __future__ import annotations

import math
from itertools import islice
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from engine.device.snapshot import DeviceSnapshot

HISTORY_POINTS = 600  # five minutes at the poll's 2 Hz
TOTAL = "total"


@dataclass(frozen=True)
class Stats:
    """Current, average and peak of a history (None where it holds no value)."""

    now: float | None = None
    avg: float | None = None
    peak: float | None = None


def stats_of(values: Iterable[float | None]) -> Stats:
    total = 0.0
    n = 0
    peak = now = None
    for v in values:
        if v is None:
            continue
        total += v
        n += 1
        now = v
        peak = v if peak is None or v > peak else peak
    return Stats(now, total / n if n else None, peak)


def rail_key(name: str) -> str:
    return f"rail:{name}"


def clock_key(domain: str) -> str:
    return f"clock:{domain}"


def temp_key(zone: str) -> str:
    return f"temp:{zone}"


class DeviceHistory:
    """The poll's readings as series: `rail:NAME` and `rail:total` (W), `clock:gpu|cpu|emc`
    (MHz), `load:gpu` (%), `temp:ZONE` and `temp:max` (°C); each the last `points` readings."""

    def __init__(self, points: int = HISTORY_POINTS) -> None:
        self.points = points
        self.readings = 0  # readings taken in, ever
        self.span_s = 0.0  # the time the kept readings cover
        self._t: deque[float] = deque(maxlen=points)
        self._series: dict[str, deque[float | None]] = {}

    def add(self, snap: DeviceSnapshot) -> None:
        values: dict[str, float] = {}
        if snap.rails and "rails" not in snap.errors:
            for r in snap.rails:
                values[rail_key(r.name)] = r.power_mw / 1000.0
            values[rail_key(TOTAL)] = snap.total_power_mw / 1000.0
        for c in snap.clocks:
            values[clock_key(c.domain.value)] = c.cur_hz / 1e6
        if snap.gpu_load is not None:
            values["load:gpu"] = snap.gpu_load * 100.0
        for t in snap.temperatures:
            values[temp_key(t.zone)] = t.celsius
        if snap.temperatures:
            values[temp_key("max")] = max(t.celsius for t in snap.temperatures)
        self.add_values(snap.t, values)

    def add_values(self, t: float, values: Mapping[str, float]) -> None:
        """One reading: a series it lacks gets a gap; a new series starts at this reading."""
        self._t.append(t)
        self.readings += 1
        self.span_s = self._t[-1] - self._t[0]
        for key, series in self._series.items():
            if key not in values:
                series.append(None)
        for key, v in values.items():
            series = self._series.get(key)
            if series is None:
                series = self._series[key] = deque(maxlen=self.points)
            series.append(None if math.isnan(v) else v)

    def keys(self, prefix: str) -> list[str]:
        return [k for k in self._series if k.startswith(prefix)]

    def values(self, key: str, last: int | None = None) -> list[float | None]:
        """The series, oldest first; only its `last` points when given."""
        series = self._series.get(key)
        if series is None:
            return []
        if last is None or last >= len(series):
            return list(series)
        return list(islice(series, len(series) - last, None)) if last > 0 else []

    def stats(self, key: str) -> Stats:
        return stats_of(self._series.get(key, ()))


# A run's power history: (device time at the span's end, its duration, joules per rail).
Span = tuple[float, float, Mapping[str, float]]


def power_columns(spans: Sequence[Span], columns: int, groups: Mapping[str, Iterable[str] | None],
                  span_s: float | None = None) -> tuple[dict[str, list[float | None]], float]:
    """({group: mean power per column in W}, the time covered) over the last `span_s` seconds of
    spans (all of them by default), in one pass for every group (a group sums its rails; None:
    every rail). Columns are equal time buckets ending at the last span; each span's energy is
    spread over the buckets it overlaps in proportion to the overlap, so every bucket the spans
    cover has a value (None only before the first span)."""
    names = list(groups)
    if not spans or columns <= 0:
        return {g: [] for g in names}, 0.0
    t_end = spans[-1][0]
    t_first = spans[0][0] - spans[0][1]
    span = t_end - t_first if span_s is None else min(span_s, t_end - t_first)
    if span <= 0:
        return {g: [] for g in names}, 0.0
    width = span / columns
    start = t_end - span
    wanted = [None if groups[g] is None else frozenset(groups[g]) for g in names]  # type: ignore[arg-type]
    joules = [[0.0] * columns for _ in names]
    seconds = [0.0] * columns
    for t, dt, energy in spans:
        if t <= start or dt <= 0:
            continue
        powers = [(sum(energy.values()) if w is None else sum(j for r, j in energy.items() if r in w)) / dt
                  for w in wanted]
        lo = max(t - dt, start)
        first = min(columns - 1, max(0, int((lo - start) / width)))
        last = min(columns - 1, max(0, int((t - start) / width - 1e-9)))
        for col in range(first, last + 1):
            c0 = start + col * width
            overlap = min(t, c0 + width) - max(lo, c0)
            if overlap > 0:
                seconds[col] += overlap
                for k, p in enumerate(powers):
                    joules[k][col] += p * overlap
    return {g: [joules[k][i] / seconds[i] if seconds[i] > 0 else None for i in range(columns)]
            for k, g in enumerate(names)}, span


def time_columns(spans: Sequence[Span], columns: int, rails: Iterable[str] | None = None,
                 span_s: float | None = None) -> tuple[list[float | None], float]:
    """`power_columns` for one group: the rails summed (every rail by default)."""
    cols, span = power_columns(spans, columns, {"": rails}, span_s)
    return cols[""], span


def group_stats(spans: Sequence[Span], groups: Mapping[str, Iterable[str] | None]) -> dict[str, Stats]:
    """Last, time-weighted average and peak power (W) of each group of rails, in one pass."""
    names = list(groups)
    wanted = [None if groups[g] is None else frozenset(groups[g]) for g in names]  # type: ignore[arg-type]
    energy = [0.0] * len(names)
    peak: list[float | None] = [None] * len(names)
    now: list[float | None] = [None] * len(names)
    time = 0.0
    for _t, dt, joules in spans:
        if dt <= 0:
            continue
        time += dt
        for k, w in enumerate(wanted):
            j = sum(joules.values()) if w is None else sum(v for r, v in joules.items() if r in w)
            p = j / dt
            energy[k] += j
            now[k] = p
            pk = peak[k]
            peak[k] = p if pk is None or p > pk else pk
    return {g: Stats(now[k], energy[k] / time if time > 0 else None, peak[k]) for k, g in enumerate(names)}
