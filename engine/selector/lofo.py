"""Leave-one-family-out evaluation: how the selector chooses for an architecture it never saw.

Cross-validation (selection.py) holds out workloads, but a held-out BERT shape still has
its siblings in training. Here each architecture family F (engine.workload.zoo.FAMILIES)
is held out whole: a selector is fitted on every other family's rows, then chooses for
each of F's workloads, and is scored against that workload's oracle in the dataset (for
twin data, the twin's fast sweep is the truth):

    regret = cost(chosen) / cost(oracle) - 1        saving = 1 - energy(chosen) / energy(MAXN)

with 0 probes and with K probes, whose windows are read from the workload's own rows (the
same figures a probe would measure on the twin).
"""

from __future__ import annotations

import logging
import statistics
from dataclasses import dataclass, replace
from typing import Callable, Iterable, Sequence, TypedDict

import numpy as np

from engine.core.errors import ConfigError
from engine.dvfs.objectives import Objective
from engine.selector.candidates import CandidateSpec
from engine.selector.dataset import Dataset
from engine.selector.selection import outcome
from engine.selector.selector import Selector, fit_selector

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FamilySplit:
    """The rows a family's selector is trained on, and the family's own rows it is tested on."""

    family: str
    train: np.ndarray
    test: np.ndarray


@dataclass(frozen=True)
class FamilyResult:
    """One held-out workload's outcome with `probes` probe windows."""

    family: str
    workload: str
    probes: int
    chosen: str  # the setting's label
    regret: float
    saving: float | None  # against MAXN
    oracle_saving: float | None


def family_splits(ds: Dataset, families: Iterable[str] | None = None) -> list[FamilySplit]:
    """One split per family of `ds` (or of `families`): its rows against everyone else's."""
    fam = np.array([w.family for w in ds.workloads])
    present = sorted(set(fam.tolist()))
    if len(present) < 2:
        raise ConfigError(f"leaving one family out needs at least 2 families, the data has {len(present)}",
                          "add workloads of other architectures (models of other families)")
    wanted = present if families is None else list(families)
    missing = [f for f in wanted if f not in present]
    if missing:
        raise ConfigError(f"no workload of family {', '.join(missing)} in the data",
                          f"pick from {', '.join(present)}")
    return [FamilySplit(f, np.flatnonzero(fam != f), np.flatnonzero(fam == f)) for f in wanted]


def evaluate_rows(selector: Selector, ds: Dataset, rows: np.ndarray, objective: Objective,
                  probes: Sequence[int] = (0, 1)) -> list[FamilyResult]:
    """The selector's choice for every workload among `rows` of `ds`, scored against its oracle there."""
    row_set = set(np.asarray(rows).tolist())
    out = []
    for key, wrows in ds.by_workload().items():
        if wrows[0] not in row_set:
            continue
        w = ds.workloads[wrows[0]]
        truth = {ds.settings[i]: ds.measurement(i) for i in wrows}
        source = ds.sources[wrows[0]]
        for k in probes:
            choice = selector.choose(w, objective, settings=list(truth), probes=k, measure=truth.__getitem__,
                                     as_source=source)
            o = outcome(ds, key, wrows, choice.setting, objective)
            out.append(FamilyResult(w.family, key, k, choice.setting.label(), o.regret, o.saving, o.oracle_saving))
    return out


def leave_one_family_out(ds: Dataset, spec: CandidateSpec, objective: Objective | None = None, *,
                         probes: Sequence[int] = (0, 1), families: Iterable[str] | None = None,
                         progress: Callable[[str], None] | None = None) -> list[FamilyResult]:
    """For each family: fit `spec` on the other families' rows, evaluate on the family's workloads."""
    objective = objective or Objective()
    results: list[FamilyResult] = []
    for split in family_splits(ds, families):
        if progress:
            progress(f"{split.family}: fitting {spec.label} on {len(split.train)} rows of other families, "
                     f"choosing for {len(ds.subset(split.test).by_workload())} workloads")
        selector = fit_selector(ds.subset(split.train), spec, objective)
        results.extend(evaluate_rows(selector, ds, split.test, objective, probes))
    return results


def leave_one_module_out(ds: Dataset, spec: CandidateSpec, objective: Objective | None = None, *,
                         probes: Sequence[int] = (0, 1), progress: Callable[[str], None] | None = None
                         ) -> list[FamilyResult]:
    """For each module of an across-module dataset: fit `spec` on the other modules' rows, and choose for the
    module's workloads with its own encoder (a module the selector was not trained on). The results' `family`
    is the held-out module (summarise groups by it)."""
    objective = objective or Objective()
    modules = list(ds.module_encoders)
    if len(modules) < 2:
        raise ConfigError(f"leaving one module out needs at least 2 modules, the data has {len(modules)}",
                          "build the data of several modules (dataset.from_twin_zoos)")
    row_module = np.array(ds.row_modules)
    results: list[FamilyResult] = []
    for module in modules:
        train, test = np.flatnonzero(row_module != module), np.flatnonzero(row_module == module)
        if progress:
            progress(f"{module}: fitting {spec.label} on {len(train)} rows of other modules")
        selector = fit_selector(ds.subset(train), spec, objective)
        selector.for_encoder(ds.module_encoders[module])
        results.extend(replace(r, family=module) for r in evaluate_rows(selector, ds, test, objective, probes))
    return results


class RegretBlock(TypedDict):
    """Regret and savings over some workloads (a family's, or all)."""

    workloads: int
    mean_regret: float
    worst_regret: float
    within_2pct: float
    mean_saving_vs_maxn: float | None
    oracle_mean_saving_vs_maxn: float | None
    worst_workload: str


class ProbesSummary(TypedDict):
    """One probe count's summary: overall, the mean of the families' means, and each family's."""

    overall: RegretBlock
    mean_of_family_means: float
    families: dict[str, RegretBlock]


def summarise(results: Sequence[FamilyResult]) -> dict[str, ProbesSummary]:
    """Mean and worst regret, and the savings against MAXN, per family and overall, per probe count
    (keyed `probes_K`)."""
    def block(rs: Sequence[FamilyResult]) -> RegretBlock:
        worst = max(rs, key=lambda r: r.regret)
        savings = [r.saving for r in rs if r.saving is not None]
        oracle = [r.oracle_saving for r in rs if r.oracle_saving is not None]
        return {
            "workloads": len(rs),
            "mean_regret": statistics.fmean(r.regret for r in rs),
            "worst_regret": worst.regret,
            "within_2pct": sum(r.regret <= 0.02 for r in rs) / len(rs),
            "mean_saving_vs_maxn": statistics.fmean(savings) if savings else None,
            "oracle_mean_saving_vs_maxn": statistics.fmean(oracle) if oracle else None,
            "worst_workload": f"{worst.workload} (chose {worst.chosen})",
        }

    out: dict[str, ProbesSummary] = {}
    for k in sorted({r.probes for r in results}):
        rs = [r for r in results if r.probes == k]
        families = sorted({r.family for r in rs})
        per_family = {f: block([r for r in rs if r.family == f]) for f in families}
        out[f"probes_{k}"] = {
            "overall": block(rs),
            # every family weighs the same, however many workloads it has
            "mean_of_family_means": statistics.fmean(v["mean_regret"] for v in per_family.values()),
            "families": per_family,
        }
    return out


__all__ = ["FamilyResult", "FamilySplit", "evaluate_rows", "family_splits", "leave_one_family_out",
           "leave_one_module_out", "summarise"]
