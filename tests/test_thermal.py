"""The thermal guard on a twin that heats up: it waits (in twin time), it aborts over the
limit with a clear error, and the clocks come back."""

from __future__ import annotations

from pathlib import Path

import pytest
from traces import BERT_BASE_LIKE as HOT
from traces import bert_base_workload

from engine.device.base import TemperatureReading
from engine.device.session import DeviceSession
from engine.device.twin.orin import VirtualOrin
from engine.device.twin.profile import load_profile
from engine.dvfs.controller import DvfsController
from engine.dvfs.objectives import Objective
from engine.dvfs.policies import PolicyContext, make_policy
from engine.device.setting import MAXN, DvfsSetting
from engine.core.errors import ConfigError, DeviceError
from engine.run.experiment import ExperimentSpec, run_experiment
from engine.run.harness import RunHarness
from engine.results.store import Store
from engine.run.sweep_driver import SweepDriver
from engine.device.twin.fast import fast_points
from engine.run.thermal import (
    DEFAULT_LIMITS,
    ThermalAbortError,
    ThermalGuard,
    ThermalLimits,
    ThermalWait,
    limits_for,
)
from engine.workload.spec import WorkloadSpec

MHZ = 1_000_000
WORKLOAD = bert_base_workload()


pytestmark = pytest.mark.usefixtures("isolated_env")  # conftest: state, data and a module's trace cache in tmp


@pytest.fixture
def hot_twin(tmp_path: Path):
    with VirtualOrin("agx-orin-64gb", root=tmp_path / "twin", thermal=True) as orin:
        orin.start(realtime=False)
        yield orin


def no_sleep(seconds: float) -> None:
    raise AssertionError("the guard slept on the twin instead of advancing its idle time")


def heat(orin: VirtualOrin, above_c: float, limit_steps: int = 2000) -> float:
    for _ in range(limit_steps):
        orin.run_step(HOT)
        if max(orin.temperatures_c().values()) > above_c:
            return max(orin.temperatures_c().values())
    raise AssertionError(f"the twin did not heat above {above_c} degC")


def test_limits_come_from_the_profile_and_flags() -> None:
    assert (DEFAULT_LIMITS.wait_c, DEFAULT_LIMITS.abort_c) == (75.0, 85.0)
    orin = DeviceSession(device=None, twin=type("T", (), {"profile": load_profile("agx-orin-64gb")})())  # type: ignore[arg-type]
    limits = limits_for(orin)
    assert (limits.wait_c, limits.abort_c, limits.cooldown_c, limits.poll_s) == (75.0, 85.0, 65.0, 5.0)
    assert limits.origin == "profile agx-orin-64gb"
    assert limits_for(None).origin == "defaults"  # no session: the defaults
    assert limits_for(DeviceSession(device=None)).origin == "defaults"  # a board: the defaults  # type: ignore[arg-type]
    tuned = limits_for(orin, wait_c=70.0, abort_c=None)
    assert tuned.wait_c == 70.0 and tuned.abort_c == 85.0 and tuned.origin.endswith("+ flags")
    with pytest.raises(ConfigError, match="cooldown <= wait < abort"):
        ThermalLimits(wait_c=90.0, abort_c=85.0)
    with pytest.raises(ConfigError, match="unknown"):
        DEFAULT_LIMITS.with_overrides(hot_c=1.0)


def test_guard_waits_in_twin_time_until_cool(hot_twin: VirtualOrin) -> None:
    limits = ThermalLimits(wait_c=60.0, abort_c=90.0, cooldown_c=50.0, poll_s=5.0)
    waits: list[ThermalWait] = []
    session = DeviceSession(hot_twin.device(), twin=hot_twin)
    guard = ThermalGuard(hot_twin.device(), limits, session=session, sleep=no_sleep, on_wait=waits.append)
    assert guard.before_point("cold start") is None  # ~42 degC: no wait
    hot = heat(hot_twin, 61.0)  # the sensors read in 0.5 degC steps
    before = hot_twin.now()
    wait = guard.before_point("point 2")
    assert wait is not None and waits == [wait] and wait.simulated
    assert wait.start_c == pytest.approx(hot, abs=0.6) and wait.end_c <= 50.0
    assert wait.waited_s > 0 and wait.waited_s % 5.0 == 0
    assert hot_twin.now() == pytest.approx(before + wait.waited_s)
    assert max(t.celsius for t in hot_twin.device().temperatures()) <= 50.0  # as the sensors read it
    assert guard.describe()["peak_c"] >= 60.0


