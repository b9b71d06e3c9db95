"""Transfer: adapt a trained selector to a board from a handful of measured sweeps.

PowerTrain moves a power/time model from one Jetson to another by fine-tuning it on a few
measured power modes of the new device. Here the base selector (by default the shipped,
twin-trained one) is kept whole and a small correction is fitted on what it got wrong on the
measured sweeps: for time and for energy, the log residual

    r(w, s) = log measured(w, s) - log base(w, s)

is fitted by weighted ridge regression on six terms:

    1, MAXN (the governor flag: its own offset, e.g. MAXN's governor settling lower under load),
    g, g^2 (g: log of the setting's GPU clock, the curve's shape over the clocks),
    c, c x g (c: how compute-bound the base says the workload is: the slope of its predicted
              log time over the GPU clocks, centred on the measured workloads' mean)

so a board whose GPU costs more per cycle, whose voltage curve is steeper, or whose host is
slower bends every workload's predicted curve, more or less by how compute-bound it is. The
terms are standardised and ridge-shrunk towards no correction (one sweep cannot move a term it
says nothing of: with one workload c is constant and drops out); g and c are held within the
range the measured sweeps covered, so the correction never extrapolates a parabola.

Why this and not more boosting rounds on the measured rows (HistGradientBoosting's
warm_start): a few dozen rows give a handful of leaves, piecewise constant over the clocks and
split on whichever workload column tells the measured workloads apart, so they transfer to
other workloads by accident; and warm start works for a hist-gb base only. The residual model
works for any base (a compact one too: no scikit-learn), keeps the base's curve shape as its
prior, has six numbers to fit, and its leave-one-sweep-out check is cheap.
"""

from __future__ import annotations

import hashlib
import logging
import math
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import numpy as np

from engine.core.errors import ConfigError
from engine.core.jsontypes import JsonObject
from engine.core.provenance import Source
from engine.device.setting import MAXN, DvfsSetting
from engine.dvfs.objectives import Objective
from engine.selector.cv_table import CvTableRow, cv_row_json
from engine.selector.dataset import Dataset
from engine.selector.features import FEATURE_COLUMNS, N_WORKLOAD_COLUMNS, SettingEncoder

if TYPE_CHECKING:
    from engine.selector.estimator import FiguresModel, ModelSpec
    from engine.selector.selection import Outcome
    from engine.selector.selector import Selector

log = logging.getLogger(__name__)

DEFAULT_RIDGE = 1.0  # penalty on the standardised terms (the intercept is free)
GPU_GHZ = FEATURE_COLUMNS.index("gpu_ghz")
GPU_GOV = FEATURE_COLUMNS.index("gpu_governor")
N_SETTING = len(FEATURE_COLUMNS) - N_WORKLOAD_COLUMNS
TERMS = ("1", "maxn", "g", "g^2", "c", "c*g", "c*maxn")
HOW_TO_MEASURE = ("sweep a workload on the board (`slm-dvfs sweep --model ... --task ...`), or import a sweep "
                  "measured elsewhere (`slm-dvfs import-sweep FILE`), then transfer again")


@dataclass(frozen=True)
class ResidualFit:
    """One target's correction: log(measured / base) = terms(x) . coef."""

    coef: np.ndarray  # one per TERMS, on the raw (unstandardised) terms
    rows: int


@dataclass(frozen=True)
class Correction:
    """The fitted corrections and what their terms need: reference settings to measure the
    base's slope with, and the ranges the measured sweeps covered."""

    time: ResidualFit
    energy: ResidualFit
    ref_lo: np.ndarray  # encoded setting columns of the lowest and highest pinned GPU clock
    ref_hi: np.ndarray
    g_range: tuple[float, float]
    c_range: tuple[float, float]
    c_mean: float
    g_mean: float

    def terms(self, x: np.ndarray, base: FiguresModel) -> np.ndarray:
        return _terms(x, base, self.ref_lo, self.ref_hi, self.g_range, self.c_range, self.c_mean, self.g_mean)

    def to_json(self) -> JsonObject:
        return {"terms": list(TERMS), "time": self.time.coef.tolist(), "energy": self.energy.coef.tolist(),
                "rows_time": self.time.rows, "rows_energy": self.energy.rows,
                "log_gpu_ghz_range": list(self.g_range), "compute_bound_range": list(self.c_range)}


