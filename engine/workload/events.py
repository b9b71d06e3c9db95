"""What the fine-tuning loop tells its listeners, one typed event at a time, and what they answer.

Every event is a frozen dataclass. The trainer calls each callback, in order, with every event,
from the training thread; a callback answers None or a `RunControl`: `RunControl.stop(reason)`
ends the run at the next step boundary with `RunCancelled(reason)` (as transformers'
`TrainerControl.should_training_stop`), so no callback stops a run by raising. `TrainingListener`
is the base with one no-op hook per event (`on_step_end`, `on_step_energy`...): a listener
overrides only what it needs. The run's other events (an experiment's phases, sweep points,
thermal waits, the fleet's) and the `Event` union of all of them are in engine/run/events.py,
the layer that emits them. Times named `wall_s` are measured on the host's clock. The trainer
knows nothing of power: `StepEnergy` comes from the run harness's power-monitor window over
each step (measured on a board, exact on the twin), and carries its source label.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable, Mapping, Protocol, Union

from engine.core.errors import SlmDvfsError
from engine.core.jsontypes import JsonObject
from engine.core.provenance import Source


@dataclass(frozen=True)
class RunStarted:
    model: str
    task: str
    mode: str  # "full" | "bitfit"
    precision: str  # the precision actually used
    device: str  # torch device of the host run, e.g. "cpu", "cuda:0"
    batch_size: int
    total_steps: int
    steps_per_epoch: int
    seed: int
    trainable_params: int
    total_params: int
    start_step: int = 0  # > 0 when resumed from a checkpoint


@dataclass(frozen=True)
class StepBegin:
    step: int  # 1-based number of the step about to run
    epoch: int  # 0-based


@dataclass(frozen=True)
class StepEnd:
    step: int
    epoch: int
    loss: float
    samples: int  # in this step
    tokens: int  # padded tokens in this step
    lr: float  # learning rate the step used
    wall_s: float  # host time of this step
    elapsed_s: float  # host time since the run (or the resumed part) began
    grad_norm: float | None = None  # before clipping


@dataclass(frozen=True)
class StepEnergy:
    """A step's energy: the power monitor's window from StepBegin to StepEnd (after StepEnd)."""

    step: int
    time_s: float  # device time of the window (the source's timebase)
    energy_j: Mapping[str, float]  # every rail the source reports
    total_energy_j: float  # over `rails` (the run's preset)
    avg_power_w: float
    rails: tuple[str, ...]
    source: Source  # measured on a board, twin when simulated
    samples: int = 0  # training samples of the step
    peak_power_w: float | None = None  # highest total over `rails` of the monitor's samples in the window

    @property
    def rail_power_w(self) -> dict[str, float]:
        return {r: j / self.time_s for r, j in self.energy_j.items()} if self.time_s > 0 else {}


@dataclass(frozen=True)
class EvalResult:
    step: int
    split: str
    metrics: Mapping[str, float]
    samples: int
    wall_s: float
    # What the model learnt from, stamped by run_finetune: the metrics mean something only
    # for pretrained weights on real data (engine.core.provenance.MetricProvenance).
    weights: str | None = None  # "pretrained" | "random"; None: not told
    synthetic: bool | None = None  # generated data


@dataclass(frozen=True)
class Checkpointed:
    step: int
    path: str


@dataclass(frozen=True)
class Paused:
    step: int  # steps completed when the pause took effect


@dataclass(frozen=True)
class Resumed:
    step: int


@dataclass(frozen=True)
class RunFinished:
    step: int
    samples: int
    wall_s: float
    final_loss: float | None


@dataclass(frozen=True)
class RunCancelled:
    step: int  # steps completed; the cancel took effect at this boundary
    samples: int
    wall_s: float
    reason: str


TrainerEvent = Union[RunStarted, StepBegin, StepEnd, StepEnergy, EvalResult, Checkpointed, Paused, Resumed,
                     RunFinished, RunCancelled]


@dataclass(frozen=True)
class RunControl:
    """What a hook answers the run, as transformers' `TrainerControl`: `should_stop` ends it at the
    next step boundary, `reason` becoming RunCancelled's. `error`: the stop is a failure (e.g. the
    thermal guard's abort); the run harness raises it once the run has wound down, so the run is
    stored as failed with that error, its windows closed and its clocks restored."""

    should_stop: bool = False
    reason: str = ""
    error: SlmDvfsError | None = None

    @classmethod
    def stop(cls, reason: str, error: SlmDvfsError | None = None) -> RunControl:
        return cls(True, reason, error)


# A trainer's callback: a listener (its __call__ dispatches to the hooks) or any callable.
Callback = Callable[[TrainerEvent], "RunControl | None"]


def first_stop(current: RunControl | None, answer: RunControl | None) -> RunControl | None:
    """The stop a run keeps: the first one asked for (later answers do not replace it)."""
    if current is not None and current.should_stop:
        return current
    return answer if answer is not None and answer.should_stop else current


class TrainingHooks(Protocol):
    """A listener of the trainer's events: one named hook each (engine/run/events.py's Listener adds the run's)."""

    def on_run_started(self, event: RunStarted) -> RunControl | None: ...
    def on_step_begin(self, event: StepBegin) -> RunControl | None: ...
    def on_step_end(self, event: StepEnd) -> RunControl | None: ...
    def on_step_energy(self, event: StepEnergy) -> RunControl | None: ...
    def on_eval(self, event: EvalResult) -> RunControl | None: ...
    def on_checkpoint(self, event: Checkpointed) -> RunControl | None: ...
    def on_paused(self, event: Paused) -> RunControl | None: ...
    def on_resumed(self, event: Resumed) -> RunControl | None: ...
    def on_finished(self, event: RunFinished) -> RunControl | None: ...
    def on_cancelled(self, event: RunCancelled) -> RunControl | None: ...


