"""The calibration's optimiser: bounded least squares over every fitted parameter at once
(scipy's `trf`: the governors' numbers with the others, since the twin is continuous in all of
them), the posterior spreads, and the parameters the fit left at a bound (`fit` says what is
fitted and why)."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Sequence

import numpy as np

from engine.device.twin.calibration.bounds import BoundHit, bound_hit
from engine.device.twin.calibration.observations import FitOptions, Observation, ParamMove, predict
from engine.device.twin.params import ParamSpread, get_param, with_params

if TYPE_CHECKING:  # the profile module loads with the first profile
    from engine.device.twin.profile import TwinProfile

log = logging.getLogger(__name__)

# Forward-difference step, in prior sds. The twin is continuous in every parameter, but not
# smooth at every scale: the governors' simulation measures whole ticks over a span that follows
# the step's length, which leaves a ripple of ~1e-4 in log energy when the host's work changes
# (cpu.serial_scale). A step of 1e-3 sd reads that ripple as slopes of several tenths per sd;
# 0.02 sd keeps it under 0.02 and follows the curvature (docs/twin.md, "Calibration").
DIFF_STEP = 0.02
# A parameter is at a bound when it ended within this many prior sds of it ...
AT_BOUND_SD = 0.01
# ... and the objective still falls beyond it, by at least this much per prior sd (the data push
# it out; a prior on its bound that the data leave alone is not reported).
PUSH = 0.05
# Stop when a step moves the numbers by under ~1% of a prior sd, or the objective by under 0.1%:
# far finer than a "moved" number (MOVED_SD); tighter tolerances cost iterations and gain nothing.
FTOL, XTOL = 1e-3, 1e-2


@dataclass(frozen=True)
class Fitted:
    profile: TwinProfile  # with the fitted values and the posterior spreads
    moves: tuple[ParamMove, ...]
    at_bounds: tuple[BoundHit, ...] = ()


class _Problem:
    """The residuals of one fit, in normalised units."""

    def __init__(self, profile: TwinProfile, observations: Sequence[Observation], spreads: Sequence[ParamSpread],
                 opts: FitOptions) -> None:
        self.base, self.obs, self.opts = profile, list(observations), opts
        self.fitted = [s for s in spreads if s.sd > 0]
        self.prior = np.array([get_param(profile, s.path) for s in self.fitted], dtype=float)
        self.sd = np.array([s.sd for s in self.fitted], dtype=float)
        self.lb = np.array([(s.lower - p) / s.sd for s, p in zip(self.fitted, self.prior)], dtype=float)
        self.ub = np.array([(s.upper - p) / s.sd for s, p in zip(self.fitted, self.prior)], dtype=float)
        self.groups: list[tuple[list[int], str]] = []
        for sweep in dict.fromkeys(ob.sweep for ob in self.obs):
            idx = [i for i, ob in enumerate(self.obs) if ob.sweep == sweep]
            self.groups.append((idx, "energy"))
            timed = [i for i in idx if self.obs[i].time_s_per_sample is not None]
            if timed:
                self.groups.append((timed, "time"))
        self.m_data = sum(len(idx) + 1 for idx, _k in self.groups)
        self.lower = np.array([s.lower for s in self.fitted], dtype=float)
        self.upper = np.array([s.upper for s in self.fitted], dtype=float)

    def values(self, u: np.ndarray) -> np.ndarray:
        # clipped: a value a rounding error outside its bounds is its bound
        return np.clip(self.prior + self.sd * u, self.lower, self.upper)

    def profile_at(self, u: np.ndarray) -> TwinProfile:
        return with_params(self.base, {s.path: float(v) for s, v in zip(self.fitted, self.values(u))})

    def data_residuals(self, u: np.ndarray) -> np.ndarray:
        preds = predict(self.profile_at(u), self.obs)
        out: list[float] = []
        sigma, w = self.opts.noise, self.opts.level_weight
        for idx, kind in self.groups:
            if kind == "energy":
                d = [math.log(preds[i].energy_j_per_sample / self.obs[i].energy_j_per_sample) for i in idx]
            else:
                d = [math.log(preds[i].time_s_per_sample / _time(self.obs[i].time_s_per_sample)) for i in idx]
            mean = sum(d) / len(d)
            out.extend((x - mean) / sigma for x in d)
            out.append(w * math.sqrt(len(d)) * mean / sigma)
        return np.array(out, dtype=float)

    def residuals(self, u: np.ndarray) -> np.ndarray:
        return np.concatenate([self.data_residuals(u), u])


def fit(profile: TwinProfile, observations: Sequence[Observation], spreads: Sequence[ParamSpread],
        opts: FitOptions, *, posterior: bool = True) -> tuple[Fitted, float]:
    """The fitted profile and the objective there. With `posterior`, the fitted spreads are the
    posterior's and the parameters left at a bound are named; without (a leave-one-sweep-out
    refit, whose profile only predicts), the spreads stay the prior's."""
    from scipy.optimize import least_squares

    prob = _Problem(profile, observations, spreads, opts)
    n = len(prob.fitted)
    u = np.zeros(n)
    jac = np.zeros((prob.m_data + n, n))
    if n:
        # The start lies strictly inside the bounds (a prior on a bound, e.g. podgov_load_seen = 1, is
        # allowed there), and the fit solves for the shift from it: trf's first trust region is as wide
        # as its start is long, so a start a hair off zero would begin with a hair-wide region and stop
        # at once; a shift starts at zero, where the region is 1. Each number is scaled by its
        # Jacobian column (x_scale="jac"), so well- and poorly-determined numbers step alike.
        span = prob.ub - prob.lb
        x0 = np.clip(u, prob.lb + 1e-6 * span, prob.ub - 1e-6 * span)
        res = least_squares(lambda z: prob.residuals(x0 + z), np.zeros(n), bounds=(prob.lb - x0, prob.ub - x0),
                            method="trf", x_scale="jac", diff_step=DIFF_STEP, max_nfev=opts.max_nfev,
                            ftol=FTOL, xtol=XTOL, gtol=1e-6)
        log.debug("calibration least squares: %s, cost %.4g, %d evaluations (+%d for Jacobians)",
                  res.message, res.cost, res.nfev, res.njev * n)
        u, jac, r = x0 + np.asarray(res.x, dtype=float), np.asarray(res.jac, dtype=float), np.asarray(res.fun, dtype=float)
    else:
        r = prob.residuals(u)
    cost = 0.5 * float(r @ r)
    values = prob.values(u)
    if posterior and n:
        sds = _posterior_sd(prob, jac, 0.5 * float(r[:prob.m_data] @ r[:prob.m_data]))
        hits = _at_bounds(prob, u, jac.T @ r)
    else:
        sds, hits = prob.sd.copy(), ()
    moves = [ParamMove(s.path, float(p), float(v), s.sd, float(post))
             for s, p, v, post in zip(prob.fitted, prob.prior, values, sds)]
    after = {m.path: m for m in moves}
    order = [s.path for s in spreads]
    moves.sort(key=lambda m: order.index(m.path))
    uncertainty = tuple(replace(s, sd=after[s.path].sd_after) if s.path in after else s for s in profile.uncertainty)
    fitted = replace(prob.profile_at(u), uncertainty=uncertainty)
    return Fitted(fitted, tuple(moves), hits), cost


