"""The run harness: the one way a run or a sweep meets the device.

    with open_harness(twin="agx-orin-64gb", rails="all", listeners=[progress], policies=factory) as h:
        workload = h.workload(spec.workload)  # once, against the board's memory: the key, the step trace
        with h.guarded():                       # clock guard + power monitor
            controller = h.controller(h.policies.make("online"), ctx)  # handed the guard
            result = h.train(finetune_spec, callbacks=[controller, recorder], workload=workload)

It opens the device session (a board, or the twin), resolves the workload, takes the
clock guard (snapshot before any change, restored whatever happens), starts the power
monitor, builds the per-step hook that advances the twin (nothing on a board), and
trains or simulates through the same step loop. There is one energy path: the monitor's
windows over the session's power source, exact on the twin and integrated on a board.
A `StepMeter` turns each step into a window whose `StepEnergy` the harness's dispatcher delivers
to every callback and listener just before the step's StepEnd. Listeners are engine.run.events
Listeners (named hooks; a plain callable through `as_listener`); a hook that answers
`RunControl.stop(...)` ends the run at the next step boundary, and a stop carrying an error (the
thermal guard's abort) is raised by the harness once the run has wound down.

The harness holds what a run's parts are handed instead of looking up: its `ClockGuard` (while
`guarded()`, given to the DVFS controllers it builds and to the experiment that names its runs in
the guard's journal) and the `PolicyFactory` its client built (engine.selector.policy_factory()
with `ml`; the dvfs layer's built-in policies by default). Nothing is process-global.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import replace
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Union

from engine.core.errors import ConfigError
from engine.device.monitor import PowerMonitor, resolve_rails
from engine.run.events import (
    Event,
    Listener,
    RunCancelled,
    RunControl,
    RunFinished,
    StepBegin,
    StepEnd,
    StepEnergy,
    TrainerEvent,
    as_listener,
    deliver,
    first_stop,
)
from engine.workload.events import Callback

# What a harness takes as a listener: a Listener, or a plain callable of an Event (engine.run.events).
ListenerLike = Union[Listener, Callable[[Event], Union[RunControl, None]]]

if TYPE_CHECKING:
    from engine.device.guard.guard import ClockGuard
    from engine.device.session import DeviceSession
    from engine.dvfs.controller import DvfsController
    from engine.dvfs.policies import Policy, PolicyContext, PolicyFactory
    from engine.run.thermal import ThermalGuard, ThermalLimits
    from engine.workload.training.loop import TrainControl
    from engine.workload.trace.simulate import SimulationResult
    from engine.workload.finetune import FinetuneResult, FinetuneSpec
    from engine.workload.resolve import Workload
    from engine.workload.spec import WorkloadSpec

log = logging.getLogger(__name__)

STEP_WINDOW = "step"


def open_session(
    *,
    twin: str | None = None,
    sysfs_root: str | None = None,
    fallback_to_twin: bool = False,
    thermal: bool = False,
) -> DeviceSession:
    """The device of a sweep or experiment: the twin
    runs in virtual time only (no wall-clock idle drift, so results repeat), with its
    thermal model when `thermal`."""
    from engine.device.session import open_device

    return open_device(twin=twin, sysfs_root=sysfs_root, fallback_to_twin=fallback_to_twin, realtime=False,
                       thermal=thermal)


def rail_names(session: DeviceSession, preset: str) -> tuple[str, ...]:
    """The rails a preset names on this device (checked: a clear error names the others)."""
    return resolve_rails(preset, session.rail_names())


class StepMeter:
    """One monitor window per step (StepBegin to StepEnd), turned into the step's StepEnergy. The
    harness's dispatcher calls it and delivers what it returns: the meter emits nothing itself."""

    def __init__(self, monitor: PowerMonitor) -> None:
        self.monitor = monitor
        self._open = False

    def begin(self) -> None:
        self.discard()  # a StepEnd that never came (an exception mid-step)
        self.monitor.begin_window(STEP_WINDOW)
        self._open = True

    def end(self, event: StepEnd) -> StepEnergy | None:
        """The step's energy; None when no window was open for it."""
        if not self._open:
            return None
        self._open = False
        w = self.monitor.end_window(STEP_WINDOW)
        # The peak of the samples the window integrated, kept by the window as they came (O(1)
        # here); an exact window (from the source's energy counter) integrated none: no peak.
        return StepEnergy(step=event.step, time_s=w.duration_s, energy_j=dict(w.energy_j),
                          total_energy_j=w.total_energy_j, avg_power_w=w.avg_power_w, rails=w.rails,
                          source=w.source, samples=event.samples, peak_power_w=w.peak_power_w)

    def discard(self) -> None:
        if self._open:
            self._open = False
            self.monitor.end_window(STEP_WINDOW)


