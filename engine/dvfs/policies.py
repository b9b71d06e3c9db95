"""Policies: what setting to run a fine-tuning job at, and whether to revise it.

Specs `make_policy` reads (the bullets are the users' help: the TUI's help screen shows them as
they are, so they say what a policy does, not how it is built):
- `maxn`: the board's uncapped nvpmodel mode (MAXN, or MAXN_SUPER on an Orin Nano / NX: found
  by name, whatever its id) with its default dynamic governors (the baseline).
- `maxn-pinned`: that mode plus jetson_clocks (every domain at the mode's maximum).
- `mode:N`: nvpmodel mode N with its default governors.
- `static:gpu=816,cpu=2201.6,emc=3199[,mode=N]`: explicit clocks in MHz as typed;
  domains left out stay with their governors; runs in the uncapped mode unless `mode=` says.
- `oracle`: the best point of a recorded sweep of this workload on this device.
- `ml`: the setting a trained selector predicts is best for this workload
  (`slm-dvfs train-selector` trains one; `ml:PATH` loads another).
- `online`: profiles GPU clocks during the first steps of the run, then keeps the best.

A `PolicyFactory` is the value that knows every policy name: `BUILTIN_POLICIES` holds the ones
this layer builds (`ml` among them only as a plug point that says how to get it); the clients
that have the selector (the CLI, the TUI) build theirs once with `engine.selector.policy_factory()`
and hand it down to the run harness. There is no registry: two factories in one process never
see each other's policies. A maker is called as `maker(arg, **options)`, `arg` being the text after
the colon (None without one). `online` is engine.dvfs.online.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Callable, Mapping, Protocol, Sequence, runtime_checkable

from engine.device.base import Device
from engine.core.units import format_mhz
from engine.core.measurement import Measurement
from engine.dvfs.objectives import Objective, baseline_of
from engine.device.baseline import baseline_setting, mode_label, uncapped_mode
from engine.device.setting import DvfsSetting, check_setting
from engine.core.clocks import parse_mhz
from engine.core.errors import ConfigError, NoRecordedSweepError
from engine.core.text import shown
from engine.core.userinput import parse_int
from engine.core.jsontypes import JsonObject

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from engine.dvfs.online import OnlineOptions

log = logging.getLogger(__name__)

SPEC_HELP = (
    "maxn, maxn-pinned, mode:N, static:gpu=MHz[,cpu=MHz][,emc=MHz][,mode=N], oracle, ml, online"
)


@dataclass(frozen=True)
class PolicyContext:
    """What a policy may look at when it chooses."""

    device: Device
    objective: Objective
    sweep_points: Sequence[tuple[DvfsSetting, Measurement]] = ()  # a recorded sweep (oracle)
    # What the run fine-tunes, as its client has it: a resolved Workload (engine.workload.resolve), its
    # WorkloadSpec, a stored record or the selector's features. Each policy narrows it (the ml selector
    # to its features, online's prior to the step trace); dvfs names none of them (features live above).
    workload: object = None


@runtime_checkable
class Policy(Protocol):
    name: str

    def initial(self, ctx: PolicyContext) -> DvfsSetting:
        """The setting to apply before the first step."""
        ...

    def on_step_end(self, step: int, cost: Measurement | None) -> DvfsSetting | None:
        """After step `step` (1-based) with its cost (None when unmeasured): a new setting
        to apply before the next step, or None to keep the current one."""
        ...

    @property
    def profiling(self) -> bool:
        """True while the policy is still trying settings (online)."""
        ...

    def describe(self) -> JsonObject:
        """What it chose and why, JSON-ready (the store keeps it)."""
        ...


class FixedPolicy:
    """A policy that chooses once, before the first step, and never revises."""

    def __init__(self, name: str, spec: str, setting: DvfsSetting | None, reason: str) -> None:
        self.name = name
        self.spec = spec
        self.setting = setting
        self.reason = reason

    def choose(self, ctx: PolicyContext) -> DvfsSetting:
        assert self.setting is not None
        return self.setting

    def initial(self, ctx: PolicyContext) -> DvfsSetting:
        self.setting = self.choose(ctx)
        check_setting(ctx.device, self.setting)
        log.info("policy %s: %s", self.spec, self.setting.label())
        return self.setting

    def on_step_end(self, step: int, cost: Measurement | None) -> DvfsSetting | None:
        return None

    @property
    def profiling(self) -> bool:
        return False

    def describe(self) -> JsonObject:
        return {
            "policy": self.name,
            "spec": self.spec,
            "setting": None if self.setting is None else self.setting.to_json(),
            "label": None if self.setting is None else self.setting.label(),
            "reason": self.reason,
        }

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.spec!r})"


class BaselinePolicy(FixedPolicy):
    """The baseline (`maxn`): the board's uncapped mode, found by name in its nvpmodel conf whatever its
    id (engine.device.baseline), with its dynamic governors; `jetson_clocks` (`maxn-pinned`): every clock
    pinned at that mode's maximum."""

    def __init__(self, *, jetson_clocks: bool = False) -> None:
        name = "maxn-pinned" if jetson_clocks else "maxn"
        super().__init__(name, name, None, "")
        self.jetson_clocks = jetson_clocks
        self.mode_name: str | None = None

    def choose(self, ctx: PolicyContext) -> DvfsSetting:
        modes = ctx.device.power_modes()
        mode = uncapped_mode(modes)
        self.mode_name = mode.name
        self.reason = (f"{mode_label(mode)} with jetson_clocks: every clock at its maximum" if self.jetson_clocks
                       else f"{mode_label(mode)} with its default dynamic governors (the baseline)")
        return baseline_setting(modes, jetson_clocks=self.jetson_clocks)

    def describe(self) -> JsonObject:
        out = super().describe()
        out["mode_name"] = self.mode_name  # the stored runs name their baseline by it
        return out


