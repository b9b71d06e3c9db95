"""The governors as controllers over time: what a training step costs while they move the clocks.

A board's dynamic governors sample the load every few tens of milliseconds and move their clock
in table steps; a training step's load is not steady (the GPU idles while the loop collates the
next batch, is starved by launches in some kernels, saturated in others), so the clock moves
within a step and MAXN's energy is the time-average over the clocks it visits. This module plays
a loaded step's phases (`model.step_loads`: host, forward+backward, optimizer) back over virtual
time, tick by tick, under three controllers (docs/twin.md, "Governors"):

- GPU `nvhost_podgov` as L4T implements it (governor_pod_scaling.c): the window's load, an
  exponential average of the normalised busy cycles (`smooth`), a jump of a third of the range when
  the window's load exceeds `load_max`, else a step of `bias x f x (busyness - target) / target`,
  damped against the average request (`damp`), at most once per `block window`, rounded up to the table.
- CPU `schedutil`: the frequency-invariant utilisation, averaged as PELT does (32 ms half-life),
  asks for `headroom x util x f_max`, never below the idle clock.
- EMC: the traffic at the governor's target utilisation, the GPU driver's request while the GPU is
  busy and the idle floor, averaged over the activity monitor's window.

The loads a governor sees vary from window to window (kernels and phases straddle windows), so a
request near a table boundary lands on either side of it: each request is rounded up to the table
in expectation over a relative noise `load_noise` (`occupancy`: the share of the window each table
clock holds). A window's figures are the time-share mixture of the model's at those table clocks
(what a board running each for its share would do). So a twin figure is a continuous function of
the workload and of every parameter: curves have no steps from thresholds, and calibration can
fit the governors' numbers by least squares.

Pure: no files, no threads; `VirtualOrin` and the fast mode call it through `governors.resolve`.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping, Sequence

if TYPE_CHECKING:  # numpy loads with the first mixture of clocks: `slm-dvfs device --twin` starts without it
    import numpy as np

from engine.core.trace import StepTrace
from engine.core.errors import ConfigError
from engine.device.twin.model import (Clocks, PhaseLoad, StepEstimate, launch_and_host_cycles, rail_powers_mw,
                                      step_loads)
from engine.device.twin.profile import TwinProfile

# How much of a run the simulation plays before it measures, and how much it measures (whole steps,
# at least this long). podgov's averages forget their start in about ten windows (p_smooth = 10 at
# 25 ms); schedutil's and the EMC's in a few of their half-lives (32 and 20 ms), so a run whose GPU
# clock is fixed settles, and repeats its steps, sooner.
WARMUP_S = 1.0
MEASURE_S = 1.0
FIXED_GPU_WARMUP_S = 0.3
FIXED_GPU_MEASURE_S = 0.3
MAX_TICKS = 20000  # 500 s of virtual time: a step longer than ~4 minutes is out of the twin's range


@dataclass(frozen=True)
class Domain:
    """One clock domain as the simulation sees it: the table clocks it may take, and whether a
    load-following governor moves it (else it stays on `allowed[0]`)."""

    allowed: tuple[int, ...]
    dynamic: bool


def occupancy(request_hz: float, allowed: Sequence[int], noise: float) -> tuple[tuple[int, float], ...]:
    """The table clocks a governor runs at when it rounds `request_hz x (1 + e)` up to the table
    (e normal with sd `noise`: the window-to-window spread of the load), each with its share of
    the time; within `allowed`. Shares under 1e-9 are left out (the rest renormalised)."""
    if len(allowed) == 1:
        return ((allowed[0], 1.0),)
    if noise <= 0.0 or request_hz <= 0.0:
        return ((next((f for f in allowed if f >= request_hz), allowed[-1]), 1.0),)
    # Only clocks within 6 sd of the request hold a share above ~1e-9.
    lo = bisect.bisect_left(allowed, request_hz * (1.0 - 6.0 * noise))
    hi = bisect.bisect_right(allowed, request_hz * (1.0 + 6.0 * noise))
    out: list[tuple[int, float]] = []
    below = 0.0  # P(the rounded request is below allowed[k])
    for k in range(lo, min(hi + 1, len(allowed))):
        f = allowed[k]
        at_most = 1.0 if k == len(allowed) - 1 else _phi((f / request_hz - 1.0) / noise)
        share = at_most - below
        below = at_most
        if share > 1e-6:
            out.append((f, share))
    total = sum(w for _f, w in out)
    return tuple((f, w / total) for f, w in out) if total > 0.0 else ((allowed[-1], 1.0),)


def mean_clock(occ: Sequence[tuple[int, float]]) -> float:
    return sum(f * w for f, w in occ)


def _phi(x: float) -> float:
    return 0.5 * (1.0 + math.erf(x * _SQRT_HALF))


_SQRT_HALF = math.sqrt(0.5)


@dataclass
class _Window:
    """What one governor window saw, in totals."""

    busy_s: float = 0.0
    bytes: float = 0.0
    cpu_util_s: float = 0.0


@dataclass
class _Totals:
    time_s: float = 0.0
    steps: float = 0.0
    busy_s: float = 0.0
    activity_s: float = 0.0
    bytes: float = 0.0
    cpu_busy_s: float = 0.0
    cpu_util_s: float = 0.0
    gpu_hz_s: float = 0.0  # clock x seconds: the time-mean clock
    cpu_hz_s: float = 0.0
    emc_hz_s: float = 0.0


@dataclass(frozen=True)
class _Rates:
    """One phase under a mixture of clocks, per second of wall time: how fast it progresses (phases
    per second), what the hardware does, and the power per rail."""

    progress: float
    busy: float
    activity: float
    bytes: float
    cpu_busy: float
    cpu_util: float
    gpu_hz: float
    cpu_hz: float
    emc_hz: float
    power_mw: tuple[float, ...]  # in the order of _Timeline.rails


def _as_rates(rows: np.ndarray) -> tuple[_Rates | None, ...]:
    return tuple(None if a[0] <= 0.0 else _Rates(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], tuple(a[9:]))
                 for a in rows.tolist())


class _Timeline:
    """The step's phases at whatever clocks the governors hold, played back in virtual time."""

    def __init__(self, trace: StepTrace, profile: TwinProfile, online: int | None) -> None:
        self.trace, self.profile, self.online = trace, profile, online
        self.rails = tuple(r.name for r in profile.rails)
        self._memo: dict[Clocks, tuple[tuple[PhaseLoad, tuple[float, ...]], ...]] = {}
        self._rows: dict[Clocks, np.ndarray] = {}
        self._single: dict[Clocks, tuple[_Rates | None, ...]] = {}
        self.phase = 0
        self.done = 0.0  # fraction of the current phase done

    def at(self, clocks: Clocks) -> tuple[tuple[PhaseLoad, tuple[float, ...]], ...]:
        """The phases at one set of table clocks, with their power per rail (kept: a run visits few)."""
        found = self._memo.get(clocks)
        if found is None:
            rows: list[tuple[PhaseLoad, tuple[float, ...]]] = []
            for p in step_loads(self.trace, clocks, self.profile):
                power = rail_powers_mw(clocks, p.load(self.online), self.profile)
                rows.append((p, tuple(power[r] for r in self.rails)))
            found = self._memo[clocks] = tuple(rows)
        return found

    def rates(self, og: Sequence[tuple[int, float]], oc: Sequence[tuple[int, float]],
              oe: Sequence[tuple[int, float]]) -> tuple[_Rates | None, ...]:
        """Each phase's rates under the clocks' time shares (None: a phase of no time)."""
        combos = [(wg * wc * we, Clocks(g, c, e)) for g, wg in og for c, wc in oc for e, we in oe]
        if len(combos) == 1:  # one clock per domain: the rates at those clocks, as computed once
            clocks = combos[0][1]
            found = self._single.get(clocks)
            if found is None:
                found = self._single[clocks] = _as_rates(self._per_second(clocks))
            return found
        merged = combos[0][0] * self._per_second(combos[0][1])  # numpy arrays: a few clocks' rows
        for w, clocks in combos[1:]:
            merged += w * self._per_second(clocks)
        return _as_rates(merged)

    def _per_second(self, clocks: Clocks) -> np.ndarray:
        """Each phase at these clocks as a row of _Rates' fields (kept: a run visits few clocks)."""
        found = self._rows.get(clocks)
        if found is None:
            rows = []
            for p, power in self.at(clocks):
                k = 1.0 / p.time_s if p.time_s > 0.0 else 0.0
                rows.append((k, k * p.gpu_busy_s, k * p.activity_s, k * p.bytes, k * p.cpu_busy_s,
                             k * p.cpu_util_s, float(clocks.gpu_hz), float(clocks.cpu_hz), float(clocks.emc_hz))
                            + power)
            import numpy

            found = self._rows[clocks] = numpy.array(rows, dtype=float)
        return found

    def advance(self, rates: Sequence[_Rates | None], dt: float, window: _Window, meter: "_Meter") -> None:
        """Play `dt` seconds of steps into the governors' window, and into the meter's totals while
        it measures; the meter hears each step's end."""
        left = dt
        n = len(rates)
        while left > 0.0:
            r = rates[self.phase]
            if r is None:  # a phase of no time
                self._next_phase(n, meter)
                continue
            to_end = (1.0 - self.done) / r.progress
            span = min(left, to_end)
            window.busy_s += r.busy * span
            window.bytes += r.bytes * span
            window.cpu_util_s += r.cpu_util * span
            totals = meter.totals
            if totals is not None:
                totals.time_s += span
                totals.busy_s += r.busy * span
                totals.activity_s += r.activity * span
                totals.bytes += r.bytes * span
                totals.cpu_busy_s += r.cpu_busy * span
                totals.cpu_util_s += r.cpu_util * span
                totals.gpu_hz_s += r.gpu_hz * span
                totals.cpu_hz_s += r.cpu_hz * span
                totals.emc_hz_s += r.emc_hz * span
                energy = meter.energy
                for i, mw in enumerate(r.power_mw):
                    energy[i] += mw * span / 1000.0
            left -= span
            if span >= to_end:
                self._next_phase(n, meter)
            else:
                self.done += span * r.progress

    def _next_phase(self, n: int, meter: "_Meter") -> None:
        self.done = 0.0
        self.phase += 1
        if self.phase == n:
            self.phase = 0
            meter.step_ended()


