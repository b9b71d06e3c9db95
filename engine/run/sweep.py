"""Sweeps: one workload measured at every setting of a setting space, resumable.

Each setting runs W unmeasured (warm-up) steps, then S measured steps; R repetitions
of the whole space give each setting a mean and a 95% confidence interval (Student's
t). The points run in repetition-major order (all settings once, then again), so slow
drift (heat, background load) spreads over the settings instead of biasing one.

Two ways to run one:
- the real fine-tuning loop (`run_sweep`): one continuous run whose steps a
  `SweepDriver` callback splits into points, applying each point's setting at a step
  boundary (through the DVFS controller's `apply`) and measuring its S steps: the
  twin's exact step costs on the twin, one power-monitor window on a board;
- `--fast`, twin only (`fast_sweep`): every point computed straight from the step
  trace with the twin's governors and model; pure and fast (thousands of points a
  second), the selector's training-data generator. No thermal dynamics in this mode.

Every point is committed to the store on its own, so a sweep killed at any moment
resumes where it stopped (`Store.completed_points`), without redoing finished points.
A thermal guard waits before a point on a hot board and aborts on an overheating one.
"""

from __future__ import annotations

import logging
import math
import statistics
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Mapping, Sequence

from engine.device.base import ClockDomain, Device, DeviceIdentity
from engine.core.clocks import highest_at_most
from engine.dvfs.objectives import Measurement, Objective, parse_objective
from engine.dvfs.space import MAXN, SPACES, DvfsSetting, check_clocks
from engine.core.errors import ConfigError
from engine.core.provenance import Source
from engine.core.trace import StepTrace

log = logging.getLogger(__name__)

CONFIDENCE = 0.95
RAILS_ALL = "all"
_POINT_WINDOW = "sweep-point"


# --------------------------------------------------------------------------- fast mode
def setting_control(setting: DvfsSetting, profile: Any) -> Any:
    """The twin's control state once `setting` is applied to a freshly booted board:
    the mode's default governors and caps (mode 0 = MAXN), jetson_clocks' pins at the
    mode maximum, then each pinned domain. Refuses unlisted clocks and clocks above the
    mode's cap with `check_clocks`, as `check_setting` does on a device."""
    from engine.device.twin.governors import default_control

    mode_id = profile.initial_mode if setting.nvpmodel is None else setting.nvpmodel
    mode = profile.mode(mode_id)
    control = default_control(profile, mode_id)
    if setting.jetson_clocks:
        g, c, e = control.gpu, control.cpu, control.emc
        control = replace(
            control,
            gpu=replace(g, min_hz=g.max_hz, cur_hz=g.max_hz),
            cpu=replace(c, min_hz=c.max_hz, cur_hz=c.max_hz),
            emc=replace(e, locked=True, cur_hz=highest_at_most(profile.emc.table_hz, e.max_hz)),
        )
    tables = {ClockDomain.GPU: profile.gpu.table_hz, ClockDomain.CPU: profile.cpu.table_hz,
              ClockDomain.EMC: profile.emc.table_hz}
    check_clocks(setting, tables, mode)
    for domain, hz in setting.pinned.items():
        if domain is ClockDomain.GPU:
            control = replace(control, gpu=replace(control.gpu, min_hz=hz, max_hz=hz, cur_hz=hz))
        elif domain is ClockDomain.CPU:
            control = replace(control, cpu=replace(control.cpu, min_hz=hz, max_hz=hz, cur_hz=hz))
        else:
            control = replace(control, emc=replace(control.emc, locked=True, cur_hz=hz))
    return control


@dataclass(frozen=True)
class FastPoint:
    """One fast-sweep point: the measurement and what it is made of."""

    setting: DvfsSetting
    measurement: Measurement  # over the rails asked for
    rail_energy_j: Mapping[str, float]  # every rail, over the measured steps
    gpu_hz: int  # where the governors settled
    cpu_hz: int
    emc_hz: int


