"""A calibration as an overlay profile: the TOML text `load_profile` reads back (base, the moved
numbers in [params], the posterior spreads in `uncertainty`, and a [calibration] summary that the
loader ignores). Every value line says where it comes from, as the shipped profile's do."""

from __future__ import annotations

import math
import re
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Sequence

from engine.core.errors import ConfigError
from engine.device.twin.calibration.fit import Calibration, calibrated_name
from engine.device.twin.params import get_param

if TYPE_CHECKING:  # the profile module loads with the first profile
    from engine.device.twin.profile import TwinProfile

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,80}$")


def check_profile_name(name: str) -> str:
    if not _NAME.match(name) or name.endswith(".toml"):
        raise ConfigError(f"profile name {name!r} is not a plain name",
                          "use letters, digits, '.', '_' and '-', e.g. agx-orin-64gb-calibrated")
    return name


def overlay_toml(cal: Calibration, *, name: str | None = None, root: TwinProfile | None = None, sweeps_note: str = "",
                 when: datetime | None = None) -> str:
    """The overlay file of `cal` (`fit.Calibration`). Its base is the
    root profile: `cal.base` itself, or, when cal.base is a calibrated overlay, `root` (the profile
    it overlays, which the caller loads): [params] then holds every number that differs from it."""
    base = cal.base
    if base.base:
        if root is None or root.name != base.base:
            raise ConfigError(f"profile {base.name} overlays {base.base}; its calibration is written over that",
                              f"pass root=load_profile({base.base!r})")
    else:
        root = base
    title = check_profile_name(name or cal.profile.name or calibrated_name(base))
    if title == root.name:
        raise ConfigError(f"a calibrated profile cannot be named {title!r}: that is its base",
                          f"use e.g. {calibrated_name(base)}")
    stamp = (when or datetime.now(timezone.utc)).strftime("%Y-%m-%dT%H:%M:%SZ")
    n_sweeps, n_points = cal.n_sweeps, cal.n_points
    fitted = {m.path: m for m in cal.params}
    tag = f"calibrated to {n_sweeps} measured sweep{'s' if n_sweeps != 1 else ''} ({sweeps_note or ', '.join(cal.sweeps)})"
    lines = [
        f"# Calibrated twin profile, written by `slm-dvfs calibrate` on {stamp}.",
        f"# {tag}, {n_points} points.",
        f"# The numbers in [params] replace {root.name}'s (profiles/devices/{root.name}.toml); every other number is its.",
        f"# Energy per sample: MAPE {cal.energy_mape_before_pct:.2f}% before, {cal.energy_mape_pct:.2f}% after "
        "[predicted against measured].",
        "",
        f"base = {_str(root.name)}  # the shipped profile this overlays",
        f"name = {_str(title)}  # {tag}",
        f"description = {_str(f'{root.description}, {tag}')}  # {tag}",
        "uncertainty = [  # the spreads the fit left (posterior sd from its Jacobian, at most the prior's); "
        "unfitted ones are the prior's",
    ]
    for s in cal.profile.uncertainty:
        note = (f"posterior: {tag}" if s.path in fitted else f"prior of {root.name} (not fitted)")
        lines.append(f"    {{ path = {_str(s.path)}, lower = {_num(s.lower)}, upper = {_num(s.upper)}, "
                     f"sd = {_num(s.sd)} }},  # {note}")
    lines += ["]", "", "[params]"]
    changed = _changed(cal.profile, root, [s.path for s in cal.profile.uncertainty])
    if not changed:
        lines.append(f"# nothing moved: the measurements agree with {root.name}'s numbers within their spreads")
    for path, value in changed:
        m = fitted.get(path)
        why = (f"{tag}; was {m.before:.4g} ± {m.sd_before:.3g}, now ± {m.sd_after:.3g}"
               if m is not None else f"from {base.name} (not fitted this time)")
        lines.append(f"{_str(path)} = {_num(value)}  # {why}")
    lines += ["", "# What the fit saw and how well it fits (ignored by the loader; `slm-dvfs calibrate` reports it).",
              "[calibration]"]
    summary: list[tuple[str, object, str]] = [
        ("date", stamp, "when the fit ran (UTC)"),
        ("base", base.name, "the profile the fit started from (its values and spreads were the priors)"),
        ("sweeps", list(cal.sweeps), "the measured sweeps fitted"),
        ("points", n_points, "measured settings fitted"),
        ("energy_mape_pct", cal.energy_mape_pct, "predicted energy per sample against measured, after the fit"),
        ("energy_mape_before_pct", cal.energy_mape_before_pct, f"the same for {base.name}"),
        ("time_mape_pct", cal.time_mape_pct, "predicted time per sample against measured (rows with a time)"),
        ("time_mape_before_pct", cal.time_mape_before_pct, f"the same for {base.name}"),
        ("noise", cal.options.noise, "relative sd assumed for one measured figure"),
        ("level_weight", cal.options.level_weight, "weight of a sweep's mean error against its curve's shape"),
    ]
    loso = cal.loso_summary()
    for key, label in (("curve_mape_pct", "normalised energy curve MAPE"),
                       ("optimum_step_error", "GPU optimum error in table steps"),
                       ("saving_error_pts", "saving against MAXN error in points")):
        summary.append((f"loso_{key}", loso.get(key), f"leave-one-sweep-out mean {label} [predicted vs measured]"))
    for key, figure, why in summary:
        if figure is None or (isinstance(figure, float) and not math.isfinite(figure)):
            continue  # TOML has no null: a figure that does not exist is left out
        lines.append(f"{key} = {_value(figure)}  # {why}")
    return "\n".join(lines) + "\n"


def _changed(profile: TwinProfile, root: TwinProfile, paths: Sequence[str]) -> list[tuple[str, float]]:
    out = []
    for path in paths:
        value, was = get_param(profile, path), get_param(root, path)
        if value != was:
            out.append((path, value))
    return out


def _num(value: float) -> str:
    return repr(float(value))


def _str(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _num(value)
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    return _str(str(value))