def _posterior_sd(prob: _Problem, jac: np.ndarray, data_cost: float) -> np.ndarray:
    """Per parameter: sqrt(diag((J_d' J_d / s2 + I)^-1)) x prior sd, where J_d is the data
    residuals' Jacobian at the optimum (the least squares' last, by forward differences of
    DIFF_STEP sd), in normalised units (the prior's information is I), and s2 the residual
    variance (the noise the residuals show, relative to the assumed one). Never above the prior."""
    n = len(prob.fitted)
    jd = jac[:prob.m_data]
    dof = prob.m_data - n
    s2 = max(2.0 * data_cost / dof if dof > 0 else 1.0, 1e-12)
    cov = np.linalg.pinv(jd.T @ jd / s2 + np.eye(n))
    return np.sqrt(np.clip(np.diag(cov), 0.0, 1.0)) * prob.sd


def _at_bounds(prob: _Problem, u: np.ndarray, grad: np.ndarray) -> tuple[BoundHit, ...]:
    """The parameters the fit left at a bound while the objective's gradient (`grad`, per prior
    sd) still points beyond it: the data asked for a value the bounds do not allow."""
    hits = []
    for s, x, lo, hi, g in zip(prob.fitted, u, prob.lb, prob.ub, grad):
        if x >= hi - AT_BOUND_SD and g < -PUSH:
            hits.append(bound_hit(s.path, "upper", s.upper))
        elif x <= lo + AT_BOUND_SD and g > PUSH:
            hits.append(bound_hit(s.path, "lower", s.lower))
    return tuple(hits)


def _time(value: float | None) -> float:
    """A time per sample of a "time" group, which holds only rows with a time (`groups`)."""
    assert value is not None
    return value
