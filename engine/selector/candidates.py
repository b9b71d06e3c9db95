"""The candidate models: scikit-learn pipelines that carry their own preprocessing.

Regressors predict two targets per (workload, setting) row, each in log space:
- `time+power`: time per sample and average power; energy = time x power;
- `time+energy`: time per sample and energy per sample directly (power = energy / time).
Time is always needed (slowdown limits, EDP). Every regressor is tried with both target
pairs; cross-validation keeps what wins.

The `ensemble` averages the log predictions of extra trees and polynomial ridge.

A classifier predicts the energy-optimal setting of a workload directly from its
workload columns (one class per setting of the space); it gives no figures of its own.

Scale features (parameters, FLOPs, bytes, clocks, ...) enter most pipelines as logs:
time and power are close to products and ratios of them, which logs make sums. Time and
energy are learnt per FLOP of a sample (what is left varies far less across model sizes,
so tree models need not extrapolate a scale), and predictions are held within 100x of
the range seen in training.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Sequence

import numpy as np
from sklearn.base import clone
from sklearn.compose import TransformedTargetRegressor
from sklearn.ensemble import (
    ExtraTreesRegressor,
    HistGradientBoostingRegressor,
    RandomForestClassifier,
    RandomForestRegressor,
    VotingRegressor,
)
from sklearn.linear_model import RidgeCV
from sklearn.neighbors import KNeighborsRegressor
from sklearn.neural_network import MLPRegressor
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import FunctionTransformer, PolynomialFeatures, StandardScaler
from sklearn.svm import SVR
from threadpoolctl import threadpool_limits

from engine.device.setting import DvfsSetting
from engine.core.errors import ConfigError
from engine.core.jsontypes import JsonObject
from engine.selector.estimator import Classifier, Estimator
from engine.selector.compact import FLOPS_PER_SAMPLE, LOG_MARGIN, figures, log_offset  # noqa: F401 - re-exported
# log_columns and workload_part live in features (no scikit-learn there); pickled pipelines name
# `engine.selector.candidates.log_columns`, which this import keeps resolving.
from engine.selector.features import log_columns, log_roofline_columns, workload_part  # noqa: F401 - re-exported

log = logging.getLogger(__name__)

TARGETS = ("time+power", "time+energy")
REGRESSORS = ("ridge-poly", "knn", "svr", "random-forest", "extra-trees", "hist-gb", "hist-gb-roofline", "mlp", "ensemble")
ENSEMBLE = ("extra-trees", "ridge-poly")  # a tree model for steps (governor switches), a smooth one for scale
CLASSIFIERS = ("rf-classifier",)
SEED = 0


def one_thread() -> threadpool_limits:
    """OpenMP (hist-gb's threads) limited to one thread: on a few shared cores the threads wait on
    each other. Fitting hist-gb on the shipped grid's 3648 rows took 17.6 s with two threads and
    3.6 s with one on this project's 2-core machine; the fitted model is the same."""
    return threadpool_limits(limits=1, user_api="openmp")


def _logs() -> FunctionTransformer:
    return FunctionTransformer(log_columns)


def _scaled_target(pipe: Pipeline) -> TransformedTargetRegressor:
    # SVR's epsilon and the MLP's loss assume a target of unit scale.
    return TransformedTargetRegressor(regressor=pipe, transformer=StandardScaler())


def make_regressor(name: str, *, small: bool = False) -> Estimator:
    """An unfitted pipeline for one target. `small` trades accuracy for speed (tests)."""
    trees = 30 if small else 80
    if name == "ridge-poly":
        return Pipeline([("log", _logs()), ("scale", StandardScaler()),
                         ("poly", PolynomialFeatures(degree=2, include_bias=False)),
                         ("post", StandardScaler()), ("ridge", RidgeCV(alphas=np.logspace(-6, 2, 9)))])
    if name == "knn":
        return Pipeline([("log", _logs()), ("scale", StandardScaler()),
                         ("knn", KNeighborsRegressor(n_neighbors=4, weights="distance"))])
    if name == "svr":
        return _scaled_target(Pipeline([("log", _logs()), ("scale", StandardScaler()),
                                        ("svr", SVR(C=10.0, epsilon=0.02, gamma="scale", cache_size=500))]))
    if name == "random-forest":
        return Pipeline([("log", _logs()), ("rf", RandomForestRegressor(
            n_estimators=trees, min_samples_leaf=2, max_features=0.6, random_state=SEED, n_jobs=1))])
    if name == "extra-trees":
        return Pipeline([("log", _logs()), ("et", ExtraTreesRegressor(
            n_estimators=trees, min_samples_leaf=2, max_features=0.8, random_state=SEED, n_jobs=1))])
    if name == "hist-gb":
        return Pipeline([("log", _logs()), ("hgb", HistGradientBoostingRegressor(
            max_iter=150 if small else 500, learning_rate=0.08, max_leaf_nodes=31, random_state=SEED))])
    if name == "hist-gb-roofline":
        # The mean of two boosted-tree models' log predictions: hist-gb on the features, and a shallower one
        # given the roofline column too. Their errors on a family neither saw fall on different settings,
        # so the mean's curve has fewer false dips (docs/selector.md, "Leave one family out").
        roofline = Pipeline([("log", FunctionTransformer(log_roofline_columns)), ("hgb", HistGradientBoostingRegressor(
            max_iter=150 if small else 500, learning_rate=0.08, max_leaf_nodes=15, random_state=SEED))])
        return VotingRegressor([("features", make_regressor("hist-gb", small=small)), ("roofline", roofline)])
    if name == "mlp":
        return _scaled_target(Pipeline([("log", _logs()), ("scale", StandardScaler()), ("mlp", MLPRegressor(
            hidden_layer_sizes=(32, 32) if small else (64, 64), max_iter=300 if small else 800,
            learning_rate_init=2e-3, alpha=1e-4, early_stopping=not small, n_iter_no_change=25,
            random_state=SEED))]))
    if name == "ensemble":
        # The mean of the members' log predictions.
        return VotingRegressor([(member, make_regressor(member, small=small)) for member in ENSEMBLE])
    raise ConfigError(f"unknown candidate model {name!r}", f"use one of {', '.join(REGRESSORS + CLASSIFIERS)}")


def make_classifier(name: str, *, small: bool = False) -> Classifier:
    if name == "rf-classifier":
        return Pipeline([("log", _logs()), ("rf", RandomForestClassifier(
            n_estimators=40 if small else 150, min_samples_leaf=1, random_state=SEED, n_jobs=1))])
    raise ConfigError(f"unknown candidate classifier {name!r}", f"use one of {', '.join(CLASSIFIERS)}")


@dataclass(frozen=True)
class CandidateSpec:
    """One entry of the model selection: an estimator and what it predicts."""

    name: str  # one of REGRESSORS or CLASSIFIERS
    target: str  # one of TARGETS, or "setting" for a classifier
    max_rows: int | None = None  # fit on at most this many rows (a seeded subsample): SVR and MLP scale badly
    small: bool = False

    @property
    def kind(self) -> str:
        return "classifier" if self.target == "setting" else "regressor"

    @property
    def label(self) -> str:
        return self.name if self.kind == "classifier" else f"{self.name}/{self.target}"

    def build(self) -> "RegressorModel | SettingClassifier":
        if self.kind == "classifier":
            return SettingClassifier(self, make_classifier(self.name, small=self.small))
        return RegressorModel(self, make_regressor(self.name, small=self.small))

    def to_json(self) -> JsonObject:
        return {"name": self.name, "target": self.target, "max_rows": self.max_rows, "small": self.small,
                "label": self.label, "kind": self.kind}


def default_candidates(*, small: bool = False, names: Sequence[str] | None = None) -> tuple[CandidateSpec, ...]:
    """Every regressor with both target pairs, and the classifier."""
    rows = {"svr": 2000 if small else 4000, "mlp": 3000 if small else 12000}
    out = []
    for name in REGRESSORS:
        for target in TARGETS:
            out.append(CandidateSpec(name, target, rows.get(name), small))
    out.extend(CandidateSpec(name, "setting", None, small) for name in CLASSIFIERS)
    if names:
        unknown = set(names) - set(REGRESSORS + CLASSIFIERS) - {c.label for c in out}
        if unknown:
            raise ConfigError(f"unknown candidate(s) {', '.join(sorted(unknown))}",
                              f"use names from {', '.join(REGRESSORS + CLASSIFIERS)}")
        out = [c for c in out if c.name in names or c.label in names]
    return tuple(out)


def _subsample(n: int, max_rows: int | None) -> np.ndarray:
    if max_rows is None or n <= max_rows:
        return np.arange(n)
    return np.sort(np.random.default_rng(SEED).choice(n, size=max_rows, replace=False))


class RegressorModel:
    """Two fitted pipelines, one per target, in log space; predicts time, power and energy per sample."""

    def __init__(self, spec: CandidateSpec, template: Estimator) -> None:
        self.spec = spec
        self.template = template
        self.models: dict[str, Estimator] = {}
        self.fit_s = 0.0

    def fit(self, x: np.ndarray, time_ps: np.ndarray, power_w: np.ndarray, energy_ps: np.ndarray,
            sample_weight: np.ndarray | None = None) -> "RegressorModel":
        """Fit both targets; `sample_weight` per row (engine.selector.mixing.fit_weighted). Rows
        without a time (energy-only: NaN) are left out of the time model and of a power target."""
        from engine.selector.mixing import fit_weighted

        t0 = time.perf_counter()
        idx = _subsample(len(x), self.spec.max_rows)
        second = power_w if self.spec.target == "time+power" else energy_ps
        self.models = {}
        self.bounds: dict[str, tuple[float, float]] = {}
        for key, y in (("time", time_ps), ("second", second)):
            model = clone(self.template)
            rows = idx[np.isfinite(y[idx])]
            if len(rows) == 0:
                raise ConfigError(f"no training row has a {'time' if key == 'time' else 'second target'} to learn",
                                  "record sweeps with times (`slm-dvfs sweep`), or train on the twin as well "
                                  "(--source both)")
            logy = np.log(y[rows]) - self._offset(key, x[rows])
            with one_thread():
                fit_weighted(model, x[rows], logy, None if sample_weight is None else sample_weight[rows])
            self.models[key] = model
            self.bounds[key] = (float(logy.min()) - LOG_MARGIN, float(logy.max()) + LOG_MARGIN)
        self.fit_s = time.perf_counter() - t0
        return self

    def _offset(self, key: str, x: np.ndarray) -> np.ndarray:
        return log_offset(key, self.spec.target, x)

    def predict(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Time per sample (s), average power (W), energy per sample (J)."""
        if not self.models:
            raise ConfigError("the model is not fitted", "fit it (train-selector) before predicting")
        with one_thread():
            return figures(self.spec.target, {k: m.predict for k, m in self.models.items()}, self.bounds, x)


class SettingClassifier:
    """Predicts the index of the energy-optimal setting from the workload columns alone."""

    def __init__(self, spec: CandidateSpec, template: Classifier) -> None:
        self.spec = spec
        self.template = template
        self.model: Classifier | None = None
        self.settings: tuple[DvfsSetting, ...] = ()
        self.fit_s = 0.0

    def fit(self, workload_x: np.ndarray, best: Sequence[DvfsSetting],
            sample_weight: np.ndarray | None = None) -> "SettingClassifier":
        from engine.selector.mixing import fit_weighted

        t0 = time.perf_counter()
        self.settings = tuple(dict.fromkeys(best))
        labels = np.array([self.settings.index(s) for s in best])
        self.model = clone(self.template)
        fit_weighted(self.model, workload_x, labels, sample_weight)
        self.fit_s = time.perf_counter() - t0
        return self

    def rank(self, workload_x: np.ndarray) -> list[list[tuple[DvfsSetting, float]]]:
        """Per row: the known settings by descending probability of being the optimum."""
        if self.model is None:
            raise ConfigError("the classifier is not fitted", "fit it (train-selector) before predicting")
        proba = self.model.predict_proba(workload_x)
        classes = [self.settings[int(c)] for c in self.model.classes_]
        return [sorted(zip(classes, map(float, row)), key=lambda sp: -sp[1]) for row in proba]
