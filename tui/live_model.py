"""The live graphs' model (`tui/widgets/live.py` draws it; no Textual here): the device poll's
bounded history and a run's power columns.

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
from typing import Any

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
            column = self._series.get(key)
            if column is None:
                column = self._series[key] = deque(maxlen=self.points)
            column.append(None if math.isnan(v) else v)

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


class _SpanArrays:
    """Spans as arrays (start, end, joules per rail), made once per tuple of spans: a redraw asks
    for columns and figures of several groups over the same spans, and a Python pass over a
    thousand spans per group and per question cost more UI time than the run could spare."""

    _last: tuple[Sequence[Span], "_SpanArrays"] | None = None  # the spans last made into arrays

    def __init__(self, spans: Sequence[Span]) -> None:
        import numpy as np  # only once a run is graphed: the TUI's first screen does without numpy

        self.rails = tuple(sorted({r for _t, _dt, e in spans for r in e}))
        kept = [(t, dt, e) for t, dt, e in spans if dt > 0]
        n = len(kept)
        self.end = np.fromiter((t for t, _dt, _e in kept), float, n)
        self.dt = dt = np.fromiter((d for _t, d, _e in kept), float, n)
        # merged or rounded spans may overlap their predecessor by a hair: start where it ended
        start = self.end - dt
        if n > 1:
            start[1:] = np.maximum(start[1:], self.end[:-1])
        self.start = np.minimum(start, self.end)
        index = {r: i for i, r in enumerate(self.rails)}
        self.joules = np.zeros((n, len(self.rails)))
        for row, (_t, _dt, e) in enumerate(kept):
            for r, j in e.items():
                self.joules[row, index[r]] = j

    @classmethod
    def of(cls, spans: Sequence[Span]) -> "_SpanArrays":
        last = cls._last
        if last is not None and last[0] is spans:
            return last[1]
        arrays = cls(spans)
        cls._last = (spans, arrays)  # holds the spans, so an identical-looking new tuple is not mistaken for them
        return arrays

    def group_joules(self, rails: Iterable[str] | None) -> Any:
        """Joules per span of a group of rails (None: every rail)."""
        if rails is None:
            return self.joules.sum(axis=1)
        wanted = set(rails)
        cols = [i for i, r in enumerate(self.rails) if r in wanted]
        return self.joules[:, cols].sum(axis=1)


def power_columns(spans: Sequence[Span], columns: int, groups: Mapping[str, Iterable[str] | None],
                  span_s: float | None = None) -> tuple[dict[str, list[float | None]], float]:
    """({group: mean power per column in W}, the time covered) over the last `span_s` seconds of
    spans (all of them by default), for every group (a group sums its rails; None: every rail).
    Columns are equal time buckets ending at the last span; each span's energy is spread over the
    buckets it overlaps in proportion to the overlap, so every bucket the spans cover has a value
    (None only where no span lies): the difference of cumulative energy over the difference of
    cumulative covered time at the buckets' edges."""
    import numpy as np

    names = list(groups)
    if not spans or columns <= 0:
        return {g: [] for g in names}, 0.0
    a = _SpanArrays.of(spans)
    if not len(a.end):
        return {g: [] for g in names}, 0.0
    t_end = float(a.end[-1])
    t_first = float(a.start[0])
    span = t_end - t_first if span_s is None else min(span_s, t_end - t_first)
    if span <= 0:
        return {g: [] for g in names}, 0.0
    edges = (t_end - span) + span / columns * np.arange(columns + 1)
    edges[-1] = t_end
    # breakpoints: each span's start and end; energy and covered time grow linearly inside spans
    xp = np.empty(2 * len(a.end))
    xp[0::2], xp[1::2] = a.start, a.end
    dt = a.end - a.start
    covered = np.concatenate(([0.0], np.cumsum(dt)))
    tp = np.empty_like(xp)
    tp[0::2], tp[1::2] = covered[:-1], covered[1:]
    seconds = np.diff(np.interp(edges, xp, tp))
    has = seconds > 1e-12 * max(span, 1.0)
    out: dict[str, list[float | None]] = {}
    for g in names:
        cum = np.concatenate(([0.0], np.cumsum(a.group_joules(groups[g]))))
        ep = np.empty_like(xp)
        ep[0::2], ep[1::2] = cum[:-1], cum[1:]
        joules = np.diff(np.interp(edges, xp, ep))
        out[g] = [float(j / t) if ok else None for j, t, ok in zip(joules, seconds, has)]
    return out, span


def time_columns(spans: Sequence[Span], columns: int, rails: Iterable[str] | None = None,
                 span_s: float | None = None) -> tuple[list[float | None], float]:
    """`power_columns` for one group: the rails summed (every rail by default)."""
    cols, span = power_columns(spans, columns, {"": rails}, span_s)
    return cols[""], span


def group_stats(spans: Sequence[Span], groups: Mapping[str, Iterable[str] | None]) -> dict[str, Stats]:
    """Last, time-weighted average and peak power (W) of each group of rails."""
    a = _SpanArrays.of(spans) if spans else None
    if a is None or not len(a.end):
        return {g: Stats() for g in groups}
    dt = a.dt
    time = float(dt.sum())
    out = {}
    for g, rails in groups.items():
        joules = a.group_joules(rails)
        power = joules / dt  # every kept span lasted: dt > 0
        out[g] = Stats(float(power[-1]), float(joules.sum()) / time if time > 0 else None, float(power.max()))
    return out
