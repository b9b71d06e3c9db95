"""The twin's uncertain parameters: named by path, read and replaced in a frozen profile, and
sampled into an ensemble of plausible profiles.

A path names one number of a `TwinProfile`: `gpu.capacitance_f`, `gpu.vf.max_v`, or a rail's
field by the rail's name, `rails.VDD_GPU_SOC.static_mw`. A profile's `[[uncertainty]]` tables
say which of its numbers are uncertain, within which bounds, and how uncertain (`sd`): the
shipped profile's are priors (its `estimate` values), a calibrated profile's are what the fit
left (see engine.device.twin.calibration). Calibration moves these numbers and no others; the
ensemble that puts intervals on twin figures samples them.
"""

from __future__ import annotations

import dataclasses
import math
import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping, Sequence, cast

from engine.core.errors import ProfileError

if TYPE_CHECKING:  # profile imports this module
    from engine.device.twin.profile import TwinProfile


@dataclass(frozen=True)
class ParamSpread:
    """How uncertain one profile number is: it lies in [lower, upper], sd is one standard deviation."""

    path: str
    lower: float
    upper: float
    sd: float

    def check(self, value: float, where: str) -> None:
        if not (self.lower < self.upper) or self.sd < 0 or not all(map(math.isfinite, (self.lower, self.upper, self.sd))):
            raise ProfileError(f"{where}: uncertainty of {self.path} needs finite lower < upper and sd >= 0, "
                               f"found [{self.lower}, {self.upper}] sd {self.sd}",
                               "correct the [[uncertainty]] table")
        if not (self.lower <= value <= self.upper):
            raise ProfileError(f"{where}: {self.path} = {value:g} lies outside its bounds [{self.lower:g}, {self.upper:g}]",
                               "widen the bounds in [[uncertainty]] or correct the value")


def get_param(profile: TwinProfile, path: str) -> float:
    """The number at `path` in `profile`."""
    obj: object = profile
    for part in path.split("."):
        obj = _child(obj, part, path)
    if isinstance(obj, bool) or not isinstance(obj, (int, float)):
        raise ProfileError(f"{path} is not a number of the profile", "name a numeric field, e.g. gpu.capacitance_f")
    return float(obj)


def with_params(profile: TwinProfile, values: Mapping[str, float]) -> TwinProfile:
    """A copy of `profile` with the numbers at these paths replaced (integers stay integers)."""
    out: object = profile
    for path, value in values.items():
        out = _replace(out, path.split("."), float(value), path)
    return cast("TwinProfile", out)  # _replace rebuilds each level with its own type


def param_values(profile: TwinProfile, paths: Sequence[str]) -> dict[str, float]:
    return {p: get_param(profile, p) for p in paths}


def sample_profiles(profile: TwinProfile, n: int, *, seed: int = 0,
                    spreads: Sequence[ParamSpread] | None = None) -> list[TwinProfile]:
    """`n` plausible profiles: each uncertain number drawn independently from a normal around the
    profile's value with its sd, truncated to its bounds (rejection, then clipping). The first
    member is the profile itself, so an ensemble's figures always include the nominal one.
    Independent draws ignore correlations between parameters: the spread is, if anything, wide."""
    spreads = tuple(profile.uncertainty if spreads is None else spreads)
    rng = random.Random(seed)
    members = [profile]
    for _ in range(max(0, n - 1)):
        values: dict[str, float] = {}
        for s in spreads:
            centre = get_param(profile, s.path)
            values[s.path] = _truncated(rng, centre, s.sd, s.lower, s.upper)
        members.append(with_params(profile, values))
    return members[:max(n, 1)]


def _truncated(rng: random.Random, mu: float, sd: float, lo: float, hi: float) -> float:
    if sd <= 0:
        return min(max(mu, lo), hi)
    for _ in range(32):
        x = rng.gauss(mu, sd)
        if lo <= x <= hi:
            return x
    return min(max(rng.gauss(mu, sd), lo), hi)


def _child(obj: object, part: str, path: str) -> object:
    if isinstance(obj, tuple):  # rails, by name
        for item in obj:
            if getattr(item, "name", None) == part:
                return item
        raise ProfileError(f"{path}: the profile has no {part!r} there",
                           f"use one of {', '.join(str(getattr(i, 'name', '?')) for i in obj)}")
    if not dataclasses.is_dataclass(obj) or isinstance(obj, type) or part not in {f.name for f in dataclasses.fields(obj)}:
        raise ProfileError(f"{path}: the profile has no field {part!r} there",
                           "name a field of profiles/devices/agx-orin-64gb.toml, e.g. gpu.vf.max_v")
    return getattr(obj, part)


def _replace(obj: object, parts: list[str], value: float, path: str) -> object:
    head, rest = parts[0], parts[1:]
    child = _child(obj, head, path)
    if isinstance(obj, tuple):
        new = _replace(child, rest, value, path) if rest else value
        return tuple(new if item is child else item for item in obj)
    assert dataclasses.is_dataclass(obj) and not isinstance(obj, type)  # _child checked it
    if rest:
        return dataclasses.replace(obj, **{head: _replace(child, rest, value, path)})
    if isinstance(child, bool) or not isinstance(child, (int, float)):
        raise ProfileError(f"{path} is not a number of the profile", "name a numeric field, e.g. gpu.capacitance_f")
    return dataclasses.replace(obj, **{head: round(value) if isinstance(child, int) else value})