def fast_points(
    trace: StepTrace,
    profile: Any,
    settings: Sequence[DvfsSetting],
    *,
    warmup_steps: int = 1,
    steps: int = 5,
    rails: Sequence[str] | None = None,
) -> list[FastPoint]:
    """`fast_sweep` with each point's per-rail energy and settled clocks."""
    from engine.device.twin.governors import resolve

    _check_counts(warmup_steps, steps, 1)
    names = tuple(profile.rail_names) if rails is None else tuple(rails)
    unknown = [r for r in names if r not in profile.rail_names]
    if unknown:
        raise ConfigError(f"rail(s) {', '.join(unknown)} not in profile {profile.name}",
                          f"use some of {', '.join(profile.rail_names)}")
    # The twin is deterministic and (in this mode) has no thermal state, so warm-up steps
    # cost what measured ones do: they are validated, not computed.
    memo: dict[Any, tuple[Any, Any]] = {}
    out: list[FastPoint] = []
    for setting in settings:
        control = setting_control(setting, profile)
        hit = memo.get(control)
        if hit is None:
            hit = memo[control] = resolve(trace, control, profile)
        clocks, est = hit
        assert est is not None
        rail_j = {name: joules * steps for name, joules in est.energy_j.items()}
        power_w = sum(est.power_mw[r] for r in names) / 1000.0
        m = Measurement(
            time_s=est.time_s * steps,
            energy_j=sum(rail_j[r] for r in names),
            samples=trace.batch_size * steps,
            peak_power_w=power_w,  # the twin's power is constant over a steady step
            source=Source.TWIN,
        )
        out.append(FastPoint(setting, m, rail_j, clocks.gpu_hz, clocks.cpu_hz, clocks.emc_hz))
    return out


def fast_sweep(
    trace: StepTrace,
    profile: Any,
    settings: Sequence[DvfsSetting],
    *,
    warmup_steps: int = 1,
    steps: int = 5,
    rails: Sequence[str] | None = None,
) -> list[tuple[DvfsSetting, Measurement]]:
    """Every setting's measurement computed from the step trace on the twin's model:
    `steps` measured steps at the clocks the governors settle on under the setting's mode
    caps and pins (MAXN = mode 0, dynamic governors). Pure: no tree, no store, no torch.
    Energy is over `rails` (default: every rail of the profile); figures are `twin`."""
    return [(p.setting, p.measurement) for p in
            fast_points(trace, profile, settings, warmup_steps=warmup_steps, steps=steps, rails=rails)]


# --------------------------------------------------------------------------- statistics
@dataclass(frozen=True)
class Stat:
    """A mean over repetitions and its 95% confidence half-width (None with one value)."""

    mean: float
    ci95: float | None
    n: int

    def to_json(self) -> dict[str, Any]:
        return {"mean": self.mean, "ci95": self.ci95, "n": self.n}


def mean_ci(values: Sequence[float], confidence: float = CONFIDENCE) -> Stat:
    """Mean and the half-width of its confidence interval from Student's t distribution."""
    vals = [float(v) for v in values]
    if not vals:
        raise ConfigError("no values to average", "measure at least one repetition")
    mean = statistics.fmean(vals)
    if len(vals) < 2:
        return Stat(mean, None, 1)
    from scipy.stats import t

    sd = statistics.stdev(vals)
    half = float(t.ppf(0.5 + confidence / 2.0, len(vals) - 1)) * sd / math.sqrt(len(vals))
    return Stat(mean, half, len(vals))


@dataclass(frozen=True)
class PointSummary:
    """One setting of a sweep over its repetitions."""

    setting: DvfsSetting
    n: int  # repetitions
    samples: int  # training samples per repetition
    time_s: Stat
    energy_j: Stat
    power_w: Stat
    joules_per_sample: Stat
    samples_per_s: Stat
    seconds_per_sample: Stat
    rail_energy_j: Mapping[str, float]  # mean per rail
    source: Source

    def measurement(self) -> Measurement:
        """The means as one Measurement (what the oracle ranks)."""
        return Measurement(self.time_s.mean, self.energy_j.mean, self.samples, source=self.source)

    def to_json(self) -> dict[str, Any]:
        return {
            "setting": self.setting.to_json(), "label": self.setting.label(), "n": self.n, "samples": self.samples,
            "time_s": self.time_s.to_json(), "energy_j": self.energy_j.to_json(), "power_w": self.power_w.to_json(),
            "joules_per_sample": self.joules_per_sample.to_json(), "samples_per_s": self.samples_per_s.to_json(),
            "seconds_per_sample": self.seconds_per_sample.to_json(),
            "rail_energy_j": dict(self.rail_energy_j), "source": self.source.value,
        }


