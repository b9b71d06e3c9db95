"""The calibration's optimiser: bounded least squares over the continuous parameters (scipy),
alternating with a grid search over the GPU governor's effective threshold, and the posterior
spreads (`fit` says what is fitted and why)."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Sequence

import numpy as np

from engine.device.twin.calibration.observations import (
    GOVERNOR_PATHS,
    FitOptions,
    Observation,
    ParamMove,
    Prediction,
    predict,
)
from engine.device.twin.params import ParamSpread, get_param, with_params

if TYPE_CHECKING:  # the profile module loads with the first profile
    from engine.device.twin.profile import TwinProfile

log = logging.getLogger(__name__)

GRID_POINTS = 201  # governor values tried per round
# Finite-difference step, in prior sds: the governors settle CPU and EMC clocks in table steps, so
# the twin is piecewise smooth; a step of 5% of an sd sees the trend rather than a jump between
# two settled clocks (a step of 1e-3 left the fit stuck at twice the truth's cost on the bench).
DIFF_STEP = 0.05
_REL_TIE = 1e-9


@dataclass(frozen=True)
class Fitted:
    profile: TwinProfile  # with the fitted values and the posterior spreads
    moves: tuple[ParamMove, ...]


class _Problem:
    """The residuals of one fit, in normalised units."""

    def __init__(self, profile: TwinProfile, observations: Sequence[Observation], spreads: Sequence[ParamSpread],
                 opts: FitOptions) -> None:
        self.base, self.obs, self.opts = profile, list(observations), opts
        fitted = [s for s in spreads if s.sd > 0]
        self.cont = [s for s in fitted if s.path not in GOVERNOR_PATHS]
        # podgov's target and load_seen act only through their ratio: one of them is searched
        gov = sorted((s for s in fitted if s.path in GOVERNOR_PATHS), key=lambda s: GOVERNOR_PATHS.index(s.path))
        # only points the GPU governor decides depend on it: without any, it is not fitted
        self.governed = [i for i, ob in enumerate(self.obs) if ob.setting.gpu_hz is None and not ob.setting.jetson_clocks]
        self.gov: ParamSpread | None = gov[0] if gov and self.governed else None
        self.gov_prior = get_param(profile, self.gov.path) if self.gov else 0.0
        self.prior = np.array([get_param(profile, s.path) for s in self.cont], dtype=float)
        self.sd = np.array([s.sd for s in self.cont], dtype=float)
        self.lb = np.array([(s.lower - p) / s.sd for s, p in zip(self.cont, self.prior)], dtype=float)
        self.ub = np.array([(s.upper - p) / s.sd for s, p in zip(self.cont, self.prior)], dtype=float)
        self.groups: list[tuple[list[int], str]] = []
        for sweep in dict.fromkeys(ob.sweep for ob in self.obs):
            idx = [i for i, ob in enumerate(self.obs) if ob.sweep == sweep]
            self.groups.append((idx, "energy"))
            timed = [i for i in idx if self.obs[i].time_s_per_sample is not None]
            if timed:
                self.groups.append((timed, "time"))
        self.m_data = sum(len(idx) + 1 for idx, _k in self.groups)
        self._last: tuple[bytes, list[Prediction]] | None = None

    def profile_at(self, u: np.ndarray, gov: float) -> TwinProfile:
        values = {s.path: float(p + sd * x) for s, p, sd, x in zip(self.cont, self.prior, self.sd, u)}
        if self.gov is not None:
            values[self.gov.path] = gov
        return with_params(self.base, values)

    def predictions(self, u: np.ndarray, gov: float) -> list[Prediction]:
        preds = predict(self.profile_at(u, gov), self.obs)
        self._last = (u.tobytes(), preds)
        return preds

    def governed_predictions(self, u: np.ndarray, gov: float) -> list[Prediction]:
        """Predictions at another governor value: the GPU-pinned points are reused from the last
        evaluation at these continuous parameters."""
        if self._last is None or self._last[0] != u.tobytes():
            self.predictions(u, self.gov_prior)
        assert self._last is not None
        preds = list(self._last[1])
        sub = predict(self.profile_at(u, gov), [self.obs[i] for i in self.governed])
        for i, p in zip(self.governed, sub):
            preds[i] = p
        return preds

    def data_residuals(self, preds: Sequence[Prediction]) -> np.ndarray:
        out: list[float] = []
        sigma, w = self.opts.noise, self.opts.level_weight
        for idx, kind in self.groups:
            if kind == "energy":
                d = [math.log(preds[i].energy_j_per_sample / self.obs[i].energy_j_per_sample) for i in idx]
            else:
                d = [math.log(_time(preds[i].time_s_per_sample) / _time(self.obs[i].time_s_per_sample)) for i in idx]
            mean = sum(d) / len(d)
            out.extend((x - mean) / sigma for x in d)
            out.append(w * math.sqrt(len(d)) * mean / sigma)
        return np.array(out, dtype=float)

    def cost(self, u: np.ndarray, gov: float, preds: Sequence[Prediction] | None = None) -> tuple[float, float]:
        """(data cost, prior cost): halves of the sums of squares."""
        r = self.data_residuals(preds if preds is not None else self.predictions(u, gov))
        prior = float(u @ u)
        if self.gov is not None:
            prior += ((gov - self.gov_prior) / self.gov.sd) ** 2
        return 0.5 * float(r @ r), 0.5 * prior


def fit(profile: TwinProfile, observations: Sequence[Observation], spreads: Sequence[ParamSpread],
        opts: FitOptions) -> tuple[Fitted, float]:
    """The fitted profile (values and posterior spreads) and the objective there."""
    prob = _Problem(profile, observations, spreads, opts)
    u = np.clip(np.zeros(len(prob.cont)), prob.lb, prob.ub)
    gov = prob.gov_prior
    jac: np.ndarray | None = None
    gov_sd = prob.gov.sd if prob.gov else 0.0
    for round_no in range(opts.max_rounds):
        if prob.cont:
            u, jac = _least_squares(prob, u, gov)
        if prob.gov is None:
            break
        new_gov, gov_sd = _grid(prob, u)
        log.debug("calibration round %d: %s %.4g -> %.4g", round_no + 1, prob.gov.path, gov, new_gov)
        if new_gov == gov:
            break
        gov = new_gov
    else:  # the governor moved in the last round: the continuous numbers follow it once more
        if prob.cont and prob.gov is not None:
            u, jac = _least_squares(prob, u, gov)
    data_cost, prior_cost = prob.cost(u, gov)
    sds = _posterior_sd(prob, u, gov, data_cost) if jac is not None else prob.sd.copy()
    moves = [ParamMove(s.path, float(p), float(p + sd * x), s.sd, float(post))
             for s, p, sd, x, post in zip(prob.cont, prob.prior, prob.sd, u, sds)]
    if prob.gov is not None:
        moves.append(ParamMove(prob.gov.path, prob.gov_prior, gov, prob.gov.sd, min(gov_sd, prob.gov.sd)))
    after = {m.path: m for m in moves}
    order = [s.path for s in spreads]
    moves.sort(key=lambda m: order.index(m.path))
    fitted = prob.profile_at(u, gov)
    uncertainty = tuple(replace(s, sd=after[s.path].sd_after) if s.path in after else s for s in profile.uncertainty)
    fitted = replace(fitted, uncertainty=uncertainty)
    return Fitted(fitted, tuple(moves)), data_cost + prior_cost


def _least_squares(prob: _Problem, u0: np.ndarray, gov: float) -> tuple[np.ndarray, np.ndarray]:
    from scipy.optimize import least_squares

    def fun(u: np.ndarray) -> np.ndarray:
        return np.concatenate([prob.data_residuals(prob.predictions(u, gov)), u])

    # Strictly inside the bounds (a prior on a bound, e.g. podgov_load_seen = 1, is allowed there).
    span = prob.ub - prob.lb
    x0 = np.clip(u0, prob.lb + 1e-6 * span, prob.ub - 1e-6 * span)
    res = least_squares(fun, x0, bounds=(prob.lb, prob.ub), method="trf", x_scale=1.0, diff_step=DIFF_STEP,
                        max_nfev=prob.opts.max_nfev, ftol=1e-6, xtol=1e-6, gtol=1e-8)
    log.debug("calibration least squares: %s, cost %.4g, %d evaluations", res.message, res.cost, res.nfev)
    return np.asarray(res.x, dtype=float), np.asarray(res.jac, dtype=float)


def _grid(prob: _Problem, u: np.ndarray) -> tuple[float, float]:
    """The governor value the MAXN points ask for, and its spread. The data cost is piecewise
    constant in it (MAXN moves by whole clock steps): among the values of least data cost, the
    prior stays if it is one of them, else the middle of the plateau nearest the prior; the
    spread is half the width of the values within 0.5 of the least total cost (a profile
    likelihood: other parameters held), at most the prior's sd."""
    assert prob.gov is not None
    s = prob.gov
    grid = np.linspace(s.lower, s.upper, GRID_POINTS)
    data = np.empty(len(grid))
    total = np.empty(len(grid))
    for k, g in enumerate(grid):
        d, p = prob.cost(u, float(g), prob.governed_predictions(u, float(g)))
        data[k], total[k] = d, d + p
    d_prior, _p = prob.cost(u, prob.gov_prior, prob.governed_predictions(u, prob.gov_prior))
    best = float(data.min())
    tie = _REL_TIE * max(1.0, abs(best))
    if d_prior <= best + tie:
        value = prob.gov_prior
    else:
        flat = data <= best + tie
        runs, start = [], None
        for k, f in enumerate(flat):
            if f and start is None:
                start = k
            if start is not None and (not f or k == len(flat) - 1):
                runs.append((start, k if f else k - 1))
                start = None
        lo, hi = min(runs, key=lambda r: min(abs(grid[r[0]] - prob.gov_prior), abs(grid[r[1]] - prob.gov_prior)))
        value = float(0.5 * (grid[lo] + grid[hi]))
    k0 = int(np.argmin(np.abs(grid - value)))
    ok = total <= float(total[k0]) + 0.5
    lo = hi = k0
    while lo > 0 and ok[lo - 1]:
        lo -= 1
    while hi < len(grid) - 1 and ok[hi + 1]:
        hi += 1
    step = float(grid[1] - grid[0])
    sd = min(s.sd, max(0.5 * float(grid[hi] - grid[lo]), step))
    return value, sd