class _Meter:
    """Measures whole steps: from the first step's end after the warm-up to the end of `steps` more."""

    def __init__(self, warmup_ticks: int, steps: int, rails: int) -> None:
        self.warmup_ticks, self.steps = warmup_ticks, steps
        self.tick = 0
        self.totals: _Totals | None = None
        self.final: _Totals | None = None
        self.energy = [0.0] * rails
        self.counted = 0

    @property
    def finished(self) -> bool:
        return self.final is not None

    def step_ended(self) -> None:
        if self.totals is not None:
            self.counted += 1
            self.totals.steps = float(self.counted)
            if self.counted >= self.steps:
                self.final, self.totals = self.totals, None
        elif self.tick >= self.warmup_ticks and self.final is None:
            self.totals = _Totals()


def simulate(trace: StepTrace, gpu: Domain, cpu: Domain, emc: Domain, profile: TwinProfile,
             *, online_cpus: int | None = None) -> tuple[Clocks, StepEstimate]:
    """One step's figures under the governors, as the mean over whole steps of a run in its steady
    state, and the clocks they visit most (each domain's time-mean clock, to the nearest allowed one)."""
    g, c, e = profile.gpu, profile.cpu, profile.emc
    timeline = _Timeline(trace, profile, online_cpus)
    # A loaded board ramps up first: dynamic domains start at the top of their range.
    og: tuple[tuple[int, float], ...] = ((gpu.allowed[-1], 1.0),)
    oc: tuple[tuple[int, float], ...] = ((cpu.allowed[-1], 1.0),)
    oe: tuple[tuple[int, float], ...] = ((emc.allowed[-1], 1.0),)
    fg, fc = float(gpu.allowed[-1]), float(cpu.allowed[-1])
    req_e = float(emc.allowed[-1])
    cycles_avg, freq_avg = fg, fg  # podgov's averages of the normalised busy cycles and of its requests
    util_c = 1.0  # schedutil's frequency-invariant utilisation
    dt = g.poll_s
    a_cpu = 0.5 ** (dt / c.schedutil_half_life_s)
    a_emc = 0.5 ** (dt / e.half_life_s)
    block = max(1, round(g.podgov_block_s / dt))
    g_top, c_top, e_top = float(g.table_hz[-1]), float(c.table_hz[-1]), float(e.table_hz[-1])
    rates = timeline.rates(og, oc, oe)
    # The horizon is set by the step at the table's top clocks, whatever this control state allows: the
    # same number of windows and steps for every setting of a sweep, so a curve has no ripple from a
    # horizon one step longer at one setting than at the next.
    step_s = sum(p.time_s for p in step_loads(trace, Clocks(g.table_hz[-1], c.table_hz[-1], e.table_hz[-1]), profile))
    # The controllers forget their start within about a second; then whole steps are measured, enough
    # of them to span a second (a periodic steady state: one step of a long run is its average).
    warmup_s, measure_s = (WARMUP_S, MEASURE_S) if gpu.dynamic else (FIXED_GPU_WARMUP_S, FIXED_GPU_MEASURE_S)
    warmup_ticks = math.ceil(max(warmup_s, step_s) / dt)
    meter = _Meter(warmup_ticks, max(1, math.ceil(measure_s / step_s)), len(timeline.rails))
    for tick in range(MAX_TICKS):
        if meter.finished:
            break
        meter.tick = tick
        window = _Window()
        timeline.advance(rates, dt, window, meter)
        changed = False
        if gpu.dynamic:
            load = min(g.podgov_load_seen * window.busy_s / dt, 1.0)
            cycles_avg = (cycles_avg * g.podgov_smooth + fg * load) / (g.podgov_smooth + 1.0)
            if (tick + 1) % block == 0:
                busyness = cycles_avg / fg
                over = _phi((load - g.podgov_load_max) / g.load_noise)  # P(the window's load > load_max)
                max_boost = gpu.allowed[-1] / 3.0
                step = min(g.podgov_bias * fg * (busyness - g.podgov_target_load) / g.podgov_target_load, max_boost)
                res = fg + over * max_boost + (1.0 - over) * step
                freq_avg = (freq_avg * g.podgov_smooth + res) / (g.podgov_smooth + 1.0)
                damp = over + (1.0 - over) * g.podgov_damp
                res = damp * res + (1.0 - damp) * freq_avg
                req_g = min(max(res, float(gpu.allowed[0])), float(gpu.allowed[-1]))
                new = occupancy(req_g, gpu.allowed, g.load_noise)
                changed = changed or new != og
                og, fg = new, mean_clock(new)
        if cpu.dynamic:
            util = min(window.cpu_util_s / dt, 1.0) * fc / c_top
            util_c = a_cpu * util_c + (1.0 - a_cpu) * util
            req_c = max(c.schedutil_headroom * util_c * c_top, float(c.idle_hz))
            # The CPU's table is dense (76.8 MHz steps): its time-mean clock stands for its shares,
            # to 100 kHz so that a settled governor's windows reuse the model's figures.
            fc = round(mean_clock(occupancy(req_c, cpu.allowed, c.load_noise)), -5)
            changed = changed or fc != oc[0][0]
            oc = ((int(fc), 1.0),)
        if emc.dynamic:
            busy = window.busy_s / dt
            need = (window.bytes / dt) / (e.target_util * e.bytes_per_cycle)
            gpu_request = e.gpu_ratio * fg / g_top * e_top * min(1.0, busy / e.gpu_busy_threshold)
            req_e = a_emc * req_e + (1.0 - a_emc) * max(need, gpu_request, float(e.idle_hz))
            new = occupancy(req_e, emc.allowed, e.load_noise)
            changed = changed or new != oe
            oe = new
        if changed:
            rates = timeline.rates(og, oc, oe)
    totals = meter.final if meter.final is not None else meter.totals
    if totals is None or totals.time_s <= 0.0:  # a step longer than the simulation's horizon
        raise ConfigError(f"a training step of {step_s:.0f} s at the top clocks is longer than the twin's governors "
                          f"are simulated for ({MAX_TICKS * dt:.0f} s)",
                          "give the twin a smaller batch or a shorter sequence length")
    energy = dict(zip(timeline.rails, meter.energy))
    host_s = launch_and_host_cycles(trace, profile) / (totals.cpu_hz_s / totals.time_s)
    return _result(totals, energy, host_s, gpu, cpu, emc, profile)


