"""What "best" means: measurements of a setting, and the objectives that rank them.

Objectives (the text `parse_objective` reads):
- `energy` (default): joules per sample.
- `energy@5%`: joules per sample, among settings at most 5% slower than MAXN
  (time per sample against the MAXN baseline). Any base objective takes the suffix.
- `edp`: energy-delay product, (J/sample) x (s/sample).
- `eta:0.5`: Zeus's cost, eta x Energy + (1 - eta) x MaxPower x Time, per sample;
  MaxPower is the module's power limit (60 W on the 64GB, 40 W on the 32GB).

Costs are per sample so that measurements over different numbers of steps (a short
online profiling window, a long sweep point) compare fairly; for equal sample counts
the ranking is the same as for totals.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Literal, Sequence, get_args

from engine.device.base import DeviceIdentity
from engine.device.setting import MAXN, DvfsSetting
from engine.core.constants import parse_choice
from engine.core.errors import ConfigError, UnknownChoiceError
from engine.core.measurement import Measurement, TimeUnknownError
from engine.core.text import shown
from engine.core.userinput import parse_float
from engine.core.jsontypes import JsonObject

log = logging.getLogger(__name__)

ObjectiveKind = Literal["energy", "edp", "eta"]  # what a cost weighs: see the module's doc
OBJECTIVES: tuple[ObjectiveKind, ...] = get_args(ObjectiveKind)
DEFAULT_MAX_POWER_W = 60.0
MODULE_POWER_LIMIT_W = {"64GB": 60.0, "32GB": 40.0}  # spec: module power limits
_SLOWDOWN_EPS = 1e-9  # a setting exactly at the limit is feasible despite rounding
_SYNTAX = "energy, energy@5%, edp, edp@10%, eta:0.5 (0 <= eta <= 1)"


@dataclass(frozen=True)
class Objective:
    """How to rank measurements; lower cost is better."""

    name: ObjectiveKind = "energy"
    max_slowdown: float | None = None  # fraction (0.05 = 5%) against MAXN; None = no limit
    eta: float | None = None  # for "eta" only
    max_power_w: float = DEFAULT_MAX_POWER_W

    def __post_init__(self) -> None:
        parse_objective_kind(self.name)  # a library caller's; parse_objective's is parsed already
        if self.name == "eta" and (self.eta is None or not 0.0 <= self.eta <= 1.0):
            raise ConfigError(f"eta must lie in [0, 1], got {self.eta!r}", "e.g. eta:0.5")
        if self.name != "eta" and self.eta is not None:
            raise ConfigError(
                f"eta is only meaningful for the eta objective, not {self.name!r}", "drop eta, or use eta:X"
            )
        if self.max_slowdown is not None and not (math.isfinite(self.max_slowdown) and self.max_slowdown >= 0):
            raise ConfigError(f"slowdown limit must be >= 0, got {self.max_slowdown!r}", "e.g. energy@5%")
        if not (math.isfinite(self.max_power_w) and self.max_power_w > 0):
            raise ConfigError(
                f"module power limit must be positive, got {self.max_power_w!r} W", "60 W (64GB) or 40 W (32GB)"
            )

    @property
    def spec(self) -> str:
        """The objective as the user writes it (parse_objective(spec) gives it back)."""
        base = f"eta:{self.eta:g}" if self.name == "eta" else self.name
        if self.max_slowdown is not None:
            base += f"@{self.max_slowdown * 100:g}%"
        return base

    def __str__(self) -> str:
        return self.spec

    @property
    def needs_baseline(self) -> bool:
        return self.max_slowdown is not None

    @property
    def needs_time(self) -> bool:
        """Whether ranking needs each point's time (all but plain `energy`): energy-only
        measurements (imported without times) cannot be ranked by it."""
        return self.name != "energy" or self.max_slowdown is not None

    def check_times(self, measurements: Sequence[Measurement]) -> None:
        """Refuse, with the remedy, to rank energy-only measurements by an objective that weighs time."""
        missing = sum(1 for m in measurements if not m.has_time)
        if self.needs_time and missing:
            raise TimeUnknownError(
                f"objective {self.spec} weighs the time per sample, but {missing} of the {len(measurements)} "
                f"points are energy-only (their time was not recorded)",
                "use --objective energy for energy-only sweeps, or import the measurements with their times "
                "(a time_s column)",
            )

    def cost(self, m: Measurement) -> float:
        """Lower is better; per sample (J, J·s, or J-equivalent for eta)."""
        if self.name == "energy":
            return m.joules_per_sample
        self.check_times([m])
        e, t = m.joules_per_sample, m.seconds_per_sample
        if self.name == "edp":
            return e * t
        assert self.eta is not None
        return self.eta * e + (1.0 - self.eta) * self.max_power_w * t

    def feasible(self, m: Measurement, baseline: Measurement | None) -> bool:
        """Whether m keeps within the slowdown limit against the MAXN baseline."""
        if self.max_slowdown is None:
            return True
        if baseline is None:
            raise ConfigError(
                f"objective {self.spec} limits the slowdown against MAXN, but no MAXN measurement was given",
                "measure the baseline (MAXN, or MAXN_SUPER on an Orin Nano / NX) on this workload first "
                "(sweeps include it unless told not to)",
            )
        self.check_times([m, baseline])
        return m.slowdown(baseline) <= self.max_slowdown + _SLOWDOWN_EPS

    def best(
        self, candidates: Sequence[tuple[DvfsSetting, Measurement]], baseline: Measurement | None, *,
        baseline_setting: DvfsSetting = MAXN,
    ) -> tuple[DvfsSetting, Measurement]:
        """The feasible candidate of lowest cost (the first on ties). With no baseline given
        but a `baseline_setting` point among the candidates, that point is the baseline. If none is
        feasible, `baseline_setting` (the board's uncapped mode: MAXN, mode 0, on an AGX Orin;
        engine.device.baseline) is returned, and that is logged."""
        if not candidates:
            raise ConfigError("no candidate settings to choose from", "measure at least one setting (`slm-dvfs sweep`)")
        self.check_times([m for _s, m in candidates])
        if baseline is None and self.needs_baseline:
            baseline = baseline_of(candidates, baseline_setting)
        feasible = [(i, s, m) for i, (s, m) in enumerate(candidates) if self.feasible(m, baseline)]
        if not feasible:
            assert baseline is not None  # feasible() raised otherwise
            log.warning(
                "no setting keeps within %s of MAXN for objective %s; falling back to MAXN",
                f"{(self.max_slowdown or 0) * 100:g}%", self.spec,
            )
            return baseline_setting, baseline
        _i, setting, m = min(feasible, key=lambda x: (self.cost(x[2]), x[0]))
        return setting, m

    def to_json(self) -> JsonObject:
        return {"spec": self.spec, "name": self.name, "max_slowdown": self.max_slowdown, "eta": self.eta,
                "max_power_w": self.max_power_w}


def baseline_of(candidates: Sequence[tuple[DvfsSetting, Measurement]],
                setting: DvfsSetting = MAXN) -> Measurement | None:
    """The measurement of the baseline point (`setting`: the board's uncapped mode) among candidates, if
    there is one."""
    return next((m for s, m in candidates if s == setting), None)


def parse_objective(text: str, *, max_power_w: float = DEFAULT_MAX_POWER_W) -> Objective:
    """`energy`, `energy@5%`, `edp`, `eta:0.5`, and `@N%` after any of them."""
    raw = (text or "").strip().lower().replace(" ", "")
    if not raw:
        raise ConfigError("empty objective", f"use one of: {_SYNTAX}")
    base, sep, limit = raw.partition("@")
    max_slowdown = None
    if sep:
        try:
            if not limit.endswith("%"):
                raise ConfigError("no percent sign", "")
            max_slowdown = parse_float(limit[:-1], "slowdown limit") / 100.0
        except ConfigError:
            raise ConfigError(
                f"slowdown limit {shown(limit)!r} in objective {shown(text)!r} is not a percentage",
                "write it with a percent sign, e.g. energy@5% (at most 5% slower than MAXN)",
            ) from None
    eta = None
    name, colon, arg = base.partition(":")
    if name == "eta":
        if not colon or not arg:
            raise ConfigError(f"objective {text!r} needs its weight", "write eta:0.5 (0 = time only, 1 = energy only)")
        try:
            eta = parse_float(arg, "eta")
        except ConfigError:
            raise ConfigError(f"eta {shown(arg)!r} in objective {shown(text)!r} is not a number",
                              "e.g. eta:0.5") from None
    elif colon:
        raise ConfigError(f"objective {shown(name)!r} takes no argument (got {shown(text)!r})",
                          f"use one of: {_SYNTAX}")
    return Objective(name=parse_objective_kind(name, text), max_slowdown=max_slowdown, eta=eta, max_power_w=max_power_w)


def parse_objective_kind(value: object, text: object = None) -> ObjectiveKind:
    """An objective's kind (energy, edp, eta); UnknownChoiceError naming `text` (the whole objective) when
    it is none of them, its remedy the syntax."""
    try:
        return parse_choice(value, OBJECTIVES, "objective")
    except UnknownChoiceError:
        raise UnknownChoiceError("objective", value if text is None else text, OBJECTIVES,
                                 f"written {_SYNTAX}") from None


def module_power_limit_w(identity: DeviceIdentity) -> float:
    """The module's power limit (Zeus's MaxPower) from its identity: its device profile's (an unknown
    module's fallback profile's, as its identity says), else by memory size; 60 W when unknown."""
    if identity.module_profile:
        from engine.device.twin.profile import board_limits  # loads a TOML: only when a profile is named

        return board_limits(identity.module_profile).power_limit_w
    for key, watts in MODULE_POWER_LIMIT_W.items():
        if key.lower() in identity.module.lower():
            return watts
    log.warning("module %r has no known power limit; assuming %g W", identity.module, DEFAULT_MAX_POWER_W)
    return DEFAULT_MAX_POWER_W