class StaticPolicy(FixedPolicy):
    """Explicit clocks, in the mode `mode=` names or else in the board's uncapped mode (where every
    table entry can be pinned: mode 0 is a capped one on an Orin Nano)."""

    def __init__(self, spec: str, setting: DvfsSetting, *, mode_given: bool) -> None:
        super().__init__("static", spec, setting, "explicit clocks")
        self.mode_given = mode_given

    def choose(self, ctx: PolicyContext) -> DvfsSetting:
        assert self.setting is not None
        if self.mode_given:
            return self.setting
        return replace(self.setting, nvpmodel=uncapped_mode(ctx.device.power_modes()).id)


class OraclePolicy(FixedPolicy):
    """The best point, for the objective, of a recorded sweep (given as data)."""

    def __init__(self) -> None:
        super().__init__("oracle", "oracle", None, "")
        self.chosen: Measurement | None = None
        self.baseline: Measurement | None = None
        self.points = 0
        self.objective: Objective | None = None

    def choose(self, ctx: PolicyContext) -> DvfsSetting:
        points = list(ctx.sweep_points)
        if not points:
            raise NoRecordedSweepError(
                "the oracle policy has no recorded sweep of this workload on this device",
                "run `slm-dvfs sweep` of this workload first (its model, task, batch, padding and loop: a run that "
                "trains needs a lean-loop sweep, e.g. `--fast --loop lean` on the twin), then use --policy oracle",
            )
        self.points, self.objective = len(points), ctx.objective
        modes = ctx.device.power_modes()
        base = baseline_setting(modes)  # the sweep's baseline point: the board's uncapped mode
        self.baseline = baseline_of(points, base)
        setting, self.chosen = ctx.objective.best(points, self.baseline, baseline_setting=base)
        self.reason = f"lowest {ctx.objective.spec} cost of {len(points)} recorded sweep points"
        if ctx.objective.needs_baseline and setting == base and self.chosen is self.baseline:
            self.reason += f" (no point kept within the slowdown limit, so {mode_label(uncapped_mode(modes))})"
        return setting

    def describe(self) -> JsonObject:
        out = super().describe()
        out["points"] = self.points
        if self.objective is not None and self.chosen is not None:
            out["objective"] = self.objective.spec
            out["measurement"] = self.chosen.to_json()
            out["cost"] = self.objective.cost(self.chosen)
        if self.baseline is not None and self.chosen is not None:
            out["baseline"] = self.baseline.to_json()
            out["energy_saving_vs_maxn"] = 1.0 - self.chosen.joules_per_sample / self.baseline.joules_per_sample
            both_timed = self.chosen.has_time and self.baseline.has_time  # energy-only points: no slowdown
            out["slowdown_vs_maxn"] = self.chosen.slowdown(self.baseline) if both_timed else None
        return out


