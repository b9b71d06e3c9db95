"""Intervals on twin figures from an ensemble of plausible profiles.

The profile's uncertain numbers (`TwinProfile.uncertainty`: priors in the shipped profile, what a
fit left in a calibrated one) are sampled into `n` plausible profiles
(engine.device.twin.params.sample_profiles, member 0 = the profile itself), and the twin's fast
model (`fast_points`) costs the workload at every setting under each. Per setting the members'
energy and time per sample give quantile intervals; derived figures are computed *within* each
member first and only then summarised (paired): the saving of a setting against MAXN is
1 - E_m(setting) / E_m(MAXN) per member m, so an error that moves both (a capacitance, a
voltage curve) cancels as it would on the board; the optimum is each member's own best setting.

Independent draws ignore correlations between parameters, so the intervals are, if anything,
wide; a calibrated profile's smaller sds narrow them. Deterministic (fixed seed): 32 members over a
12-setting space and four padded lengths take about a second, once per workload (docs/twin.md, "Intervals").
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Sequence

from engine.core.interval import LEVEL, Interval, quantile_interval
from engine.core.measurement import Measurement
from engine.core.trace import StepMix, StepTrace
from engine.core.jsontypes import JsonObject
from engine.device.baseline import profile_baseline
from engine.device.setting import MAXN, DvfsSetting
from engine.device.twin.ensemble_cache import Figures, cached_figures, ensemble_key, store_figures
from engine.device.twin.fast import fast_points
from engine.device.twin.params import sample_profiles

if TYPE_CHECKING:  # the profile module loads with the first profile
    from engine.device.twin.profile import TwinProfile

log = logging.getLogger(__name__)

MEMBERS = 32  # enough for stable 5th/95th percentiles of smooth figures; each costs one fast sweep
SEED = 0
Cost = Callable[[Measurement], float]


@dataclass(frozen=True)
class Ensemble:
    """Each member's twin figures of one workload at each setting (per sample)."""

    settings: tuple[DvfsSetting, ...]
    energy_ps: tuple[tuple[float, ...], ...]  # [member][setting], J per sample
    time_ps: tuple[tuple[float, ...], ...]  # [member][setting], s per sample
    gpu_hz: tuple[tuple[int, ...], ...]  # [member][setting], where the GPU governor settled
    gpu_table_hz: tuple[int, ...]
    profile: str
    seed: int = SEED
    level: float = LEVEL
    baseline: DvfsSetting = MAXN  # the profile's uncapped mode (engine.device.baseline): savings are against it

    @property
    def members(self) -> int:
        return len(self.energy_ps)

    @property
    def basis(self) -> str:
        return f"twin ensemble of {self.members} {self.profile} profiles"

    def _col(self, setting: DvfsSetting) -> int:
        try:
            return self.settings.index(setting)
        except ValueError:
            raise KeyError(f"{setting.label()} is not a setting of this ensemble") from None

    def energy(self, setting: DvfsSetting) -> Interval:
        """Energy per sample at `setting` (J)."""
        j = self._col(setting)
        return quantile_interval([m[j] for m in self.energy_ps], self.level, self.basis)

    def time(self, setting: DvfsSetting) -> Interval:
        """Time per sample at `setting` (s)."""
        j = self._col(setting)
        return quantile_interval([m[j] for m in self.time_ps], self.level, self.basis)

    def savings(self, setting: DvfsSetting, baseline: DvfsSetting | None = None) -> list[float]:
        """1 - E(setting) / E(baseline), per member (paired); `baseline` defaults to the profile's."""
        j, b = self._col(setting), self._col(baseline or self.baseline)
        return [1.0 - m[j] / m[b] for m in self.energy_ps]

    def saving(self, setting: DvfsSetting, baseline: DvfsSetting | None = None) -> Interval:
        """The energy saving of `setting` against `baseline` (a fraction), paired within members."""
        return quantile_interval(self.savings(setting, baseline), self.level, f"{self.basis}, paired")

    def slowdown(self, setting: DvfsSetting, baseline: DvfsSetting | None = None) -> Interval:
        j, b = self._col(setting), self._col(baseline or self.baseline)
        return quantile_interval([m[j] / m[b] - 1.0 for m in self.time_ps], self.level, f"{self.basis}, paired")

    def optima(self, cost: Cost | None = None, *, pinned_only: bool = True) -> list[DvfsSetting]:
        """Each member's best setting (least energy per sample, or least `cost`); MAXN is the
        baseline, not a candidate, unless it is the only setting (as the selector chooses)."""
        cols = [j for j, s in enumerate(self.settings) if not (pinned_only and s == self.baseline)] or \
            list(range(len(self.settings)))
        out = []
        for e_row, t_row in zip(self.energy_ps, self.time_ps):
            if cost is None:
                best = min(cols, key=lambda j: e_row[j])
            else:
                best = min(cols, key=lambda j: cost(Measurement(t_row[j], e_row[j], 1, None)))
            out.append(self.settings[best])
        return out

    def optimum_gpu_hz(self, cost: Cost | None = None) -> list[int]:
        """The GPU clock of each member's optimum (where its governor settled, for an unpinned one)."""
        return [row[self._col(s)] for row, s in zip(self.gpu_hz, self.optima(cost))]

    def optimum_gpu(self, cost: Cost | None = None) -> Interval:
        """Where the optimum's GPU clock lies across members (Hz)."""
        return quantile_interval(self.optimum_gpu_hz(cost), self.level, self.basis)

    def optimum_steps(self, cost: Cost | None = None) -> int:
        """How many GPU table steps the central `level` of the members' optima spans (0: they agree
        on one step). Order statistics, not interpolation: a step is a step."""
        hz = sorted(self.optimum_gpu_hz(cost))
        tail = (1.0 - self.level) / 2.0
        lo = hz[int(round(tail * (len(hz) - 1)))]
        hi = hz[int(round((1.0 - tail) * (len(hz) - 1)))]
        return _step_index(self.gpu_table_hz, hi) - _step_index(self.gpu_table_hz, lo)

    def to_json(self) -> JsonObject:
        return {"members": self.members, "seed": self.seed, "level": self.level, "basis": self.basis,
                "profile": self.profile}


