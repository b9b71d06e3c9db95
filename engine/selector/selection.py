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
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

import numpy as np
from sklearn.model_selection import GroupKFold
from threadpoolctl import threadpool_limits

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
# Candidates that go through every fold after the first pass ranks them all on one fold (cross_validate).
# On three draws of 100 twin sweeps (bench_selector's training_scale data) the full search's winner ranked
# 2nd, 3rd and 5th on the first pass's fold; 6 of the 17 default candidates keeps it in each.
DEFAULT_SHORTLIST = 6
# The fewest held-out workloads a first pass ranks on; with fewer, every candidate takes every fold.
FIRST_PASS_WORKLOADS = 10
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


def outcome(ds: Dataset, key: str, rows: np.ndarray, chosen: DvfsSetting, objective: Objective, *,
            oracle: DvfsSetting | None = None) -> Outcome:
    """What `chosen` truly cost on workload `key` (`oracle`: its oracle_of, when the caller has it)."""
    settings = [ds.settings[i] for i in rows]
    src = ds.sources[rows[0]]
    t, e = ds.time_per_sample[rows], ds.energy_per_sample[rows]
    oracle = oracle_of(ds, rows, objective) if oracle is None else oracle
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
    fit_s: float  # wall seconds of its fits, over its folds
    workloads: int
    cpu_s: float = 0.0  # CPU seconds of its folds' fits and predictions (its cost in the search)
    folds: int = 0  # the folds it went through: all of them, or 1 where the first pass left it out

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
                          workloads=self.workloads, cpu_s=self.cpu_s, folds=self.folds)


@dataclass(frozen=True)
class CVReport:
    rows: tuple[CVRow, ...]  # ranked, best first
    folds: tuple[tuple[np.ndarray, np.ndarray], ...] = field(repr=False)
    outcomes: dict[str, tuple[Outcome, ...]] = field(repr=False)  # per candidate label
    objective: str = "energy"
    graded_on: str = "twin workloads"  # which held-out workloads the regrets and MAPEs are over
    cpu_s: float = 0.0  # CPU seconds of the whole search (every fold's task and the grading)
    jobs: int = 1  # the worker processes the folds ran in
    shortlist: tuple[str, ...] = ()  # the candidates the first pass sent through every fold (): no first pass

    @property
    def winner(self) -> CVRow:
        return self.rows[0]

    def table(self) -> list[CvTableRow]:
        return [r.table_row() for r in self.rows]

    def cost_json(self) -> JsonObject:
        """What the search cost, as train-selector's JSON gives it."""
        return {"cpu_s": round(self.cpu_s, 2), "jobs": self.jobs, "folds": len(self.folds),
                "shortlist": list(self.shortlist),
                "candidates": {r.label: {"cpu_s": round(r.cpu_s, 2), "fit_s": round(r.fit_s, 2), "folds": r.folds}
                               for r in self.rows}}


def _weights(ds: Dataset, rows: np.ndarray) -> np.ndarray | None:
    return None if ds.weights is None else ds.weights[rows]


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


# ----------------------------------------------------------------------------- one fold of one candidate
# The fits and predictions run where joblib puts them (a worker process, or here with one job); the
# choices and regrets are made here from what they return, so a worker gets arrays, not the dataset.

def _fit_predict(spec: CandidateSpec, x: np.ndarray, t: np.ndarray, p: np.ndarray, e: np.ndarray,
                 w: np.ndarray | None, train: np.ndarray,
                 test: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, float, float, int]:
    """A regressor fitted on `train`, its time, power and energy on `test`, its fit's wall seconds, the
    task's CPU seconds and the process it ran in."""
    # One thread for BLAS and OpenMP, here and in every worker: the folds are what runs in parallel, and
    # a fit's floats then do not depend on how many threads a library picked (serial = parallel).
    with threadpool_limits(limits=1):
        c0 = time.thread_time()
        model = spec.build()
        assert isinstance(model, RegressorModel)
        model.fit(x[train], t[train], p[train], e[train], None if w is None else w[train])
        pt, pp, pe = model.predict(x[test])
        return pt, pp, pe, model.fit_s, time.thread_time() - c0, os.getpid()


