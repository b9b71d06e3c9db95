"""Cheap sampling: window edges use the sampler's latest sample (no sensor read in the training
thread), per-window peaks kept as samples arrive, rail files kept open and read with pread,
and the twin's sampling rate said where it cannot be given."""

from __future__ import annotations

import errno
import json
import math
import os
import threading
import time
from pathlib import Path

import pytest

from engine.core.errors import DeviceError
from engine.core.provenance import Source
from engine.device.monitor import PowerMonitor, PowerSample, TwinSource
from engine.device.sysfs import OpenFiles, SysfsTree
from engine.device.treegen import TreeLayout
from engine.run.harness import StepMeter
from engine.workload.events import StepEnd
from test_monitor import FakeClock


class SineSource:
    """GPU rail 5 W + 2 W sin(pi t), CPU 1 W, on an injected clock; counts its reads per thread."""

    source = Source.MEASURED
    min_interval_s = 0.0

    def __init__(self, clock) -> None:  # type: ignore[no-untyped-def]
        self.clock = clock
        self.readers: list[int] = []

    def read(self) -> PowerSample:
        self.readers.append(threading.get_ident())
        t = self.clock()
        return PowerSample(t, {"VDD_GPU_SOC": 5000 + 2000 * math.sin(math.pi * t), "VDD_CPU_CV": 1000.0})

    def energy_counter(self) -> None:
        return None


def gpu_exact_j(a: float, b: float) -> float:
    return 5 * (b - a) - (2 / math.pi) * (math.cos(math.pi * b) - math.cos(math.pi * a))


class SamplerRunning(PowerMonitor):
    """A monitor that behaves as if its sampler thread ran, while the test feeds the samples
    (`sample_once` standing in for the thread) on a fake clock: deterministic edges."""

    running = True  # type: ignore[assignment]


def test_window_edges_read_no_sensor_in_the_calling_thread_while_the_sampler_runs() -> None:
    src = SineSource(time.monotonic)
    with PowerMonitor(src, rate_hz=200) as mon:
        assert mon.running
        first = len(src.readers)  # start() took one sample here, before any window
        me = threading.get_ident()
        for _ in range(20):
            mon.begin_window("step")
            time.sleep(0.002)
            mon.end_window("step")
        while mon.sample_count < 3:  # the thread's own samples, however loaded the host
            time.sleep(0.01)
    assert src.readers[:first] == [me]
    assert me not in src.readers[first:]
    assert len(src.readers) > first


def test_without_the_sampler_thread_edges_still_sample() -> None:
    clock = FakeClock()
    src = SineSource(clock)
    mon = PowerMonitor(src, clock=clock)
    mon.sample_once()
    clock.t = 0.1
    mon.begin_window("w")
    clock.t = 0.2
    mon.end_window("w")
    assert len(src.readers) == 3  # the first sample and one per edge


def steps_between_samples(mon: PowerMonitor, clock: FakeClock, step_s: float) -> tuple[list, object, list]:
    """Steps of `step_s` from t=0.013 to 4 s while samples arrive every 50 ms (`sample_once`
    standing in for the sampler): (step windows, the run window, the steps' (start, end))."""
    mon.sample_once()
    next_sample, t = 0.05, 0.013
    clock.t = t
    mon.begin_window("run")
    steps, edges = [], []
    while t + step_s < 4.0:
        clock.t = t
        mon.begin_window("step")
        end = t + step_s
        while next_sample <= end:
            clock.t = next_sample
            mon.sample_once()
            next_sample = round(next_sample + 0.05, 10)
        clock.t = end
        steps.append(mon.end_window("step"))
        edges.append((t, end))
        t = end
    return steps, mon.end_window("run"), edges


@pytest.mark.parametrize("step_s", [0.01, 0.03, 0.07, 0.33])
def test_edges_from_the_latest_sample_keep_the_integration_accuracy(step_s: float) -> None:
    """Steps shorter and longer than the 50 ms sampling interval, edges between samples: the
    same figures as before the change for a sensor updating at the sampling rate (whose edges
    could not read a newer value either), the run window and the steps' sum within 0.1% of the
    analytic energy, each step within the bound of holding power over one interval."""
    clock = FakeClock()
    steps, run, edges = steps_between_samples(SamplerRunning(SineSource(clock), rate_hz=20, clock=clock), clock, step_s)

    class SensorAtSamplingRate(SineSource):
        min_interval_s = 0.05

    clock_b = FakeClock()
    before, run_b, _ = steps_between_samples(PowerMonitor(SensorAtSamplingRate(clock_b), rate_hz=20, clock=clock_b),
                                             clock_b, step_s)
    assert [r.energy_j for r in steps] == [r.energy_j for r in before] and run.energy_j == run_b.energy_j
    start, end = edges[0][0], edges[-1][1]
    assert run.energy_j["VDD_GPU_SOC"] == pytest.approx(gpu_exact_j(start, end), rel=1e-3)
    assert sum(r.energy_j["VDD_GPU_SOC"] for r in steps) == pytest.approx(gpu_exact_j(start, end), rel=1e-3)
    for res, (a, b) in zip(steps, edges):
        # |dP/dt| <= 2*pi W/s held over at most 50 ms, against at least 3 W
        assert res.energy_j["VDD_GPU_SOC"] == pytest.approx(gpu_exact_j(a, b), rel=2 * math.pi * 0.05 / 3)
        assert res.energy_j["VDD_CPU_CV"] == pytest.approx(b - a, rel=1e-9)


