"""Fitting a profile to measured sweeps (`calibrate_profile` -> `Calibration`, with each point's
and each held-out sweep's error): the profile's uncertain numbers fitted by bounded, regularised
least squares (the shipped values and spreads are the priors).

An `Observation` is one measured setting of one sweep: energy per sample over the rails the
measurement summed, and time per sample when it is known (energy-only rows have none). The
forward model is the twin's own (`fast.setting_control` + `fast.mix_estimate`, what `sweep --fast`
computes), with the profile's numbers replaced by `params.with_params`.

The objective, in normalised units (docs/twin.md, "Calibration"):
- each parameter as u = (value - prior) / sd, bounded by its ParamSpread; the prior residual is u;
- per point d = log(predicted / measured) of energy per sample (and of time per sample where
  known), divided by the measurement noise `noise` (relative, default 2%);
- per sweep and kind, d is split into the curve's shape (d minus the sweep's mean d) and its level
  (the mean, weighted by `level_weight` x sqrt(n)): with level_weight 1 the sum of squares is the
  plain one; below 1 a workload whose trace is off by a constant factor (a tracer's error, not the
  board's) bends the device's parameters less. Optimum, curve and saving against MAXN depend on
  the shape only.
Every number is fitted at once, the GPU governor's (podgov_target_load, podgov_load_seen: the MAXN
points inform them) and the host's (launch cycles, host overlap, the loop's serial_scale: a
host-bound model's curve informs them) with the others: the governors are simulated over time and
their requests rounded to the table in expectation (engine.device.twin.dynamics), so every figure is
continuous in every parameter. A number the fit leaves at a bound with the data pushing beyond it
is named with what that means (`Calibration.at_bounds`, engine.device.twin.calibration.bounds).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Sequence

from engine.core.errors import ConfigError
from engine.core.jsontypes import JsonObject
from engine.device.baseline import profile_baseline
from engine.device.twin.calibration.bounds import BoundHit
from engine.device.twin.calibration.observations import FitOptions, Observation, ParamMove, predict
from engine.device.twin.params import ParamSpread
from engine.device.twin.profile import CALIBRATED_SUFFIX

if TYPE_CHECKING:  # the profile module loads with the first profile
    from engine.device.twin.profile import TwinProfile


# --------------------------------------------------------------------------- results
@dataclass(frozen=True)
class PointError:
    sweep: str
    label: str  # the setting's label
    measured_energy_j: float  # per sample
    predicted_energy_j: float
    measured_time_s: float | None  # per sample; None: energy only
    predicted_time_s: float

    @property
    def energy_error_pct(self) -> float:
        return 100.0 * (self.predicted_energy_j / self.measured_energy_j - 1.0)

    @property
    def time_error_pct(self) -> float | None:
        if self.measured_time_s is None:
            return None
        return 100.0 * (self.predicted_time_s / self.measured_time_s - 1.0)

    def to_json(self) -> JsonObject:
        return {"sweep": self.sweep, "setting": self.label,
                "measured_energy_j_per_sample": self.measured_energy_j,
                "predicted_energy_j_per_sample": self.predicted_energy_j, "energy_error_pct": self.energy_error_pct,
                "measured_time_s_per_sample": self.measured_time_s, "predicted_time_s_per_sample": self.predicted_time_s,
                "time_error_pct": self.time_error_pct}


@dataclass(frozen=True)
class SweepError:
    """How well a profile predicts one sweep's curve, in the terms a user acts on: the energy
    curve normalised by its own mean (shape), the optimum's GPU step, the saving against MAXN."""

    sweep: str
    points: int
    curve_mape_pct: float  # mean |pred/mean(pred) / (meas/mean(meas)) - 1|
    curve_rmse_pct: float  # RMS of the same
    optimum_measured: str | None  # label of the measured optimum among GPU-pinned points
    optimum_predicted: str | None
    optimum_step_error: int | None  # |GPU table index difference|; None: no GPU-pinned points
    saving_measured_pct: float | None  # optimum against MAXN (None: no MAXN point)
    saving_predicted_pct: float | None
    optimum_regret_pct: float | None = None  # measured energy at the predicted optimum over the measured optimum's, - 1

    @property
    def saving_error_pts(self) -> float | None:
        if self.saving_measured_pct is None or self.saving_predicted_pct is None:
            return None
        return self.saving_predicted_pct - self.saving_measured_pct

    def to_json(self) -> JsonObject:
        return {"sweep": self.sweep, "points": self.points, "curve_mape_pct": self.curve_mape_pct,
                "curve_rmse_pct": self.curve_rmse_pct, "optimum_measured": self.optimum_measured,
                "optimum_predicted": self.optimum_predicted, "optimum_step_error": self.optimum_step_error,
                "saving_measured_pct": self.saving_measured_pct, "saving_predicted_pct": self.saving_predicted_pct,
                "saving_error_pts": self.saving_error_pts, "optimum_regret_pct": self.optimum_regret_pct}