def _slope(x: np.ndarray, base: FiguresModel, ref_lo: np.ndarray, ref_hi: np.ndarray) -> np.ndarray:
    """How compute-bound the base says each row's workload is: -d log(time) / d log(GPU clock)."""
    lo, hi = x.copy(), x.copy()
    lo[:, N_WORKLOAD_COLUMNS:N_WORKLOAD_COLUMNS + N_SETTING] = ref_lo
    hi[:, N_WORKLOAD_COLUMNS:N_WORKLOAD_COLUMNS + N_SETTING] = ref_hi
    t_lo, t_hi = base.predict(lo)[0], base.predict(hi)[0]
    span = math.log(ref_hi[GPU_GHZ - N_WORKLOAD_COLUMNS] / ref_lo[GPU_GHZ - N_WORKLOAD_COLUMNS])
    return (np.log(t_lo) - np.log(t_hi)) / span


def _terms(x: np.ndarray, base: FiguresModel, ref_lo: np.ndarray, ref_hi: np.ndarray, g_range: tuple[float, float],
           c_range: tuple[float, float], c_mean: float, g_mean: float) -> np.ndarray:
    g = np.clip(np.log(x[:, GPU_GHZ]), *g_range) - g_mean
    c = np.clip(_slope(x, base, ref_lo, ref_hi), *c_range) - c_mean
    return np.column_stack([np.ones(len(x)), x[:, GPU_GOV], g, g * g, c, c * g, c * x[:, GPU_GOV]])


def _ridge(phi: np.ndarray, r: np.ndarray, w: np.ndarray, ridge: float) -> np.ndarray:
    """Weighted ridge, intercept free, on standardised terms; terms constant over the rows drop out."""
    sw = w / w.sum()
    mean = sw @ phi
    sd = np.sqrt(sw @ (phi - mean) ** 2)
    live = sd > 1e-9
    live[0] = False
    z = np.zeros_like(phi)
    z[:, live] = (phi[:, live] - mean[live]) / sd[live]
    z[:, 0] = 1.0
    a = z.T @ (z * w[:, None])
    pen = np.full(phi.shape[1], ridge * w.sum() / len(w))  # `ridge` rows' worth of shrinkage
    pen[~live] = 1e12  # a dead term gets no coefficient
    pen[0] = 0.0
    beta = np.linalg.solve(a + np.diag(pen), z.T @ (w * r))
    coef = np.zeros(phi.shape[1])
    coef[live] = beta[live] / sd[live]
    coef[0] = beta[0] - float(np.sum(coef[live] * mean[live]))
    return coef