def summarize_points(points: Iterable[Any]) -> list[PointSummary]:
    """Group stored sweep points (engine.results.store.SweepPoint) by setting, in order of first appearance."""
    from engine.results.store import setting_key

    groups: dict[str, list[Any]] = {}
    for p in points:
        groups.setdefault(setting_key(p.setting), []).append(p)
    out = []
    for pts in groups.values():
        setting = DvfsSetting.from_json(dict(pts[0].setting))
        rails = sorted({r for p in pts for r in p.rail_energy_j})
        samples = [int(p.samples) for p in pts]
        source = pts[0].source or Source.TWIN
        out.append(PointSummary(
            setting=setting,
            n=len(pts),
            samples=round(statistics.fmean(samples)),
            time_s=mean_ci([p.time_s for p in pts]),
            energy_j=mean_ci([p.energy_j for p in pts]),
            power_w=mean_ci([p.energy_j / p.time_s for p in pts]),
            joules_per_sample=mean_ci([p.energy_j / p.samples for p in pts]),
            samples_per_s=mean_ci([p.samples / p.time_s for p in pts]),
            seconds_per_sample=mean_ci([p.time_s / p.samples for p in pts]),
            rail_energy_j={r: statistics.fmean(p.rail_energy_j.get(r, 0.0) for p in pts) for r in rails},
            source=Source(source),
        ))
    return out


def optimum(summaries: Sequence[PointSummary], objective: Objective | None = None) -> PointSummary | None:
    """The summary the objective ranks best (energy per sample by default)."""
    if not summaries:
        return None
    objective = objective or Objective()
    candidates = [(s.setting, s.measurement()) for s in summaries]
    best, _m = objective.best(candidates, None)
    return next(s for s in summaries if s.setting == best)


def maxn_of(summaries: Sequence[PointSummary]) -> PointSummary | None:
    return next((s for s in summaries if s.setting == MAXN), None)


def stored_points(
    store: Any,
    device_id: int,
    workload_id: int,
    *,
    source: Source | None = None,
    rails: str | None = None,
) -> list[tuple[DvfsSetting, Measurement]]:
    """(setting, mean measurement) of every setting the store's sweeps of this workload on
    this device measured (all their repetitions together): the oracle's data. With
    `rails`, only sweeps whose energy is over that preset."""
    points: list[Any] = []
    for sweep in store.list_sweeps():
        if sweep.device_id != device_id or sweep.workload_id != workload_id:
            continue
        if source is not None and sweep.source != source:
            continue
        if rails is not None and sweep.space.get("rails", RAILS_ALL) != rails:
            continue
        points.extend(store.sweep_points(sweep.id))
    return [(s.setting, s.measurement()) for s in summarize_points(points)]


# --------------------------------------------------------------------------- sessions and rails
def open_session(
    *,
    twin: str | None = None,
    sysfs_root: str | None = None,
    fallback_to_twin: bool = False,
    thermal: bool = False,
) -> Any:
    """The device of a sweep or experiment (engine.device.session.DeviceSession): the twin
    runs in virtual time only (no wall-clock idle drift, so results repeat), with its
    thermal model when `thermal`."""
    from engine.device.session import open_device

    return open_device(twin=twin, sysfs_root=sysfs_root, fallback_to_twin=fallback_to_twin, realtime=False,
                       thermal=thermal)


def rail_names(session: Any, preset: str) -> tuple[str, ...]:
    """The rails a preset names on this device (checked: a clear error names the others)."""
    from engine.device.monitor import resolve_rails

    if session.twin is not None:
        available: Sequence[str] = session.twin.profile.rail_names
    else:
        available = [r.name for r in session.device.rails()]
    return resolve_rails(preset, available)


