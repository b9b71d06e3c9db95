"""Training the selector: one path for every client. The CLI's `train-selector` and the
TUI's train key both call `train_from_store` (or `train_on` with twin-zoo data), so the
same store gives the same dataset rows, restricted to the same setting space, and the
same selector."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

from engine.core.errors import ConfigError
from engine.core.jsontypes import JsonObject
from engine.dvfs.objectives import Objective
from engine.selector.candidates import CandidateSpec, default_candidates
from engine.selector.dataset import Dataset, from_store, profile_settings
from engine.selector.mixing import merge, weigh_measured
from engine.selector.selection import DEFAULT_SPLITS, CVReport, Progress
from engine.selector.selector import Selector, train_selector

if TYPE_CHECKING:
    from engine.results.store import Store

DEFAULT_PROFILE = "agx-orin-64gb"
DEFAULT_SPACE = "gpu"  # every GPU step, CPU and EMC on their governors
DEFAULT_RAILS = "all"


@dataclass(frozen=True)
class Trained:
    selector: Selector
    report: CVReport  # the cross-validation table
    dataset: Dataset  # what it learnt from


def store_dataset(store: Store, *, source: str = "measured", profile: str = DEFAULT_PROFILE,
                  space: str = DEFAULT_SPACE, rails: str = DEFAULT_RAILS, measured_weight: float | None = None,
                  module: str | None = None, across_modules: bool = False) -> Dataset:
    """The store's sweep points of `source` over `rails` (engine.selector.dataset.from_store),
    only those whose setting lies in the profile's `space`: a selector chooses among that
    space, so points outside it would teach it settings it can never pick. With both sources,
    each measured point weighs `measured_weight` (None: engine.selector.mixing.auto_weight).
    One module's sweeps (`module`, else engine.selector.modules.pick_module), or with
    `across_modules` every module's, each encoded against its own profile."""
    from engine.device.twin.profile import load_profile

    ds = from_store(store, source=source, profile=profile, space=space, rails=rails, module=module,
                    across_modules=across_modules)
    allowed = set(profile_settings(load_profile(profile), space))
    keep = [i for i, s in enumerate(ds.settings) if s in allowed]
    if not keep:
        raise ConfigError(f"no recorded sweep point lies in the {space} space",
                          "sweep that space (`slm-dvfs sweep --space ...`), or pick the space you swept")
    return weigh_measured(ds.subset(keep), measured_weight)


def with_measured(twin: Dataset, store: Store, *, profile: str = DEFAULT_PROFILE, space: str = DEFAULT_SPACE,
                  rails: str = DEFAULT_RAILS, measured_weight: float | None = None,
                  module: str | None = None) -> Dataset:
    """Twin data (e.g. the twin zoo) and the store's measured sweeps (of one module: store_dataset),
    the source a feature and each measured point weighted (`train-selector --from-twin-zoo --source both`)."""
    measured = store_dataset(store, source="measured", profile=profile, space=space, rails=rails, module=module)
    return weigh_measured(merge(twin, measured), measured_weight)


def train_on(ds: Dataset, objective: Objective | None = None, *, candidates: Sequence[CandidateSpec] | None = None,
             n_splits: int = DEFAULT_SPLITS, progress: Progress | None = None, command: JsonObject | None = None,
             jobs: int | None = None, shortlist: int | None = None) -> Trained:
    """Cross-validate the candidates on `ds` and refit the winner (engine.selector.selector.train_selector;
    `jobs` and `shortlist` as engine.selector.selection.cross_validate takes them)."""
    specs = list(candidates or default_candidates())
    if progress is not None:
        progress(f"{len(ds)} rows, {ds.summary()['workloads']} workloads; cross-validating {len(specs)} candidates")
    selector, report = train_selector(ds, objective, candidates=specs, n_splits=n_splits, progress=progress,
                                      command=command, jobs=jobs, shortlist=shortlist)
    return Trained(selector, report, ds)


def train_from_store(store: Store, objective: Objective | None = None, *, source: str = "measured", profile: str = DEFAULT_PROFILE,
                     space: str = DEFAULT_SPACE, rails: str = DEFAULT_RAILS,
                     candidates: Sequence[CandidateSpec] | None = None, n_splits: int = DEFAULT_SPLITS,
                     progress: Progress | None = None, command: JsonObject | None = None,
                     measured_weight: float | None = None, module: str | None = None,
                     across_modules: bool = False, jobs: int | None = None, shortlist: int | None = None) -> Trained:
    """store_dataset, then train_on: the selector the store's sweeps teach."""
    ds = store_dataset(store, source=source, profile=profile, space=space, rails=rails,
                       measured_weight=measured_weight, module=module, across_modules=across_modules)
    return train_on(ds, objective, candidates=candidates, n_splits=n_splits, progress=progress, command=command,
                    jobs=jobs, shortlist=shortlist)
