"""A training step's phases on the twin: where its time and energy go within the step.

The model splits a step at fixed clocks into its phases (`model.step_loads`): the loop's serial
host work with the GPU idle, then forward+backward and the optimizer behind the launch queue (the
tracer does not tell forward from backward). Under dynamic governors a step's figures are a
time-average over the clocks they visit (engine/device/twin/dynamics.py), so the phases shown are
the model's at the clocks the board shows, scaled so that they sum to the step's exact time and
each rail's exact energy. The twin's rail files show the phase power while a run drives it
(`VirtualOrin`); its energy counter is the step's, unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from engine.core.trace import StepTrace
from engine.device.twin.model import (COMPUTE_PHASE, HOST_PHASE, OPTIMIZER_PHASE, Clocks, StepEstimate,
                                      rail_powers_mw, step_loads)
from engine.device.twin.profile import TwinProfile

HOST = HOST_PHASE  # the loop's serial host work: the GPU idles
COMPUTE = COMPUTE_PHASE
OPTIMIZER = OPTIMIZER_PHASE
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
    loads = tuple(p for p in step_loads(trace, clocks, profile) if p.time_s > 0.0)
    if len(loads) <= 1 or est.time_s <= 0.0:
        return (Phase("step", est.time_s, dict(est.power_mw), est.gpu_util),)
    parts = [(p, rail_powers_mw(clocks, p.load(online_cpus), profile)) for p in loads]
    t_sum = sum(p.time_s for p, _ in parts)
    e_sum = {r: sum(mw.get(r, 0.0) * p.time_s for p, mw in parts) for r in est.energy_j}
    t_left, e_left = est.time_s, dict(est.energy_j)
    phases = []
    for i, (p, mw) in enumerate(parts):
        last = i == len(parts) - 1
        dt = t_left if last else est.time_s * p.time_s / t_sum
        energy = {r: e_left[r] if last else (est.energy_j[r] * mw.get(r, 0.0) * p.time_s / e_sum[r] if e_sum[r] else 0.0)
                  for r in est.energy_j}
        t_left -= dt
        for r, j in energy.items():
            e_left[r] -= j
        if dt <= 0.0:
            continue
        phases.append(Phase(p.name, dt, {r: j / dt * 1000.0 for r, j in energy.items()}, min(p.gpu_busy_s / p.time_s, 1.0)))
    return tuple(phases)


def phase_at(phases: tuple[Phase, ...], offset_s: float) -> Phase:
    """The phase running `offset_s` seconds into the step (the last one at or past its end)."""
    t = 0.0
    for ph in phases:
        t += ph.time_s
        if offset_s < t:
            return ph
    return phases[-1]
