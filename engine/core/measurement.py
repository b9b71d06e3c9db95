"""A measurement: the time and energy of some training samples at one setting, with its source.

The time may be unknown (None): an energy-only measurement, as imported sweeps may hold
(`slm-dvfs import-sweep`). Its energy per sample ranks settings; anything derived from the
time (power, throughput, slowdown) raises TimeUnknownError instead of inventing a figure."""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Mapping

from engine.core.errors import ConfigError
from engine.core.provenance import Source
from engine.core.jsontypes import JsonObject, as_float, as_int


class TimeUnknownError(ConfigError):
    """A figure that needs the time was asked of an energy-only measurement."""


@dataclass(frozen=True)
class Measurement:
    """Time and energy of some training samples at one setting.

    `source` says where the figures come from; the twin's costs are `twin`, a board's
    power monitor `measured`. Callers on a board must pass Source.MEASURED."""

    time_s: float | None  # None: energy-only (an imported sweep without times)
    energy_j: float
    samples: int
    peak_power_w: float | None = None
    source: Source = Source.TWIN

    def __post_init__(self) -> None:
        if self.time_s is not None and not (math.isfinite(self.time_s) and self.time_s > 0):
            raise ConfigError(f"measurement time must be positive, got {self.time_s!r} s", "measure at least one step")
        if not (math.isfinite(self.energy_j) and self.energy_j >= 0):
            raise ConfigError(f"measurement energy must be >= 0, got {self.energy_j!r} J", "check the power source")
        if isinstance(self.samples, bool) or not isinstance(self.samples, numbers.Integral) or self.samples <= 0:
            raise ConfigError(
                f"measurement needs a positive sample count, got {self.samples!r}",
                "count the samples of the measured steps",
            )
        object.__setattr__(self, "samples", int(self.samples))

    @property
    def has_time(self) -> bool:
        """False for an energy-only measurement."""
        return self.time_s is not None

    def _time(self, what: str) -> float:
        if self.time_s is None:
            raise TimeUnknownError(
                f"{what} needs the time, but this {self.source.value} measurement is energy-only (no time recorded)",
                "rank energy-only points by energy per sample (objective `energy`), or import the measurements "
                "with their times (a time_s column)",
            )
        return self.time_s

    @property
    def avg_power_w(self) -> float:
        return self.energy_j / self._time("the average power")

    @property
    def joules_per_sample(self) -> float:
        return self.energy_j / self.samples

    @property
    def seconds_per_sample(self) -> float:
        return self._time("the time per sample") / self.samples

    @property
    def samples_per_s(self) -> float:
        return self.samples / self._time("the throughput")

    def slowdown(self, baseline: "Measurement") -> float:
        """Fractional increase of time per sample over the baseline (0.05 = 5% slower)."""
        return self.seconds_per_sample / baseline.seconds_per_sample - 1.0

    def __add__(self, other: "Measurement") -> "Measurement":
        """Two windows at the same setting, taken together."""
        if other.source != self.source:
            raise ConfigError(
                f"cannot add a {other.source} measurement to a {self.source} one",
                "keep figures of different sources apart",
            )
        peaks = [p for p in (self.peak_power_w, other.peak_power_w) if p is not None]
        return Measurement(
            None if self.time_s is None or other.time_s is None else self.time_s + other.time_s,
            self.energy_j + other.energy_j,
            self.samples + other.samples,
            max(peaks) if peaks else None,
            self.source,
        )

    def to_json(self) -> JsonObject:
        return {
            "time_s": self.time_s,
            "energy_j": self.energy_j,
            "samples": self.samples,
            "peak_power_w": self.peak_power_w,
            "source": self.source.value,
            "avg_power_w": self.avg_power_w if self.has_time else None,
            "joules_per_sample": self.joules_per_sample,
            "samples_per_s": self.samples_per_s if self.has_time else None,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, object]) -> "Measurement":
        try:
            return cls(
                time_s=None if d["time_s"] is None else as_float(d["time_s"]),
                energy_j=as_float(d["energy_j"]),
                samples=as_int(d["samples"]),
                peak_power_w=None if d.get("peak_power_w") is None else as_float(d["peak_power_w"]),
                source=Source(d.get("source", Source.TWIN.value)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"stored measurement is malformed ({exc})", "re-run the sweep that wrote it") from None