class TransferredRegressor:
    """A base model's figures, corrected by a Correction fitted on measured residuals."""

    def __init__(self, base: FiguresModel, correction: Correction) -> None:
        self.base = base
        self.correction = correction
        self.spec: ModelSpec = base.spec

    def predict(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        t, _p, e = self.base.predict(x)
        phi = self.correction.terms(x, self.base)
        t2 = t * np.exp(phi @ self.correction.time.coef)
        e2 = e * np.exp(phi @ self.correction.energy.coef)
        return t2, e2 / t2, e2


def fit_correction(base: FiguresModel, ds: Dataset, settings: Sequence[DvfsSetting], encoder: SettingEncoder, *,
                   ridge: float = DEFAULT_RIDGE, rows: np.ndarray | None = None) -> Correction:
    """Fit the time and energy corrections of `base` (a regressor) on `ds`'s measured rows
    (or `rows` of them). `settings`: the selector's space, for the reference clocks."""
    rows = np.flatnonzero([s == Source.MEASURED for s in ds.sources]) if rows is None else np.asarray(rows)
    if len(rows) == 0:
        raise ConfigError("no measured sweep point to adapt the selector with", HOW_TO_MEASURE)
    pinned = sorted((s for s in settings if s != MAXN and s.gpu_hz), key=lambda s: s.gpu_hz or 0)  # each has one
    if len(pinned) < 2:
        raise ConfigError("the selector's space has fewer than two pinned GPU clocks", "transfer a gpu-space selector")
    ref_lo, ref_hi = np.array(encoder.row(pinned[0])), np.array(encoder.row(pinned[-1]))
    x = ds.X()[rows]
    g = np.log(x[:, GPU_GHZ])
    c = _slope(x, base, ref_lo, ref_hi)
    g_range, c_range = (float(g.min()), float(g.max())), (float(c.min()), float(c.max()))
    c_mean, g_mean = float(c.mean()), float(g.mean())
    phi = _terms(x, base, ref_lo, ref_hi, g_range, c_range, c_mean, g_mean)
    t_base, _p, e_base = base.predict(x)
    w = np.ones(len(rows)) if ds.weights is None else ds.weights[rows]
    fits = {}
    for name, truth, pred in (("time", ds.time_per_sample[rows], t_base), ("energy", ds.energy_per_sample[rows], e_base)):
        ok = np.isfinite(truth)  # energy-only rows teach the energy correction alone
        if not ok.any():
            fits[name] = ResidualFit(np.zeros(len(TERMS)), 0)
            continue
        fits[name] = ResidualFit(_ridge(phi[ok], np.log(truth[ok]) - np.log(pred[ok]), w[ok], ridge), int(ok.sum()))
    return Correction(fits["time"], fits["energy"], ref_lo, ref_hi, g_range, c_range, c_mean, g_mean)


def _with_model(base: Selector, model: FiguresModel, training: JsonObject, cv_table: list[CvTableRow],
                winner: str) -> Selector:
    from engine.selector.selector import Selector

    # Labelled by what it learnt from: a twin base and measured sweeps are both.
    source = "measured" if base.source == "measured" else "both"
    return Selector(model=model, chooser=None, encoder=base.encoder, candidates=base.candidates, source=source,
                    source_column=base.source_column, winner=winner, cv_table=cv_table, objective=base.objective,
                    training=training, ranges=base.ranges,
                    encoders=dict(base.encoders) or None)


def _grade(selector: Selector, ds: Dataset, keys: Sequence[str], objective: Objective
           ) -> tuple[list[Outcome], dict[str, list[float]]]:
    """Each workload's outcome (its choice against its measured oracle), and the relative errors
    of the selector's time, power and energy at its measured points."""
    from engine.selector.selection import outcome

    by_wl = ds.by_workload()
    out: list[Outcome] = []
    errs: dict[str, list[float]] = {"time": [], "power": [], "energy": []}
    for key in keys:
        rows = by_wl[key]
        present = [ds.settings[i] for i in rows]
        choice = selector.choose(ds.workloads[rows[0]], objective, settings=present, as_source=Source.MEASURED)
        out.append(outcome(ds, key, rows, choice.setting, objective))
        pred = {p.setting: p for p in selector.predict(ds.workloads[rows[0]], present, as_source=Source.MEASURED)}
        for i in rows:
            p = pred[ds.settings[i]]
            for name, got, true in (("time", p.time_per_sample, ds.time_per_sample[i]),
                                    ("power", p.power_w, ds.power_w[i]),
                                    ("energy", p.energy_per_sample, ds.energy_per_sample[i])):
                if np.isfinite(true):  # an energy-only point has no time or power to err on
                    errs[name].append(abs(got - true) / true)
    return out, errs


def _row(label: str, graded: tuple[list[Outcome], dict[str, list[float]]], what: str) -> CvTableRow:
    outcomes, errs = graded
    regrets = [o.regret for o in outcomes]
    mape = {k: (float(np.mean(v)) if v else None) for k, v in errs.items()}
    return {"label": label, "name": "transfer", "target": "time+energy", "kind": "regressor",
            "mean_regret": float(np.mean(regrets)), "worst_regret": float(np.max(regrets)),
            "mape_time": mape["time"], "mape_power": mape["power"], "mape_energy": mape["energy"], "fit_s": 0.0,
            "workloads": len(outcomes), "graded_on": what}


def _relabelled(row: CvTableRow, label: str | None, graded_on: str) -> CvTableRow:
    """A base's CV row under the transfer's label (None where the row had none), graded_on said."""
    out = row.copy()
    if label is not None:  # every row CVRow writes has one
        out["label"] = label
    out["graded_on"] = graded_on
    return out


@dataclass(frozen=True)
class TransferReport:
    """What a transfer did: its cross-validation table (rows as the selector's own), the correction,
    and the measured data it rests on (`measured`: rows, workloads, digest, devices, energy-only rows)."""

    cv_table: Sequence[CvTableRow]
    correction: JsonObject
    measured_rows: int
    measured_workloads: int
    measured: JsonObject
    basis: str

    @property
    def graded_on(self) -> str | None:
        """What the table's figures were graded on (its first row says)."""
        return self.cv_table[0].get("graded_on") if self.cv_table else None

    def to_json(self) -> JsonObject:
        return {"cv_table": [cv_row_json(r) for r in self.cv_table], "correction": self.correction,
                "measured": self.measured, "basis": self.basis}


def transfer_selector(base: Selector, ds: Dataset, objective: Objective | None = None, *, ridge: float = DEFAULT_RIDGE,
                      base_path: str | Path | None = None, command: JsonObject | None = None
                      ) -> tuple[Selector, TransferReport]:
    """A new Selector: `base`'s model with a correction fitted on `ds`'s measured sweeps.

    With two or more measured workloads, each is held out in turn (the correction fitted on the
    others) and the regret of the transferred and of the base selector's choices on it against
    its measured oracle are the cross-validation table. Returns the selector and that report."""
    from engine.selector.basis import from_training
    from engine.selector.mixing import gradable

    objective = objective or Objective()
    measured = [i for i, s in enumerate(ds.sources) if s == Source.MEASURED]
    if not measured:
        raise ConfigError("there are no measured sweeps to adapt the selector with", HOW_TO_MEASURE)
    if ds.encoder.to_json() != base.encoder.to_json():
        raise ConfigError(f"the measured sweeps are encoded for profile {ds.encoder.profile}, the selector for "
                          f"{base.encoder.profile}", f"transfer with --profile {base.encoder.profile}")
    ds = ds.subset(measured)
    inside = [i for i, s in enumerate(ds.settings) if s in set(base.candidates)]
    if not inside:
        raise ConfigError("no measured point lies in the selector's setting space",
                          "sweep the settings it chooses among (`slm-dvfs sweep --space gpu`)")
    ds = ds.subset(inside)
    by_wl = ds.by_workload()
    keys = [k for k, rows in by_wl.items() if gradable(ds, rows, objective)]
    winner = f"{base.winner}+transfer"
    cv_table: list[CvTableRow] = []
    if len(keys) >= 2:
        what = "measured workloads, each left out of the correction in turn"
        plain = _grade(base, ds, keys, objective)
        loo: tuple[list[Outcome], dict[str, list[float]]] = ([], {"time": [], "power": [], "energy": []})
        for key in keys:
            train = np.concatenate([rows for k, rows in by_wl.items() if k != key])
            corr = fit_correction(base.model, ds, base.candidates, base.encoder, ridge=ridge, rows=train)
            one = _grade(_with_model(base, TransferredRegressor(base.model, corr), {}, [], winner), ds, [key],
                         objective)
            loo[0].extend(one[0])
            for name, v in one[1].items():
                loo[1][name].extend(v)
        cv_table = [_row(winner, loo, what), _row(f"{base.winner} (base, uncorrected)", plain, what)]
    else:
        note = "too few measured workloads to hold one out; the base's CV record, on its own data"
        cv_table = [_relabelled(r, winner if r.get("label") == base.winner else r.get("label"), note)
                    for r in base.cv_table]
    corr = fit_correction(base.model, ds, base.candidates, base.encoder, ridge=ridge)
    summary = ds.summary()
    base_basis = base.basis
    digest = None
    if base_path is not None and Path(base_path).is_file():
        digest = hashlib.sha256(Path(base_path).read_bytes()).hexdigest()
    base_info = {"name": Path(str(base_path)).name if base_path else "a base selector",
                 "path": None if base_path is None else str(base_path), "joblib_sha256": digest,
                 "winner": base.winner, "basis": base_basis.line(), "base_basis": base_basis.to_json()}
    basis = from_training(summary, command=command, base=base_info)
    basis = replace(basis, twin_workloads=base_basis.twin_workloads, twin_points=base_basis.twin_points,
                    profile=base_basis.profile)
    training: JsonObject = {
        **{k: v for k, v in base.training.items() if k not in ("basis", "cv_graded_on")},
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": command, "transfer": {"ridge": ridge, "correction": corr.to_json(),
                                         "measured": {k: summary[k] for k in ("rows", "workloads", "digest", "devices",
                                                                              "energy_only_rows")},
                                         "measured_workloads": sorted(by_wl)},
        "basis": basis.to_json(),
        "cv_graded_on": cv_table[0].get("graded_on") if cv_table else None,
    }
    if base.chooser is not None:
        log.info("the base's classifier is left out: the correction acts on the figures, so they choose")
    selector = _with_model(base, TransferredRegressor(base.model, corr), training, cv_table, winner)
    counts: JsonObject = {k: summary[k] for k in ("rows", "workloads", "digest", "devices", "energy_only_rows")}
    report = TransferReport(cv_table=cv_table, correction=corr.to_json(), measured_rows=len(ds),
                            measured_workloads=len(ds.by_workload()), measured=counts, basis=basis.line())
    return selector, report


__all__ = ["Correction", "DEFAULT_RIDGE", "HOW_TO_MEASURE", "ResidualFit", "TransferredRegressor", "fit_correction",
           "transfer_selector"]
