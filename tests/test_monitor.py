"""The power monitor: integration accuracy, windows, rail presets, clamping, exact counters, the thread."""

from __future__ import annotations

import logging
import math
import time

import pytest

from engine.device.base import DeviceIdentity, RailReading
from engine.core.errors import ConfigError, DeviceError
from engine.device.monitor import (
    DeviceRailSource,
    PowerMonitor,
    PowerSample,
    PowerSource,
    TwinSource,
    resolve_rails,
)
from engine.core.provenance import Source

ORIN = ("VDD_GPU_SOC", "VDD_CPU_CV", "VIN_SYS_5V0", "VDDQ_VDD2_1V8AO")


class FakeClock:
    def __init__(self, t: float = 0.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


class SineSource:
    """GPU rail P(t) = 5 W + 2 W sin(2π·0.5·t); CPU 1 W; SYS 3 W; on an injected clock."""

    source = Source.MEASURED

    def __init__(self, clock: FakeClock, min_interval_s: float = 0.0) -> None:
        self.clock = clock
        self.min_interval_s = min_interval_s
        self.reads = 0

    def read(self) -> PowerSample:
        self.reads += 1
        t = self.clock()
        return PowerSample(
            t, {"VDD_GPU_SOC": 5000 + 2000 * math.sin(math.pi * t), "VDD_CPU_CV": 1000.0, "VIN_SYS_5V0": 3000.0}
        )

    def energy_counter(self) -> None:
        return None


def gpu_exact_j(a: float, b: float) -> float:
    return 5 * (b - a) - (2 / math.pi) * (math.cos(math.pi * b) - math.cos(math.pi * a))


def drive(mon: PowerMonitor, clock: FakeClock, until: float, step: float = 0.05) -> None:
    """Sample at `step` on the fake clock from its current time up to `until`."""
    n = round((until - clock.t) / step)
    start = clock.t
    for k in range(1, n + 1):
        clock.t = start + k * step
        mon.sample_once()


def test_protocol_satisfied() -> None:
    assert isinstance(SineSource(FakeClock()), PowerSource)


@pytest.mark.parametrize("sensor_s", [0.0, 0.05])
def test_integration_error_against_analytic(sensor_s: float) -> None:
    """20 Hz over 4 s: whole run under 1%; a window with edges between samples under 0.1%
    (edges read fresh when the sensor allows, else interpolated)."""
    clock = FakeClock()
    src = SineSource(clock, min_interval_s=sensor_s)
    mon = PowerMonitor(src, rate_hz=20, clock=clock)
    mon.sample_once()
    drive(mon, clock, 0.30)
    clock.t = 0.33
    mon.begin_window("w")
    clock.t = 0.30
    drive(mon, clock, 3.70)
    clock.t = 3.71
    res = mon.end_window("w")
    clock.t = 3.70
    drive(mon, clock, 4.0)
    total = mon.energy_j()["VDD_GPU_SOC"]
    assert abs(total / gpu_exact_j(0.0, 4.0) - 1) < 0.01
    assert res.duration_s == pytest.approx(3.38)
    assert abs(res.energy_j["VDD_GPU_SOC"] / gpu_exact_j(0.33, 3.71) - 1) < 0.001
    assert res.energy_j["VDD_CPU_CV"] == pytest.approx(3.38, rel=1e-9)
    assert res.total_energy_j == pytest.approx(sum(res.energy_j.values()))
    assert res.avg_power_w == pytest.approx(res.total_energy_j / 3.38)
    assert res.source is Source.MEASURED and res.exact is False
    assert 60 <= res.samples <= 70


def test_windows_nest_and_overlap() -> None:
    clock = FakeClock()
    mon = PowerMonitor(SineSource(clock), clock=clock)
    mon.sample_once()
    mon.begin_window("run")
    drive(mon, clock, 1.0)
    mon.begin_window("a")
    drive(mon, clock, 1.5)
    mon.begin_window("b")  # overlaps a
    drive(mon, clock, 2.0)
    a = mon.end_window("a")
    assert mon.open_windows() == ("run", "b")
    drive(mon, clock, 2.6)
    b = mon.end_window("b")
    run = mon.end_window("run")
    assert (a.start, a.end, b.start, b.end) == pytest.approx((1.0, 2.0, 1.5, 2.6))
    assert run.duration_s == pytest.approx(2.6)
    assert a.energy_j["VDD_CPU_CV"] == pytest.approx(1.0) and b.energy_j["VDD_CPU_CV"] == pytest.approx(1.1)
    for res, (lo, hi) in ((a, (1.0, 2.0)), (b, (1.5, 2.6)), (run, (0.0, 2.6))):
        assert res.energy_j["VDD_GPU_SOC"] == pytest.approx(gpu_exact_j(lo, hi), rel=1e-3)
    # nested pieces add up to the whole, exactly: one integral, cut at edges
    mon.begin_window("x")
    drive(mon, clock, 3.0)
    mon.begin_window("y")
    drive(mon, clock, 3.4)
    y = mon.end_window("y")
    x = mon.end_window("x")
    assert x.energy_j["VDD_GPU_SOC"] == pytest.approx(
        gpu_exact_j(2.6, 3.0) + y.energy_j["VDD_GPU_SOC"], rel=1e-3
    )


def test_window_name_errors() -> None:
    clock = FakeClock()
    mon = PowerMonitor(SineSource(clock), clock=clock)
    mon.sample_once()
    with pytest.raises(ConfigError, match="no open window named 'nope'") as exc:
        mon.end_window("nope")
    assert exc.value.remedy
    mon.begin_window("step")
    with pytest.raises(ConfigError, match="already open"):
        mon.begin_window("step")
    clock.t = 0.1
    mon.end_window("step")
    with pytest.raises(ConfigError, match="no open window"):
        mon.end_window("step")


def test_rail_presets() -> None:
    have = ORIN
    assert resolve_rails("all", have) == have
    assert resolve_rails("gpu+cpu", have) == ("VDD_GPU_SOC", "VDD_CPU_CV")
    assert resolve_rails("VDDQ_VDD2_1V8AO, VDD_GPU_SOC", have) == ("VDDQ_VDD2_1V8AO", "VDD_GPU_SOC")
    assert resolve_rails(["VIN_SYS_5V0"], have) == ("VIN_SYS_5V0",)
    with pytest.raises(ConfigError, match="POM_5V_GPU") as exc:
        resolve_rails("POM_5V_GPU,VDD_GPU_SOC", have)
    assert "VDDQ_VDD2_1V8AO" in exc.value.remedy  # says which rails exist
    with pytest.raises(ConfigError):
        resolve_rails(" , ", have)


def test_preset_sums_only_its_rails_and_bad_preset_fails_on_start() -> None:
    clock = FakeClock()
    mon = PowerMonitor(SineSource(clock), rails="gpu+cpu", clock=clock)
    mon.sample_once()
    assert mon.rails == ("VDD_GPU_SOC", "VDD_CPU_CV")
    mon.begin_window("w")
    drive(mon, clock, 2.0)
    res = mon.end_window("w")
    assert set(res.energy_j) == {"VDD_GPU_SOC", "VDD_CPU_CV", "VIN_SYS_5V0"}
    assert res.total_energy_j == pytest.approx(res.energy_j["VDD_GPU_SOC"] + res.energy_j["VDD_CPU_CV"])
    bad = PowerMonitor(SineSource(FakeClock()), rails="VDD_GPU_SOC,VDDQ_VDD2_1V8AO")
    with pytest.raises(ConfigError, match="VDDQ_VDD2_1V8AO") as exc:
        bad.start()
    assert "VIN_SYS_5V0" in exc.value.remedy
    assert not bad.running


def test_rate_clamped_to_sensor_interval(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="engine.device.monitor"):
        mon = PowerMonitor(SineSource(FakeClock(), min_interval_s=0.1), rate_hz=20)
    assert mon.interval_s == pytest.approx(0.1) and mon.rate_hz == pytest.approx(10)
    assert any("sensor updates only every 100 ms" in r.getMessage() for r in caplog.records)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="engine.device.monitor"):
        free = PowerMonitor(SineSource(FakeClock(), min_interval_s=0.002), rate_hz=20)
    assert free.interval_s == pytest.approx(0.05)
    assert not any("sensor" in r.getMessage() for r in caplog.records)
    with pytest.raises(ConfigError):
        PowerMonitor(SineSource(FakeClock()), rate_hz=0)