class RunHarness:
    """An open device session with what a run needs around it (see the module's docstring)."""

    def __init__(self, session: DeviceSession, *, rails: str = "all", listeners: Iterable[ListenerLike] = (),
                 control: TrainControl | None = None, policies: PolicyFactory | None = None) -> None:
        from engine.dvfs.policies import BUILTIN_POLICIES

        self.session = session
        self.policies = policies or BUILTIN_POLICIES  # every policy name a run here may ask for
        self.device = session.device
        self.identity = self.device.identity()
        self.source = self.identity.source
        self.rails_preset = rails
        self.rails = rail_names(session, rails)
        self.listeners: list[Listener] = [as_listener(x) for x in listeners]
        self.control = control
        self.monitor: PowerMonitor | None = None
        self.clock_guard: ClockGuard | None = None  # while guarded(): the clocks' snapshot and journal
        self._stop: RunControl | None = None  # the first stop a listener answered in the run under way

    def emit(self, event: Event) -> RunControl | None:
        """Deliver a run event (a phase, a sweep point, a thermal wait) to every listener; a stop
        answered here ends the run under way at its next boundary (the first stop is kept)."""
        for listener in self.listeners:
            self._stop = first_stop(self._stop, deliver(listener, event))
        return self._stop

    def workload(self, spec: WorkloadSpec, resolved: Workload | None = None) -> Workload:
        """`spec` resolved against this device's memory (its MemTotal: the session's
        /proc/meminfo), or `resolved` (resolved before the device was known) checked against it:
        a step that does not fit this board is refused (MemoryFitError, with the remedies) before
        a store row is written or a model built."""
        from engine.workload.resolve import resolve_workload

        total = self.session.memory_total_bytes()
        if resolved is None:
            return resolve_workload(spec, mem_total_bytes=total)
        resolved.check_memory(total)
        return resolved

    def thermal_guard(self, overrides: Iterable[tuple[str, float]] = (),
                      limits: ThermalLimits | None = None) -> ThermalGuard:
        """The thermal guard of this device: its limits (or `limits`) with the overrides; waits go to listeners."""
        from engine.run.thermal import ThermalGuard, limits_for

        return ThermalGuard(self.device, limits or limits_for(self.session, **dict(overrides)), session=self.session,
                            on_wait=self.emit)

    @contextlib.contextmanager
    def guarded(self) -> Iterator["RunHarness"]:
        """The clock guard (snapshot now, restored on the way out) and the power monitor."""
        from engine.device.guard.guard import ClockGuard

        with ClockGuard(self.device) as guard, self.monitored():
            self.clock_guard = guard
            try:
                yield self
            finally:
                self.clock_guard = None

    def controller(self, policy: Policy, ctx: PolicyContext) -> DvfsController:
        """A DVFS controller of `policy` on this device, handed this harness's clock guard (it notes
        jetson_clocks' store there); build it inside `guarded()`."""
        from engine.dvfs.controller import DvfsController

        return DvfsController(self.device, policy, ctx, guard=self.clock_guard)

    @contextlib.contextmanager
    def monitored(self) -> Iterator["RunHarness"]:
        """The power monitor alone, for a run that changes no clocks."""
        self.monitor = PowerMonitor(self.session.power_source(), rails=self.rails_preset).start()
        try:
            yield self
        finally:
            monitor, self.monitor = self.monitor, None
            monitor.stop()

    def _dispatcher(self, callbacks: Iterable[Callback]) -> Callback:
        """The run's one callback: each trainer event to the run's callbacks, then to the listeners,
        with the step meter's StepEnergy delivered just before its StepEnd (a step's window closes
        before anyone acts on its StepEnd, e.g. a sweep driver idling the twin to cool it before
        its next point). It answers the first stop anyone asked for in this run."""
        if self.monitor is None:
            raise ConfigError("a run needs the harness's power monitor", "run it inside `with harness.guarded():`")
        meter = StepMeter(self.monitor)
        run_callbacks = list(callbacks)

        def deliver_all(event: TrainerEvent) -> None:
            for callback in run_callbacks:
                self._stop = first_stop(self._stop, callback(event))
            for listener in self.listeners:
                self._stop = first_stop(self._stop, deliver(listener, event))

        def dispatch(event: TrainerEvent) -> RunControl | None:
            if isinstance(event, StepBegin):
                meter.begin()
            elif isinstance(event, StepEnd):
                energy = meter.end(event)
                if energy is not None:
                    deliver_all(energy)
            elif isinstance(event, (RunFinished, RunCancelled)):
                meter.discard()
            deliver_all(event)
            return self._stop

        return dispatch

    @contextlib.contextmanager
    def _run(self) -> Iterator[None]:
        """One run: a stop answered during it ends it; a stop that carries an error (the thermal
        guard's abort) is raised once the run has wound down (RunCancelled delivered, windows closed)."""
        try:
            yield
        finally:
            stop, self._stop = self._stop, None
        if stop is not None and stop.error is not None:
            raise stop.error

    def train(self, spec: FinetuneSpec, callbacks: Iterable[Callback] = (), *,
              workload: Workload | None = None) -> FinetuneResult:
        """Fine-tune with the per-step hook; returns its result. `workload`: the spec's workload as
        resolved for this run (the trainer then names nothing again)."""
        from engine.workload.finetune import run_finetune

        with self._run(), self.session.driven():
            result = run_finetune(spec, callbacks=[self._dispatcher(callbacks)], control=self.control,
                                  step_hook=self.session.step_hook, workload=workload)
        return result

    def simulate(self, workload: Workload, *, steps: int, seed: int = 0,
                 callbacks: Iterable[Callback] = ()) -> SimulationResult:
        """Only advance the device's model by the workload's steps, step by step (with dynamic
        padding each step is the weighted mix of the lengths its batches pad to)."""
        from engine.workload.trace.simulate import simulate_run

        if not self.session.can_simulate:
            raise ConfigError("--simulate needs the digital twin: there is no training to measure on a board",
                              "add --twin, or drop --simulate")
        mix = workload.steps
        hook = self.session.step_hook(lambda rows, seq_len: mix)
        with self._run(), self.session.driven():
            result = simulate_run(workload, steps=steps, seed=seed, step_hook=hook,
                                  callbacks=[self._dispatcher(callbacks)], control=self.control)
        return result


