"""A training step's phases on the twin: where its time and energy go within the step.

A step trace holds the step's GPU work by kind; the optimizer's kernels are their own
kind, forward and backward share the others (the tracer does not tell them apart), and
the host work (data, Python) is its own figure. Each phase is estimated alone at the
step's clocks; those estimates give only the *shares*: every phase gets its share of the
step's exact time and of each rail's exact energy, so the phases always sum to the step
(`estimate_step`) however the model overlaps them. The twin's rail files show the phase
power while a run drives it (`VirtualOrin`); its energy counter is the step's, unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Mapping

from engine.core.trace import StepTrace
from engine.device.twin.model import Clocks, StepEstimate, estimate_step
from engine.device.twin.profile import TwinProfile

HOST = "host"  # data loading and Python between the kernels
COMPUTE = "forward+backward"
OPTIMIZER = "optimizer"
PHASE_ORDER = (HOST, COMPUTE, OPTIMIZER)  # the order within a step


@dataclass(frozen=True)
class Phase:
    """One phase of a step: its part of the step's time, its power per rail (mW), GPU load."""

    name: str
    time_s: float
    power_mw: Mapping[str, float]
    gpu_util: float

    @property
    def energy_j(self) -> dict[str, float]:
        return {r: mw * self.time_s / 1000.0 for r, mw in self.power_mw.items()}


def step_phases(trace: StepTrace, clocks: Clocks, profile: TwinProfile, est: StepEstimate,
                *, online_cpus: int | None = None) -> tuple[Phase, ...]:
    """The phases of a step whose whole estimate is `est`: times sum to est.time_s and each
    rail's phase energies to est.energy_j (the last phase takes what is left, so the sums
    hold to rounding). A trace with a single phase gives one phase: the step itself."""
    groups = (
        (HOST, (), trace.host_cycles),
        (COMPUTE, tuple(op for op in trace.ops if op.kind != "optimizer"), 0.0),
        (OPTIMIZER, tuple(op for op in trace.ops if op.kind == "optimizer"), 0.0),
    )
    parts: list[tuple[str, StepEstimate]] = []
    for name, ops, host in groups:
        if ops or host > 0.0:
            sub = replace(trace, ops=ops, host_cycles=host)
            parts.append((name, estimate_step(sub, clocks, profile, online_cpus=online_cpus)))
    if len(parts) <= 1 or est.time_s <= 0.0:
        return (Phase("step", est.time_s, dict(est.power_mw), est.gpu_util),)
    t_sum = sum(p.time_s for _, p in parts)
    e_sum = {r: sum(p.energy_j.get(r, 0.0) for _, p in parts) for r in est.energy_j}
    t_left, e_left = est.time_s, dict(est.energy_j)
    phases = []
    for i, (name, p) in enumerate(parts):
        last = i == len(parts) - 1
        dt = t_left if last else est.time_s * p.time_s / t_sum
        energy = {r: e_left[r] if last else (est.energy_j[r] * p.energy_j.get(r, 0.0) / e_sum[r] if e_sum[r] else 0.0)
                  for r in est.energy_j}
        t_left -= dt
        for r, j in energy.items():
            e_left[r] -= j
        if dt <= 0.0:
            continue
        gpu_busy = min(p.gpu_busy_s / p.time_s, 1.0) if p.time_s > 0 else 0.0
        phases.append(Phase(name, dt, {r: j / dt * 1000.0 for r, j in energy.items()}, gpu_busy))
    return tuple(phases)


def phase_at(phases: tuple[Phase, ...], offset_s: float) -> Phase:
    """The phase running `offset_s` seconds into the step (the last one at or past its end)."""
    t = 0.0
    for ph in phases:
        t += ph.time_s
        if offset_s < t:
            return ph
    return phases[-1]
