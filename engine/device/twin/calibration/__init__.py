"""Calibrating the twin to measured sweeps, one job in four parts:

- `observations`: what a calibration works on: measured points, the twin's forward model over
  them (`predict`), fit options, fitted parameters;
- `optimiser`: the numerics: bounded least squares over every fitted number, posterior spreads;
- `bounds`: what a fit that ends at a parameter's bound means (`BoundHit`);
- `fit`: `calibrate_profile` -> `Calibration`, each point's and each held-out sweep's error
  (the objective is described there);
- `overlay`: the calibrated profile as the overlay TOML file `load_profile` reads back.
"""

from engine.device.twin.calibration.bounds import BoundHit, ParamKind, param_kind
from engine.device.twin.calibration.fit import (
    Calibration,
    PointError,
    SweepError,
    calibrate_profile,
    calibrated_name,
    loso_summary,
    mape,
    point_errors,
    spreads_for,
    sweep_error,
    written_profile,
)
from engine.device.twin.calibration.observations import (
    DEFAULT_LEVEL_WEIGHT,
    DEFAULT_NOISE,
    FitOptions,
    Observation,
    ParamMove,
    Prediction,
    predict,
)
from engine.device.twin.calibration.overlay import check_profile_name, overlay_toml

__all__ = ["DEFAULT_LEVEL_WEIGHT", "DEFAULT_NOISE", "BoundHit", "Calibration", "FitOptions", "Observation",
           "ParamKind", "ParamMove", "PointError", "Prediction", "SweepError", "calibrate_profile", "calibrated_name",
           "check_profile_name", "loso_summary", "mape", "overlay_toml", "param_kind", "point_errors", "predict", "spreads_for",
           "sweep_error", "written_profile"]
