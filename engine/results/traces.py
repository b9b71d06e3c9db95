"""Power traces as stored: down-sampled so a run holds a bounded number of samples with the same energy."""

from __future__ import annotations

from typing import Sequence

from engine.core.errors import ConfigError
from engine.core.stats import RunningTrapezoid
from engine.device.power import PowerSample

DEFAULT_MAX_SAMPLES = 2000

def downsample(samples: Sequence[PowerSample], max_samples: int = DEFAULT_MAX_SAMPLES) -> list[PowerSample]:
    """At most `max_samples` samples with the same energy: the time-weighted mean power of
    equal-time buckets, at each bucket's middle, and at the first and last sample's times the
    first and last bucket's mean.

    The power is taken as linear between samples (as the monitor's trapezoid rule does), so a
    bucket's mean is exact, and the trapezoid over the result is the original's: each bucket's
    mean counts for half its width on either side of its middle (the edges hold the end buckets'
    means, not the end samples' instant power, which would skew the two half-buckets there).
    """
    if max_samples < 3:
        raise ConfigError(f"cannot down-sample to {max_samples} samples", "keep at least 3")
    if len(samples) <= max_samples:
        return list(samples)
    ts = [float(s.t) for s in samples]
    if any(b <= a for a, b in zip(ts, ts[1:])):
        raise _not_increasing()
    stream = TraceDownsampler(ts[0], ts[-1], max_samples)
    for s in samples:
        stream.add(s)
    return stream.result()


def _not_increasing() -> ConfigError:
    return ConfigError("power samples must have strictly increasing times", "sort them and drop duplicates")


class TraceDownsampler:
    """`downsample` of a trace given one sample at a time, whose first and last times are known before
    (a log's, from reading it once): the same samples bit for bit, holding at most `max_samples` of
    them however long the trace (a tegrastats log of an hour at 10 ms is 360k samples).

    Each bucket edge is served by the segment between the two samples around it, as downsample's
    bisect finds it (the last segment serves every edge at or past its start)."""

    def __init__(self, t_first: float, t_last: float, max_samples: int = DEFAULT_MAX_SAMPLES) -> None:
        if max_samples < 3:
            raise ConfigError(f"cannot down-sample to {max_samples} samples", "keep at least 3")
        self.max_samples = max_samples
        self._buckets = max_samples - 2
        self._t0, self._t_last = float(t_first), float(t_last)
        self._width = (self._t_last - self._t0) / self._buckets
        self._kept: list[PowerSample] | None = []  # the samples themselves while there are few enough
        self._rails: tuple[str, ...] = ()
        self._energy: RunningTrapezoid | None = None
        self._prev: tuple[float, list[float], list[float]] | None = None  # t, powers, mW·s up to it
        self._seg: tuple[tuple[float, list[float], list[float]], tuple[float, list[float], list[float]]] | None = None
        self._before: list[float] | None = None
        self._k = 0  # the next bucket to close
        self._means: list[PowerSample] = []

    def add(self, sample: PowerSample) -> None:
        t = float(sample.t)
        if self._kept is not None:
            self._kept.append(sample)
            if len(self._kept) > self.max_samples:
                self._kept = None
        if self._energy is None:
            self._rails = tuple(sample.rails_mw)
            self._energy = RunningTrapezoid(len(self._rails))
        elif not t > self._prev[0]:  # type: ignore[index]
            raise _not_increasing()
        try:
            powers = [float(sample.rails_mw[r]) for r in self._rails]
        except KeyError as exc:
            raise ConfigError(f"rail {exc.args[0]} is missing from some power samples",
                              "store samples of one rail set per run") from None
        self._energy.add(t, powers)
        # mW·s (= mJ) up to this sample, as downsample's cumulative trapezoid gives it
        point = (t, powers, [j * 1000.0 for j in self._energy.joules()])
        if self._prev is not None:
            self._seg = (self._prev, point)
            self._serve(final=False)
        self._prev = point

    def result(self) -> list[PowerSample]:
        """The trace as downsample gives it: the samples themselves when there are at most max_samples."""
        if self._kept is not None:
            return list(self._kept)
        if self._prev is None or self._prev[0] != self._t_last:
            raise ConfigError("the trace does not end at the time it was said to",
                              "give the last sample's time as t_last")
        self._serve(final=True)
        first, last = self._means[0], self._means[-1]
        return [PowerSample(self._t0, dict(first.rails_mw)), *self._means, PowerSample(self._t_last, dict(last.rails_mw))]

    def _serve(self, final: bool) -> None:
        """Close the buckets whose edges lie before the newest sample (all of them once `final`)."""
        assert self._seg is not None
        if self._before is None:
            self._before = self._energy_at(self._t0)
        t0, width, buckets = self._t0, self._width, self._buckets
        while self._k < buckets:
            k = self._k
            edge = self._t_last if k == buckets - 1 else t0 + (k + 1) * width
            if not final and not edge < self._seg[1][0]:
                return
            after = self._energy_at(edge)
            span = edge - (t0 + k * width)
            self._means.append(PowerSample(t0 + (k + 0.5) * width,
                                           {r: (after[i] - self._before[i]) / span for i, r in enumerate(self._rails)}))
            self._before = after
            self._k += 1

    def _energy_at(self, t: float) -> list[float]:
        (t_a, p_a, cum_a), (t_b, p_b, _cum_b) = self._seg  # type: ignore[misc]
        dt, span = t - t_a, t_b - t_a
        return [cum_a[i] + p0 * dt + 0.5 * (p1 - p0) / span * dt * dt for i, (p0, p1) in enumerate(zip(p_a, p_b))]