def sweep_error(profile: TwinProfile, observations: Sequence[Observation]) -> SweepError:
    """`profile`'s prediction of one sweep (all observations share `sweep`) against its measurements."""
    names = {ob.sweep for ob in observations}
    if len(names) != 1:
        raise ConfigError("sweep_error takes the points of one sweep", "group observations by their sweep first")
    preds = predict(profile, observations)
    meas = [ob.energy_j_per_sample for ob in observations]
    pred = [p.energy_j_per_sample for p in preds]
    mm, mp = sum(meas) / len(meas), sum(pred) / len(pred)
    rel = [(p / mp) / (m / mm) - 1.0 for p, m in zip(pred, meas)]
    table = tuple(profile.gpu.table_hz)
    pinned = [i for i, ob in enumerate(observations) if ob.setting.gpu_hz is not None]
    best_m = min(pinned, key=lambda i: meas[i]) if pinned else None
    best_p = min(pinned, key=lambda i: pred[i]) if pinned else None
    step = regret = None
    if best_m is not None and best_p is not None:
        step = abs(_step(table, observations[best_m].setting.gpu_hz) - _step(table, observations[best_p].setting.gpu_hz))
        regret = 100.0 * (meas[best_p] / meas[best_m] - 1.0)
    base = profile_baseline(profile).setting  # the profile's uncapped mode: MAXN_SUPER (mode 2) on an Orin Nano
    maxn = next((i for i, ob in enumerate(observations) if ob.setting == base), None)
    others = [i for i in range(len(observations)) if i != maxn]
    saving_m = saving_p = None
    if maxn is not None and others:
        saving_m = 100.0 * (1.0 - min(meas[i] for i in others) / meas[maxn])
        saving_p = 100.0 * (1.0 - min(pred[i] for i in others) / pred[maxn])
    return SweepError(
        sweep=next(iter(names)), points=len(observations),
        curve_mape_pct=100.0 * sum(abs(r) for r in rel) / len(rel),
        curve_rmse_pct=100.0 * math.sqrt(sum(r * r for r in rel) / len(rel)),
        optimum_measured=None if best_m is None else observations[best_m].setting.label(),
        optimum_predicted=None if best_p is None else observations[best_p].setting.label(),
        optimum_step_error=step, saving_measured_pct=saving_m, saving_predicted_pct=saving_p,
        optimum_regret_pct=regret,
    )


def _step(table: tuple[int, ...], hz: int | None) -> int:
    assert hz is not None
    return min(range(len(table)), key=lambda i: abs(table[i] - hz))


