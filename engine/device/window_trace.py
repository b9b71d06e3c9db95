"""A monitor window's power trace: samples whose trapezoid is the window's energy, kept as they arrive.

The power monitor (engine/device/monitor.py) keeps one for a window opened with `trace=True`
(the run recorder's). How the samples make up the window's energy depends on the source:

- an integrating source (the INA3221 rails): the trapezoid over its samples, so the trace is the
  samples inside the window and its two edges, at the powers the integral took there (the start
  interpolated between the samples around it, the end holding the last sample's power);
- an exact source (the twin's counter): a sample is the counter's mean power since the sample
  before it, so the trace holds each interval as a flat step at that mean, its left end a hair
  after the sample before it (times stay strictly increasing; the hair's share of the energy is
  a millionth of the interval's). A power equal to the step before needs no left end.
"""

from __future__ import annotations

import math
from typing import Mapping

from engine.device.power import PowerSample


class WindowTrace:
    """The trace of one window (`exact`: over an exact source's mean-power samples)."""

    def __init__(self, exact: bool) -> None:
        self.exact = exact
        self.samples: list[PowerSample] = []

    def edge(self, t: float, rails_mw: Mapping[str, float]) -> None:
        """An integrating window's start edge (or the end, through `close`)."""
        self.samples.append(PowerSample(t, dict(rails_mw)))

    def add(self, sample: PowerSample, left: float) -> None:
        """A sample inside the window; `left`: when the interval it closes began (the sample before
        it, or the window's start), for an exact source's flat step."""
        if not self.exact:
            self.samples.append(sample)
            return
        trace = self.samples
        if trace and _same_power(trace[-1].rails_mw, sample.rails_mw):
            trace.append(sample)
            return
        if trace:
            hair = left + (sample.t - left) * 1e-6
            left = hair if hair > left else math.nextafter(left, sample.t)
        if left < sample.t:
            trace.append(PowerSample(left, sample.rails_mw))
        trace.append(sample)

    def close(self, end: float, rails_mw: Mapping[str, float]) -> tuple[PowerSample, ...]:
        """The trace of an integrating window ending at `end` with that power (the exact one ends
        with its end's sample already)."""
        if not self.exact:
            self.samples[:] = [s for s in self.samples if s.t < end]
            self.edge(end, rails_mw)
        return tuple(self.samples)


def power_at(prev: PowerSample | None, last: PowerSample, t: float) -> dict[str, float]:
    """Power per rail at time t as the monitor integrates between its last two samples: linear
    between them, the last one's held beyond them (or before a lone one)."""
    if t >= last.t or prev is None or t < prev.t:
        return dict(last.rails_mw)
    f = (t - prev.t) / (last.t - prev.t)
    out = {}
    for r, p1 in last.rails_mw.items():
        p0 = prev.rails_mw.get(r)
        out[r] = p1 if p0 is None else p0 + f * (p1 - p0)
    return out


def _same_power(a: Mapping[str, float], b: Mapping[str, float]) -> bool:
    """Equal to a part in a billion, rail by rail (a counter's means of equal steps differ in the last bits)."""
    return a.keys() == b.keys() and all(abs(a[r] - b[r]) <= 1e-9 * max(abs(a[r]), abs(b[r])) for r in a)