def _fit_rank(spec: CandidateSpec, wx: np.ndarray, best: list[DvfsSetting], w: np.ndarray | None,
              wx_test: np.ndarray) -> tuple[list[list[tuple[DvfsSetting, float]]], float, float, int]:
    """A classifier fitted on one row per training workload (its oracle the label), its ranking of
    each held-out workload's settings, its fit's wall seconds, the task's CPU seconds and process."""
    with threadpool_limits(limits=1):
        c0 = time.thread_time()
        clf = spec.build()
        assert isinstance(clf, SettingClassifier)
        clf.fit(wx, best, w)
        return clf.rank(wx_test), clf.fit_s, time.thread_time() - c0, os.getpid()


# a fold's fit: _fit_predict or _fit_rank, and its arguments
Task = tuple[Callable[..., tuple[Any, ...]], tuple[Any, ...]]


@dataclass(frozen=True)
class FoldResult:
    """One candidate on one fold: its held-out workloads' outcomes, its errors, what it cost."""

    outcomes: tuple[Outcome, ...]
    errs: dict[str, np.ndarray]  # absolute relative error per graded row with a time (regressors)
    fit_s: float  # wall seconds of the fits
    cpu_s: float  # CPU seconds of the fold's task (fit and predict)
    pid: int  # the process it ran in


class _Grading:
    """What every candidate's folds are graded against, computed once: each workload's rows, which
    workloads are graded (mixing.graded_keys), their oracles, and the classifiers' training labels."""

    def __init__(self, ds: Dataset, objective: Objective, x: np.ndarray) -> None:
        from engine.selector.mixing import gradable, graded_keys

        self.ds, self.objective, self.x = ds, objective, x
        self.by_wl = ds.by_workload()
        self.graded, self.what = graded_keys(ds, objective)
        self.graded_rows = np.zeros(len(ds), dtype=bool)
        for k in self.graded:
            self.graded_rows[self.by_wl[k]] = True
        # Every gradable workload's oracle: the graded ones' regrets and the classifiers' labels.
        self.oracles = {k: oracle_of(ds, rows, objective) for k, rows in self.by_wl.items()
                        if gradable(ds, rows, objective)}
        self.first_row = {k: int(rows[0]) for k, rows in self.by_wl.items()}

    def held(self, test: np.ndarray) -> dict[str, np.ndarray]:
        test_set = set(test.tolist())
        return {k: rows for k, rows in self.by_wl.items() if rows[0] in test_set and k in self.graded}

    def task(self, spec: CandidateSpec, train: np.ndarray, test: np.ndarray) -> Task:
        """The function and arguments of one fold's fit (run by _run_tasks)."""
        ds, x = self.ds, self.x
        if spec.kind == "classifier":
            row_set = set(train.tolist())
            firsts = np.array([self.first_row[k] for k in self.oracles if self.first_row[k] in row_set])
            best = [self.oracles[k] for k in self.oracles if self.first_row[k] in row_set]
            held = self.held(test)
            wx_test = workload_part(x[[int(rows[0]) for rows in held.values()]], ds.source_column)
            return _fit_rank, (spec, workload_part(x[firsts], ds.source_column), best, _weights(ds, firsts), wx_test)
        return _fit_predict, (spec, x, ds.time_per_sample, ds.power_w, ds.energy_per_sample, ds.weights, train, test)

    def grade(self, spec: CandidateSpec, test: np.ndarray, result: tuple[Any, ...]) -> FoldResult:
        """The outcomes and errors of one fold from what its task returned."""
        ds, objective = self.ds, self.objective
        held = self.held(test)
        outcomes: list[Outcome] = []
        errs: dict[str, np.ndarray] = {}
        if spec.kind == "classifier":
            ranks, fit_s, cpu_s, pid = result
            for (key, rows), ranked in zip(held.items(), ranks):
                present = [ds.settings[i] for i in rows]
                chosen = next((s for s, _p in ranked if s in present), present[0])
                outcomes.append(outcome(ds, key, rows, chosen, objective, oracle=self.oracles[key]))
            return FoldResult(tuple(outcomes), errs, fit_s, cpu_s, pid)
        t, p, e, fit_s, cpu_s, pid = result
        on = self.graded_rows[test]
        for name, pred, true in (("time", t, ds.time_per_sample[test]), ("power", p, ds.power_w[test]),
                                 ("energy", e, ds.energy_per_sample[test])):
            keep = on & np.isfinite(true)  # energy-only rows have no time or power to err on
            errs[name] = np.abs(pred[keep] - true[keep]) / true[keep]
        pos = {r: j for j, r in enumerate(test.tolist())}
        for key, rows in held.items():
            j = [pos[r] for r in rows]
            chosen = choose([ds.settings[r] for r in rows], t[j], e[j], objective, Source.PREDICTED,
                            prefer_pinned=True)
            outcomes.append(outcome(ds, key, rows, chosen, objective, oracle=self.oracles[key]))
        return FoldResult(tuple(outcomes), errs, fit_s, cpu_s, pid)