def _nearest(allowed: Sequence[int], hz: float) -> int:
    return min(allowed, key=lambda f: abs(f - hz))


def _result(t: _Totals, energy: Mapping[str, float], host_s: float, gpu: Domain, cpu: Domain, emc: Domain,
            profile: TwinProfile) -> tuple[Clocks, StepEstimate]:
    steps = t.steps if t.steps > 0.0 else 1.0
    time_s = t.time_s / steps
    per_step = {rail: j / steps for rail, j in energy.items()}
    clocks = Clocks(_nearest(gpu.allowed, t.gpu_hz_s / t.time_s), _nearest(cpu.allowed, t.cpu_hz_s / t.time_s),
                    _nearest(emc.allowed, t.emc_hz_s / t.time_s))
    traffic = t.bytes / t.time_s
    est = StepEstimate(
        time_s=time_s,
        gpu_busy_s=t.busy_s / steps,
        host_s=host_s,  # the thread's own work at its time-mean clock (not its spinning)
        power_mw={rail: 1000.0 * j / time_s for rail, j in per_step.items()},
        energy_j=per_step,
        gpu_util=min(t.busy_s / t.time_s, 1.0),
        emc_util=min(traffic / (profile.emc.bytes_per_cycle * (t.emc_hz_s / t.time_s)), 1.0),
        cpu_util=min(t.cpu_util_s / t.time_s, 1.0),
        traffic_bps=traffic,
        gpu_activity=min(t.activity_s / t.time_s, 1.0),
        cpu_busy_cores=min(t.cpu_busy_s / t.time_s, 1.0),
    )
    return clocks, est
