"""What the fine-tuning loop tells its listeners, one typed event at a time.

Every event is a frozen dataclass. A listener is any callable taking an event; the
trainer calls each listener, in order, with every event, from the training thread.
The store, the progress bar, the TUI and the DVFS controller all hang off this hook.
Times named `wall_s` are measured on the host's clock. The trainer knows nothing of
power: `StepEnergy` comes from the run harness's power-monitor window over each step
(measured on a board, exact on the twin), and carries its source label.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Union

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


Event = Union[RunStarted, StepBegin, StepEnd, StepEnergy, EvalResult, Checkpointed, Paused, Resumed,
              RunFinished, RunCancelled]
Callback = Callable[[Event], None]


def event_to_json(event: Event) -> dict[str, Any]:
    """A JSON-ready dict of an event, with its type under "event"."""
    out: dict[str, Any] = {"event": type(event).__name__}
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