def test_stale_samples_dropped_and_ring_buffer() -> None:
    clock = FakeClock()
    mon = PowerMonitor(SineSource(clock), rate_hz=20, buffer_seconds=1.0, clock=clock)
    assert mon.sample_once() is not None
    assert mon.sample_once() is None  # same t: nothing new
    drive(mon, clock, 10.0)
    everything = mon.recent(100)
    assert len(everything) == 21  # 1 s at 20 Hz, plus the edge
    assert everything[-1].t == pytest.approx(10.0)
    last_half = mon.recent(0.5)
    assert [s.t for s in last_half] == pytest.approx([9.5 + 0.05 * i for i in range(11)])
    assert mon.latest().t == pytest.approx(10.0)


class CounterSource(SineSource):
    """Reports power, but also an exact counter that deliberately disagrees with it."""

    source = Source.TWIN

    def energy_counter(self) -> tuple[float, dict[str, float]]:
        t = self.clock()
        return t, {"VDD_GPU_SOC": 7.0 * t, "VDD_CPU_CV": 0.5 * t, "VIN_SYS_5V0": 1.0 * t}


def test_exact_window_uses_counter() -> None:
    clock = FakeClock(10.0)
    mon = PowerMonitor(CounterSource(clock), rails="gpu+cpu", clock=clock)
    mon.begin_window("step")
    clock.t = 12.0
    res = mon.end_window("step")
    assert res.exact is True and res.source is Source.TWIN
    assert res.energy_j == pytest.approx({"VDD_GPU_SOC": 14.0, "VDD_CPU_CV": 1.0, "VIN_SYS_5V0": 2.0})
    assert res.total_energy_j == pytest.approx(15.0)
    assert res.avg_power_w == pytest.approx(7.5)
    assert (res.start, res.end, res.duration_s) == (10.0, 12.0, 2.0)