def _step_index(table: Sequence[int], hz: int) -> int:
    return min(range(len(table)), key=lambda i: abs(table[i] - hz)) if table else 0


def ensemble(trace: StepTrace | StepMix, profile: TwinProfile, settings: Sequence[DvfsSetting], *,
             members: int = MEMBERS, seed: int = SEED, level: float = LEVEL,
             rails: Sequence[str] | None = None) -> Ensemble:
    """The ensemble's figures of `trace` at `settings` (the profile's baseline, its uncapped mode, added
    when missing: savings need it). Cached per (trace, profile, settings, members, seed, rails): the CLI
    and the TUI ask twice; and on disk (ensemble_cache), for the next process that asks."""
    settings = tuple(settings)
    base = profile_baseline(profile).setting
    if base not in settings:
        settings = (base,) + settings
    rails = None if rails is None else tuple(rails)
    try:
        return _cached(trace, profile, settings, members, seed, level, rails)
    except TypeError:  # something unhashable (a test double): compute without the cache
        return _compute(trace, profile, settings, members, seed, level, rails)


@functools.lru_cache(maxsize=16)
def _cached(trace: StepTrace | StepMix, profile: TwinProfile, settings: tuple[DvfsSetting, ...], members: int, seed: int, level: float,
            rails: tuple[str, ...] | None) -> Ensemble:
    return _compute(trace, profile, settings, members, seed, level, rails)


def _compute(trace: StepTrace | StepMix, profile: TwinProfile, settings: tuple[DvfsSetting, ...], members: int, seed: int, level: float,
             rails: tuple[str, ...] | None) -> Ensemble:
    # A fresh process asks for the same workload's figures again (each `select`): they are kept on disk.
    try:
        key = ensemble_key(trace, profile, settings, members, seed, rails)
    except TypeError:  # a profile that is no TwinProfile (a test double): nothing to key it by
        key = None
    figures = None if key is None else cached_figures(key)
    if figures is None:
        figures = _simulate(trace, profile, settings, members, seed, rails)
        if key is not None:
            store_figures(key, figures)
    return Ensemble(settings, figures.energy_ps, figures.time_ps, figures.gpu_hz, tuple(profile.gpu.table_hz),
                    str(profile.name), seed, level, profile_baseline(profile).setting)


def _simulate(trace: StepTrace | StepMix, profile: TwinProfile, settings: tuple[DvfsSetting, ...], members: int,
              seed: int, rails: tuple[str, ...] | None) -> Figures:
    energy, time, clocks = [], [], []
    for member in sample_profiles(profile, members, seed=seed):
        points = fast_points(trace, member, settings, warmup_steps=0, steps=1, rails=rails)
        energy.append(tuple(p.measurement.joules_per_sample for p in points))
        time.append(tuple(p.measurement.seconds_per_sample for p in points))
        clocks.append(tuple(p.gpu_hz for p in points))
    log.debug("twin ensemble: %d members x %d settings of %s", members, len(settings), profile.name)
    return Figures(tuple(energy), tuple(time), tuple(clocks))
