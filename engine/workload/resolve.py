"""Twin-only execution: the fine-tuning event stream without training anything.

`simulate_run` emits what the trainer emits (RunStarted, StepBegin, StepEnd with the
twin's cost, RunFinished or RunCancelled), but each step only advances the digital twin
by the workload's step trace: no data, no model weights, no torch arithmetic. So a
policy (and the DVFS controller applying it) can be evaluated on pythia-410m in
seconds. There is no loss (NaN) and no evaluation metric; results say `simulated`.

`resolve_workload` turns (model, task, batch, length, precision, mode) into the step
trace every twin figure is computed from (meta tensors: nothing is allocated).
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from engine.core.errors import ConfigError
from engine.core.provenance import Source
from engine.workload.events import (
    Callback,
    Event,
    Paused,
    Resumed,
    RunCancelled,
    RunFinished,
    RunStarted,
    StepBegin,
    StepEnd,
    TwinCost,
)
from engine.core.trace import StepTrace

log = logging.getLogger(__name__)

SIMULATED_DEVICE = "twin (simulated, no training)"  # RunStarted.device of a simulated run


def workload_key(model: str, task: str, batch_size: int, seq_len: int, precision: str, mode: str) -> str:
    return f"{model}|{task}|{batch_size}|{seq_len}|{precision}|{mode}"


@dataclass(frozen=True)
class Workload:
    """One fine-tuning workload, resolved: names as the store keys them, and its step trace."""

    model: str  # display name, e.g. "bert-tiny" (the store's key)
    task: str  # canonical GLUE key, e.g. "sst2"
    family: str  # "bert" | "pythia"
    batch_size: int
    seq_len: int
    precision: str  # what the Orin runs (16-bit stays 16-bit on the twin)
    mode: str  # "full" | "bitfit"
    trace: StepTrace
    total_params: int
    spec: str = ""  # what the user typed for the model

    @property
    def key(self) -> str:
        """What the store keys this workload by."""
        return workload_key(self.model, self.task, self.batch_size, self.seq_len, self.precision, self.mode)

    def to_json(self) -> dict[str, Any]:
        return {"model": self.model, "task": self.task, "family": self.family, "batch_size": self.batch_size,
                "seq_len": self.seq_len, "precision": self.precision, "mode": self.mode,
                "trainable_params": self.trace.params, "total_params": self.total_params,
                "trace": {"flops": self.trace.flops, "bytes": self.trace.bytes, "kernels": self.trace.kernels,
                          "source": Source.PREDICTED.value}}


def resolve_workload(
    model: str,
    task: str,
    *,
    batch_size: int | None = None,
    seq_len: int | None = None,
    precision: str | None = None,
    mode: str = "full",
    seed: int = 0,
    allow_download: bool = False,
) -> Workload:
    """The workload a run or sweep of `model` on `task` fine-tunes, with its step trace
    (cached; captured on meta tensors when not). Defaults come from the zoo entry."""
    from engine.workload.finetune import defaults_for
    from engine.workload.glue import get_task
    from engine.workload.models import build_model, resolve_model
    from engine.core.constants import MODES, PRECISIONS
    from engine.workload.trainer import apply_mode
    from engine.workload.tracer import step_trace

    if mode not in MODES:
        raise ConfigError(f"unknown training mode {mode!r}", f"use one of {', '.join(MODES)}")
    if precision is not None and precision not in PRECISIONS:
        raise ConfigError(f"unknown precision {precision!r}", f"use one of {', '.join(PRECISIONS)}")
    for name, value in (("batch size", batch_size), ("sequence length", seq_len)):
        if value is not None and value < 1:
            raise ConfigError(f"{name} must be at least 1, not {value}", f"give a {name} of 1 or more")
    glue = get_task(task)
    resolved = resolve_model(model, allow_download=allow_download)
    defaults = defaults_for(model)
    batch = batch_size or defaults.batch_size
    length = seq_len or defaults.seq_len
    max_pos = int(resolved.config.get("max_position_embeddings", 512))
    if length > max_pos:
        raise ConfigError(f"sequence length {length} exceeds what {resolved.name} can take ({max_pos} positions)",
                          f"give --max-seq-len {max_pos} or less")
    prec = precision or defaults.precision
    net = build_model(resolved.config, glue, seed=seed, device="meta")
    apply_mode(net, mode)
    record = step_trace(net, name=resolved.name, batch_size=batch, seq_len=length, precision=prec)
    return Workload(
        model=resolved.name, task=glue.name, family=resolved.family, batch_size=batch, seq_len=length,
        precision=prec, mode=mode, trace=record.trace, total_params=sum(p.numel() for p in net.parameters()),
        spec=str(model),
    )


@dataclass(frozen=True)
class SimulationResult:
    """What a simulated run did: twin figures only (there was no training)."""

    steps: int
    samples: int
    twin: TwinCost  # the whole run on the twin, per rail
    wall_s: float  # host time the simulation took (measured; says nothing about the board)
    cancelled: bool = False
    simulated: bool = True
    start_step: int = 0

    @property
    def source(self) -> Source:
        return Source.TWIN

    def to_json(self) -> dict[str, Any]:
        return {"simulated": True, "steps": self.steps, "samples": self.samples, "cancelled": self.cancelled,
                "twin": self.twin.to_json(), "host_wall_s": self.wall_s}


def simulate_run(
    workload: Workload,
    twin: Any,
    *,
    steps: int,
    seed: int = 0,
    callbacks: Iterable[Callback] = (),
    control: Any = None,
    twin_name: str | None = None,
) -> SimulationResult:
    """Run `steps` steps of `workload` on `twin` (anything with `run_step(trace)`, and
    optionally `driven()`), emitting the trainer's events to `callbacks` in order.

    A `TrainControl` (pause, cancel) is honoured at step boundaries, as in the trainer."""
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ConfigError(f"a simulated run needs at least one step, not {steps!r}", "give --steps 1 or more")
    listeners = list(callbacks)

    def emit(event: Event) -> None:
        for callback in listeners:
            callback(event)

    trace = workload.trace
    name = twin_name or str(getattr(getattr(twin, "profile", None), "name", "twin"))
    emit(RunStarted(
        model=workload.model, task=workload.task, mode=workload.mode, precision=workload.precision,
        device=SIMULATED_DEVICE, batch_size=workload.batch_size, total_steps=steps, steps_per_epoch=steps,
        seed=seed, trainable_params=trace.params, total_params=workload.total_params, twin=name,
    ))
    t0 = time.perf_counter()
    paused_s = 0.0
    total = TwinCost(0.0)
    samples = 0
    step = 0
    driven = twin.driven() if hasattr(twin, "driven") else contextlib.nullcontext()
    with driven:
        while step < steps:
            if control is not None and control.paused and not control.cancelled:
                emit(Paused(step))
                p0 = time.perf_counter()
                control.wait_until_running()
                paused_s += time.perf_counter() - p0
                emit(Resumed(step))
            if control is not None and control.cancelled:
                wall = time.perf_counter() - t0 - paused_s
                emit(RunCancelled(step, samples, wall, control.reason or "cancelled", total))
                return SimulationResult(step, samples, total, wall, cancelled=True)
            emit(StepBegin(step + 1, 0))
            s0 = time.perf_counter()
            result = twin.run_step(trace)
            cost = TwinCost(float(result.time_s), {k: float(v) for k, v in dict(result.energy_j).items()})
            total = total + cost
            step += 1
            samples += trace.batch_size
            wall_step = time.perf_counter() - s0
            emit(StepEnd(step=step, epoch=0, loss=math.nan, samples=trace.batch_size, tokens=trace.tokens, lr=0.0,
                         wall_s=wall_step, elapsed_s=time.perf_counter() - t0 - paused_s, twin=cost))
    wall = time.perf_counter() - t0 - paused_s
    emit(RunFinished(step, samples, wall, None, total))
    log.info("simulated %d steps of %s/%s on %s: %.3f s, %.2f J (twin)", step, workload.model, workload.task,
             name, total.time_s, total.total_energy_j)
    return SimulationResult(step, samples, total, wall)


def rails_total(energy_j: Mapping[str, float], rails: Iterable[str]) -> float:
    """Joules over the named rails (the monitor preset's) of a per-rail mapping."""
    return float(sum(energy_j.get(r, 0.0) for r in rails))