def _posterior_sd(prob: _Problem, u: np.ndarray, gov: float, data_cost: float) -> np.ndarray:
    """Per continuous parameter: sqrt(diag((J_d' J_d / s2 + I)^-1)) x prior sd, where J_d is the
    data residuals' Jacobian (normalised units: the prior's information is I) and s2 the residual
    variance (the noise the residuals show, relative to the assumed one). Never above the prior.
    J_d by central differences of a tenth of a prior sd: the governors settle CPU and EMC clocks in
    table steps, and a tiny step that straddles one would read a jump as a huge derivative."""
    n = len(prob.cont)
    h = 0.1
    cols = []
    for j in range(n):
        up, down = u.copy(), u.copy()
        up[j] = min(u[j] + h, prob.ub[j])
        down[j] = max(u[j] - h, prob.lb[j])
        width = up[j] - down[j]
        if width <= 0:
            cols.append(np.zeros(prob.m_data))
            continue
        r_up = prob.data_residuals(prob.predictions(up, gov))
        r_down = prob.data_residuals(prob.predictions(down, gov))
        cols.append((r_up - r_down) / width)
    jd = np.stack(cols, axis=1)
    dof = prob.m_data - n - (1 if prob.gov is not None else 0)
    s2 = 2.0 * data_cost / dof if dof > 0 else 1.0
    s2 = max(s2, 1e-12)
    cov = np.linalg.pinv(jd.T @ jd / s2 + np.eye(n))
    return np.sqrt(np.clip(np.diag(cov), 0.0, 1.0)) * prob.sd


def _time(value: float | None) -> float:
    """A time per sample of a "time" group, which holds only rows with a time (`groups`)."""
    assert value is not None
    return value