@dataclass(frozen=True)
class Calibration:
    """A fitted profile and how well it fits: every figure in it is `predicted` against `measured`."""

    profile: TwinProfile  # the fitted TwinProfile (uncertainty = the posterior spreads)
    base: TwinProfile  # the profile the fit started from (its values and spreads were the priors)
    params: tuple[ParamMove, ...]  # every fitted number
    points: tuple[PointError, ...]  # the fitted profile against each observation
    energy_mape_pct: float
    time_mape_pct: float | None  # None: no observation has a time
    energy_mape_before_pct: float  # the base profile's, for comparison
    time_mape_before_pct: float | None
    loso: tuple[SweepError, ...]  # each sweep predicted by a fit to the others (empty: one sweep)
    loso_before: tuple[SweepError, ...]  # the base profile on the same sweeps
    sweeps: tuple[str, ...]
    cost: float  # the objective at the optimum (half the sum of squared normalised residuals)
    options: FitOptions = field(default_factory=FitOptions)
    at_bounds: tuple[BoundHit, ...] = ()  # numbers the fit left at a bound, the data pushing beyond it

    @property
    def n_points(self) -> int:
        return len(self.points)

    @property
    def n_sweeps(self) -> int:
        return len(self.sweeps)

    @property
    def moved(self) -> tuple[ParamMove, ...]:
        return tuple(p for p in self.params if p.moved)

    def loso_summary(self) -> dict[str, float | None]:
        return loso_summary(self.loso)

    def to_json(self) -> JsonObject:
        return {
            "profile": self.profile.name, "base": self.base.name, "sweeps": list(self.sweeps),
            "n_points": self.n_points, "n_sweeps": self.n_sweeps, "cost": self.cost,
            "options": self.options.to_json(),
            "energy_mape_pct": self.energy_mape_pct, "time_mape_pct": self.time_mape_pct,
            "energy_mape_before_pct": self.energy_mape_before_pct, "time_mape_before_pct": self.time_mape_before_pct,
            "params": [p.to_json() for p in self.params], "moved": [p.path for p in self.moved],
            "at_bounds": [b.to_json() for b in self.at_bounds],
            "points": [p.to_json() for p in self.points],
            "leave_one_sweep_out": [e.to_json() for e in self.loso],
            "leave_one_sweep_out_before": [e.to_json() for e in self.loso_before],
            "leave_one_sweep_out_summary": loso_summary(self.loso),
            "leave_one_sweep_out_summary_before": loso_summary(self.loso_before),
            "source": {"measured": "the observations", "predicted": "every fitted or predicted figure"},
        }


def loso_summary(errors: Sequence[SweepError]) -> dict[str, float | None]:
    """Means over held-out sweeps: curve MAPE and RMSE (%), |optimum step error|, |saving error| (points)."""
    def mean(xs: list[float]) -> float | None:
        return sum(xs) / len(xs) if xs else None

    steps = [float(e.optimum_step_error) for e in errors if e.optimum_step_error is not None]
    savings = [abs(e.saving_error_pts) for e in errors if e.saving_error_pts is not None]
    regrets = [e.optimum_regret_pct for e in errors if e.optimum_regret_pct is not None]
    return {"curve_mape_pct": mean([e.curve_mape_pct for e in errors]),
            "curve_rmse_pct": mean([e.curve_rmse_pct for e in errors]),
            "optimum_step_error": mean(steps), "optimum_step_error_max": max(steps) if steps else None,
            "saving_error_pts": mean(savings), "saving_error_pts_max": max(savings) if savings else None,
            "optimum_regret_pct": mean(regrets), "optimum_regret_pct_max": max(regrets) if regrets else None}


def mape(points: Sequence[PointError]) -> tuple[float, float | None]:
    """Energy and time MAPE (%) of these points (time over the points that have one)."""
    e = [abs(p.energy_error_pct) for p in points]
    t = [abs(x) for p in points if (x := p.time_error_pct) is not None]
    return (sum(e) / len(e) if e else math.nan), (sum(t) / len(t) if t else None)


