"""The twin's performance and power model: pure functions of (trace, clocks, profile).

Equations are written out in docs/twin.md; the names here follow that page.
Kept free of I/O and state so a sweep can call `estimate_step` thousands of times
and a calibration can fit the profile's parameters against measurements.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from engine.device.rails import total_of
from engine.device.twin.profile import TwinProfile
from engine.core.provenance import Source
from engine.core.trace import StepTrace

# Kinds that may run on tensor cores (fp16/bf16); everything else uses the FP32 CUDA cores.
MATRIX_KINDS = frozenset({"matmul", "attention"})
TENSOR_PRECISIONS = frozenset({"fp16", "bf16"})


@dataclass(frozen=True)
class Clocks:
    gpu_hz: int
    cpu_hz: int
    emc_hz: int


@dataclass(frozen=True)
class Load:
    """What the hardware does, averaged over an interval: the power model's input."""

    gpu_activity: float = 0.0  # time-averaged switching activity above the idle floor, 0..1
    cpu_busy_cores: float = 0.0  # busy core-equivalents
    traffic_bps: float = 0.0  # DRAM bytes per second
    online_cpus: int | None = None  # None: every core of the profile


@dataclass(frozen=True)
class StepEstimate:
    time_s: float
    gpu_busy_s: float  # GPU executing kernels (including per-kernel overhead)
    host_s: float  # CPU busy issuing kernels and doing host work
    power_mw: Mapping[str, float]  # per rail, average over the step
    energy_j: Mapping[str, float]  # per rail
    gpu_util: float
    emc_util: float  # DRAM traffic / peak bandwidth at this EMC clock
    cpu_util: float  # busy fraction of the core running the training loop
    traffic_bps: float = 0.0
    gpu_activity: float = 0.0

    @property
    def total_energy_j(self) -> float:
        return total_of(self.energy_j)  # the module's input rail where it has one, else the sum

    @property
    def total_power_mw(self) -> float:
        return total_of(self.power_mw)

    @property
    def source(self) -> Source:
        return Source.TWIN

    cpu_busy_cores: float = 0.0  # busy core-equivalents for the power model

    def load(self, online_cpus: int | None = None) -> Load:
        return Load(self.gpu_activity, self.cpu_busy_cores, self.traffic_bps, online_cpus)


@dataclass(frozen=True)
class PhaseLoad:
    """One phase of a step at fixed clocks (docs/twin.md, "Phases"): how long it lasts and what the
    hardware does in it, in totals over the phase. Power is affine in these at fixed clocks, so the
    phases' energies sum to the step's exactly."""

    name: str  # HOST, COMPUTE or OPTIMIZER (engine.device.twin.phases)
    time_s: float
    gpu_busy_s: float  # GPU executing kernels
    activity_s: float  # GPU switching activity x seconds
    bytes: float  # DRAM traffic
    cpu_busy_s: float  # busy core-seconds as the power model counts them (spinning at reduced activity)
    cpu_util_s: float  # seconds the training thread's core looks busy to the OS (schedutil's input)

    def load(self, online_cpus: int | None = None) -> Load:
        t = self.time_s if self.time_s > 0.0 else 1e-12
        return Load(min(self.activity_s / t, 1.0), min(self.cpu_busy_s / t, 1.0), self.bytes / t, online_cpus)


def estimate_step(
    trace: StepTrace, clocks: Clocks, profile: TwinProfile, *, online_cpus: int | None = None
) -> StepEstimate:
    """Time, utilisations and per-rail power/energy of one training step at fixed clocks."""
    phases = step_loads(trace, clocks, profile)
    time_s = sum(p.time_s for p in phases)
    gpu_busy = sum(p.gpu_busy_s for p in phases)
    activity_s = sum(p.activity_s for p in phases)
    total_bytes = sum(p.bytes for p in phases)
    cpu_busy = sum(p.cpu_busy_s for p in phases)
    cpu_seen = sum(p.cpu_util_s for p in phases)
    host_s = (launch_and_host_cycles(trace, profile)) / float(clocks.cpu_hz)
    traffic = total_bytes / time_s
    load = Load(min(activity_s / time_s, 1.0), min(cpu_busy / time_s, 1.0), traffic, online_cpus)
    power = rail_powers_mw(clocks, load, profile)
    energy = {name: mw * time_s / 1000.0 for name, mw in power.items()}
    e = profile.emc
    return StepEstimate(
        time_s=time_s,
        gpu_busy_s=gpu_busy,
        host_s=host_s,
        power_mw=power,
        energy_j=energy,
        gpu_util=min(gpu_busy / time_s, 1.0),
        emc_util=min(traffic / (e.bytes_per_cycle * float(clocks.emc_hz)), 1.0),
        cpu_util=min(cpu_seen / time_s, 1.0),
        traffic_bps=traffic,
        gpu_activity=load.gpu_activity,
        cpu_busy_cores=load.cpu_busy_cores,
    )


def launch_and_host_cycles(trace: StepTrace, profile: TwinProfile) -> float:
    """CPU cycles the training thread works in a step: launches, host work, the loop's serial part."""
    return trace.kernels * profile.cpu.launch_cycles + trace.host_cycles + trace.serial_cycles * profile.cpu.serial_scale


