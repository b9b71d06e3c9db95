"""The control state the governors work from, and what they make of a load.

`resolve(trace, control, profile)` applies the control files (min/max, governors, the EMC lock),
the nvpmodel mode's caps, a thermal cap and the module power limit. A domain whose clock no load
changes (pinned, `performance`, `powersave`, `userspace`, a locked EMC rate) takes its clock; the
load-following ones (GPU `nvhost_podgov` / `simple_ondemand`, CPU `schedutil` / `ondemand` /
`conservative`, the EMC's automatic scaling) are simulated as controllers over the step's phases
(engine/device/twin/dynamics.py), and the step's figures are the time-average over the clocks they
visit. An idle board parks each dynamic domain at its idle clock. Every clock stays inside
[min, min(max, mode cap, thermal cap)] (docs/twin.md, "Governors and modes").
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, replace

from engine.device.base import PowerMode
from engine.device.twin.dynamics import Domain, simulate
from engine.device.twin.model import Clocks, StepEstimate, estimate_step
from engine.device.twin.profile import TwinProfile
from engine.core.trace import StepTrace

log = logging.getLogger(__name__)

_LOAD_FOLLOWING = frozenset({"nvhost_podgov", "simple_ondemand", "schedutil", "ondemand", "conservative"})
_MAX_ROUNDS = 8


@dataclass(frozen=True)
class DomainControl:
    """The control files of one clock domain, as written by the user or nvpmodel."""

    min_hz: int
    max_hz: int
    governor: str | None  # None for EMC
    cur_hz: int  # for `userspace` (keeps the clock) and the EMC locked rate
    locked: bool = False  # EMC: mrq_rate_locked


@dataclass(frozen=True)
class ControlState:
    gpu: DomainControl
    cpu: DomainControl
    emc: DomainControl
    online_cpus: int
    mode_id: int


def default_control(profile: TwinProfile, mode_id: int | None = None) -> ControlState:
    """The control state after `nvpmodel -m mode_id` on a fresh boot: default governors,
    full ranges up to the mode's caps. Mode 0 gives the "MAXN Mode 0" baseline."""
    mode = profile.mode(profile.initial_mode if mode_id is None else mode_id)
    g, c, e = profile.gpu, profile.cpu, profile.emc
    gmax = _cap(g.table_hz[-1], mode.gpu_max_hz)
    cmax = _cap(c.table_hz[-1], mode.cpu_max_hz)
    emax = _cap(e.table_hz[-1], mode.emc_max_hz)
    return ControlState(
        gpu=DomainControl(g.table_hz[0], gmax, g.governor, g.idle_hz),
        cpu=DomainControl(c.table_hz[0], cmax, c.governor, min(c.idle_hz, cmax)),
        emc=DomainControl(e.table_hz[0], emax, None, min(e.idle_hz, emax)),
        online_cpus=mode.online_cpus or c.cores,
        mode_id=mode.id,
    )


def pin_gpu(control: ControlState, hz: int) -> ControlState:
    """The control state with the GPU pinned (min = max = hz), the rest unchanged."""
    return replace(control, gpu=replace(control.gpu, min_hz=hz, max_hz=hz, cur_hz=hz))


def resolve(
    trace: StepTrace | None,
    control: ControlState,
    profile: TwinProfile,
    *,
    gpu_cap_hz: int | None = None,
) -> tuple[Clocks, StepEstimate | None]:
    """The clocks the governors settle on for this load (None = idle), and the step
    estimate at those clocks. Applies the mode's caps, `gpu_cap_hz` (thermal throttling)
    and the module power limit (the GPU steps down while the total exceeds it)."""
    key = (trace, control, gpu_cap_hz, id(profile))
    with _SETTLED_LOCK:
        found = _SETTLED.get(key)
    if found is not None and found[0] is profile:
        return found[1]
    result = _resolve(trace, control, profile, gpu_cap_hz)
    with _SETTLED_LOCK:
        if len(_SETTLED) >= _SETTLED_MAX:
            _SETTLED.pop(next(iter(_SETTLED)))
        _SETTLED[key] = (profile, result)
    return result


# A board's state is settled again on every sync and every step of a run while nothing changed:
# the governors' simulation is the twin's costliest part, so its results are kept (the profile is
# held with them, so an id is never reused by another profile while its entry lives).
_SETTLED: dict[tuple[object, ...], tuple[TwinProfile, tuple[Clocks, StepEstimate | None]]] = {}
_SETTLED_MAX = 256
_SETTLED_LOCK = threading.RLock()  # the sync thread and a run's steps settle in parallel; re-entrant: a signal
# handler (the clock guard restoring on SIGHUP) may run in a thread that holds it, and reach a sync