def _row(spec: CandidateSpec, folds: Sequence[FoldResult]) -> tuple[CVRow, tuple[Outcome, ...]]:
    """A candidate's CV row over the folds it went through."""
    outcomes = tuple(o for f in folds for o in f.outcomes)
    if not outcomes:
        raise ConfigError("cross-validation graded no workload", "record sweeps of more workloads")
    regrets = np.array([o.regret for o in outcomes])
    mape: dict[str, float | None] = {}
    for name in ("time", "power", "energy"):
        parts = [f.errs[name] for f in folds if name in f.errs]
        mape[name] = float(np.mean(np.concatenate(parts))) if parts and sum(map(len, parts)) else None
    row = CVRow(spec.label, spec.name, spec.target, spec.kind, float(regrets.mean()), float(regrets.max()),
                mape["time"], mape["power"], mape["energy"], sum(f.fit_s for f in folds), len(outcomes),
                cpu_s=sum(f.cpu_s for f in folds), folds=len(folds))
    return row, outcomes


def default_jobs() -> int:
    """Worker processes for the folds: one per core this process may run on."""
    affinity = getattr(os, "sched_getaffinity", None)  # Linux: the cores it is allowed (a cgroup's, taskset's)
    return max(1, len(affinity(0)) if affinity else os.cpu_count() or 1)


def _run_tasks(tasks: Sequence[Task], jobs: int) -> Iterator[tuple[Any, ...]]:
    """Each task's result, in order: in this process with one job, else in joblib's loky workers
    (the same functions on the same arrays, so the same floats)."""
    if jobs <= 1 or len(tasks) <= 1:
        return (fn(*args) for fn, args in tasks)
    from joblib import Parallel, delayed

    return iter(Parallel(n_jobs=min(jobs, len(tasks)), backend="loky", return_as="generator")(
        delayed(fn)(*args) for fn, args in tasks))


def _pass(grading: _Grading, specs: Sequence[CandidateSpec], folds: Sequence[tuple[np.ndarray, np.ndarray]],
          jobs: int, done: Callable[[CandidateSpec, list[FoldResult]], None]) -> dict[str, list[FoldResult]]:
    """Every spec through `folds` (all of them in one pool, candidates in order); `done` is called as
    each candidate's last fold arrives."""
    tasks = [grading.task(spec, tr, te) for spec in specs for tr, te in folds]
    results = _run_tasks(tasks, jobs)
    out: dict[str, list[FoldResult]] = {}
    for spec in specs:
        out[spec.label] = [grading.grade(spec, te, next(results)) for _tr, te in folds]
        done(spec, out[spec.label])
    return out


def evaluate(spec: CandidateSpec, ds: Dataset, folds: Sequence[tuple[np.ndarray, np.ndarray]],
             objective: Objective, x: np.ndarray | None = None, *, jobs: int = 1) -> tuple[CVRow, tuple[Outcome, ...]]:
    """Out-of-fold choices and errors of one candidate, over the workloads mixing.graded_keys
    grades (the measured ones when there are any)."""
    grading = _Grading(ds, objective, ds.X() if x is None else x)
    return _row(spec, _pass(grading, [spec], folds, jobs, lambda _s, _f: None)[spec.label])


def _shortlist(rows: Sequence[CVRow], keep: int) -> list[str]:
    """The labels of the `keep` best rows of a first pass, and any tied with the last of them."""
    ranked = sorted(rows, key=CVRow.rank_key)
    cut = ranked[keep - 1].rank_key()
    return [r.label for r in ranked if r.rank_key() <= cut]


