"""Sweep summaries: points grouped by setting with confidence intervals, the optimum, MAXN, and the oracle's stored points."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Protocol, Sequence

from engine.core.measurement import Measurement
from engine.core.provenance import Source
from engine.core.stats import Stat, mean_ci
from engine.device.setting import MAXN, DvfsSetting
from engine.results.records import setting_key


RAILS_ALL = "all"


@dataclass(frozen=True)
class PointSummary:
    """One setting of a sweep over its repetitions."""

    setting: DvfsSetting
    n: int  # repetitions
    samples: int  # training samples per repetition
    time_s: Stat
    energy_j: Stat
    power_w: Stat
    joules_per_sample: Stat
    samples_per_s: Stat
    seconds_per_sample: Stat
    rail_energy_j: Mapping[str, float]  # mean per rail
    source: Source

    def measurement(self) -> Measurement:
        """The means as one Measurement (what the oracle ranks)."""
        return Measurement(self.time_s.mean, self.energy_j.mean, self.samples, source=self.source)

    def to_json(self) -> dict[str, Any]:
        return {
            "setting": self.setting.to_json(), "label": self.setting.label(), "n": self.n, "samples": self.samples,
            "time_s": self.time_s.to_json(), "energy_j": self.energy_j.to_json(), "power_w": self.power_w.to_json(),
            "joules_per_sample": self.joules_per_sample.to_json(), "samples_per_s": self.samples_per_s.to_json(),
            "seconds_per_sample": self.seconds_per_sample.to_json(),
            "rail_energy_j": dict(self.rail_energy_j), "source": self.source.value,
        }


def summarize_points(points: Iterable[Any]) -> list[PointSummary]:
    """Group stored sweep points (engine.results.records.SweepPoint) by setting, in order of first appearance."""
    groups: dict[str, list[Any]] = {}
    for p in points:
        groups.setdefault(setting_key(p.setting), []).append(p)
    out = []
    for pts in groups.values():
        setting = DvfsSetting.from_json(dict(pts[0].setting))
        rails = sorted({r for p in pts for r in p.rail_energy_j})
        samples = [int(p.samples) for p in pts]
        source = pts[0].source or Source.TWIN
        out.append(PointSummary(
            setting=setting,
            n=len(pts),
            samples=round(statistics.fmean(samples)),
            time_s=mean_ci([p.time_s for p in pts]),
            energy_j=mean_ci([p.energy_j for p in pts]),
            power_w=mean_ci([p.energy_j / p.time_s for p in pts]),
            joules_per_sample=mean_ci([p.energy_j / p.samples for p in pts]),
            samples_per_s=mean_ci([p.samples / p.time_s for p in pts]),
            seconds_per_sample=mean_ci([p.time_s / p.samples for p in pts]),
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

    def best(self, candidates: Sequence[tuple[DvfsSetting, Measurement]],
             baseline: Measurement | None) -> tuple[DvfsSetting, Measurement]: ...


def optimum(summaries: Sequence[PointSummary], objective: Ranking | None = None) -> PointSummary | None:
    """The summary the objective ranks best; without one, the lowest energy per sample
    (the first on ties, as the energy objective ranks)."""
    if not summaries:
        return None
    if objective is None:
        return min(summaries, key=lambda s: s.measurement().joules_per_sample)
    candidates = [(s.setting, s.measurement()) for s in summaries]
    best, _m = objective.best(candidates, None)
    return next(s for s in summaries if s.setting == best)


def maxn_of(summaries: Sequence[PointSummary]) -> PointSummary | None:
    return next((s for s in summaries if s.setting == MAXN), None)


def stored_points(
    store: Any,
    device_id: int,
    workload_id: int,
    *,
    source: Source | None = None,
    rails: str | None = None,
) -> list[tuple[DvfsSetting, Measurement]]:
    """(setting, mean measurement) of every setting the store's sweeps of this workload on
    this device measured (all their repetitions together): the oracle's data. With
    `rails`, only sweeps whose energy is over that preset."""
    points: list[Any] = []
    for sweep in store.list_sweeps():
        if sweep.device_id != device_id or sweep.workload_id != workload_id:
            continue
        if source is not None and sweep.source != source:
            continue
        if rails is not None and sweep.space.get("rails", RAILS_ALL) != rails:
            continue
        points.extend(store.sweep_points(sweep.id))
    return [(s.setting, s.measurement()) for s in summarize_points(points)]