@contextlib.contextmanager
def open_harness(*, session: DeviceSession | None = None, twin: str | None = None, sysfs_root: str | None = None,
                 fallback_to_twin: bool = False, thermal: bool = False, rails: str = "all",
                 listeners: Iterable[ListenerLike] = (), control: TrainControl | None = None,
                 policies: PolicyFactory | None = None) -> Iterator[RunHarness]:
    """A harness over `session`, or over a session opened here (and closed on the way out);
    `policies`: the factory of every policy name its runs may ask for (default: the built-in ones)."""
    owned = session is None
    if session is None:
        session = open_session(twin=twin, sysfs_root=sysfs_root, fallback_to_twin=fallback_to_twin, thermal=thermal)
    try:
        yield RunHarness(session, rails=rails, listeners=listeners, control=control, policies=policies)
    finally:
        if owned:
            session.close()


def finetune_measured(spec: FinetuneSpec, *, twin: str, callbacks: Iterable[Callback] = (),
                      control: TrainControl | None = None, rails: str = "all") -> FinetuneResult:
    """`slm-dvfs finetune --twin`: fine-tune on this host while the twin runs every step, and
    give the result the twin's time and energy from one monitor window over the training steps."""
    from engine.core.provenance import Source
    from engine.run.recorder import RunRecorder

    with open_session(twin=twin) as session:
        harness = RunHarness(session, rails=rails, control=control)
        with harness.monitored():
            assert harness.monitor is not None
            recorder = RunRecorder(harness.monitor, keep_samples=False)
            result = harness.train(spec, callbacks=[recorder, *callbacks])
        totals = recorder.totals()
    if totals is None:
        return result
    return replace(result, twin_profile=twin, twin_precision=spec.workload.named().named_precision,
                   twin_time_s=totals.time_s, twin_energy_j=dict(totals.rail_energy_j), twin_source=Source.TWIN)
