"""Measured and twin data together: the measured rows weighted, graded on, and let in when they
carry energy only.

A board's sweep is the truth the selector is for; the twin's sweeps are a prior that covers
workloads nobody measured. Training on both (`train-selector --source both`, or
`--from-twin-zoo --source both`: the zoo plus the store's measured sweeps) keeps the source a
feature (`source_measured`, predictions made for the source asked) and weights every measured
row by `measured_weight`: by default (`auto`) enough for the measured rows to weigh as much in
total as the twin's, so a few measured sweeps are not drowned by thousands of twin rows.

Cross-validation then grades only the measured workloads (`graded_keys`): how well the
selector chooses on the board is what it is for; twin workloads still train every fold.

A measured point may carry energy and no time (an imported energy-only row: time and power
NaN in the dataset). It teaches the energy model; the time model and a power target skip it,
and a workload without times is graded only by an objective that needs no time (energy).
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import TYPE_CHECKING, Sequence

import numpy as np

from engine.core.errors import ConfigError
from engine.core.provenance import Source
from engine.dvfs.objectives import Objective
from engine.selector.dataset import Dataset
from engine.core.text import shown
from engine.core.userinput import number_value
from engine.device.setting import DvfsSetting

if TYPE_CHECKING:
    from engine.selector.estimator import Estimator

log = logging.getLogger(__name__)

AUTO = "auto"


def merge(twin: Dataset, measured: Dataset) -> Dataset:
    """One dataset of `twin` rows (e.g. the twin zoo) and `measured` rows (the store's), the
    source a feature column. Both must be over the same device profile's encoding."""
    if twin.across_modules or measured.across_modules:
        raise ConfigError("measured sweeps join one module's twin zoo; this data is of several modules",
                          "train --across-modules on the store's sweeps alone, or give --source both one --twin")
    if twin.encoder != measured.encoder:
        raise ConfigError(f"the twin data is over profile {twin.encoder.profile}, the measured data over "
                          f"{measured.encoder.profile}", "train both with the same --profile")
    parts = (twin, measured)
    weights = None
    if any(p.weights is not None for p in parts):
        weights = np.concatenate([p.weights if p.weights is not None else np.ones(len(p)) for p in parts])
    return Dataset(
        workloads=twin.workloads + measured.workloads, settings=twin.settings + measured.settings,
        time_per_sample=np.concatenate([twin.time_per_sample, measured.time_per_sample]),
        power_w=np.concatenate([twin.power_w, measured.power_w]),
        energy_per_sample=np.concatenate([twin.energy_per_sample, measured.energy_per_sample]),
        sources=twin.sources + measured.sources, encoder=twin.encoder, space=twin.space, source_column=True,
        notes=twin.notes + measured.notes, weights=weights, devices=tuple(dict.fromkeys(twin.devices + measured.devices)),
    )


def parse_weight(text: str | float | None) -> float | None:
    """`auto` (or None) -> None; else a positive number."""
    if text is None or (isinstance(text, str) and text.strip().lower() == AUTO):
        return None
    try:
        value = number_value(text, "--measured-weight")
    except ConfigError:
        raise ConfigError(f"--measured-weight {shown(text)!r} is not a number", "give e.g. 50, or auto") from None
    if not value > 0:
        raise ConfigError(f"--measured-weight {shown(text)!r} must be positive", "give e.g. 50, or auto")
    return value


def auto_weight(ds: Dataset) -> float:
    """A measured row's weight that makes the measured rows weigh as much in total as the twin's
    (at least 1: a measured row never counts less than a twin one)."""
    n_m = sum(s == Source.MEASURED for s in ds.sources)
    n_t = len(ds) - n_m
    return max(1.0, n_t / n_m) if n_m else 1.0


def weigh_measured(ds: Dataset, measured_weight: float | None = None) -> Dataset:
    """`ds` with every measured row weighted `measured_weight` (None: auto_weight) and twin rows 1.
    Data of one source is returned as it is: weights only matter between sources."""
    if len(set(ds.sources)) < 2:
        return ds
    w = auto_weight(ds) if measured_weight is None else float(measured_weight)
    weights = np.array([w if s == Source.MEASURED else 1.0 for s in ds.sources])
    return replace(ds, weights=weights)


def measured_weight_of(ds: Dataset) -> float | None:
    """The weight of a measured row in `ds` (None when unweighted)."""
    if ds.weights is None:
        return None
    rows = [i for i, s in enumerate(ds.sources) if s == Source.MEASURED]
    return float(ds.weights[rows[0]]) if rows else None


def needs_time(objective: Objective) -> bool:
    return objective.name != "energy" or objective.needs_baseline


def gradable(ds: Dataset, rows: np.ndarray, objective: Objective) -> bool:
    """Whether a workload's rows can be graded for `objective` (an energy-only one: energy alone)."""
    return not (needs_time(objective) and bool(ds.energy_only()[rows].any()))


def graded_keys(ds: Dataset, objective: Objective) -> tuple[set[str], str]:
    """The workloads cross-validation grades, and what they are: the measured ones when there
    are any (the truth is the board), else every workload. Workloads measured without time are
    left out for an objective that needs time (the note says how many)."""
    by_wl = ds.by_workload()
    measured = {k for k, rows in by_wl.items() if ds.sources[rows[0]] == Source.MEASURED}
    pool = measured or set(by_wl)
    keep = {k for k in pool if gradable(ds, by_wl[k], objective)}
    what = "measured workloads" if measured else f"{ds.sources[0].value} workloads"
    if len(keep) < len(pool):
        what += f" ({len(pool) - len(keep)} energy-only left out: objective {objective.spec} needs time)"
    if not keep and measured:  # nothing measured can be graded: the twin's workloads are
        keep = {k for k, rows in by_wl.items() if k not in measured and gradable(ds, rows, objective)}
        what = ("twin workloads (the measured ones carry energy only and objective "
                f"{objective.spec} needs time)")
    return keep, what


def energy_oracle(settings: Sequence[DvfsSetting], energy: np.ndarray) -> DvfsSetting:
    """The best setting by energy alone (energy-only rows; the first on ties)."""
    return settings[int(np.argmin(energy))]


# --------------------------------------------------------------------------- sample weights in a fit

# The final step of each candidate pipeline that takes sample_weight in fit. kNN cannot: it gets
# weights by replicating rows. VotingRegressor cannot pass them into pipelines: its members are
# fitted one by one.
_WEIGHTED_STEPS = ("ridge", "svr", "rf", "et", "hgb", "mlp")


def fit_weighted(model: Estimator, x: np.ndarray, y: np.ndarray, weight: np.ndarray | None) -> Estimator:
    """`model.fit(x, y)` with per-row `weight`: passed to the estimator that takes it, to each
    member of an ensemble, else by replicating each row round(weight / smallest weight) times
    (at most 1000)."""
    if weight is None or np.allclose(weight, weight[0]):
        return model.fit(x, y)
    from sklearn.ensemble import VotingRegressor  # loaded already: the model is scikit-learn's

    if isinstance(model, VotingRegressor):  # the ensemble: each member fitted with the weights
        from sklearn.base import clone
        from sklearn.utils import Bunch

        model.estimators_ = [fit_weighted(clone(est), x, y, weight) for _name, est in model.estimators]
        model.named_estimators_ = Bunch(**{n: e for (n, _), e in zip(model.estimators, model.estimators_)})
        return model
    step = _final_step(model)
    if step is not None:
        return model.fit(x, y, **{f"{step}__sample_weight": weight})
    reps = np.clip(np.rint(weight / weight.min()), 1, 1000).astype(int)
    idx = np.repeat(np.arange(len(x)), reps)
    return model.fit(x[idx], y[idx])


def _final_step(model: Estimator) -> str | None:
    pipe = getattr(model, "regressor", model)  # TransformedTargetRegressor wraps the pipeline
    steps = getattr(pipe, "steps", None)
    if not steps or steps[-1][0] not in _WEIGHTED_STEPS:
        return None
    return str(steps[-1][0])


__all__ = ["AUTO", "auto_weight", "energy_oracle", "fit_weighted", "gradable", "graded_keys", "measured_weight_of",
           "merge", "needs_time", "parse_weight", "weigh_measured"]
