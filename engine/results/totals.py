"""One run's figures, as one value: `RunTotals`.

The run recorder (engine.run.recorder) makes one from its monitor window over the training steps; an
import makes one from a log's figures. `Store.finish_run` stores it as it is (watts, throughput and
joules per sample are its properties, derived here and nowhere else), and the experiment's RunFigures
and a stored run's RunRecord are views of it (`RunRecord.totals`), so every client reads the same
numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Mapping

from engine.core.provenance import Source
from engine.device.power import PowerSample
from engine.device.rails import total_rails

if TYPE_CHECKING:  # annotations only
    from engine.device.monitor import WindowResult


@dataclass(frozen=True)
class RunTotals:
    """Time, energy (per rail, and the total over the preset's rails), samples, steps and the power trace
    of one run's training steps, labelled by their source."""

    time_s: float  # on the device (measured, or the twin's virtual time)
    rail_energy_j: Mapping[str, float] = field(default_factory=dict)  # every rail the source reported
    rails: tuple[str, ...] = ()  # the rails the total is over (the preset's, resolved on this device)
    rails_preset: str | None = None  # the preset they were named by, e.g. "gpu+cpu" (the store's column)
    samples: int | None = None  # training samples (None: as the run was started with)
    steps: int | None = None
    power_samples: tuple[PowerSample, ...] = ()  # the window's trace: its trapezoid is rail_energy_j
    source: Source | None = None  # None: the run's own (an import's figures)
    # The total over `rails`; None: summed here from rail_energy_j (over `rails`, or every rail given). An
    # import gives the total its log states.
    energy_j: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "rails", tuple(self.rails))
        object.__setattr__(self, "power_samples", tuple(self.power_samples))
        if self.source is not None:
            object.__setattr__(self, "source", Source(self.source))
        if self.energy_j is None and self.rail_energy_j:
            over = self.rails or total_rails(tuple(self.rail_energy_j))  # the module's total where none is named
            object.__setattr__(self, "energy_j", float(sum(self.rail_energy_j.get(r, 0.0) for r in over)))

    @classmethod
    def from_window(cls, window: WindowResult, *, samples: int | None, steps: int | None = None, rails: tuple[str, ...] | None = None,
                    rails_preset: str | None = None) -> RunTotals:
        """From a monitor window (engine.device.monitor.WindowResult) over the run's steps; `rails`: the
        rails the total is over (default: the window's)."""
        return cls(time_s=float(window.duration_s), rail_energy_j=dict(window.energy_j),
                   rails=tuple(window.rails if rails is None else rails), rails_preset=rails_preset,
                   samples=samples, steps=steps, power_samples=tuple(window.trace), source=Source(window.source))

    @property
    def total_j(self) -> float:
        """The energy over the preset's rails (0.0 when none was recorded)."""
        return float(self.energy_j or 0.0)

    @property
    def avg_power_w(self) -> float | None:
        return self.energy_j / self.time_s if self.energy_j is not None and self.time_s else None

    @property
    def samples_per_s(self) -> float | None:
        return self.samples / self.time_s if self.samples and self.time_s else None

    @property
    def joules_per_sample(self) -> float | None:
        return self.energy_j / self.samples if self.samples and self.energy_j is not None else None