def test_window_keeps_count_and_peak_of_its_samples() -> None:
    clock = FakeClock()
    mon = SamplerRunning(SineSource(clock), rails="VDD_GPU_SOC", clock=clock)
    mon.sample_once()  # t=0, outside every window below
    clock.t = 0.2
    mon.begin_window("w")
    seen = []
    for t in (0.3, 0.5, 0.7):
        clock.t = t
        seen.append(mon.sample_once())
    clock.t = 0.75
    res = mon.end_window("w")
    assert res.samples == 3
    assert res.peak_power_w == pytest.approx(max(s.rails_mw["VDD_GPU_SOC"] for s in seen) / 1000)  # GPU rail only
    assert res.peak_power_w == pytest.approx(7.0)  # sin(pi/2) at t=0.5
    assert res.to_json()["peak_power_w"] == res.peak_power_w
    mon.begin_window("empty")
    clock.t = 0.76
    empty = mon.end_window("empty")
    assert empty.samples == 0 and empty.peak_power_w is None


def test_step_meter_reads_the_windows_peak_not_the_buffer() -> None:
    clock = FakeClock()
    mon = SamplerRunning(SineSource(clock), clock=clock)
    mon.sample_once()
    mon.since = mon.recent = None  # type: ignore[method-assign, assignment]  # a walk over the buffer fails
    meter = StepMeter(mon)
    meter.begin()
    for t in (0.1, 0.5, 0.9):
        clock.t = t
        mon.sample_once()
    clock.t = 1.0
    energy = meter.end(StepEnd(step=1, epoch=0, loss=0.0, samples=8, tokens=64, lr=1e-3, wall_s=1.0, elapsed_s=1.0))
    assert energy is not None
    assert energy.peak_power_w == pytest.approx(8.0)  # 7 W GPU at t=0.5 + 1 W CPU
    assert energy.time_s == pytest.approx(1.0)


class FakeOrin:
    def __init__(self, tick: float | None) -> None:
        self.t = 0.0
        self.tick = tick

    def now(self) -> float:
        return self.t

    def rail_powers_mw(self) -> dict[str, float]:
        return {"VDD_GPU_SOC": 9000.0}

    def energy_j(self) -> dict[str, float]:
        return {"VDD_GPU_SOC": 9.0 * self.t}

    def rail_update_interval_s(self) -> float:
        return self.tick or 0.0


def test_twin_says_what_rate_it_gives() -> None:
    idle_ticking = PowerMonitor(TwinSource(FakeOrin(0.02)), rate_hz=100)
    assert idle_ticking.rate_hz == pytest.approx(50)
    assert idle_ticking.rate_note is not None and "20 ms ticks" in idle_ticking.rate_note
    assert "100 Hz asked" in idle_ticking.rate_note
    assert PowerMonitor(TwinSource(FakeOrin(0.02)), rate_hz=20).rate_note is None
    virtual = PowerMonitor(TwinSource(FakeOrin(None)), rate_hz=1000)  # time moves only with steps
    assert virtual.rate_hz == pytest.approx(1000) and virtual.rate_note is None


def test_exact_windows_sample_every_edge_whatever_the_twins_tick() -> None:
    orin = FakeOrin(0.02)
    mon = PowerMonitor(TwinSource(orin))
    mon.sample_once()
    for _ in range(3):
        mon.begin_window("step")
        orin.t += 0.005  # a step shorter than the idle tick
        res = mon.end_window("step")
        assert res.exact and res.total_energy_j == pytest.approx(0.045)
        assert res.peak_power_w is None and res.samples == 0
    assert [s.t for s in mon.since(0.0)] == pytest.approx([0.005, 0.010, 0.015])


def test_real_twin_tick_is_its_rail_interval(tmp_path: Path) -> None:
    from engine.device.twin.orin import VirtualOrin

    with VirtualOrin(root=tmp_path / "twin") as orin:
        orin.start(realtime=False)
        assert orin.rail_update_interval_s() == 0.0
        orin.start(tick_s=0.02, realtime=True)
        assert orin.rail_update_interval_s() == pytest.approx(0.02)


