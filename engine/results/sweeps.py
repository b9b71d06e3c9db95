"""Sweep summaries: points grouped by setting with confidence intervals, the optimum, MAXN, and the oracle's stored points."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Mapping, Protocol, Sequence

from engine.core.jsontypes import JsonObject
from engine.core.measurement import Measurement
from engine.core.provenance import Source
from engine.core.stats import Stat, mean_ci
from engine.device.setting import MAXN, DvfsSetting
from engine.results.records import SweepPoint, setting_key

if TYPE_CHECKING:  # annotations only: engine.results.store imports the results modules
    from engine.results.store import Store


RAILS_ALL = "all"


@dataclass(frozen=True)
class PointSummary:
    """One setting of a sweep over its repetitions.

    The time figures (time_s, power_w, samples_per_s, seconds_per_sample) are None for an
    energy-only setting (no repetition recorded its time: an imported sweep); with some
    repetitions timed they are over those (their Stat's n says how many)."""

    setting: DvfsSetting
    n: int  # repetitions
    samples: int  # training samples per repetition
    time_s: Stat | None
    energy_j: Stat
    power_w: Stat | None
    joules_per_sample: Stat
    samples_per_s: Stat | None
    seconds_per_sample: Stat | None
    rail_energy_j: Mapping[str, float]  # mean per rail
    source: Source

    @property
    def energy_only(self) -> bool:
        """No repetition of this setting recorded its time."""
        return self.time_s is None

    def measurement(self) -> Measurement:
        """The means as one Measurement (what the oracle ranks); its time is None when energy-only."""
        return Measurement(None if self.time_s is None else self.time_s.mean, self.energy_j.mean, self.samples,
                           source=self.source)

    def to_json(self) -> JsonObject:
        return {
            "setting": self.setting.to_json(), "label": self.setting.label(), "n": self.n, "samples": self.samples,
            "time_s": _json(self.time_s), "energy_j": self.energy_j.to_json(), "power_w": _json(self.power_w),
            "joules_per_sample": self.joules_per_sample.to_json(), "samples_per_s": _json(self.samples_per_s),
            "seconds_per_sample": _json(self.seconds_per_sample),
            "rail_energy_j": dict(self.rail_energy_j), "source": self.source.value, "energy_only": self.energy_only,
        }


def _json(stat: Stat | None) -> JsonObject | None:
    return None if stat is None else stat.to_json()


def _timed(values: list[float]) -> Stat | None:
    return mean_ci(values) if values else None


def summarize_points(points: Iterable[SweepPoint]) -> list[PointSummary]:
    """Group stored sweep points (engine.results.records.SweepPoint) by setting, in order of first appearance."""
    groups: dict[str, list[SweepPoint]] = {}
    for p in points:
        groups.setdefault(setting_key(p.setting), []).append(p)
    out = []
    for pts in groups.values():
        setting = DvfsSetting.from_json(dict(pts[0].setting))
        rails = sorted({r for p in pts for r in p.rail_energy_j})
        samples = [int(p.samples) for p in pts]
        source = pts[0].source or Source.TWIN
        # energy-only points (time None) have no time figures: (time, energy, samples) of the timed ones
        timed = [(p.time_s, p.energy_j, p.samples) for p in pts if p.time_s is not None]
        out.append(PointSummary(
            setting=setting,
            n=len(pts),
            samples=round(statistics.fmean(samples)),
            time_s=_timed([t for t, _, _ in timed]),
            energy_j=mean_ci([p.energy_j for p in pts]),
            power_w=_timed([e / t for t, e, _ in timed]),
            joules_per_sample=mean_ci([p.energy_j / p.samples for p in pts]),
            samples_per_s=_timed([n / t for t, _, n in timed]),
            seconds_per_sample=_timed([t / n for t, _, n in timed]),
            rail_energy_j={r: statistics.fmean(p.rail_energy_j.get(r, 0.0) for p in pts) for r in rails},
            source=Source(source),
        ))
    return out


class Ranking(Protocol):
    """What ranks settings (engine.dvfs.objectives.Objective): given by the caller, so the
    results layer does not depend on the dvfs layer above it."""

    @property
    def spec(self) -> str:
        """How the user writes it, e.g. `energy` or `energy@5%`."""
        ...

    def best(self, candidates: Sequence[tuple[DvfsSetting, Measurement]], baseline: Measurement | None, *,
             baseline_setting: DvfsSetting = MAXN) -> tuple[DvfsSetting, Measurement]: ...


def optimum(summaries: Sequence[PointSummary], objective: Ranking | None = None, *,
            baseline: DvfsSetting = MAXN) -> PointSummary | None:
    """The summary the objective ranks best; without one, the lowest energy per sample
    (the first on ties, as the energy objective ranks). `baseline`: the board's (as for maxn_of), what a
    slowdown limit is measured against and what the objective falls back to."""
    if not summaries:
        return None
    if objective is None:
        return min(summaries, key=lambda s: s.measurement().joules_per_sample)
    candidates = [(s.setting, s.measurement()) for s in summaries]
    best, _m = objective.best(candidates, None, baseline_setting=baseline)
    return next(s for s in summaries if s.setting == best)


def maxn_of(summaries: Sequence[PointSummary], baseline: DvfsSetting = MAXN) -> PointSummary | None:
    """The baseline's point: `baseline` is the board's (engine.device.baseline.board_baseline, or
    engine.results.baseline.device_baseline for a stored sweep); MAXN, mode 0, the AGX Orin's."""
    return next((s for s in summaries if s.setting == baseline), None)


def stored_points(
    store: Store,
    device_id: int,
    workload_id: int,
    *,
    source: Source | None = None,
    rails: str | None = None,
) -> list[tuple[DvfsSetting, Measurement]]:
    """(setting, mean measurement) of every setting the store's sweeps of this workload on
    this device's module measured (all their repetitions together, on any board of the module:
    Db.device_ids): the oracle's data. With `rails`, only sweeps whose energy is over that preset."""
    points: list[SweepPoint] = []
    devices = set(store.device_ids(device_id, "module")) if hasattr(store, "device_ids") else {device_id}
    for sweep in store.list_sweeps():
        if sweep.device_id not in devices or sweep.workload_id != workload_id:
            continue
        if source is not None and sweep.source != source:
            continue
        if rails is not None and sweep.space.get("rails", RAILS_ALL) != rails:
            continue
        points.extend(store.sweep_points(sweep.id))
    return [(s.setting, s.measurement()) for s in summarize_points(points)]