# --------------------------------------------------------------------------- spec parsing


def parse_static(arg: str, *, default_mode: int | None = 0) -> DvfsSetting:
    """`gpu=816,emc=3199[,cpu=2201.6][,mode=N]` (MHz as typed) -> a setting in `default_mode` unless
    `mode=` says (the static policy passes None and runs it in the board's uncapped mode)."""
    if not arg or not arg.strip():
        raise ConfigError("static needs at least one clock", "e.g. static:gpu=816 or static:gpu=816,emc=3199 (MHz)")
    clocks: dict[str, int] = {}
    mode = default_mode
    for item in arg.split(","):
        key, eq, value = item.strip().partition("=")
        key = key.strip().lower()
        value = value.strip().lower()
        if not eq or not value:
            raise ConfigError(f"static clock {item.strip()!r} has no value", "write domain=MHz, e.g. gpu=816")
        if key in ("mode", "nvpmodel"):
            mode = _mode_id(value, f"static mode {shown(value)!r} is not a mode id", "e.g. mode=0")
            continue
        if key not in ("gpu", "cpu", "emc"):
            raise ConfigError(f"unknown clock domain {key!r} in static:{arg}", "use gpu, cpu, emc (and mode=N)")
        if key in clocks:
            raise ConfigError(f"{key} given twice in static:{arg}", "give each domain once")
        clocks[key] = parse_mhz(value, what=f"{key} clock")
    if not clocks:
        raise ConfigError("static needs at least one clock", "e.g. static:gpu=816 (MHz)")
    return DvfsSetting(gpu_hz=clocks.get("gpu"), cpu_hz=clocks.get("cpu"), emc_hz=clocks.get("emc"), nvpmodel=mode)


def _mode_id(text: str, what: str, remedy: str) -> int:
    """An nvpmodel mode id, read strictly (engine.core.userinput): a whole number >= 0."""
    try:
        n = parse_int(text, "mode id")
    except ConfigError:
        raise ConfigError(what, remedy) from None
    if n < 0:
        raise ConfigError(what, remedy)
    return n


def _no_options(spec: str, options: Mapping[str, object]) -> None:
    if options:
        raise ConfigError(
            f"policy {spec} takes no options (got {', '.join(sorted(options))})",
            "drop them; only `online` (and registered policies) take options",
        )


def _no_arg(name: str, arg: str | None) -> None:
    if arg is not None:
        raise ConfigError(f"policy {name} takes no argument (got {name}:{arg})", f"use one of: {SPEC_HELP}")


def _maxn(arg: str | None, **options: object) -> Policy:
    _no_arg("maxn", arg)
    _no_options("maxn", options)
    return BaselinePolicy()


def _maxn_pinned(arg: str | None, **options: object) -> Policy:
    _no_arg("maxn-pinned", arg)
    _no_options("maxn-pinned", options)
    return BaselinePolicy(jetson_clocks=True)


def _mode(arg: str | None, **options: object) -> Policy:
    _no_options(f"mode:{arg}", options)
    n = _mode_id(arg or "", f"mode needs a mode id (got {shown(arg)!r})",
                 "e.g. mode:2 (`slm-dvfs device` lists the modes)")
    return FixedPolicy("mode", f"mode:{n}", DvfsSetting(nvpmodel=n), f"nvpmodel mode {n} with its default governors")


def _static(arg: str | None, *, setting: DvfsSetting | None = None, **options: object) -> Policy:
    _no_options("static", options)
    mode_given = True
    if setting is None:
        setting = parse_static(arg or "", default_mode=None)
        mode_given = setting.nvpmodel is not None
        if not mode_given:  # mode 0 until the board is known: its uncapped mode (StaticPolicy.choose)
            setting = replace(setting, nvpmodel=0)
    elif arg:
        raise ConfigError("static got both clocks in its spec and a setting", "give one of them")
    spec = "static:" + ",".join(
        [f"{d.value}={format_mhz(hz)}" for d, hz in setting.pinned.items()]
        # a mode typed in the spec stays in it (mode=0 is a capped mode on an Orin Nano)
        + ([f"mode={setting.nvpmodel}"] if setting.nvpmodel not in (None, 0) or (arg and mode_given) else [])
    )
    return StaticPolicy(spec, setting, mode_given=mode_given)


