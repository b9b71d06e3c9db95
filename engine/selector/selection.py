"""Model selection: leave-workloads-out cross-validation, ranked by the regret of the choices.

Folds come from GroupKFold over workload groups (a workload shape with all its tasks),
so no workload's rows are ever on both sides of a fold. For every held-out workload a
candidate chooses the setting its predictions rank best for the objective; its regret is
what that choice truly costs over the workload's oracle (the best recorded setting):

    regret = cost(chosen) / cost(oracle) - 1      (energy per sample, with objective `energy`)

Candidates are ranked by mean regret, then worst regret, then energy MAPE; the mean
absolute percentage error of time, power and energy is reported beside it. The winner
is refitted on all the data.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
from sklearn.model_selection import GroupKFold

from engine.core.jsontypes import JsonObject
from engine.core.measurement import Measurement
from engine.dvfs.objectives import Objective
from engine.device.setting import MAXN, DvfsSetting
from engine.core.errors import ConfigError
from engine.core.provenance import Source
from engine.selector.candidates import CandidateSpec, RegressorModel, SettingClassifier, workload_part
from engine.selector.cv_table import CvTableRow
from engine.selector.dataset import Dataset

log = logging.getLogger(__name__)

DEFAULT_SPLITS = 5
Progress = Callable[[str], None]


def cv_folds(ds: Dataset, n_splits: int = DEFAULT_SPLITS) -> list[tuple[np.ndarray, np.ndarray]]:
    """(train rows, test rows) per fold; every workload group lies wholly on one side."""
    groups = ds.groups()
    n_groups = len(set(groups.tolist()))
    if n_groups < 2:
        raise ConfigError(f"cross-validation needs at least 2 workloads, the data has {n_groups}",
                          "record sweeps of more workloads (models, batch sizes, lengths)")
    k = max(2, min(n_splits, n_groups))
    return [(tr, te) for tr, te in GroupKFold(n_splits=k).split(np.zeros(len(groups)), groups=groups)]


def per_sample(t: float, e: float, source: Source) -> Measurement:
    return Measurement(float(t), float(e), 1, None, source)


def choose(settings: Sequence[DvfsSetting], time_ps: Sequence[float] | np.ndarray,
           energy_ps: Sequence[float] | np.ndarray, objective: Objective, source: Source, *,
           prefer_pinned: bool = False) -> DvfsSetting:
    """The setting the objective ranks best among (setting, time, energy) candidates.

    `prefer_pinned` (how predictions choose): MAXN is the baseline, not a candidate, unless
    no other setting is feasible. Its governors settle on clocks that depend on the load,
    which makes it the hardest setting to predict, and a pinned setting at the clocks
    they settle on costs the same; so nothing is lost by not choosing it."""
    cands = [(s, per_sample(t, e, source)) for s, t, e in zip(settings, time_ps, energy_ps)]
    baseline = next((m for s, m in cands if s == MAXN), None)
    if objective.needs_baseline and baseline is None:
        raise ConfigError(f"objective {objective.spec} needs MAXN among the candidates",
                          "train on sweeps that include MAXN (they do unless told not to)")
    if prefer_pinned:
        pinned = [(s, m) for s, m in cands if s != MAXN]
        if pinned and any(objective.feasible(m, baseline) for _s, m in pinned):
            return objective.best(pinned, baseline)[0]
    return objective.best(cands, baseline)[0]


@dataclass(frozen=True)
class Outcome:
    """What a choice truly cost on one workload."""

    workload: str
    chosen: DvfsSetting
    oracle: DvfsSetting
    regret: float  # cost(chosen) / cost(oracle) - 1
    energy_regret: float
    saving: float | None  # chosen against MAXN, energy per sample (None without MAXN)
    oracle_saving: float | None


def oracle_of(ds: Dataset, rows: np.ndarray, objective: Objective) -> DvfsSetting:
    """A workload's best recorded setting; by energy alone where its rows carry no time
    (engine.selector.mixing: only an objective that needs no time grades those)."""
    from engine.selector.mixing import energy_oracle, gradable

    settings = [ds.settings[i] for i in rows]
    if ds.energy_only()[rows].any():
        if not gradable(ds, rows, objective):
            raise ConfigError(f"objective {objective.spec} needs times, and {ds.workloads[rows[0]].key} was "
                              "measured with energy only", "grade it by energy, or import its times as well")
        return energy_oracle(settings, ds.energy_per_sample[rows])
    return choose(settings, ds.time_per_sample[rows], ds.energy_per_sample[rows], objective, ds.sources[rows[0]])


def outcome(ds: Dataset, key: str, rows: np.ndarray, chosen: DvfsSetting, objective: Objective) -> Outcome:
    settings = [ds.settings[i] for i in rows]
    src = ds.sources[rows[0]]
    t, e = ds.time_per_sample[rows], ds.energy_per_sample[rows]
    oracle = oracle_of(ds, rows, objective)
    if chosen not in settings:
        raise ConfigError(f"the chosen setting {chosen.label()} was not recorded for {key}",
                          "evaluate on workloads swept over the selector's space")
    i_c, i_o = settings.index(chosen), settings.index(oracle)
    if np.isfinite(t[[i_c, i_o]]).all():
        regret = (objective.cost(per_sample(t[i_c], e[i_c], src)) / objective.cost(per_sample(t[i_o], e[i_o], src))
                  - 1.0)
    else:  # energy only (oracle_of admitted it: the objective is energy)
        regret = float(e[i_c] / e[i_o] - 1.0)
    maxn = settings.index(MAXN) if MAXN in settings else None
    return Outcome(
        workload=key, chosen=chosen, oracle=oracle,
        regret=regret,
        energy_regret=float(e[i_c] / e[i_o] - 1.0),
        saving=None if maxn is None else float(1.0 - e[i_c] / e[maxn]),
        oracle_saving=None if maxn is None else float(1.0 - e[i_o] / e[maxn]),
    )


@dataclass(frozen=True)
class CVRow:
    label: str
    name: str
    target: str
    kind: str
    mean_regret: float
    worst_regret: float
    mape_time: float | None
    mape_power: float | None
    mape_energy: float | None
    fit_s: float
    workloads: int

    def rank_key(self) -> tuple[float, float, float]:
        # Mean regret first (to 0.01 percentage point: below that, candidates tie), then worst, then MAPE.
        return (round(self.mean_regret, 4), round(self.worst_regret, 4),
                self.mape_energy if self.mape_energy is not None else math.inf)

    def to_json(self) -> JsonObject:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}

    def table_row(self) -> CvTableRow:
        return CvTableRow(label=self.label, name=self.name, target=self.target, kind=self.kind,
                          mean_regret=self.mean_regret, worst_regret=self.worst_regret, mape_time=self.mape_time,
                          mape_power=self.mape_power, mape_energy=self.mape_energy, fit_s=self.fit_s,
                          workloads=self.workloads)


@dataclass(frozen=True)
class CVReport:
    rows: tuple[CVRow, ...]  # ranked, best first
    folds: tuple[tuple[np.ndarray, np.ndarray], ...] = field(repr=False)
    outcomes: dict[str, tuple[Outcome, ...]] = field(repr=False)  # per candidate label
    objective: str = "energy"
    graded_on: str = "twin workloads"  # which held-out workloads the regrets and MAPEs are over

    @property
    def winner(self) -> CVRow:
        return self.rows[0]

    def table(self) -> list[CvTableRow]:
        return [r.table_row() for r in self.rows]


def _mape(pred: np.ndarray, true: np.ndarray) -> float:
    return float(np.mean(np.abs(pred - true) / true))


def _weights(ds: Dataset, rows: np.ndarray) -> np.ndarray | None:
    return None if ds.weights is None else ds.weights[rows]


def evaluate(spec: CandidateSpec, ds: Dataset, folds: Sequence[tuple[np.ndarray, np.ndarray]],
             objective: Objective, x: np.ndarray | None = None) -> tuple[CVRow, tuple[Outcome, ...]]:
    """Out-of-fold choices and errors of one candidate, over the workloads mixing.graded_keys
    grades (the measured ones when there are any)."""
    from engine.selector.mixing import graded_keys

    x = ds.X() if x is None else x
    by_wl = ds.by_workload()
    graded, _what = graded_keys(ds, objective)
    graded_rows = np.zeros(len(ds), dtype=bool)
    for k in graded:
        graded_rows[by_wl[k]] = True
    outcomes: list[Outcome] = []
    errs: dict[str, list[np.ndarray]] = {"time": [], "power": [], "energy": []}
    fit_s = 0.0
    for train, test in folds:
        test_set = set(test.tolist())
        held = {k: rows for k, rows in by_wl.items() if rows[0] in test_set and k in graded}
        if spec.kind == "classifier":
            clf = _fit_classifier(spec, ds, x, train, objective)
            fit_s += clf.fit_s
            for key, rows in held.items():
                ranked = clf.rank(workload_part(x[rows[:1]], ds.source_column))[0]
                present = [ds.settings[i] for i in rows]
                chosen = next((s for s, _p in ranked if s in present), present[0])
                outcomes.append(outcome(ds, key, rows, chosen, objective))
            continue
        model = spec.build()
        assert isinstance(model, RegressorModel)
        model.fit(x[train], ds.time_per_sample[train], ds.power_w[train], ds.energy_per_sample[train],
                  _weights(ds, train))
        fit_s += model.fit_s
        t, p, e = model.predict(x[test])
        on = graded_rows[test]
        for name, pred, true in (("time", t, ds.time_per_sample[test]), ("power", p, ds.power_w[test]),
                                 ("energy", e, ds.energy_per_sample[test])):
            keep = on & np.isfinite(true)  # energy-only rows have no time or power to err on
            errs[name].append(np.abs(pred[keep] - true[keep]) / true[keep])
        pos = {r: j for j, r in enumerate(test.tolist())}
        for key, rows in held.items():
            j = [pos[r] for r in rows]
            chosen = choose([ds.settings[r] for r in rows], t[j], e[j], objective, Source.PREDICTED,
                            prefer_pinned=True)
            outcomes.append(outcome(ds, key, rows, chosen, objective))
    if not outcomes:
        raise ConfigError("cross-validation graded no workload", "record sweeps of more workloads")
    regrets = np.array([o.regret for o in outcomes])
    mape = {k: (float(np.mean(np.concatenate(v))) if v and sum(map(len, v)) else None) for k, v in errs.items()}
    row = CVRow(spec.label, spec.name, spec.target, spec.kind, float(regrets.mean()), float(regrets.max()),
                mape["time"], mape["power"], mape["energy"], fit_s, len(outcomes))
    return row, tuple(outcomes)


def _fit_classifier(spec: CandidateSpec, ds: Dataset, x: np.ndarray, rows: np.ndarray,
                    objective: Objective) -> SettingClassifier:
    """Fit on one row per training workload, labelled with its oracle setting (weighted as its rows)."""
    from engine.selector.mixing import gradable

    row_set = set(rows.tolist())
    firsts, best = [], []
    for wrows in ds.by_workload().values():
        if wrows[0] not in row_set or not gradable(ds, wrows, objective):
            continue
        best.append(oracle_of(ds, wrows, objective))
        firsts.append(wrows[0])
    clf = spec.build()
    assert isinstance(clf, SettingClassifier)
    first = np.array(firsts)
    return clf.fit(workload_part(x[first], ds.source_column), best, _weights(ds, first))


def cross_validate(ds: Dataset, specs: Sequence[CandidateSpec], objective: Objective | None = None, *,
                   n_splits: int = DEFAULT_SPLITS, progress: Progress | None = None) -> CVReport:
    """Every candidate through the same folds; rows ranked best first."""
    if not specs:
        raise ConfigError("no candidate models to select from", "give at least one candidate")
    objective = objective or Objective()
    folds = cv_folds(ds, n_splits)
    x = ds.X()
    rows, outs = [], {}
    for spec in specs:
        if progress:
            progress(f"cross-validating {spec.label} ({len(folds)} folds)")
        row, oc = evaluate(spec, ds, folds, objective, x)
        log.info("%s: mean regret %.3f%%, worst %.3f%%", spec.label, 100 * row.mean_regret, 100 * row.worst_regret)
        rows.append(row)
        outs[spec.label] = oc
    rows.sort(key=CVRow.rank_key)
    from engine.selector.mixing import graded_keys

    return CVReport(tuple(rows), tuple(folds), outs, objective.spec, graded_keys(ds, objective)[1])


def fit_all(spec: CandidateSpec, ds: Dataset, objective: Objective,
            x: np.ndarray | None = None) -> RegressorModel | SettingClassifier:
    """The candidate refitted on every row."""
    x = ds.X() if x is None else x
    if spec.kind == "classifier":
        return _fit_classifier(spec, ds, x, np.arange(len(ds)), objective)
    model = spec.build()
    assert isinstance(model, RegressorModel)
    return model.fit(x, ds.time_per_sample, ds.power_w, ds.energy_per_sample, ds.weights)
