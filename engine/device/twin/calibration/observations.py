"""What a calibration works on: observations, the forward model over them, fit options and
fitted parameters (`fit` says what is fitted and how)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

from engine.core.errors import ConfigError
from engine.core.trace import StepMix, StepTrace, as_mix
from engine.core.jsontypes import JsonObject
from engine.device.setting import DvfsSetting

if TYPE_CHECKING:  # the profile module loads with the first profile
    from engine.device.twin.fast import MixEstimate
    from engine.device.twin.profile import TwinProfile

DEFAULT_NOISE = 0.02  # relative sd of a measured energy or time per sample
DEFAULT_LEVEL_WEIGHT = 0.5
MOVED_SD = 0.05  # a parameter "moved" when it changed by at least this many prior sds


@dataclass(frozen=True)
class Observation:
    """One measured setting of one sweep (repeats averaged by the caller)."""

    sweep: str  # groups points for the per-sweep shape and leave-one-sweep-out
    trace: StepTrace | StepMix
    setting: DvfsSetting
    rails: tuple[str, ...]  # the rails the measured energy sums
    energy_j_per_sample: float
    time_s_per_sample: float | None = None  # None: an energy-only row

    def __post_init__(self) -> None:
        if not (self.energy_j_per_sample > 0 and math.isfinite(self.energy_j_per_sample)):
            raise ConfigError(f"sweep {self.sweep}, {self.setting.label()}: energy per sample must be positive, "
                              f"not {self.energy_j_per_sample!r}", "drop or correct that measurement")
        t = self.time_s_per_sample
        if t is not None and not (t > 0 and math.isfinite(t)):
            raise ConfigError(f"sweep {self.sweep}, {self.setting.label()}: time per sample must be positive "
                              f"or unknown, not {t!r}", "leave the time out (energy only) or correct it")
        if not self.rails:
            raise ConfigError(f"sweep {self.sweep}: no rails named for its energy",
                              "name the rails the energy sums, e.g. VDD_GPU_SOC,VDD_CPU_CV")


@dataclass(frozen=True)
class Prediction:
    energy_j_per_sample: float
    time_s_per_sample: float


def predict(profile: TwinProfile, observations: Sequence[Observation]) -> list[Prediction]:
    """The twin's energy and time per sample at each observation's setting (energy over its rails)."""
    from engine.device.twin.fast import mix_estimate, setting_control

    memo: dict[tuple[int, DvfsSetting], MixEstimate] = {}
    mixes: dict[int, StepMix] = {}
    out = []
    for ob in observations:
        mix = mixes.get(id(ob.trace))
        if mix is None:
            mix = mixes[id(ob.trace)] = as_mix(ob.trace)
        key = (id(ob.trace), ob.setting)
        est = memo.get(key)
        if est is None:
            est = memo[key] = mix_estimate(mix, setting_control(ob.setting, profile), profile)
        try:
            energy = sum(est.energy_j[r] for r in ob.rails)
        except KeyError:
            unknown = [r for r in ob.rails if r not in est.energy_j]
            raise ConfigError(f"sweep {ob.sweep}: rail(s) {', '.join(unknown)} not in profile {profile.name}",
                              f"its energy must sum rails of {', '.join(profile.rail_names)}") from None
        n = mix.batch_size
        out.append(Prediction(energy / n, est.time_s / n))
    return out


@dataclass(frozen=True)
class ParamMove:
    """One fitted number: the prior and what the fit left."""

    path: str
    before: float
    after: float
    sd_before: float
    sd_after: float

    @property
    def relative_change(self) -> float:
        return (self.after - self.before) / self.before if self.before else math.inf

    @property
    def moved(self) -> bool:
        return abs(self.after - self.before) >= MOVED_SD * self.sd_before

    def to_json(self) -> JsonObject:
        return {"path": self.path, "before": self.before, "after": self.after, "sd_before": self.sd_before,
                "sd_after": self.sd_after, "relative_change": self.relative_change, "moved": self.moved}


@dataclass(frozen=True)
class FitOptions:
    """How the fit weighs what it sees (docs/twin.md, "Calibration")."""

    noise: float = DEFAULT_NOISE  # relative sd of one measured figure
    level_weight: float = DEFAULT_LEVEL_WEIGHT  # weight of each sweep's mean error against its shape
    max_nfev: int = 40  # the least squares' function evaluations (its Jacobians' not counted)

    def check(self) -> None:
        if not (0 < self.noise < 1):
            raise ConfigError(f"noise {self.noise!r} must lie in (0, 1)", "give a relative sd, e.g. 0.02")
        if not (0 <= self.level_weight <= 1):
            raise ConfigError(f"level weight {self.level_weight!r} must lie in [0, 1]", "e.g. 0.5")
        if self.max_nfev < 1:
            raise ConfigError("the fit needs at least one evaluation", "raise max_nfev")

    def to_json(self) -> JsonObject:
        return {"noise": self.noise, "level_weight": self.level_weight, "max_nfev": self.max_nfev}
