"""Every event of a run in one union, and the listener that takes them by name.

The trainer's events (engine/workload/events.py: RunStarted, StepBegin, StepEnd, StepEnergy,
EvalResult, Checkpointed, Paused, Resumed, RunFinished, RunCancelled) are re-exported here with
the ones the run layer emits: an experiment's `ExperimentPhase`, a sweep's `SweepPointDone`, the
thermal guard's `ThermalWait`, and the fleet driver's `FleetEvent` (a fleet sweep) and
`ExperimentEvent` (a fleet run). `Event` is their union.

A listener is the `Listener` protocol: one named hook per event type, each answering None to go
on or a `RunControl` (`RunControl.stop(reason)` ends the run at the next step boundary). It is
modelled on transformers' `TrainerCallback`, whose `on_*` hooks do nothing until a subclass
overrides them and whose `TrainerControl.should_training_stop` is how a callback ends training
(huggingface/transformers, src/transformers/trainer_callback.py; docs: "Callbacks",
https://huggingface.co/docs/transformers/main/trainer_callbacks). `RunListener` is the base with
no-op hooks: subclass it and override what you need. A plain callable taking an Event still works
through one adapter, `as_listener` (the CLI's progress line and the TUI's bridge are callables).
`deliver(listener, event)` is the one place an event is matched to its hook.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Protocol, Union, runtime_checkable

from engine.core.measurement import Measurement
from engine.core.provenance import Source
from engine.device.setting import DvfsSetting
from engine.workload.events import (
    Checkpointed,
    EvalResult,
    Paused,
    Resumed,
    RunCancelled,
    RunControl,
    RunFinished,
    RunStarted,
    StepBegin,
    StepEnd,
    StepEnergy,
    TrainerEvent,
    TrainingHooks,
    TrainingListener,
    deliver_training,
    first_stop,
)

if TYPE_CHECKING:
    from engine.results.compare import RunRole


@dataclass(frozen=True)
class ExperimentPhase:
    """Event: one of the experiment's runs is about to start."""

    role: RunRole
    policy: str
    index: int  # 1-based
    total: int
    mode: str | None = None  # the baseline's mode by name and id (`MAXN_SUPER (mode 2)`); None: not the baseline


@dataclass(frozen=True)
class SweepPointDone:
    """Event: a sweep point was measured and committed."""

    index: int  # 1-based among the points measured in this invocation
    total: int  # points this invocation measures
    setting: DvfsSetting
    repeat: int
    measurement: Measurement


@dataclass(frozen=True)
class ThermalWait:
    """Event: one cool-down of the thermal guard (also kept in the experiment's record)."""

    zone: str
    start_c: float
    end_c: float
    waited_s: float  # on the twin: virtual seconds
    label: str = ""  # what was waiting (e.g. a sweep point)
    simulated: bool = False  # the twin's idle time, not a sleep


@dataclass(frozen=True)
class FleetEvent:
    """Event of a fleet sweep's driver: a unit started, a point stored, a board lost, a unit retried..."""

    kind: str  # one of engine.run.fleet.model.EVENT_KINDS
    board: str  # the board's serial ("" when none)
    sweep_id: int | None
    text: str
    setting: DvfsSetting | None = None  # "point": the point's figures
    repeat: int | None = None
    time_s: float | None = None
    energy_j: float | None = None
    avg_power_w: float | None = None
    done: int | None = None  # "point": points of the sweep stored so far, of `total`
    total: int | None = None
    source: Source | None = None  # "point": measured (a board) or twin


@dataclass(frozen=True)
class ExperimentEvent:
    """Event of a fleet run's driver: an experiment started, a run's phase, progress, stored, retried..."""

    kind: str  # one of engine.run.fleet.model.RUN_EVENT_KINDS
    board: str  # the board's serial ("" when none)
    index: int  # the experiment's place in the list given
    label: str  # e.g. "bert-tiny/sst2 b8 oracle"
    text: str
    role: str | None = None  # "phase" / "progress": which run
    step: int | None = None
    steps: int | None = None
    time_s: float | None = None  # the run so far, or (finished) the policy run's
    energy_j: float | None = None
    saving_pct: float | None = None  # "finished": against the MAXN baseline on the same board
    slowdown_pct: float | None = None
    source: Source | None = None


Event = Union[TrainerEvent, ExperimentPhase, SweepPointDone, ThermalWait, FleetEvent, ExperimentEvent]
Answer = Union[RunControl, None]  # what a hook returns


@runtime_checkable
class Listener(TrainingHooks, Protocol):
    """One named hook per event (the trainer's, TrainingHooks, and these); each answers None (go on)
    or a RunControl."""

    def on_phase(self, event: ExperimentPhase) -> Answer: ...
    def on_sweep_point(self, event: SweepPointDone) -> Answer: ...
    def on_thermal_wait(self, event: ThermalWait) -> Answer: ...
    def on_fleet_sweep(self, event: FleetEvent) -> Answer: ...
    def on_fleet_run(self, event: ExperimentEvent) -> Answer: ...


class RunListener(TrainingListener):
    """The Listener with every hook a no-op (through `on_event`): override what you need."""

    def on_event(self, event: Event) -> Answer:
        return None

    def on_phase(self, event: ExperimentPhase) -> Answer:
        return self.on_event(event)

    def on_sweep_point(self, event: SweepPointDone) -> Answer:
        return self.on_event(event)

    def on_thermal_wait(self, event: ThermalWait) -> Answer:
        return self.on_event(event)

    def on_fleet_sweep(self, event: FleetEvent) -> Answer:
        return self.on_event(event)

    def on_fleet_run(self, event: ExperimentEvent) -> Answer:
        return self.on_event(event)

    def __call__(self, event: Event) -> Answer:  # every event, not only the trainer's
        return deliver(self, event)


class _CallableListener(RunListener):
    """A plain callable taking an Event, as a Listener: every hook calls it."""

    def __init__(self, function: Callable[[Event], Answer]) -> None:
        self.function = function

    def on_event(self, event: Event) -> Answer:
        return self.function(event)

    def __repr__(self) -> str:
        return f"as_listener({self.function!r})"


def as_listener(listener: Listener | Callable[[Event], Answer]) -> Listener:
    """A Listener as it is; a plain callable taking an Event, through the one adapter."""
    if isinstance(listener, Listener):
        return listener
    return _CallableListener(listener)


def deliver(listener: Listener, event: Event) -> Answer:
    """Call the listener's hook for this event; its answer."""
    if isinstance(event, ExperimentPhase):
        return listener.on_phase(event)
    if isinstance(event, SweepPointDone):
        return listener.on_sweep_point(event)
    if isinstance(event, ThermalWait):
        return listener.on_thermal_wait(event)
    if isinstance(event, FleetEvent):
        return listener.on_fleet_sweep(event)
    if isinstance(event, ExperimentEvent):
        return listener.on_fleet_run(event)
    return deliver_training(listener, event)


__all__ = [
    "Answer", "Checkpointed", "EvalResult", "Event", "ExperimentEvent", "ExperimentPhase", "FleetEvent", "Listener",
    "Paused", "Resumed", "RunCancelled", "RunControl", "RunFinished", "RunListener", "RunStarted", "StepBegin",
    "StepEnd", "StepEnergy", "SweepPointDone", "ThermalWait", "TrainerEvent", "as_listener", "deliver", "first_stop",
]
