"""Sweeps: one workload measured at every setting of a setting space, resumable.

Each setting runs W unmeasured (warm-up) steps, then S measured steps; R repetitions
of the whole space give each setting a mean and a 95% confidence interval (Student's
t). The points run in repetition-major order (all settings once, then again), so slow
drift (heat, background load) spreads over the settings instead of biasing one.

Two ways to run one:
- the real fine-tuning loop (`run_sweep`), through the run harness: one continuous run
  whose steps a `SweepDriver` callback splits into points, applying each point's setting
  at a step boundary (through the DVFS controller's `apply`) and measuring its S steps
  in one power-monitor window (exact on the twin, integrated on a board);
- `--fast`, twin only (`fast_sweep`): every point computed straight from the step
  trace with the twin's governors and model; pure and fast (thousands of points a
  second), the selector's training-data generator. No thermal dynamics in this mode.

Every point is committed to the store on its own, so a sweep killed at any moment
resumes where it stopped (`Store.completed_points`), without redoing finished points.
A thermal guard waits before a point on a hot board and aborts on an overheating one.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Callable, Iterable, Mapping

from engine.device.base import Device, DeviceIdentity
from engine.device.baseline import Baseline, board_baseline
from engine.core.measurement import Measurement
from engine.dvfs.objectives import Objective, parse_objective
from engine.device.setting import MAXN, DvfsSetting
from engine.dvfs.space import SPACES
from engine.core.errors import ConfigError
from engine.core.jsontypes import JsonObject, JsonValue
from engine.core.provenance import Source
from engine.device.twin.fast import check_counts, fast_points
from engine.results.compare import SweepSaving, optimum_vs_maxn
from engine.results.estimates import board_estimate
from engine.results.sweeps import RAILS_ALL, PointSummary, maxn_of, optimum, summarize_points
from engine.run.events import SweepPointDone as SweepPointDone  # defined with every event of a run
from engine.run.harness import ListenerLike, RunHarness, open_harness
from engine.run.sweep_driver import SweepDriver
from engine.workload.resolve import Workload
from engine.workload.spec import WorkloadSpec
from engine.workload.trace.loop import check_loop_for

if TYPE_CHECKING:
    from engine.results.records import RunStatus
    from engine.device.session import DeviceSession
    from engine.results.store import Store
    from engine.run.thermal import ThermalGuard, ThermalLimits
    from engine.workload.training.loop import TrainControl

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- the sweep
@dataclass(frozen=True)
class SweepSpec:
    workload: WorkloadSpec  # what every point fine-tunes: model, task, shape, mode, padding, data, seed
    space: str = "gpu"  # gpu | gpu+emc | full | modes
    warmup_steps: int = 1
    steps: int = 5  # measured steps per point
    repeats: int = 1
    fast: bool = False  # twin only: compute points from the step trace, no training
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

    @property
    def trains(self) -> bool:
        """Whether each point trains (slm-dvfs's own loop), or the twin computes it from the trace (--fast)."""
        return not self.fast

    def validate(self) -> None:
        self.validate_work()
        if self.fast and not self.twin:
            raise ConfigError("--fast computes points on the digital twin's model",
                              "add --twin (e.g. --twin agx-orin-64gb), or drop --fast on a board")

    def validate_work(self) -> None:
        """Every check but where it runs (a fleet checks that on the board it gives the sweep)."""
        self.workload.validate()
        check_loop_for(self.trains, self.workload.loop)
        if self.space not in SPACES:
            raise ConfigError(f"unknown setting space {self.space!r}", f"use one of {', '.join(SPACES)}")
        check_counts(self.warmup_steps, self.steps, self.repeats)
        parse_objective(self.objective)

    def space_key(self, rails: str) -> JsonObject:
        """What identifies the sweep among the store's, besides workload, device and counts."""
        if self.settings:
            return {"settings": [s.to_json() for s in self.settings], "rails": rails,
                    "method": "fast" if self.fast else "run", "seed": self.workload.seed,
                    "thermal": bool(self.thermal and self.twin)}
        return {"space": self.space, "cpu_stride": self.cpu_stride, "include_maxn": self.include_maxn,
                "rails": rails, "method": "fast" if self.fast else "run", "seed": self.workload.seed,
                "thermal": bool(self.thermal and self.twin)}

    def to_json(self) -> JsonObject:
        out: JsonObject = dict(self.__dict__)
        out["workload"] = self.workload.to_json()
        out["settings"] = [s.to_json() for s in self.settings]
        out["thermal_overrides"] = dict(self.thermal_overrides)
        return out


@dataclass(frozen=True)
class SweepResult:
    sweep_id: int
    spec: SweepSpec
    source: Source
    identity: DeviceIdentity
    workload: Workload
    rails: tuple[str, ...]
    settings: int
    resumed: int  # points already in the store when this invocation started
    measured: int  # points measured by this invocation
    points: tuple[PointSummary, ...]
    optimum: PointSummary | None
    maxn: PointSummary | None
    status: RunStatus  # finished | cancelled
    thermal: Mapping[str, JsonValue] = field(default_factory=dict)
    vs_maxn: SweepSaving | None = None  # the optimum against the baseline per sample, its board estimate included
    baseline: Baseline | None = None  # the board's: what `maxn` is the point of and how the text names it

    @property
    def complete(self) -> bool:
        return self.status == "finished"

    def to_json(self) -> JsonObject:
        saving = None if self.vs_maxn is None else self.vs_maxn.saving_pct
        return {
            "sweep_id": self.sweep_id, "source": self.source.value, "status": self.status,
            "spec": self.spec.to_json(), "workload": self.workload.to_json(),
            "device": {"board": self.identity.board, "module": self.identity.module, "profile": self.identity.profile,
                       "twin": self.identity.is_twin},
            "rails": list(self.rails), "settings": self.settings, "resumed": self.resumed, "measured": self.measured,
            "points": [p.to_json() for p in self.points],
            "optimum": None if self.optimum is None else self.optimum.to_json(),
            "maxn": None if self.maxn is None else self.maxn.to_json(),
            "baseline": None if self.baseline is None else {"setting": self.baseline.setting.to_json(),
                                                            "mode_name": self.baseline.name,
                                                            "label": self.baseline.label},
            "optimum_saving_vs_maxn_pct": saving,
            "optimum_vs_maxn": None if self.vs_maxn is None else self.vs_maxn.to_json(),
            "thermal": dict(self.thermal),
        }


def run_sweep(
    spec: SweepSpec,
    *,
    store: Store,
    callbacks: Iterable[ListenerLike] = (),
    control: TrainControl | None = None,
    session: DeviceSession | None = None,
    limits: ThermalLimits | None = None,
    workload: Workload | None = None,
) -> SweepResult:
    """Run (or resume) a sweep and return its summary. Points are committed one by one as they are
    measured; a fast sweep's all together, in one transaction.

    `session` (a DeviceSession) and `workload` (spec.workload resolved) may be given
    by a caller that already has them; `limits` (engine.run.thermal.ThermalLimits) default
    to the device's. Events (the trainer's, `SweepPointDone`, `ThermalWait`) go to callbacks."""
    from engine.results.store import DeviceRecord, SweepPoint, WorkloadRecord, setting_key
    from engine.device.guard.lock import session_lock
    from engine.run.thermal import limits_for

    spec.validate()
    listeners = list(callbacks)
    with open_harness(session=session, twin=spec.twin, sysfs_root=spec.sysfs_root, thermal=spec.thermal,
                      rails=spec.rails, listeners=listeners, control=control) as harness:
        # against this board's memory: refused before the store is touched or a model built
        workload = harness.workload(spec.workload, workload)
        device, identity, source, rails = harness.device, harness.identity, harness.source, harness.rails
        if spec.fast:
            harness.session.fast_model()  # a board has none: say so before the store is touched
        else:  # its thermal limits and its data: refused before the store is touched too
            from engine.workload.data.text import check_source  # torch, as training needs anyway

            limits = limits or limits_for(harness.session, **dict(spec.thermal_overrides))
            check_source(spec.workload.task, spec.workload.data, train_samples=spec.train_samples,
                         eval_samples=spec.eval_samples)
        settings = sweep_settings(spec, device)
        device_id = store.ensure_device(DeviceRecord.from_identity(identity))
        workload_id = store.ensure_workload(WorkloadRecord.from_workload(workload, spec.workload.data))
        sweep = store.find_or_create_sweep(
            device=device_id, workload=workload_id, space=spec.space_key(spec.rails),
            warmup_steps=spec.warmup_steps, steps=spec.steps, repeats=spec.repeats, source=source,
            planned=len(settings) * spec.repeats,
            owner_lock=str(session_lock()),  # free once we are gone: the sweep is then marked abandoned
        )
        done = store.completed_points(sweep.id)
        plan = [(s, r) for r in range(spec.repeats) for s in settings if (setting_key(s), r) not in done]
        resumed = len(settings) * spec.repeats - len(plan)
        if resumed:
            log.info("sweep %d: %d of %d points already done; measuring the other %d", sweep.id, resumed,
                     resumed + len(plan), len(plan))

        # Points wait here until committed: a trained point (seconds of measurement) alone, as it is done;
        # a fast sweep's (computed in a blink) all in one transaction, not one fsync each. A crash loses at
        # most this batch, never a committed point: the same sweep resumes from the stored ones.
        pending: list[tuple[SweepPoint, SweepPointDone]] = []

        def flush() -> None:
            if not pending:
                return
            batch = list(pending)
            store.add_points([p for p, _e in batch])
            pending.clear()
            for _p, event in batch:  # SweepPointDone: measured and committed
                harness.emit(event)

        def record(setting: DvfsSetting, repeat: int, m: Measurement, rail_j: Mapping[str, float], i: int) -> None:
            pending.append((SweepPoint(sweep_id=sweep.id, setting=setting.to_json(), repeat=repeat, time_s=m.time_s,
                                       energy_j=m.energy_j, samples=m.samples, rail_energy_j=dict(rail_j),
                                       avg_power_w=m.avg_power_w, source=source),
                            SweepPointDone(i, len(plan), setting, repeat, m)))
            if not spec.fast:
                flush()

        try:
            status, thermal = measure_points(spec, harness, workload, plan, record, control=control, limits=limits)
            flush()
        except BaseException:
            try:
                flush()  # the points computed before an interrupt are kept
            except Exception as exc:  # the store's own failure: the batch is lost, the committed points stay
                log.warning("sweep %d: %d point(s) not stored: %s", sweep.id, len(pending), exc)
            store.finish_sweep(sweep.id, "failed")  # resumable: find_or_create_sweep picks it up again
            raise
        store.finish_sweep(sweep.id, status)
        summaries = summarize_points(store.sweep_points(sweep.id))
        objective = parse_objective(spec.objective)
        base = sweep_baseline(device)
        best = optimum(summaries, objective, baseline=base.setting if base else MAXN)
        maxn = None if base is None else maxn_of(summaries, base.setting)
        vs_maxn = optimum_vs_maxn(best, maxn)
        if vs_maxn is not None and best is not None:  # computed once here, for the text, --json and the TUI
            vs_maxn = replace(vs_maxn, interval=board_estimate(
                source, workload.steps, identity.profile, best.setting, vs_maxn.saving_pct))
        return SweepResult(
            sweep_id=sweep.id, spec=spec, source=source, identity=identity, workload=workload, rails=rails,
            settings=len(settings), resumed=resumed, measured=len(store.sweep_points(sweep.id)) - resumed,
            points=tuple(summaries), optimum=best, maxn=maxn, status=status, thermal=thermal, vs_maxn=vs_maxn,
            baseline=base,
        )


def sweep_baseline(device: Device) -> Baseline | None:
    """The board's baseline, the point its sweep compares with; None on a board whose conf has no uncapped
    mode (an explicit-settings sweep may run there): nothing is then stated against a baseline."""
    try:
        return board_baseline(device.power_modes())
    except ConfigError:
        return None


def sweep_settings(spec: SweepSpec, device: Device) -> tuple[DvfsSetting, ...]:
    """The settings a sweep measures on this device: its explicit ones (checked), or its space's."""
    from engine.dvfs.space import setting_space

    if spec.settings:
        from engine.device.setting import check_setting

        for s in spec.settings:
            check_setting(device, s)
        return tuple(dict.fromkeys(spec.settings))
    return tuple(setting_space(device, spec.space, cpu_stride=spec.cpu_stride, include_maxn=spec.include_maxn))


PointSink = Callable[[DvfsSetting, int, Measurement, Mapping[str, float], int], None]


def measure_points(spec: SweepSpec, harness: RunHarness, workload: Workload, plan: list[tuple[DvfsSetting, int]],
                   record: PointSink, *, control: TrainControl | None = None,
                   limits: ThermalLimits | None = None) -> tuple[RunStatus, JsonObject]:
    """Measure the planned (setting, repeat) points in order, each handed to `record(setting,
    repeat, measurement, rail_j, i)` as it is done: the store's writer in a local sweep, the
    stream back to the driver on a fleet board. Returns (finished | cancelled, the thermal notes)."""
    status: RunStatus = "finished"
    thermal: JsonObject = {}
    if spec.fast:
        pts = fast_points(workload.steps, harness.session.fast_model(), [s for s, _r in plan],
                          warmup_steps=spec.warmup_steps, steps=spec.steps, rails=harness.rails)
        for i, ((setting, repeat), p) in enumerate(zip(plan, pts), start=1):
            if control is not None and control.cancelled:
                status = "cancelled"
                break
            record(setting, repeat, p.measurement, p.rail_energy_j, i)
        thermal = {"note": "fast mode computes points without heating the twin: no thermal guard"}
    elif plan:
        guard = harness.thermal_guard(spec.thermal_overrides, limits=limits)
        status = _run_points(spec, harness, workload, plan, guard, record)
        thermal = guard.describe()
    return status, thermal


def _run_points(spec: SweepSpec, harness: RunHarness, workload: Workload, plan: list[tuple[DvfsSetting, int]],
                guard: ThermalGuard, record: PointSink) -> RunStatus:
    """The fine-tuning loop over all planned points, inside the harness's clock guard and monitor."""
    from engine.dvfs.policies import PolicyContext, make_policy
    from engine.workload.finetune import FinetuneSpec

    device = harness.device
    total_steps = len(plan) * (spec.warmup_steps + spec.steps)
    ft = FinetuneSpec(workload=workload.spec, steps=total_steps, train_samples=spec.train_samples,
                      eval_samples=spec.eval_samples, save_model=False)
    with harness.guarded():
        assert harness.monitor is not None
        # Only its `apply` is used (each point's setting), handed the guard like any run's controller.
        applier = harness.controller(make_policy("maxn"), PolicyContext(device, Objective()))
        driver = SweepDriver(plan, warmup_steps=spec.warmup_steps, steps=spec.steps, apply=applier.apply,
                             record=record, monitor=harness.monitor, guard=guard)
        result = harness.train(ft, callbacks=[driver], workload=workload)
    if result.cancelled or driver.done < len(plan):
        return "cancelled"
    return "finished"