def step_loads(trace: StepTrace, clocks: Clocks, profile: TwinProfile) -> tuple[PhaseLoad, ...]:
    """The phases of one step at fixed clocks, in order: the host alone (the loop's serial work and
    the part of the host work no queue hides; the GPU idles), then forward+backward and the
    optimizer (the GPU runs behind the launch queue). Equations in docs/twin.md."""
    g, c, e = profile.gpu, profile.cpu, profile.emc
    fg, fc, fe = float(clocks.gpu_hz), float(clocks.cpu_hz), float(clocks.emc_hz)
    tensor = trace.precision in TENSOR_PRECISIONS
    fp32_peak = g.fp32_flops_per_cycle * fg
    matrix_peak = (g.tensor_flops_per_cycle * fg if tensor else fp32_peak) * g.matmul_efficiency
    vector_peak = fp32_peak * g.vector_efficiency
    # Bandwidth: the DRAM's achievable rate, unless the SMs at this clock cannot issue that much.
    bandwidth = min(e.bytes_per_cycle * fe * e.achievable, g.bytes_per_cycle * fg)
    k_gpu = g.kernel_cycles / fg + g.kernel_fixed_s
    k_cpu = c.launch_cycles / fc

    # [compute, optimizer]: GPU time, launch time, per-group slower side, activity-seconds, bytes, kernels
    acc = [[0.0] * 6, [0.0] * 6]
    for op in trace.ops:
        t_compute = op.flops / (matrix_peak if op.kind in MATRIX_KINDS else vector_peak)
        t_memory = op.bytes / bandwidth
        body = max(t_compute, t_memory)
        overhead = op.kernels * k_gpu
        g_i = body + overhead
        l_i = op.kernels * k_cpu
        a = acc[1 if op.kind == "optimizer" else 0]
        a[0] += g_i
        a[1] += l_i
        a[2] += max(g_i, l_i)
        if body > 0.0:
            # SMs switch more while compute-bound than while stalled on memory.
            a_body = g.activity_memory + (g.activity_compute - g.activity_memory) * (t_compute / body)
            a[3] += body * a_body
        a[3] += overhead * g.activity_overhead
        a[4] += op.bytes
        a[5] += op.kernels
    host_work = trace.host_cycles / fc
    serial = trace.serial_cycles * c.serial_scale / fc + (1.0 - c.host_overlap) * host_work
    # The thread spins while it waits for the GPU (CUDA's default with fewer contexts than cores):
    # the OS sees it busy, the power model counts it at reduced activity.
    spin = c.wait_spin_activity / c.activity_busy
    spins = c.wait_spin_activity > 0.0
    kernels = acc[0][5] + acc[1][5]
    phases = [PhaseLoad(HOST_PHASE, serial, 0.0, 0.0, 0.0, serial, serial)]
    for name, a in ((COMPUTE_PHASE, acc[0]), (OPTIMIZER_PHASE, acc[1])):
        # Asynchronous stream: perfect queueing hides the faster side (max of sums); the per-group
        # slower side (sum of max) is the no-overlap bound; overlap_loss blends them. Each part is
        # its own stream: the optimizer's kernels run after the backward pass, so its GPU time cannot
        # hide in the forward's launch gaps.
        ideal = max(a[0], a[1])
        stream = ideal + g.overlap_loss * (a[2] - ideal)
        # The host work that overlaps the queue (Python around each op) goes with the part's operators;
        # when launches and that work take longer than the stream, the host starves the GPU.
        host_busy = a[1] + c.host_overlap * host_work * (a[5] / kernels if kernels else 0.0)
        t = max(stream, host_busy)
        waited = t - host_busy
        phases.append(PhaseLoad(name, t, a[0], a[3], a[4], host_busy + waited * spin,
                                host_busy + (waited if spins else 0.0)))
    if sum(p.time_s for p in phases) <= 0.0:  # an empty trace: report idle power
        phases[0] = PhaseLoad(HOST_PHASE, 1e-9, 0.0, 0.0, 0.0, 1e-9, 1e-9)
    return tuple(phases)  # the same three at any clocks; a phase of a kind the trace lacks takes no time


HOST_PHASE = "host"  # the loop's serial host work: data collation, bookkeeping, the end-of-step sync
COMPUTE_PHASE = "forward+backward"
OPTIMIZER_PHASE = "optimizer"


def rail_powers_mw(clocks: Clocks, load: Load, profile: TwinProfile) -> dict[str, float]:
    """Power per rail (mW) at these clocks under this load."""
    g, c = profile.gpu, profile.cpu
    fg, fc = float(clocks.gpu_hz), float(clocks.cpu_hz)
    vg, vc = g.vf.volts(fg), c.vf.volts(fc)
    online = c.cores if load.online_cpus is None else max(0, min(load.online_cpus, c.cores))
    busy = max(0.0, min(load.cpu_busy_cores, float(online)))

    # Dynamic power C * V^2 * f * activity (W -> mW); leakage grows with V^2.
    gpu_dyn = 1000.0 * g.capacitance_f * vg * vg * fg * (g.activity_idle + load.gpu_activity)
    gpu_leak = g.leak_mw * (vg / g.vf.floor_v) ** 2
    cpu_act = busy * c.activity_busy + (online - busy) * c.activity_idle
    cpu_dyn = 1000.0 * c.capacitance_f * vc * vc * fc * cpu_act
    cpu_leak = c.leak_mw_per_core * online * (vc / c.vf.floor_v) ** 2
    domain = {"gpu": gpu_dyn + gpu_leak, "cpu": cpu_dyn + cpu_leak}

    emc_ghz = clocks.emc_hz / 1e9
    gbps = load.traffic_bps / 1e9
    out: dict[str, float] = {}
    for r in profile.rails:
        p = r.static_mw + r.emc_mw_per_ghz * emc_ghz + r.traffic_mw_per_gbps * gbps
        p += sum(domain[d] for d in r.domains)
        p += r.conversion_share * (gpu_dyn + cpu_dyn)
        out[r.name] = p
    return out


def idle_power_mw(clocks: Clocks, profile: TwinProfile, *, online_cpus: int | None = None) -> dict[str, float]:
    """Power per rail of an idle board at these clocks."""
    return rail_powers_mw(clocks, Load(online_cpus=online_cpus), profile)