def cross_validate(ds: Dataset, specs: Sequence[CandidateSpec], objective: Objective | None = None, *,
                   n_splits: int = DEFAULT_SPLITS, progress: Progress | None = None, jobs: int | None = None,
                   shortlist: int = DEFAULT_SHORTLIST) -> CVReport:
    """Every candidate through the same folds; rows ranked best first.

    With more candidates than `shortlist` (0: no shortlist), a first pass fits every candidate on one
    fold alone (the one grading the most workloads, at least FIRST_PASS_WORKLOADS), and only the
    `shortlist` best of it (and any tied with the last) go through the other folds: the winner is the best of those by every fold, and their rows are what a full search gives
    them (the first fold's fits are reused). The others' rows follow, over that fold (`folds` 1). `jobs` worker processes fit the folds (default: one per core; 1: in this process)."""
    if not specs:
        raise ConfigError("no candidate models to select from", "give at least one candidate")
    if shortlist < 0:
        raise ConfigError(f"a shortlist of {shortlist} candidates", "give 0 (every candidate through every fold) "
                                                                    "or a positive number")
    objective = objective or Objective()
    jobs = default_jobs() if jobs is None else max(1, jobs)
    folds = cv_folds(ds, n_splits)
    c0 = time.thread_time()
    grading = _Grading(ds, objective, ds.X())
    say = progress or (lambda _msg: None)

    def report_done(spec: CandidateSpec, res: list[FoldResult]) -> None:
        row, _oc = _row(spec, res)
        log.info("%s: mean regret %.3f%%, worst %.3f%%", spec.label, 100 * row.mean_regret, 100 * row.worst_regret)
        say(f"{spec.label}: {row.folds} fold{'s' if row.folds > 1 else ''}, mean regret {row.mean_regret:.2%}, "
            f"worst {row.worst_regret:.2%}; {row.cpu_s:.1f} s CPU")

    kept: list[CandidateSpec] = []
    # The first pass's fold: the one that grades the most workloads (with measured data only the measured
    # ones are graded, and a fold may hold none); too few to rank on, and every candidate takes every fold.
    graded = [len(grading.held(te)) for _tr, te in folds]
    lead = int(np.argmax(graded))
    if 0 < shortlist < len(specs) and len(folds) > 1 and graded[lead] >= FIRST_PASS_WORKLOADS:
        say(f"first pass: {len(specs)} candidates on fold {lead + 1} of {len(folds)} ({graded[lead]} workloads, "
            f"{jobs} job{'s' if jobs > 1 else ''})")
        first = _pass(grading, specs, folds[lead:lead + 1], jobs, report_done)
        keep = set(_shortlist([_row(s, first[s.label])[0] for s in specs], shortlist))
        kept = [s for s in specs if s.label in keep]
        say(f"shortlist: {', '.join(s.label for s in kept)} through the other {len(folds) - 1} folds")
        others = folds[:lead] + folds[lead + 1:]
        rest = _pass(grading, kept, others, jobs,
                     lambda s, r: report_done(s, r[:lead] + first[s.label] + r[lead:]))
        # in fold order, as a full search has them (the outcomes' order)
        results = {s.label: (rest[s.label][:lead] + first[s.label] + rest[s.label][lead:]) if s.label in rest
                   else first[s.label] for s in specs}
    else:
        why = "" if len(specs) <= shortlist or not shortlist or len(folds) < 2 else \
            f"; no fold grades {FIRST_PASS_WORKLOADS} workloads to shortlist on"
        say(f"{len(specs)} candidate{'s' if len(specs) > 1 else ''} on {len(folds)} folds "
            f"({jobs} job{'s' if jobs > 1 else ''}{why})")
        results = _pass(grading, specs, folds, jobs, report_done)
    rows, outs = [], {}
    for spec in specs:
        row, oc = _row(spec, results[spec.label])
        rows.append(row)
        outs[spec.label] = oc
    # every fold's rows first (the winner is among them), then the first pass's
    rows.sort(key=lambda r: (r.folds < len(folds), r.rank_key()))
    # this thread's (its grading, and the tasks that ran here), and the workers' tasks
    here = os.getpid()
    cpu_s = time.thread_time() - c0 + sum(f.cpu_s for res in results.values() for f in res if f.pid != here)
    return CVReport(tuple(rows), tuple(folds), outs, objective.spec, grading.what, cpu_s=cpu_s, jobs=jobs,
                    shortlist=tuple(s.label for s in kept))


def fit_all(spec: CandidateSpec, ds: Dataset, objective: Objective,
            x: np.ndarray | None = None) -> RegressorModel | SettingClassifier:
    """The candidate refitted on every row."""
    x = ds.X() if x is None else x
    if spec.kind == "classifier":
        return _fit_classifier(spec, ds, x, np.arange(len(ds)), objective)
    model = spec.build()
    assert isinstance(model, RegressorModel)
    return model.fit(x, ds.time_per_sample, ds.power_w, ds.energy_per_sample, ds.weights)
