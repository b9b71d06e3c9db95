"""`slm-dvfs calibrate`: fit the twin's uncertain parameters to the measured sweeps in the results
store and write a calibrated profile (`--twin <name>-calibrated` then uses it)."""

from __future__ import annotations

import argparse
import json
import sys

from engine.cli.store_cmds import add_db_arg, _db_path
from engine.core.errors import ConfigError
from engine.core.text import clean_text


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("calibrate", help="fit the digital twin to measured sweeps; writes a calibrated profile",
                       description="Fit the twin profile's uncertain parameters (voltage curve, capacitances, "
                                   "leakage, efficiencies, host overheads, MAXN's governor) to the measured sweeps "
                                   "in the results store, by bounded least squares on normalised energy and time "
                                   "with the profile's values as priors (docs/twin.md, \"Calibration\"). Writes "
                                   "DATA_DIR/profiles/<name>.toml and a fit report beside it.")
    add_db_arg(p)
    p.add_argument("--sweeps", nargs="+", metavar="ID",
                   help="measured sweeps to fit, e.g. s3 s5 or 3 5 (default: every measured sweep)")
    p.add_argument("--twin", metavar="BASE", default=None,
                   help="the profile to calibrate (default agx-orin-64gb; a calibrated one is recalibrated from "
                        "its values and spreads)")
    p.add_argument("--name", help="the calibrated profile's name (default <base>-calibrated)")
    p.add_argument("--params", metavar="P1,P2",
                   help="fit only these uncertain numbers, e.g. gpu.vf.knee_hz,gpu.capacitance_f "
                        "(default: every one the profile lists under uncertainty)")
    p.add_argument("--no-loso", action="store_true",
                   help="skip the leave-one-sweep-out errors (one refit per sweep)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=cmd_calibrate)


def cmd_calibrate(args: argparse.Namespace) -> int:
    from engine.results.store import Store
    from engine.run.calibrate import (
        HOW_TO_MEASURE,
        CalibrateSpec,
        calibrate_gathered,
        observe,
        parse_sweep_ids,
        read_measured,
    )

    params = None
    if args.params:
        params = tuple(p.strip() for p in args.params.split(",") if p.strip())
        if not params:
            raise ConfigError(f"--params {args.params!r} names no parameter", "e.g. --params gpu.vf.knee_hz")
    spec = CalibrateSpec(sweeps=parse_sweep_ids(args.sweeps or ()), twin=args.twin, name=args.name, params=params,
                         loso=not args.no_loso)
    path = _db_path(args)
    if not path.exists():
        raise ConfigError(f"no results store at {path}: it holds no measured sweeps to calibrate against",
                          HOW_TO_MEASURE)
    with Store(path, create=False) as store:  # read, then let go: tracing and the fit do not need it
        stored = read_measured(store, spec)
    gathered = observe(stored, spec)
    print(f"fitting {gathered.base.name} to {len(gathered.sweeps)} measured sweep(s), "
          f"{len(gathered.observations)} settings...", file=sys.stderr)
    result = calibrate_gathered(gathered, spec)
    if args.json:
        print(json.dumps(result.to_json(), indent=2, default=str))
    else:
        print(clean_text(result.report_text()))
    return 0
