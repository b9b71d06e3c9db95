"""What the fine-tuning loop tells its listeners, one typed event at a time.

Every event is a frozen dataclass. A listener is any callable taking an event; the
trainer calls each listener, in order, with every event, from the training thread.
The store, the progress bar, the TUI and the power monitor all hang off this hook.
Times named `wall_s` are measured on the host's clock; twin figures travel in a
`TwinCost`, which carries its `twin` source label.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Union

from engine.core.provenance import Source


@dataclass(frozen=True)
class TwinCost:
    """Time and energy the digital twin charged, per rail (J)."""

    time_s: float
    energy_j: Mapping[str, float] = field(default_factory=dict)
    source: Source = Source.TWIN

    @property
    def total_energy_j(self) -> float:
        return float(sum(self.energy_j.values()))

    def __add__(self, other: "TwinCost") -> "TwinCost":
        rails = dict(self.energy_j)
        for rail, joules in other.energy_j.items():
            rails[rail] = rails.get(rail, 0.0) + float(joules)
        return TwinCost(self.time_s + other.time_s, rails, self.source)

    def to_json(self) -> dict[str, Any]:
        return {
            "time_s": self.time_s,
            "energy_j": dict(self.energy_j),
            "total_energy_j": self.total_energy_j,
            "source": str(self.source),
        }


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
    twin: str | None = None  # twin profile when the run advances a digital twin


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
    twin: TwinCost | None = None  # this step on the twin


@dataclass(frozen=True)
class EvalResult:
    step: int
    split: str
    metrics: Mapping[str, float]
    samples: int
    wall_s: float


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
    twin: TwinCost | None = None  # the whole run on the twin


@dataclass(frozen=True)
class RunCancelled:
    step: int  # steps completed; the cancel took effect at this boundary
    samples: int
    wall_s: float
    reason: str
    twin: TwinCost | None = None


Event = Union[RunStarted, StepBegin, StepEnd, EvalResult, Checkpointed, Paused, Resumed,
              RunFinished, RunCancelled]
Callback = Callable[[Event], None]


def event_to_json(event: Event) -> dict[str, Any]:
    """A JSON-ready dict of an event, with its type under "event"."""
    out: dict[str, Any] = {"event": type(event).__name__}
    for f in dataclasses.fields(event):
        value = getattr(event, f.name)
        if isinstance(value, TwinCost):
            value = value.to_json()
        elif isinstance(value, Mapping):
            value = dict(value)
        out[f.name] = value
    return out