# --------------------------------------------------------------------------- the sweep
@dataclass(frozen=True)
class SweepSpec:
    model: str
    task: str
    space: str = "gpu"  # gpu | gpu+emc | full | modes
    warmup_steps: int = 1
    steps: int = 5  # measured steps per point
    repeats: int = 1
    fast: bool = False  # twin only: compute points from the step trace, no training
    batch_size: int | None = None
    max_seq_len: int | None = None
    precision: str | None = None
    mode: str = "full"
    seed: int = 0
    data: str = "synthetic"
    train_samples: int | None = None
    eval_samples: int | None = 8  # the loop ends with an evaluation; keep it short
    twin: str | None = None
    sysfs_root: str | None = None
    rails: str = RAILS_ALL
    cpu_stride: int = 4
    include_maxn: bool = True
    objective: str = "energy"  # how the optimum is chosen in the result
    thermal: bool = False  # the twin's thermal model
    settings: tuple[DvfsSetting, ...] = ()  # explicit settings instead of the space (library callers)
    thermal_overrides: tuple[tuple[str, float], ...] = ()  # e.g. (("wait_c", 70.0),)

    def validate(self) -> None:
        if self.space not in SPACES:
            raise ConfigError(f"unknown setting space {self.space!r}", f"use one of {', '.join(SPACES)}")
        _check_counts(self.warmup_steps, self.steps, self.repeats)
        if self.fast and self.twin is None:
            raise ConfigError("--fast computes points on the digital twin's model",
                              "add --twin (e.g. --twin agx-orin-64gb), or drop --fast on a board")
        parse_objective(self.objective)

    def space_key(self, rails: str) -> dict[str, Any]:
        """What identifies the sweep among the store's, besides workload, device and counts."""
        if self.settings:
            return {"settings": [s.to_json() for s in self.settings], "rails": rails,
                    "method": "fast" if self.fast else "run", "seed": self.seed,
                    "thermal": bool(self.thermal and self.twin is not None)}
        return {"space": self.space, "cpu_stride": self.cpu_stride, "include_maxn": self.include_maxn,
                "rails": rails, "method": "fast" if self.fast else "run", "seed": self.seed,
                "thermal": bool(self.thermal and self.twin is not None)}

    def to_json(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        out["settings"] = [s.to_json() for s in self.settings]
        out["thermal_overrides"] = dict(self.thermal_overrides)
        return out


@dataclass(frozen=True)
class SweepPointDone:
    """Event: a sweep point was measured and committed."""

    index: int  # 1-based among the points measured in this invocation
    total: int  # points this invocation measures
    setting: DvfsSetting
    repeat: int
    measurement: Measurement


@dataclass(frozen=True)
class SweepResult:
    sweep_id: int
    spec: SweepSpec
    source: Source
    identity: DeviceIdentity
    workload: Any  # engine.workload.resolve.Workload
    rails: tuple[str, ...]
    settings: int
    resumed: int  # points already in the store when this invocation started
    measured: int  # points measured by this invocation
    points: tuple[PointSummary, ...]
    optimum: PointSummary | None
    maxn: PointSummary | None
    status: str  # finished | cancelled
    thermal: Mapping[str, Any] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        return self.status == "finished"

    def to_json(self) -> dict[str, Any]:
        saving = None
        if self.optimum is not None and self.maxn is not None:
            saving = 100.0 * (1.0 - self.optimum.joules_per_sample.mean / self.maxn.joules_per_sample.mean)
        return {
            "sweep_id": self.sweep_id, "source": self.source.value, "status": self.status,
            "spec": self.spec.to_json(), "workload": self.workload.to_json(),
            "device": {"board": self.identity.board, "module": self.identity.module, "profile": self.identity.profile,
                       "twin": self.identity.is_twin},
            "rails": list(self.rails), "settings": self.settings, "resumed": self.resumed, "measured": self.measured,
            "points": [p.to_json() for p in self.points],
            "optimum": None if self.optimum is None else self.optimum.to_json(),
            "maxn": None if self.maxn is None else self.maxn.to_json(),
            "optimum_saving_vs_maxn_pct": saving, "thermal": dict(self.thermal),
        }


def run_sweep(
    spec: SweepSpec,
    *,
    store: Any,
    callbacks: Iterable[Callable[[Any], None]] = (),
    control: Any = None,
    session: Any = None,
    limits: Any = None,
    workload: Any = None,
) -> SweepResult:
    """Run (or resume) a sweep and return its summary. Points are committed one by one.

    `session` (a DeviceSession) and `workload` (engine.workload.resolve.Workload) may be given
    by a caller that already has them; `limits` (engine.run.thermal.ThermalLimits) default
    to the device's. Events (the trainer's, `SweepPointDone`, `ThermalWait`) go to callbacks."""
    from engine.dvfs.space import setting_space
    from engine.workload.resolve import resolve_workload
    from engine.results.store import DeviceRecord, SweepPoint, setting_key
    from engine.run.thermal import ThermalGuard, limits_for

    spec.validate()
    listeners = list(callbacks)
    if workload is None:
        workload = resolve_workload(spec.model, spec.task, batch_size=spec.batch_size, seq_len=spec.max_seq_len,
                                    precision=spec.precision, mode=spec.mode, seed=spec.seed)
    owned = session is None
    if owned:
        session = open_session(twin=spec.twin, sysfs_root=spec.sysfs_root, thermal=spec.thermal)
    try:
        device: Device = session.device
        if spec.fast and session.twin is None:
            raise ConfigError("--fast needs the digital twin", "add --twin, or drop --fast on a board")
        identity = device.identity()
        source = identity.source
        rails = rail_names(session, spec.rails)
        if spec.settings:
            from engine.dvfs.space import check_setting

            for s in spec.settings:
                check_setting(device, s)
            settings = tuple(dict.fromkeys(spec.settings))
        else:
            settings = setting_space(device, spec.space, cpu_stride=spec.cpu_stride, include_maxn=spec.include_maxn)
        device_id = store.ensure_device(DeviceRecord.from_identity(identity))
        workload_id = store.ensure_workload(workload.record(spec.data))
        sweep = store.find_or_create_sweep(
            device=device_id, workload=workload_id, space=spec.space_key(spec.rails),
            warmup_steps=spec.warmup_steps, steps=spec.steps, repeats=spec.repeats, source=source,
        )
        done = store.completed_points(sweep.id)
        plan = [(s, r) for r in range(spec.repeats) for s in settings if (setting_key(s), r) not in done]
        resumed = len(settings) * spec.repeats - len(plan)
        if resumed:
            log.info("sweep %d: %d of %d points already done; measuring the other %d", sweep.id, resumed,
                     resumed + len(plan), len(plan))

        def record(setting: DvfsSetting, repeat: int, m: Measurement, rail_j: Mapping[str, float], i: int) -> None:
            store.add_point(SweepPoint(sweep_id=sweep.id, setting=setting.to_json(), repeat=repeat, time_s=m.time_s,
                                       energy_j=m.energy_j, samples=m.samples, rail_energy_j=dict(rail_j),
                                       avg_power_w=m.avg_power_w, source=source))
            event = SweepPointDone(i, len(plan), setting, repeat, m)
            for callback in listeners:
                callback(event)

        status = "finished"
        thermal: dict[str, Any] = {}
        try:
            if spec.fast:
                pts = fast_points(workload.trace, session.twin.profile, [s for s, _r in plan],
                                  warmup_steps=spec.warmup_steps, steps=spec.steps, rails=rails)
                for i, ((setting, repeat), p) in enumerate(zip(plan, pts), start=1):
                    if control is not None and control.cancelled:
                        status = "cancelled"
                        break
                    record(setting, repeat, p.measurement, p.rail_energy_j, i)
                thermal = {"note": "fast mode computes points without heating the twin: no thermal guard"}
            elif plan:
                limits = limits or limits_for(session.twin, **dict(spec.thermal_overrides))
                guard = ThermalGuard(device, limits, twin=session.twin,
                                     on_wait=lambda w: [cb(w) for cb in listeners])
                status = _run_points(spec, session, workload, plan, rails, guard, record, listeners, control)
                thermal = guard.describe()
        except BaseException:
            store.finish_sweep(sweep.id, "failed")  # resumable: find_or_create_sweep picks it up again
            raise
        store.finish_sweep(sweep.id, status)
        summaries = summarize_points(store.sweep_points(sweep.id))
        objective = parse_objective(spec.objective)
        return SweepResult(
            sweep_id=sweep.id, spec=spec, source=source, identity=identity, workload=workload, rails=rails,
            settings=len(settings), resumed=resumed, measured=len(store.sweep_points(sweep.id)) - resumed,
            points=tuple(summaries), optimum=optimum(summaries, objective), maxn=maxn_of(summaries),
            status=status, thermal=thermal,
        )
    finally:
        if owned:
            session.close()


def _run_points(spec: SweepSpec, session: Any, workload: Any, plan: list[tuple[DvfsSetting, int]],
                rails: tuple[str, ...], guard: Any, record: Callable[..., None], listeners: list[Any],
                control: Any) -> str:
    """The fine-tuning loop over all planned points, inside the clock guard."""
    from engine.dvfs.controller import DvfsController
    from engine.dvfs.policies import PolicyContext, make_policy
    from engine.device.guard.guard import ClockGuard
    from engine.device.monitor import DeviceRailSource, PowerMonitor
    from engine.workload.finetune import FinetuneSpec, run_finetune

    device = session.device
    applier = DvfsController(device, make_policy("maxn"), PolicyContext(device, Objective()))
    total_steps = len(plan) * (spec.warmup_steps + spec.steps)
    ft = FinetuneSpec(
        model=workload.spec or workload.model, task=workload.task, data=spec.data, steps=total_steps,
        batch_size=workload.batch_size, max_seq_len=workload.seq_len, precision=workload.precision,
        train_samples=spec.train_samples, eval_samples=spec.eval_samples, mode=workload.mode, seed=spec.seed,
    )
    with ClockGuard(device):
        monitor = None if session.twin is not None else PowerMonitor(DeviceRailSource(device), rails=spec.rails)
        if monitor is not None:
            monitor.start()
        try:
            driver = SweepDriver(plan, warmup_steps=spec.warmup_steps, steps=spec.steps, apply=applier.apply,
                                 record=record, rails=rails, guard=guard, monitor=monitor)
            result = run_finetune(ft, callbacks=[driver, *listeners], control=control, twin=session.twin)
        finally:
            if monitor is not None:
                monitor.stop()
    if result.cancelled or driver.done < len(plan):
        return "cancelled"
    return "finished"


class SweepDriver:
    """A trainer callback that splits one run into sweep points: before each point it
    lets the thermal guard cool the board and applies the point's setting; it measures
    the point's last `steps` steps and records them."""

    def __init__(
        self,
        plan: Sequence[tuple[DvfsSetting, int]],
        *,
        warmup_steps: int,
        steps: int,
        apply: Callable[[DvfsSetting], None],
        record: Callable[[DvfsSetting, int, Measurement, Mapping[str, float], int], None],
        rails: Sequence[str],
        guard: Any = None,
        monitor: Any = None,
    ) -> None:
        self.plan = list(plan)
        self.warmup_steps = warmup_steps
        self.steps = steps
        self.apply = apply
        self.record = record
        self.rails = tuple(rails)
        self.guard = guard
        self.monitor = monitor
        self.done = 0
        self._in_point = 0
        self._time = 0.0
        self._rail_j: dict[str, float] = {}
        self._samples = 0
        self._peak_w = 0.0
        self._window = False

    def __call__(self, event: Any) -> None:
        from engine.workload.events import RunCancelled, RunFinished, RunStarted, StepBegin, StepEnd

        if isinstance(event, RunStarted):
            if self.plan:
                self._begin_point()
        elif isinstance(event, StepBegin):
            if self.done < len(self.plan) and self._in_point == self.warmup_steps and self.monitor is not None:
                self.monitor.begin_window(_POINT_WINDOW)
                self._window = True
        elif isinstance(event, StepEnd):
            self._step_end(event)
        elif isinstance(event, (RunFinished, RunCancelled)):
            if self._window and self.monitor is not None:
                self._window = False
                self.monitor.end_window(_POINT_WINDOW)

    def _begin_point(self) -> None:
        setting, repeat = self.plan[self.done]
        if self.guard is not None:
            self.guard.before_point(f"{setting.label()} (repeat {repeat + 1})")
        self.apply(setting)
        self._in_point = 0
        self._time, self._rail_j, self._samples, self._peak_w = 0.0, {}, 0, 0.0

    def _step_end(self, event: Any) -> None:
        if self.done >= len(self.plan):
            return
        if self.guard is not None:
            self.guard.check()
        self._in_point += 1
        if self._in_point <= self.warmup_steps:
            return
        self._samples += event.samples
        if event.twin is not None:
            self._time += event.twin.time_s
            for rail, joules in event.twin.energy_j.items():
                self._rail_j[rail] = self._rail_j.get(rail, 0.0) + joules
            if event.twin.time_s > 0:
                watts = sum(event.twin.energy_j.get(r, 0.0) for r in self.rails) / event.twin.time_s
                self._peak_w = max(self._peak_w, watts)
        if self._in_point < self.warmup_steps + self.steps:
            return
        setting, repeat = self.plan[self.done]
        if event.twin is not None:
            m = Measurement(self._time, sum(self._rail_j.get(r, 0.0) for r in self.rails), self._samples,
                            self._peak_w or None, Source.TWIN)
            rail_j = dict(self._rail_j)
        else:
            if self.monitor is None:
                raise ConfigError("a sweep on a board needs a power monitor", "this is a bug: please report it")
            window = self.monitor.end_window(_POINT_WINDOW)
            self._window = False
            m = Measurement(window.duration_s, window.total_energy_j, self._samples, None, window.source)
            rail_j = dict(window.energy_j)
        self.done += 1
        self.record(setting, repeat, m, rail_j, self.done)
        if self.done < len(self.plan):
            self._begin_point()


def _check_counts(warmup: Any, steps: Any, repeats: Any) -> None:
    for name, value, low in (("warm-up steps", warmup, 0), ("measured steps", steps, 1), ("repeats", repeats, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ConfigError(f"{name} must be a whole number of at least {low}, not {value!r}",
                              "e.g. --warmup-steps 1 --steps 5 --repeats 3")

