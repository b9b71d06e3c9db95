"""The `ml` policy: the trained selector chooses the setting before the first step.

    --policy ml                      the user's selector, else the shipped twin-trained one
    --policy ml:/path/sel.joblib     that selector
    --policy ml:probes=3[,warmup=1][,measure=2][,selector=PATH]
    (as make_policy keywords: selector=PATH, probes=K (0..3) or auto, warmup_steps=1, measure_steps=2)

With probes, the first K x (warmup + measure) steps of the run are the probe windows,
at the settings the selector picks (its predicted best and GPU-clock neighbours); their
measured costs correct the predictions, then the final choice holds for the rest of the run.
Without a number (`probes=auto`, the default) the choice's own doubt decides K
(engine.selector.uncertainty.probes_for): none when the twin ensemble's plausible profiles agree
on the optimum's GPU step and the selector's held-out regret is small, up to 3 when they do not
or the workload lies outside what it was trained on. A number given is taken as it is.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.device.base import Device
from engine.device.baseline import AGX_MAXN, Baseline, board_baseline
from engine.core.measurement import Measurement
from engine.dvfs.objectives import Objective
from engine.dvfs.policies import BUILTIN_POLICIES, PolicyFactory
from engine.device.setting import DvfsSetting, check_setting
from engine.core.errors import ConfigError, DeviceError, SlmDvfsError
from engine.core.provenance import Source
from engine.core.text import shown
from engine.core.userinput import parse_int

if TYPE_CHECKING:
    from engine.dvfs.policies import PolicyContext
    from engine.selector.features import WorkloadFeatures
    from engine.selector.selector import Choice, Selector

log = logging.getLogger(__name__)


def workload_features(workload: Any) -> "WorkloadFeatures":
    """The selector's features of what the experiment passes as the workload: features themselves, a
    resolved workload (engine.workload.resolve.Workload), a WorkloadSpec, or a stored WorkloadRecord
    (its spec: the model as recorded, never re-resolved by name)."""
    from engine.selector.features import WorkloadFeatures, features_of
    from engine.workload.resolve import Workload, resolve_workload
    from engine.workload.spec import WorkloadSpec

    if isinstance(workload, WorkloadFeatures):
        return workload
    if isinstance(workload, Workload):
        return features_of(workload)
    if workload is None:
        raise ConfigError("the ml policy was given no workload to choose for",
                          "pass the workload in the policy context (the experiment does)")
    spec = workload if isinstance(workload, WorkloadSpec) else getattr(workload, "spec", None)
    if not isinstance(spec, WorkloadSpec):
        raise ConfigError(f"the ml policy cannot tell the workload of a {type(workload).__name__}",
                          "pass selector features, a resolved workload or a WorkloadSpec")
    return features_of(resolve_workload(spec))


def _baseline_of(device: Device) -> Baseline:
    """The device's baseline; the AGX Orin's MAXN (mode 0) where its conf names no uncapped mode (the
    selector's settings then run as they are, and check_setting refuses what the modes cap)."""
    try:
        return board_baseline(device.power_modes())
    except SlmDvfsError:
        return AGX_MAXN


def _module_profile(device: Device) -> str | None:
    """The device's module profile (a twin's own), for the choice's interval; None where it cannot be read."""
    try:
        identity = device.identity()
    except SlmDvfsError:
        return None
    return identity.profile or identity.module_profile


def accepts(device: Device, setting: DvfsSetting) -> bool:
    """Whether the device can take the setting (listed clocks, within the mode's caps)."""
    try:
        check_setting(device, setting)
    except SlmDvfsError:
        return False
    return True


class MLPolicy:
    """Chooses with a trained selector; optionally probes first (profiling windows)."""

    name = "ml"

    def __init__(self, selector: "str | Path | Selector | None" = None, *, probes: int | str | None = None,
                 warmup_steps: int = 1, measure_steps: int = 2) -> None:
        from engine.selector.persistence import resolve_selector_path
        from engine.selector.probes import MAX_PROBES

        if probes == AUTO:
            probes = None
        if probes is not None and (isinstance(probes, bool) or not isinstance(probes, int)
                                   or not 0 <= probes <= MAX_PROBES):
            raise ConfigError(f"the ml policy takes 0 to {MAX_PROBES} probes or auto, got {probes!r}",
                              "e.g. probes=1, or probes=auto (the default: the choice's interval decides)")
        for key, value, low in (("warmup_steps", warmup_steps, 0), ("measure_steps", measure_steps, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ConfigError(f"{key} must be an integer >= {low}, got {value!r}", f"e.g. {key}={max(low, 1)}")
        self._selector: Selector | None = None
        self.path: Path | None = None
        if selector is None or isinstance(selector, (str, Path)):
            self.path = resolve_selector_path(selector)  # fails now, not at the first step, if there is none
        else:
            self._selector = selector
        self.given_probes = probes  # None: decided per run from the choice's interval
        self.probes = 0 if probes is None else probes  # the number this run takes (set by initial)
        self.probe_rule = "" if probes is None else "given"
        self.warmup_steps = warmup_steps
        self.measure_steps = measure_steps
        self._reset()

    def _reset(self) -> None:
        self.choice: Choice | None = None
        self.setting: DvfsSetting | None = None
        self._ctx: PolicyContext | None = None
        self._features: WorkloadFeatures | None = None
        self._trace: Any = None
        self._settings: list[DvfsSetting] = []  # the selector's (its MAXN is mode 0)
        self._board: Baseline = AGX_MAXN  # the board's baseline: the selector's settings run in its mode
        self._plan: list[DvfsSetting] = []  # the board's settings (in its baseline's mode)
        self._windows: dict[DvfsSetting, Measurement] = {}
        self._step_in_window = 0
        self._acc: Measurement | None = None
        self._steps = 0

    @property
    def selector(self) -> "Selector":
        if self._selector is None:
            from engine.selector.persistence import load_selector

            self._selector = load_selector(self.path)
        return self._selector

    @property
    def spec(self) -> str:
        out = "ml" if self.path is None else f"ml:{self.path}"
        return out + (f" (probes={self.given_probes})" if self.given_probes else "")

    # ------------------------------------------------------------------ the Policy protocol
    def initial(self, ctx: "PolicyContext") -> DvfsSetting:
        self._reset()
        self._ctx = ctx
        sel = self.selector
        self._features = workload_features(ctx.workload)
        self._trace = _steps_of(ctx.workload)
        self._board = _baseline_of(ctx.device)
        self._for_board(ctx)
        self._settings = [s for s in sel.candidates if accepts(ctx.device, self._board.in_its_mode(s))]
        if not self._settings:
            raise ConfigError("no setting of the selector's space is available on this device",
                              "retrain the selector on this device's sweeps (`slm-dvfs train-selector`)")
        if self.given_probes is None:
            first = self._decide(ctx.objective, None)
            self.probes, self.probe_rule = self._auto_probes()
            if not self.probes:
                return first
            self.choice = self.setting = None  # the probes decide
        if self.probes:
            self._plan = self._probe_plan(ctx.objective)
            log.info("ml policy: probing %d setting(s) first: %s", len(self._plan),
                     ", ".join(s.label() for s in self._plan))
            return self._plan[0]
        return self._decide(ctx.objective, None)

    def on_step_end(self, step: int, cost: Measurement | None) -> DvfsSetting | None:
        if self._ctx is None:
            raise ConfigError("the ml policy got a step before its initial setting", "call initial(ctx) first")
        if self.setting is not None:
            return None
        self._steps += 1
        self._step_in_window += 1
        if self._step_in_window > self.warmup_steps:
            if cost is None:
                raise DeviceError(f"the ml policy got no time/energy for probe step {step}",
                                  "run on the twin, or give the controller a power monitor on a board")
            self._acc = cost if self._acc is None else self._acc + cost
        if self._step_in_window < self.warmup_steps + self.measure_steps:
            return None
        assert self._acc is not None
        current = self._plan[len(self._windows)]
        self._windows[current] = self._acc
        self._step_in_window, self._acc = 0, None
        if len(self._windows) < len(self._plan):
            return self._plan[len(self._windows)]
        chosen = self._decide(self._ctx.objective, self._windows)
        return None if chosen == current else chosen

    @property
    def profiling(self) -> bool:
        return self._ctx is not None and self.setting is None

    def describe(self) -> dict[str, Any]:
        sel = self._selector
        return {
            "policy": self.name,
            "spec": self.spec,
            "selector": None if self.path is None else str(self.path),
            "selector_trained_on": None if sel is None else sel.source,
            "selector_basis": None if sel is None else sel.basis.line(),  # what its choice rests on
            "winner": None if sel is None else sel.winner,
            "probes": self.probes,
            "probes_given": self.given_probes is not None,
            "probes_rule": self.probe_rule,
            "probe_steps": self._steps,
            "setting": None if self.setting is None else self.setting.to_json(),
            "label": None if self.setting is None else self.setting.label(),
            "reason": self._reason(),
            "predicted": None if self.choice is None else
            f"{self.choice.setting.label()}, {self._saving_text()} [predicted]",
            "choice": None if self.choice is None else self.choice.to_json(),
        }

    # ------------------------------------------------------------------ helpers
    def _as_source(self) -> Source:
        assert self._ctx is not None
        try:
            identity = self._ctx.device.identity()
        except SlmDvfsError:
            return Source.MEASURED
        return identity.source

    def _for_board(self, ctx: "PolicyContext") -> None:
        """Choose for the board's module (its module profile: figures and setting space), learnt or not."""
        from engine.device.twin.profile import load_profile

        try:
            identity = ctx.device.identity()
        except SlmDvfsError:
            return
        name = identity.profile or identity.module_profile
        if name:
            try:
                self.selector.for_profile(load_profile(name))
            except SlmDvfsError as exc:  # a calibrated profile gone: its module's shipped one
                log.warning("ml policy: profile %s: %s", name, exc.what)
                if identity.module_profile and identity.module_profile != name:
                    self.selector.for_profile(load_profile(identity.module_profile))

    def _probe_plan(self, objective: Objective) -> list[DvfsSetting]:
        assert self._features is not None
        plan = self.selector.probe_plan(self._features, objective, probes=self.probes,
                                        settings=self._with_maxn(), as_source=self._as_source())
        return [self._board.in_its_mode(s) for s in plan]

    def _auto_probes(self) -> tuple[int, str]:
        """How many probes the first choice's interval calls for (uncertainty.probes_for)."""
        from engine.selector.probes import MAX_PROBES
        from engine.selector.uncertainty import probes_for

        assert self.choice is not None
        n, why = probes_for(self.choice, MAX_PROBES)
        log.info("ml policy: %d probe(s) from the choice's interval: %s", n, why)
        return n, f"auto: {why}"

    def _with_maxn(self) -> list[DvfsSetting]:
        from engine.device.setting import MAXN

        return [MAXN] + [s for s in self._settings if s != MAXN]

    def _decide(self, objective: Objective, windows: dict[DvfsSetting, Measurement] | None) -> DvfsSetting:
        assert self._ctx is not None and self._features is not None

        def measure(setting: DvfsSetting) -> Measurement:
            setting = self._board.in_its_mode(setting)  # the windows were taken in the board's mode
            if windows is None or setting not in windows:
                raise ConfigError(f"no probe window was taken at {setting.label()}",
                                  "this is a bug: the probe plan changed between the windows and the choice")
            return windows[setting]

        from engine.selector.uncertainty import with_uncertainty

        choice = self.selector.choose(self._features, objective, settings=self._with_maxn(),
                                      probes=len(windows or {}), measure=measure, as_source=self._as_source())
        # in the board's baseline mode (MAXN_SUPER, mode 2, on an Orin Nano), its interval from the module's
        # profile there; on a board whose baseline is mode 0, from the selector's (calibrated) board as before
        profile = None if self._board.setting == AGX_MAXN.setting else _module_profile(self._ctx.device)
        self.choice = with_uncertainty(choice.on_board(self._board), self.selector, self._trace, profile)
        self.setting = self.choice.setting
        check_setting(self._ctx.device, self.setting)
        log.info("ml policy (%s): %s, predicted saving %s against %s", self.selector.winner,
                 self.setting.label(), self._saving_text(), self.choice.baseline_label)
        return self.setting

    def _reason(self) -> str:
        if self._ctx is None:
            return "not started"
        if self.choice is None:
            return f"probing: {len(self._windows)} of {len(self._plan)} window(s) done"
        c = self.choice
        probed = f" after {len(c.probes)} probe(s)" if c.probes else ""
        return (f"predicted lowest {c.objective} cost by the {c.trained_on}-trained selector ({c.chooser}){probed}; "
                f"expected {self._saving_text()} (predicted), confidence {c.confidence.level}")

    def _saving_text(self) -> str:
        from engine.results.format import saving_text

        c = self.choice
        assert c is not None
        return saving_text(100.0 * c.saving, than=c.baseline_name,
                           interval=None if c.uncertainty is None else c.uncertainty.saving)


def _steps_of(workload: Any) -> Any:
    """What the twin ensemble costs: a resolved workload's steps (its padding mix), a trace, or None
    (features only: the interval then rests on the selector's record alone)."""
    steps = getattr(workload, "steps", None)
    if steps is not None and not callable(steps):
        return steps
    return getattr(workload, "trace", None)


AUTO = "auto"
_SPEC_KEYS = {"selector": "selector", "probes": "probes", "warmup": "warmup_steps", "measure": "measure_steps"}
_OPTIONS_HELP = "ml, ml:PATH, ml:probes=K|auto[,warmup=N][,measure=N][,selector=PATH]"


def parse_ml_arg(arg: str | None) -> dict[str, Any]:
    """`PATH`, or `probes=3,warmup=1,measure=2,selector=PATH` -> MLPolicy keyword arguments."""
    if not arg:
        return {}
    if "=" not in arg:
        return {"selector": arg}
    out: dict[str, Any] = {}
    for item in arg.split(","):
        key, _eq, value = item.strip().partition("=")
        name = _SPEC_KEYS.get(key.strip().lower())
        if name is None or not value.strip():
            raise ConfigError(f"bad ml policy option {shown(item.strip())!r}", f"use {_OPTIONS_HELP}")
        if name in out:
            raise ConfigError(f"ml policy option {key.strip()} given twice", "give each once")
        if name == "selector" or (name == "probes" and value.strip().lower() == AUTO):
            out[name] = value.strip().lower() if name == "probes" else value.strip()
            continue
        try:
            out[name] = parse_int(value, f"ml policy option {key.strip()}")
        except ConfigError:
            raise ConfigError(f"ml policy option {key.strip()}={shown(value.strip())} is not a whole number",
                              f"use {_OPTIONS_HELP}") from None
    return out


def ml_factory(arg: str | None = None, **options: Any) -> MLPolicy:
    """make_policy's factory for `ml`, `ml:PATH` and `ml:probes=K,...` (options may also come as keywords)."""
    parsed = parse_ml_arg(arg)
    both = set(parsed) & set(options)
    if both:
        raise ConfigError(f"ml policy option(s) {', '.join(sorted(both))} given both in the spec and as options",
                          "give each once")
    options = {**parsed, **options}
    selector = options.pop("selector", None)
    try:
        return MLPolicy(selector, **options)
    except TypeError as exc:  # an unknown keyword
        raise ConfigError(f"bad option for the ml policy: {exc}",
                          "use selector=PATH, probes=K, warmup_steps=N, measure_steps=N") from None


def policy_factory(base: PolicyFactory | None = None) -> PolicyFactory:
    """Every policy a client may run, `ml` included: `base` (default the dvfs layer's built-in ones)
    with its `ml` plug point filled by `ml_factory`. The CLI and the TUI build it once and hand it
    down; nothing is registered anywhere (scikit-learn loads only when a selector does)."""
    return (base or BUILTIN_POLICIES).with_policy("ml", ml_factory)