def test_guard_on_a_board_sleeps_and_gives_up_on_a_board_that_never_cools(tmp_path: Path) -> None:
    with VirtualOrin("agx-orin-64gb", root=tmp_path / "warm") as orin:
        device = orin.device()  # idle twin without the thermal model: a constant ~42 degC
        slept: list[float] = []
        limits = ThermalLimits(wait_c=40.0, abort_c=90.0, cooldown_c=30.0, poll_s=2.0, max_wait_s=7.0)
        guard = ThermalGuard(device, limits, session=DeviceSession(device), sleep=slept.append)  # a board: it sleeps
        with pytest.raises(ThermalAbortError, match="stayed above 30 degC") as err:
            guard.before_point()
        assert slept == [2.0, 2.0, 2.0, 1.0] and "fan" in err.value.remedy


def test_the_guard_waits_through_the_sessions_idle() -> None:
    """The guard never asks what the device is: it idles through the session (a twin renders its
    zones as they are read: no refresh first)."""

    class Session:
        virtual_time = True

        def __init__(self) -> None:
            self.calls: list = []

        def idle(self, seconds: float, sleep=None) -> None:
            self.calls.append(("idle", seconds))
            temps[:] = [t - 10.0 for t in temps]

    class Board:
        def temperatures(self):
            return [TemperatureReading("gpu-thermal", temps[0])]

    temps = [80.0]
    session = Session()
    guard = ThermalGuard(Board(), ThermalLimits(wait_c=75.0, abort_c=90.0, cooldown_c=65.0, poll_s=3.0),
                         session=session, sleep=no_sleep)
    wait = guard.before_point("p")
    assert wait is not None and wait.simulated and wait.waited_s == 6.0
    assert session.calls == [("idle", 3.0), ("idle", 3.0)]


def test_sweep_points_wait_for_a_cool_board(hot_twin: VirtualOrin) -> None:
    """The sweep driver, fed by a simulated run on the heating twin: before each point the
    guard cools the board in twin time; the idle time is not charged to any point."""
    device = hot_twin.device()
    settings = [MAXN, DvfsSetting(gpu_hz=1_300_500_000, nvpmodel=0), DvfsSetting(gpu_hz=612 * MHZ, nvpmodel=0)]
    plan = [(s, 0) for s in settings]
    session = DeviceSession(device, twin=hot_twin)
    guard = ThermalGuard(device, ThermalLimits(wait_c=55.0, abort_c=90.0, cooldown_c=48.0), session=session,
                         sleep=no_sleep)
    applier = DvfsController(device, make_policy("maxn"), PolicyContext(device, Objective()))
    recorded: list = []
    harness = RunHarness(session)
    with harness.monitored():
        driver = SweepDriver(plan, warmup_steps=0, steps=80, apply=applier.apply, monitor=harness.monitor,
                             record=lambda s, r, m, rails, i: recorded.append((s, m)), guard=guard)
        harness.simulate(WORKLOAD, steps=240, callbacks=[driver])
    assert [s for s, _m in recorded] == settings
    assert len(guard.waits) >= 1 and all(w.end_c <= 48.0 for w in guard.waits)
    expected = {p.setting: p.measurement for p in fast_points(HOT, hot_twin.profile, settings, steps=80)}
    for setting, m in recorded:
        assert m.energy_j == pytest.approx(expected[setting].energy_j, rel=1e-9)
        assert m.time_s == pytest.approx(expected[setting].time_s, rel=1e-9)
    busy = sum(m.time_s for _s, m in recorded)
    assert hot_twin.now() == pytest.approx(busy + sum(w.waited_s for w in guard.waits))


def test_overheating_aborts_the_experiment_and_restores_the_clocks(hot_twin: VirtualOrin, tmp_path: Path) -> None:
    gpu = hot_twin.root / "sys/class/devfreq/17000000.gpu"
    before = {n: (gpu / n).read_text() for n in ("min_freq", "max_freq", "governor")}
    spec = ExperimentSpec(WorkloadSpec("bert-base-like", "sst2"), policy="static:gpu=1300.5", steps=500,
                          twin="agx-orin-64gb", simulate=True, thermal=True,
                          thermal_overrides=(("wait_c", 50.0), ("cooldown_c", 45.0), ("abort_c", 55.0)))
    with Store(tmp_path / "db.sqlite") as store:
        with pytest.raises(ThermalAbortError) as err:
            run_experiment(spec, store=store, session=DeviceSession(hot_twin.device(), twin=hot_twin),
                           workload=WORKLOAD)
        assert isinstance(err.value, DeviceError)
        assert "over the 55 degC abort limit" in err.value.what and "clocks restored" in err.value.what
        assert "resumes" in err.value.remedy
        (run,) = store.list_runs()
        assert run.status == "failed" and "abort limit" in run.error
    assert max(hot_twin.temperatures_c().values()) > 55.0
    assert {n: (gpu / n).read_text() for n in before} == before  # pinned at 1300.5 MHz, then restored
