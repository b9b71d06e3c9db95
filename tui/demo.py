"""Fixed demo data: a device reading, a run in progress, a store with a compared pair of
runs and a sweep. Nothing here depends on the clock, so screenshots of the app fed with it
repeat exactly (the snapshot tests use it; so can documentation)."""

from __future__ import annotations

import dataclasses
from typing import Any

from engine.device.base import (
    ClockDomain,
    ClockState,
    DeviceIdentity,
    PowerMode,
    RailReading,
    TemperatureReading,
)
from engine.device.activity import CoreLoad, DeviceActivity, MemoryReading
from engine.device.snapshot import DeviceSnapshot
from engine.device.setting import MAXN, DvfsSetting
from engine.device.power import PowerSample
from engine.core.provenance import Source
from engine.workload.events import EvalResult, RunStarted, StepEnd, StepEnergy
from tui.runstate import RunTracker, RunView

MHZ = 1_000_000
STAMP = "2025-01-02T03:04:05+00:00"
RAILS = ("VDD_GPU_SOC", "VDD_CPU_CV", "VIN_SYS_5V0", "VDDQ_VDD2_1V8AO")
IDENTITY = DeviceIdentity(board="NVIDIA Jetson AGX Orin Developer Kit", module="P3701-0000 (AGX Orin 64GB)",
                          l4t="36.3.0", jetpack="6.0", is_twin=True, profile="agx-orin-64gb")
GPU_TABLE = tuple(int(f * MHZ) for f in (306, 408, 510, 612, 714, 816, 918, 1020, 1122, 1224, 1300.5))
CPU_TABLE = tuple(int(f * MHZ) for f in (115.2, 729.6, 1420.8, 2201.6))
EMC_TABLE = tuple(int(f * MHZ) for f in (204, 665.6, 2133, 3199))
TABLES = {ClockDomain.GPU: GPU_TABLE, ClockDomain.CPU: CPU_TABLE, ClockDomain.EMC: EMC_TABLE}


def snapshot(gpu_hz: int = 816 * MHZ, pinned: bool = True) -> DeviceSnapshot:
    """A twin reading mid-run: GPU pinned at 816 MHz, CPU and EMC on their governors."""
    lo, hi = (gpu_hz, gpu_hz) if pinned else (306 * MHZ, int(1300.5 * MHZ))
    clocks = (
        ClockState(ClockDomain.GPU, gpu_hz, lo, hi, "nvhost_podgov"),
        ClockState(ClockDomain.CPU, int(2201.6 * MHZ), int(115.2 * MHZ), int(2201.6 * MHZ), "schedutil"),
        ClockState(ClockDomain.EMC, 3199 * MHZ, 204 * MHZ, 3199 * MHZ, None),
    )
    rails = (RailReading("VDD_GPU_SOC", 5000.0, 1820.0), RailReading("VDD_CPU_CV", 5000.0, 332.0),
             RailReading("VIN_SYS_5V0", 5000.0, 1108.0), RailReading("VDDQ_VDD2_1V8AO", 5000.0, 666.0))
    temps = tuple(TemperatureReading(z, c) for z, c in (
        ("cpu-thermal", 52.5), ("gpu-thermal", 63.0), ("cv0-thermal", 48.0), ("cv1-thermal", 48.5),
        ("cv2-thermal", 48.0), ("soc0-thermal", 55.0), ("soc1-thermal", 54.5), ("soc2-thermal", 54.0),
        ("tj-thermal", 77.0)))
    return DeviceSnapshot(t=100.0, identity=IDENTITY, mode=PowerMode(0, "MAXN"), clocks=clocks, rails=rails,
                          temperatures=temps, gpu_load=0.93, activity=ACTIVITY)


# The training loop's core busy, the rest light; the third cluster's governor at a lower clock. The
# twin renders MemTotal only (it does not model what the OS holds) and has no fan.
_LOADS = (0.97, 0.12, 0.08, 0.05, 0.03, 0.02, 0.02, 0.01, 0.01, 0.0, 0.0, 0.02)
ACTIVITY = DeviceActivity(
    cores=tuple(CoreLoad(c, True, load, int((2201.6 if c < 8 else 729.6) * MHZ)) for c, load in enumerate(_LOADS)),
    emc_load=0.41,
    memory=MemoryReading(62841 * 1024 * 1024),
)