def _oracle(arg: str | None, **options: object) -> Policy:
    _no_arg("oracle", arg)
    _no_options("oracle", options)
    return OraclePolicy()


def _ml_missing(arg: str | None, **options: object) -> Policy:
    # The dvfs layer does not import the selector above it: the clients (CLI, TUI) build their
    # factory with `engine.selector.policy_factory()`, which puts the ml policy in this place.
    raise ConfigError(
        "the ml policy is not among this run's policies (the built-in ones, without the selector)",
        "pass the run the factory of engine.selector.policy_factory() (the slm-dvfs CLI and TUI do), "
        "or pick another policy: oracle, online, maxn",
    )


def _online(arg: str | None, **options: Unpack[OnlineOptions]) -> Policy:
    from engine.dvfs.online import OnlinePolicy, parse_online_options

    if arg:
        parsed = parse_online_options(arg)
        both = set(parsed) & set(options)
        if both:
            raise ConfigError(f"online option(s) {', '.join(sorted(both))} given twice", "give each once")
        merged: OnlineOptions = {**parsed, **options}
        options = merged
    try:
        return OnlinePolicy(**options)
    except TypeError as exc:  # an unknown keyword
        raise ConfigError(f"bad option for the online policy: {exc}", "see engine.dvfs.online.OnlinePolicy") from None


# What makes a policy from its spec's argument and options: maker(arg, **options).
PolicyMaker = Callable[..., Policy]

_BUILTIN: Mapping[str, PolicyMaker] = MappingProxyType({
    "maxn": _maxn,
    "maxn-pinned": _maxn_pinned,
    "mode": _mode,
    "static": _static,
    "oracle": _oracle,
    "ml": _ml_missing,
    "online": _online,
})
_PLUG_POINTS = frozenset({"ml"})  # built-in names that exist to be replaced


@dataclass(frozen=True, eq=False)
class PolicyFactory:
    """Every policy a run may ask for, by name: an immutable value that a client builds once and
    hands down (the run harness, the experiment, the fleet's boards). `with_policy` gives a new
    factory with one more maker; the factory it was made from is unchanged."""

    makers: Mapping[str, PolicyMaker] = field(default_factory=lambda: _BUILTIN)

    def __post_init__(self) -> None:
        object.__setattr__(self, "makers", MappingProxyType(dict(self.makers)))

    def with_policy(self, name: str, maker: PolicyMaker, *, replace: bool = False) -> PolicyFactory:
        """This factory with `name` (and `name:arg`) made by `maker`. Replacing a built-in other
        than the `ml` plug point needs replace=True."""
        key = name.strip().lower()
        if not re.fullmatch(r"[a-z][a-z0-9_-]*", key):
            raise ConfigError(f"policy name {name!r} is not a plain name", "use letters, digits, - and _")
        if key in self.makers and key not in _PLUG_POINTS and self.makers[key] is not maker and not replace:
            raise ConfigError(f"a policy named {key!r} is already in this factory",
                              "pick another name, or pass replace=True")
        return PolicyFactory({**self.makers, key: maker})

    def names(self) -> tuple[str, ...]:
        """The policy names this factory makes (help texts, the TUI)."""
        return tuple(self.makers)

    def make(self, spec: str, **options: object) -> Policy:
        """A policy from its spec ("maxn", "mode:2", "static:gpu=816", "online", ...)."""
        text = (spec or "").strip()
        name, colon, arg = text.partition(":")
        maker = self.makers.get(name.strip().lower())
        if maker is None:
            extra = sorted(set(self.makers) - set(_BUILTIN))
            listed = SPEC_HELP + (", " + ", ".join(extra) if extra else "")
            raise ConfigError(f"unknown policy {spec!r}", f"use one of: {listed}")
        return maker(arg.strip() if colon else None, **options)


BUILTIN_POLICIES = PolicyFactory()  # what this layer builds by itself: `ml` only as its plug point


def make_policy(spec: str, **options: object) -> Policy:
    """A built-in policy from its spec (`BUILTIN_POLICIES.make`); a run that may ask for `ml` uses
    the factory its client built (engine.selector.policy_factory())."""
    return BUILTIN_POLICIES.make(spec, **options)