class TrainingListener:
    """One hook per trainer event, each doing nothing but `on_event` (itself a no-op): override the
    hooks you need (or `on_event` for all of them). A hook answers None to go on, or a RunControl."""

    def on_event(self, event: TrainerEvent) -> RunControl | None:
        return None

    def on_run_started(self, event: RunStarted) -> RunControl | None:
        return self.on_event(event)

    def on_step_begin(self, event: StepBegin) -> RunControl | None:
        return self.on_event(event)

    def on_step_end(self, event: StepEnd) -> RunControl | None:
        return self.on_event(event)

    def on_step_energy(self, event: StepEnergy) -> RunControl | None:
        return self.on_event(event)

    def on_eval(self, event: EvalResult) -> RunControl | None:
        return self.on_event(event)

    def on_checkpoint(self, event: Checkpointed) -> RunControl | None:
        return self.on_event(event)

    def on_paused(self, event: Paused) -> RunControl | None:
        return self.on_event(event)

    def on_resumed(self, event: Resumed) -> RunControl | None:
        return self.on_event(event)

    def on_finished(self, event: RunFinished) -> RunControl | None:
        return self.on_event(event)

    def on_cancelled(self, event: RunCancelled) -> RunControl | None:
        return self.on_event(event)

    def __call__(self, event: TrainerEvent) -> RunControl | None:
        return deliver_training(self, event)


def deliver_training(listener: TrainingHooks, event: TrainerEvent) -> RunControl | None:
    """Call the listener's hook for this trainer event; its answer."""
    if isinstance(event, StepEnd):
        return listener.on_step_end(event)
    if isinstance(event, StepEnergy):
        return listener.on_step_energy(event)
    if isinstance(event, StepBegin):
        return listener.on_step_begin(event)
    if isinstance(event, RunStarted):
        return listener.on_run_started(event)
    if isinstance(event, EvalResult):
        return listener.on_eval(event)
    if isinstance(event, Checkpointed):
        return listener.on_checkpoint(event)
    if isinstance(event, Paused):
        return listener.on_paused(event)
    if isinstance(event, Resumed):
        return listener.on_resumed(event)
    if isinstance(event, RunFinished):
        return listener.on_finished(event)
    return listener.on_cancelled(event)


def event_to_json(event: TrainerEvent) -> JsonObject:
    """A JSON-ready dict of an event, with its type under "event"."""
    out: JsonObject = {"event": type(event).__name__}
    for f in dataclasses.fields(event):
        value = getattr(event, f.name)
        if isinstance(value, Source):
            value = value.value
        elif isinstance(value, tuple):
            value = list(value)
        elif isinstance(value, Mapping):
            value = dict(value)
        out[f.name] = value
    return out
