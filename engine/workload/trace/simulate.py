"""Simulated runs: the fine-tuning event stream without training anything; torch-free.

`simulate_run` emits what the trainer emits (RunStarted, StepBegin, StepEnd,
RunFinished or RunCancelled) through the same step-boundary loop (`engine.workload.training.loop`),
but a step only calls the run's `step_hook` with the workload's batch and length: no
data, no model weights, no torch arithmetic. Where the run is assembled on the digital
twin, that hook advances the twin by the step trace, so a policy (and the DVFS controller
applying it) is evaluated on pythia-410m in seconds. There is no loss (NaN) and no
evaluation metric; results say `simulated`.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable

from engine.core.errors import ConfigError
from engine.core.jsontypes import JsonObject
from engine.workload.events import Callback, RunCancelled, RunFinished, RunStarted, StepEnd
from engine.workload.training.loop import StepHook, StepLoop, TrainControl

if TYPE_CHECKING:
    from engine.workload.resolve import Workload

log = logging.getLogger(__name__)

SIMULATED_DEVICE = "twin (simulated, no training)"  # RunStarted.device of a simulated run


@dataclass(frozen=True)
class SimulationResult:
    """What a simulated run did (there was no training; energy comes from the run's monitor)."""

    steps: int
    samples: int
    wall_s: float  # host time the simulation took (measured; says nothing about the board)
    cancelled: bool = False
    simulated: bool = True
    start_step: int = 0

    def to_json(self) -> JsonObject:
        return {"simulated": True, "steps": self.steps, "samples": self.samples, "cancelled": self.cancelled,
                "host_wall_s": self.wall_s}


def simulate_run(
    workload: Workload,
    *,
    steps: int,
    step_hook: StepHook | None,
    seed: int = 0,
    callbacks: Iterable[Callback] = (),
    control: TrainControl | None = None,
) -> SimulationResult:
    """Run `steps` steps of `workload` (an engine.workload.resolve.Workload), each only
    calling `step_hook(batch_size, seq_len)`, emitting the trainer's events to `callbacks`.

    A `TrainControl` (pause, cancel) and a callback's `RunControl.stop` are honoured at step
    boundaries, by the trainer's loop."""
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ConfigError(f"a simulated run needs at least one step, not {steps!r}", "give --steps 1 or more")
    loop = StepLoop(control, callbacks)  # delivers the events, keeps a callback's stop
    emit = loop.emit
    trace = workload.trace
    emit(RunStarted(
        model=workload.model, task=workload.task, mode=workload.mode, precision=workload.precision,
        device=SIMULATED_DEVICE, batch_size=workload.batch_size, total_steps=steps, steps_per_epoch=steps,
        seed=seed, trainable_params=trace.params, total_params=workload.total_params,
    ))
    t0 = time.perf_counter()
    samples = step = 0
    while step < steps or loop.stopping:  # a stop at the last step still ends it cancelled
        if loop.boundary(step, 0):
            wall = time.perf_counter() - t0 - loop.paused_s
            emit(RunCancelled(step, samples, wall, loop.reason))
            return SimulationResult(step, samples, wall, cancelled=True)
        s0 = time.perf_counter()
        if step_hook is not None:
            step_hook(trace.batch_size, trace.seq_len)
        step += 1
        samples += trace.batch_size
        emit(StepEnd(step=step, epoch=0, loss=math.nan, samples=trace.batch_size, tokens=trace.tokens, lr=0.0,
                     wall_s=time.perf_counter() - s0, elapsed_s=time.perf_counter() - t0 - loop.paused_s))
    wall = time.perf_counter() - t0 - loop.paused_s
    emit(RunFinished(step, samples, wall, None))
    log.info("simulated %d steps of %s/%s in %.3f s of host time", step, workload.model, workload.task, wall)
    return SimulationResult(step, samples, wall)