# ---------------------------------------------------------------- rail files kept open


def test_rail_files_opened_once_and_read_with_pread(r36_tree: tuple[Path, TreeLayout],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    import engine.device.sysfs as sysfs_mod
    from engine.device.jetson import JetsonDevice

    root, lay = r36_tree
    dev = JetsonDevice(root)
    dev.rails()
    opened: list[str] = []
    real_open = sysfs_mod.SysfsTree.open_read
    monkeypatch.setattr(sysfs_mod.SysfsTree, "open_read", lambda t, rel: opened.append(str(rel)) or real_open(t, rel))
    volt, curr = lay.rails["VDD_GPU_SOC"]
    (root / volt).write_text("5000\n")  # rewritten in place, as a kernel attribute changes
    (root / curr).write_text("3000\n")
    for _ in range(5):
        assert {r.name: r.power_mw for r in dev.rails()}["VDD_GPU_SOC"] == pytest.approx(15000.0)
    assert opened == []
    tmp = root / f"{curr}.new"  # replaced atomically, as the twin writes: seen, through a new descriptor
    tmp.write_text("1000\n")
    os.replace(tmp, root / curr)
    assert dev.rail("VDD_GPU_SOC").power_mw == pytest.approx(5000.0)
    assert opened == [curr]
    dev.close()


def test_rail_that_vanished_is_a_clear_error(r36_tree: tuple[Path, TreeLayout]) -> None:
    from engine.device.jetson import JetsonDevice

    root, lay = r36_tree
    dev = JetsonDevice(root)
    dev.rails()
    volt, _curr = lay.rails["VDD_CPU_CV"]
    (root / volt).unlink()
    with pytest.raises(DeviceError, match="VDD_CPU_CV vanished") as err:
        dev.rails()
    assert "INA3221" in err.value.remedy


def test_enodev_reopens_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import engine.device.sysfs as sysfs_mod

    (tmp_path / "in1_input").write_text("4984\n")
    files = OpenFiles(SysfsTree(tmp_path))
    assert files.read_ints(["in1_input"]) == [4984]
    real_pread = os.pread
    failures = [errno.ENODEV]

    def flaky(fd: int, n: int, off: int) -> bytes:
        if failures:
            raise OSError(failures.pop(), "No such device")
        return real_pread(fd, n, off)

    monkeypatch.setattr(sysfs_mod.os, "pread", flaky)
    assert files.read_ints(["in1_input"]) == [4984]  # reopened, read again
    failures.extend([errno.EIO])
    with pytest.raises(DeviceError, match="cannot read"):
        files.read_ints(["in1_input"])
    failures.extend([errno.ENODEV, errno.ENODEV])
    with pytest.raises(DeviceError):  # reopened once, still refused: an error, not a loop
        files.read_ints(["in1_input"])


def test_close_closes_the_descriptors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import engine.device.sysfs as sysfs_mod

    (tmp_path / "a").write_text("1\n")
    (tmp_path / "b").write_text("2\n")
    files = OpenFiles(SysfsTree(tmp_path))
    assert files.read_ints(["a", "b"]) == [1, 2]
    fds = set(files._fds.values())
    closed: list[int] = []
    real_close = os.close
    monkeypatch.setattr(sysfs_mod.os, "close", lambda fd: closed.append(fd) or real_close(fd))
    files.close()
    assert set(closed) == fds and len(closed) == 2
    assert files.read_ints(["b"]) == [2]  # reading again reopens
    files.close()


def test_monitor_cli_says_the_twins_rate(isolated_env, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    from engine.cli import main

    assert main(["monitor", "--twin", "agx-orin-64gb", "--seconds", "0.3", "--rate", "100", "--json"]) == 0
    out = capsys.readouterr()
    data = json.loads(out.out)
    assert data["rate_hz"] == 100 and data["sampling_hz"] == pytest.approx(50)
    assert "20 ms ticks" in data["rate_note"] and "20 ms ticks" in out.err
    assert isinstance(data["samples"], int) and data["exact"] is True


def test_session_close_closes_the_rail_files(twin_session, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    import engine.device.sysfs as sysfs_mod

    device = twin_session.device
    assert len(device.rails()) == 4
    fds = set(device._rail_files._fds.values())
    assert len(fds) == 8  # mV and mA of four rails, kept open
    closed: list[int] = []
    real_close = os.close
    monkeypatch.setattr(sysfs_mod.os, "close", lambda fd: closed.append(fd) or real_close(fd))
    twin_session.close()
    assert fds <= set(closed) and device._rail_files._fds == {}  # (the twin closes its folders' descriptors too)