def point_errors(profile: TwinProfile, observations: Sequence[Observation]) -> tuple[PointError, ...]:
    return tuple(PointError(ob.sweep, ob.setting.label(), ob.energy_j_per_sample, p.energy_j_per_sample,
                            ob.time_s_per_sample, p.time_s_per_sample)
                 for ob, p in zip(observations, predict(profile, observations)))


def calibrated_name(base: TwinProfile) -> str:
    """The default name of a calibration of `base`: "<root>-calibrated", where root is the shipped
    profile a calibrated base itself overlays (so calibrating again replaces, not stacks)."""
    return f"{base.base or base.name}{CALIBRATED_SUFFIX}"


def written_profile(base: TwinProfile, fitted: TwinProfile, moves: Sequence[ParamMove], name: str | None = None) -> TwinProfile:
    """The calibrated profile as its overlay file states it: the base with the moved numbers
    only (a change under MOVED_SD prior sds is noise, not worth a line) and the fitted spreads.
    The report's figures are this profile's, so they are what `--twin NAME` reproduces."""
    from dataclasses import replace

    from engine.device.twin.params import with_params

    moved = {m.path: m.after for m in moves if m.moved}
    return replace(with_params(base, moved), uncertainty=fitted.uncertainty, name=name or calibrated_name(base),
                   base=base.base or base.name)


def spreads_for(profile: TwinProfile, paths: Sequence[str] | None) -> tuple[ParamSpread, ...]:
    """The profile's spreads of `paths` (default: all of them), refusing paths it has none for."""
    by_path = {s.path: s for s in profile.uncertainty}
    if paths is None:
        chosen = tuple(profile.uncertainty)
    else:
        unknown = [p for p in paths if p not in by_path]
        if unknown:
            raise ConfigError(f"profile {profile.name} gives no uncertainty for {', '.join(unknown)}",
                              f"fit some of: {', '.join(by_path) or '(none: the profile has no [uncertainty])'}")
        chosen = tuple(by_path[p] for p in dict.fromkeys(paths))
    if not chosen:
        raise ConfigError(f"profile {profile.name} has no uncertain parameters to fit",
                          "calibrate a profile with an `uncertainty = [...]` list (the shipped one has)")
    return chosen


def calibrate_profile(profile: TwinProfile, observations: Sequence[Observation], *, paths: Sequence[str] | None = None,
                      options: FitOptions | None = None, loso: bool = True, name: str | None = None) -> Calibration:
    """Fit `profile`'s uncertain numbers (`paths`, default all of profile.uncertainty) to the
    observations; with `loso`, also predict each sweep from a fit to the others. The fitted
    profile is called `name` (default "<base>-calibrated")."""
    from engine.device.twin.calibration.optimiser import fit

    opts = options or FitOptions()
    opts.check()
    if not observations:
        raise ConfigError("nothing to calibrate against", "give measured sweep points")
    spreads = spreads_for(profile, paths)
    fitted, cost = fit(profile, observations, spreads, opts)
    result = written_profile(profile, fitted.profile, fitted.moves, name)
    points = point_errors(result, observations)
    before = point_errors(profile, observations)
    e_after, t_after = mape(points)
    e_before, t_before = mape(before)
    sweeps = tuple(dict.fromkeys(ob.sweep for ob in observations))
    held, held_before = [], []
    if loso and len(sweeps) > 1:
        for name in sweeps:
            train = [ob for ob in observations if ob.sweep != name]
            test = [ob for ob in observations if ob.sweep == name]
            refit, _c = fit(profile, train, spreads, opts, posterior=False)
            held.append(sweep_error(refit.profile, test))
            held_before.append(sweep_error(profile, test))
    return Calibration(
        profile=result, base=profile, params=fitted.moves, points=points,
        energy_mape_pct=e_after, time_mape_pct=t_after, energy_mape_before_pct=e_before,
        time_mape_before_pct=t_before, loso=tuple(held), loso_before=tuple(held_before), sweeps=sweeps,
        cost=cost, options=opts, at_bounds=fitted.at_bounds,
    )