def snapshot_at(i: int) -> DeviceSnapshot:
    """Reading `i` of a fixed minute of a run on the twin, two a second: power follows steps and
    pauses, the GPU clock its governor, the zones warm up (for graphs with shape)."""
    import math

    base = snapshot(gpu_hz=(306, 612, 816, 1020, 816)[(i // 25) % 5] * MHZ, pinned=False)
    busy = 0.0 if 70 <= i < 80 else 0.55 + 0.45 * abs(math.sin(i / 7.0))
    scale = {"VDD_GPU_SOC": 0.45 + 1.3 * busy, "VDD_CPU_CV": 0.9 + 0.2 * busy, "VIN_SYS_5V0": 0.85 + 0.3 * busy,
             "VDDQ_VDD2_1V8AO": 0.6 + 0.6 * busy}
    rails = tuple(RailReading(r.name, r.voltage_mv, round(r.current_ma * scale[r.name], 1)) for r in base.rails)
    warm = 30.0 * (1.0 - math.exp(-i / 40.0)) - 28.0
    temps = tuple(TemperatureReading(t.zone, round(t.celsius + warm, 1)) for t in base.temperatures)
    return dataclasses.replace(base, t=100.0 + 0.5 * i, rails=rails, temperatures=temps)


def run_view(steps_done: int = 120, total: int = 300) -> RunView:
    """A run 1 of 2 (static:gpu=816 then MAXN), `steps_done` steps in, with a loss and an evaluation."""
    tracker = RunTracker(Source.TWIN, RAILS, chart_columns=60)
    from engine.run.experiment import ExperimentPhase

    tracker.feed(ExperimentPhase("policy", "static:gpu=816", 1, 2))
    tracker.feed(RunStarted(model="bert-tiny", task="sst2", mode="full", precision="fp32", device="cpu",
                            batch_size=32, total_steps=total, steps_per_epoch=63, seed=0, trainable_params=4_386_178,
                            total_params=4_386_178))
    for i in range(1, steps_done + 1):
        # a slow ramp and a dip, so the chart shows shape
        scale = 1.0 + 0.2 * ((i % 40) / 40.0) - (0.3 if 60 <= i < 70 else 0.0)
        energy = {"VDD_GPU_SOC": 0.0455 * scale, "VDD_CPU_CV": 0.0083, "VIN_SYS_5V0": 0.0277, "VDDQ_VDD2_1V8AO": 0.0167}
        step_j = sum(energy.values())
        tracker.feed(StepEnergy(step=i, time_s=0.005, energy_j=energy, total_energy_j=step_j, avg_power_w=step_j / 0.005,
                                rails=RAILS, source=Source.TWIN, samples=32))
        tracker.feed(StepEnd(step=i, epoch=i // 63, loss=0.70 - 0.001 * i, samples=32, tokens=4096, lr=1e-3,
                             wall_s=0.02, elapsed_s=0.02 * i))
        if i == 100:
            tracker.feed(EvalResult(step=100, split="validation", metrics={"accuracy": 0.8125}, samples=64, wall_s=0.1,
                                    weights="random", synthetic=True))
    return tracker.view()


def fill_store(store: Any) -> dict[str, int]:
    """A compared pair (static:gpu=816 against MAXN), an unrelated run, and a GPU sweep; returns their ids."""
    from engine.results.store import DeviceRecord, SweepPoint, WorkloadRecord
    from engine.results.totals import RunTotals

    device = store.ensure_device(DeviceRecord.from_identity(IDENTITY))
    workload = store.ensure_workload(WorkloadRecord("bert-tiny", "sst2", 32, 128, "fp32", "full", family="bert",
                                                    params=4_386_178))
    other = store.ensure_workload(WorkloadRecord("pythia-70m", "rte", 16, 128, "fp32", "full", family="pythia"))

    def run(policy: str, notes: str, setting: DvfsSetting, time_s: float, rail_j: dict[str, float],
            accuracy: float, workload_id: int = workload) -> int:
        rid = store.start_run(policy=policy.split(":")[0], source=Source.TWIN, device=device, workload=workload_id,
                              objective="energy", seed=0, steps=300, rails="all", weights="random", synthetic=True,
                              data_source="synthetic", notes=notes,
                              started_at=STAMP)
        store.finish_run(rid, RunTotals(time_s=time_s, rail_energy_j=rail_j, rails_preset="all", samples=9600,
                                        steps=300), wall_s=6.0, metrics={"accuracy": accuracy}, setting=setting, notes=notes, finished_at=STAMP)
        watts = {r: j / time_s * 1000.0 for r, j in rail_j.items()}
        store.add_power_samples(rid, [PowerSample(time_s * k / 30, {r: w * (0.9 + 0.2 * ((k * 7) % 5) / 4)
                                                                    for r, w in watts.items()}) for k in range(1, 31)])
        return rid

    maxn = run("maxn", "policy maxn", MAXN, 2.87,
               {"VDD_GPU_SOC": 47.0, "VDD_CPU_CV": 4.98, "VIN_SYS_5V0": 17.3, "VDDQ_VDD2_1V8AO": 11.4}, 0.8125)
    static = run("static:gpu=816", "policy static:gpu=816", DvfsSetting(gpu_hz=816 * MHZ, nvpmodel=0), 3.51,
                 {"VDD_GPU_SOC": 31.9, "VDD_CPU_CV": 5.8, "VIN_SYS_5V0": 19.4, "VDDQ_VDD2_1V8AO": 11.7}, 0.8100)
    store.compare_runs(static, maxn)
    lone = run("online", "policy online", DvfsSetting(gpu_hz=612 * MHZ, nvpmodel=0), 9.9,
               {"VDD_GPU_SOC": 60.0, "VDD_CPU_CV": 9.0, "VIN_SYS_5V0": 30.0, "VDDQ_VDD2_1V8AO": 20.0}, 0.55,
               workload_id=other)

    sweep = store.find_or_create_sweep(device=device, workload=workload, space={"space": "gpu", "method": "fast",
                                                                                 "rails": "all"},
                                       warmup_steps=1, steps=5, repeats=1, source=Source.TWIN, label="demo")
    for gpu in (None,) + GPU_TABLE:
        setting = MAXN if gpu is None else DvfsSetting(gpu_hz=gpu, nvpmodel=0)
        f = 816 * MHZ if gpu is None else gpu
        # energy per sample has its minimum near 816 MHz, MAXN a little above the middle
        jps = 0.0060 + 0.0025 * ((f / MHZ - 800.0) / 500.0) ** 2 + (0.0009 if gpu is None else 0.0)
        time_s = 0.5 * (1300.5 * MHZ / f) ** 0.5 if gpu is not None else 0.52
        store.add_point(SweepPoint(sweep_id=sweep.id, setting=setting.to_json(), repeat=0, time_s=time_s,
                                   energy_j=jps * 160, samples=160, source=Source.TWIN))
    store.finish_sweep(sweep.id, "finished")
    store._query("SELECT 1")
    with store._tx("demo timestamps") as conn:
        conn.execute("UPDATE sweeps SET created_at = ?, finished_at = ?", (STAMP, STAMP))
        conn.execute("UPDATE comparisons SET created_at = ?", (STAMP,))
    return {"maxn": maxn, "static": static, "lone": lone, "sweep": sweep.id}


def fleet_boards(i: int = 0, busy: bool = True) -> tuple[Any, ...]:
    """Poll `i` of a fixed fleet of three: two twins of different modules (one sweeping) and a board
    (sweeping), their power moving with `i` (for the Fleet page's graphs)."""
    import math

    from engine.run.fleet.model import BoardInfo

    def watts(base: float, phase: float) -> float:
        return round(base * (0.75 + 0.25 * math.sin(i / 4.0 + phase)), 2)

    def temps(base: float) -> dict[str, float]:
        return {"cpu-thermal": base, "gpu-thermal": base + 6.5, "tj-thermal": base + 9.0}

    return (
        BoardInfo("board-twin-0", "twin-0", IDENTITY.module, IDENTITY.l4t, "agx-orin-64gb", True, temps(52.0), watts(31.4, 0.0),
                  busy, "bert-tiny/sst2 7/12" if busy else ""),
        BoardInfo("board-twin-1", "twin-1", "P3701-0004 (AGX Orin 32GB)", "36.3.0", "agx-orin-32gb", True, temps(44.0),
                  watts(12.8, 1.0), False, ""),
        BoardInfo("board-10.0.0.7-4f2a91c0", "1423021034567", "P3767-0000 (Orin NX 16GB)", "35.4.1", None, False,
                  temps(68.5), watts(17.95, 2.0), busy, "pythia-70m/rte 3/12" if busy else ""),
    )


def fleet_events() -> tuple[Any, ...]:
    """A fleet sweep's first events on the fixed fleet: two sweeps started, a few points stored."""
    from engine.run.fleet.model import FleetEvent

    return (
        FleetEvent("started", "twin-0", 7, "bert-tiny/sst2 on twin-0: 12 of 12 points to measure (sweep s7)"),
        FleetEvent("started", "1423021034567", 8, "pythia-70m/rte on 1423021034567: 12 of 12 points to measure "
                   "(sweep s8)"),
        *(FleetEvent("point", "twin-0", 7, f"GPU {mhz} · mode 0 (repeat 1)", energy_j=0.96, time_s=0.41, done=i,
                     total=12) for i, mhz in enumerate((306, 408, 510), 1)),
        FleetEvent("point", "1423021034567", 8, "MAXN (repeat 1)", energy_j=2.1, time_s=0.52, done=1, total=12),
    )