class FakeOrin:
    """Duck-typed stand-in for the twin's VirtualOrin."""

    def __init__(self) -> None:
        self.t = 100.0

    def now(self) -> float:
        return self.t

    def rail_powers_mw(self) -> dict[str, float]:
        return {"VDD_GPU_SOC": 9000.0, "VDD_CPU_CV": 1500.0}

    def energy_j(self) -> dict[str, float]:
        return {"VDD_GPU_SOC": 9.0 * self.t, "VDD_CPU_CV": 1.5 * self.t}


def test_twin_source_exact_on_virtual_time() -> None:
    orin = FakeOrin()
    src = TwinSource(orin)
    assert isinstance(src, PowerSource) and src.source is Source.TWIN
    assert src.read() == PowerSample(100.0, {"VDD_GPU_SOC": 9000.0, "VDD_CPU_CV": 1500.0})
    mon = PowerMonitor(src)  # clock defaults to the twin's virtual time
    mon.sample_once()
    mon.begin_window("epoch")
    orin.t = 160.0
    res = mon.end_window("epoch")
    assert res.exact and res.duration_s == 60.0
    assert res.total_energy_j == pytest.approx(60 * 10.5)
    with pytest.raises(TypeError):
        TwinSource(object())


def test_exact_windows_sample_at_their_edges_so_each_step_has_a_sample() -> None:
    """On the twin the monitor's thread may see nothing new between two steps: the window
    edges take the samples, one per step, at the step's power; `since` gives the new ones."""
    orin = FakeOrin()
    mon = PowerMonitor(TwinSource(orin))
    mon.sample_once()
    for k in range(1, 4):
        mon.begin_window("step")
        orin.t += 0.5
        mon.end_window("step")
    times = [s.t for s in mon.since(100.0)]
    assert times == [100.5, 101.0, 101.5]
    assert mon.since(101.0) == [mon.latest()] and mon.since(101.5) == []


class FakeDevice:
    def __init__(self, is_twin: bool) -> None:
        self.is_twin = is_twin

    def identity(self) -> DeviceIdentity:
        return DeviceIdentity("board", "module", "36.3.0", "6.0", is_twin=self.is_twin)

    def rails(self) -> tuple[RailReading, ...]:
        return (RailReading("VDD_GPU_SOC", 5000.0, 480.0), RailReading("VDD_CPU_CV", 5000.0, 80.0))

    def rail_update_interval_s(self) -> float:
        return 0.14


