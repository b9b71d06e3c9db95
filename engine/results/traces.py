"""Power traces as stored: down-sampled so a run holds a bounded number of samples with the same energy."""

from __future__ import annotations

from bisect import bisect_right
from typing import Sequence

from engine.core.errors import ConfigError
from engine.core.stats import cumulative_trapezoid_j
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
    n = len(samples)
    if n <= max_samples:
        return list(samples)
    ts = [float(s.t) for s in samples]
    if any(b <= a for a, b in zip(ts, ts[1:])):
        raise ConfigError("power samples must have strictly increasing times", "sort them and drop duplicates")
    rails = tuple(samples[0].rails_mw)
    try:
        power = {r: [float(s.rails_mw[r]) for s in samples] for r in rails}
    except KeyError as exc:
        raise ConfigError(f"rail {exc.args[0]} is missing from some power samples",
                          "store samples of one rail set per run") from None
    # mW·s (= mJ) up to each sample, as the monitor integrates
    cum = {r: [j * 1000.0 for j in cumulative_trapezoid_j(ts, power[r])] for r in rails}

    def energy_at(t: float) -> dict[str, float]:
        i = min(max(bisect_right(ts, t) - 1, 0), n - 2)
        dt, span = t - ts[i], ts[i + 1] - ts[i]
        out = {}
        for r in rails:
            p0, p1 = power[r][i], power[r][i + 1]
            out[r] = cum[r][i] + p0 * dt + 0.5 * (p1 - p0) / span * dt * dt
        return out

    buckets = max_samples - 2
    t0, width = ts[0], (ts[-1] - ts[0]) / buckets
    means = []
    before = energy_at(t0)
    for k in range(buckets):
        edge = ts[-1] if k == buckets - 1 else t0 + (k + 1) * width
        after = energy_at(edge)
        span = edge - (t0 + k * width)
        means.append(PowerSample(t0 + (k + 0.5) * width, {r: (after[r] - before[r]) / span for r in rails}))
        before = after
    return [PowerSample(ts[0], dict(means[0].rails_mw)), *means, PowerSample(ts[-1], dict(means[-1].rails_mw))]