def _resolve(trace: StepTrace | None, control: ControlState, profile: TwinProfile,
             gpu_cap_hz: int | None) -> tuple[Clocks, StepEstimate | None]:
    mode = next((m for m in profile.modes if m.id == control.mode_id), None)
    if mode is None:
        log.warning("twin: nvpmodel mode %d is not in profile %s; no mode caps applied", control.mode_id, profile.name)
        mode = PowerMode(control.mode_id, "unknown")
    cap = gpu_cap_hz
    while True:
        clocks, est = _resolve_once(trace, control, profile, mode, cap)
        if est is None or est.total_power_mw <= profile.module_power_limit_mw:
            return clocks, est
        lower = [f for f in profile.gpu.table_hz if f < clocks.gpu_hz]
        if not lower:
            return clocks, est
        log.debug("twin: %.0f mW over the module limit, GPU capped to %d Hz", est.total_power_mw, lower[-1])
        cap = lower[-1]


def _resolve_once(
    trace: StepTrace | None, control: ControlState, profile: TwinProfile, mode: PowerMode, gpu_cap: int | None
) -> tuple[Clocks, StepEstimate | None]:
    g, c, e = profile.gpu, profile.cpu, profile.emc
    gpu_allowed = _allowed(g.table_hz, control.gpu, _min_cap(mode.gpu_max_hz, gpu_cap))
    cpu_allowed = _allowed(c.table_hz, control.cpu, mode.cpu_max_hz)
    emc_allowed = _allowed(e.table_hz, control.emc, mode.emc_max_hz)
    online = control.online_cpus

    gpu_fixed = _fixed_choice(control.gpu, gpu_allowed)
    cpu_fixed = _fixed_choice(control.cpu, cpu_allowed)
    emc_fixed = _pick_at_least(emc_allowed, control.emc.cur_hz) if control.emc.locked else None

    if trace is None:
        clocks = Clocks(
            gpu_fixed or _pick_at_least(gpu_allowed, g.idle_hz),
            cpu_fixed or _pick_at_least(cpu_allowed, c.idle_hz),
            emc_fixed or _pick_at_least(emc_allowed, e.idle_hz),
        )
        return clocks, None

    gpu = Domain(tuple(gpu_allowed), gpu_fixed is None)
    cpu = Domain(tuple(cpu_allowed) if cpu_fixed is None else (cpu_fixed,), cpu_fixed is None)
    emc = Domain(tuple(emc_allowed) if emc_fixed is None else (emc_fixed,), emc_fixed is None)
    if gpu_fixed is not None:
        gpu = Domain((gpu_fixed,), False)
    if not (gpu.dynamic or cpu.dynamic or emc.dynamic):
        clocks = Clocks(gpu.allowed[0], cpu.allowed[0], emc.allowed[0])
        return clocks, estimate_step(trace, clocks, profile, online_cpus=online)
    return simulate(trace, gpu, cpu, emc, profile, online_cpus=online)


def _fixed_choice(ctl: DomainControl, allowed: list[int]) -> int | None:
    """The clock of a domain that no load changes, or None for a load-following governor."""
    if len(allowed) == 1:
        return allowed[0]
    gov = ctl.governor
    if gov is None or gov in _LOAD_FOLLOWING:
        return None
    if gov == "performance":
        return allowed[-1]
    if gov == "powersave":
        return allowed[0]
    return _pick_at_least(allowed, ctl.cur_hz)  # userspace and unknown ones keep the clock


def _allowed(table: tuple[int, ...], ctl: DomainControl, mode_cap: int | None) -> list[int]:
    """Table entries inside [min, min(max, cap)]. If min exceeds the effective max
    the max wins, as devfreq and cpufreq resolve it."""
    hi = _cap(ctl.max_hz, mode_cap)
    inside = [f for f in table if ctl.min_hz <= f <= hi]
    if inside:
        return inside
    below = [f for f in table if f <= hi]
    return [below[-1] if below else table[0]]


def _pick_at_least(allowed: list[int], hz: float) -> int:
    for f in allowed:
        if f >= hz:
            return f
    return allowed[-1]


def _cap(hz: int, cap: int | None) -> int:
    return hz if cap is None else min(hz, cap)


def _min_cap(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    if b is None:
        return a
    return min(a, b)