def test_device_rail_source() -> None:
    clock = FakeClock(3.0)
    src = DeviceRailSource(FakeDevice(is_twin=False), clock=clock)  # type: ignore[arg-type]
    assert src.source is Source.MEASURED and src.min_interval_s == 0.14
    assert src.read() == PowerSample(3.0, {"VDD_GPU_SOC": 2400.0, "VDD_CPU_CV": 400.0})
    assert src.energy_counter() is None
    assert DeviceRailSource(FakeDevice(is_twin=True)).source is Source.TWIN  # type: ignore[arg-type]
    assert PowerMonitor(src).rate_hz == pytest.approx(1 / 0.14)


def test_vanished_rail_is_an_error() -> None:
    clock = FakeClock()

    class Flaky(SineSource):
        def read(self) -> PowerSample:
            s = super().read()
            return PowerSample(s.t, {"VDD_CPU_CV": 1.0}) if s.t > 0.5 else s

    mon = PowerMonitor(Flaky(clock), rails="gpu+cpu", clock=clock)
    mon.sample_once()
    clock.t = 1.0
    with pytest.raises(DeviceError, match="VDD_GPU_SOC vanished"):
        mon.sample_once()


class RealTimeSource:
    source = Source.MEASURED
    min_interval_s = 0.0

    def __init__(self, fail_after: int | None = None) -> None:
        self.reads = 0
        self.fail_after = fail_after

    def read(self) -> PowerSample:
        self.reads += 1
        if self.fail_after is not None and self.reads > self.fail_after:
            raise DeviceError("sensor gone", "replug it")
        return PowerSample(time.monotonic(), {"VDD_GPU_SOC": 4000.0})

    def energy_counter(self) -> None:
        return None


def test_thread_samples_and_joins() -> None:
    src = RealTimeSource()
    with PowerMonitor(src, rate_hz=100) as mon:
        assert mon.running
        mon.begin_window("w")
        time.sleep(0.25)
        res = mon.end_window("w")
    assert not mon.running
    assert src.reads >= 8  # ~25 at 100 Hz; generous for a loaded machine
    assert res.avg_power_w == pytest.approx(4.0)
    assert res.total_energy_j == pytest.approx(4.0 * res.duration_s)


def test_sampler_error_raised_on_end_window_and_stop() -> None:
    mon = PowerMonitor(RealTimeSource(fail_after=3), rate_hz=200).start()
    mon.begin_window("w")
    deadline = time.monotonic() + 5
    while mon.running and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not mon.running  # the thread stopped on the error
    with pytest.raises(DeviceError, match="sensor gone"):
        mon.end_window("w")
    mon.stop()  # already reported: stop is clean

    mon2 = PowerMonitor(RealTimeSource(fail_after=2), rate_hz=200).start()
    deadline = time.monotonic() + 5
    while mon2.running and time.monotonic() < deadline:
        time.sleep(0.01)
    with pytest.raises(DeviceError, match="sensor gone"):
        mon2.stop()


class RampSource:
    """P(t) = 1000·t mW on a slow sensor (new value once a second)."""

    source = Source.MEASURED
    min_interval_s = 1.0

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock

    def read(self) -> PowerSample:
        return PowerSample(self.clock(), {"VDD_GPU_SOC": 1000.0 * self.clock()})

    def energy_counter(self) -> None:
        return None


def test_window_edge_interpolated_between_samples() -> None:
    """A window opened between two sensor updates starts on the line between them:
    exact for a linear ramp, where holding either neighbour's power would be far off."""
    clock = FakeClock()
    mon = PowerMonitor(RampSource(clock), clock=clock)
    mon.sample_once()
    clock.t = 0.25
    mon.begin_window("w")  # too soon for a new sensor value: edge resolved later
    clock.t = 1.0
    mon.sample_once()
    res = mon.end_window("w")
    assert res.energy_j["VDD_GPU_SOC"] == pytest.approx((1.0 - 0.25**2) / 2)
    assert res.samples == 1
