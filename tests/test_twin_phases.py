"""The twin's power follows a step's phases in its rail files, idles when steps stop coming,
and keeps every step's exact energy and time."""

from __future__ import annotations

import dataclasses

import pytest
from traces import BERT_BASE_LIKE as BUSY

from engine.device.twin.model import Clocks, estimate_step, idle_power_mw
from engine.device.twin.orin import IDLE_AFTER_S, VirtualOrin
from engine.device.twin.phases import COMPUTE, HOST, OPTIMIZER, phase_at, step_phases
from engine.device.twin.profile import load_profile

MHZ = 1_000_000


class FakeWall:
    """The wall clock the twin plays phases back against, moved by the test."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _file_watts(twin: VirtualOrin) -> float:
    """Total power as the INA3221 files show it (what the TUI's poll and jtop read); the Jetson
    backend is built directly, as twin.device() would start a sync thread racing the fake clock."""
    from engine.device.jetson import JetsonDevice

    return sum(r.power_mw for r in JetsonDevice(twin.root).rails()) / 1000.0


@pytest.mark.parametrize("gpu_mhz", [306, 816, 1300.5])
def test_phases_sum_to_the_step_and_differ(gpu_mhz: float) -> None:
    profile = load_profile("agx-orin-64gb")
    clocks = Clocks(int(gpu_mhz * MHZ), 2201600000, 3199 * MHZ)
    est = estimate_step(BUSY, clocks, profile)
    phases = step_phases(BUSY, clocks, profile, est)
    assert [p.name for p in phases] == [HOST, COMPUTE, OPTIMIZER]
    assert sum(p.time_s for p in phases) == pytest.approx(est.time_s, rel=1e-12)
    for rail, joules in est.energy_j.items():
        assert sum(p.energy_j[rail] for p in phases) == pytest.approx(joules, rel=1e-12)
    gpu_w = {p.name: p.power_mw["VDD_GPU_SOC"] for p in phases}
    assert gpu_w[COMPUTE] > gpu_w[HOST] and gpu_w[OPTIMIZER] > gpu_w[HOST]  # the GPU idles in host work
    assert gpu_w[COMPUTE] != pytest.approx(gpu_w[OPTIMIZER], rel=1e-4)  # each phase its own load
    assert all(p.time_s > 0 for p in phases)
    assert phase_at(phases, 0.0).name == HOST
    assert phase_at(phases, est.time_s * 2).name == OPTIMIZER


def test_a_trace_of_one_kind_is_one_phase() -> None:
    profile = load_profile("agx-orin-64gb")
    trace = dataclasses.replace(BUSY, ops=BUSY.ops[:1], host_cycles=0.0)
    clocks = Clocks(816 * MHZ, 2201600000, 3199 * MHZ)
    est = estimate_step(trace, clocks, profile)
    (only,) = step_phases(trace, clocks, profile, est)
    assert only.time_s == est.time_s and dict(only.power_mw) == dict(est.power_mw)


def test_rail_files_play_the_phases_back_and_idle_when_paused() -> None:
    with VirtualOrin() as twin:
        twin.wall_clock = wall = FakeWall()
        with twin.driven():
            twin.run_step(BUSY)
            wall.t += 0.2  # the host takes 0.2 s a step
            step = twin.run_step(BUSY)
            seen: dict[str, float] = {}
            for k in range(400):  # through the next step's wall time
                wall.t = 1000.2 + 0.2 * k / 400
                twin.sync()
                seen[twin.shown_phase()] = _file_watts(twin)
            assert set(seen) == {HOST, COMPUTE, OPTIMIZER}
            assert max(seen.values()) > step.total_energy_j / step.time_s > min(seen.values())
            assert twin.rail_powers_mw() == step.power_mw  # the monitor's samples keep the step's average
            energy = twin.energy_j()
            wall.t += max(IDLE_AFTER_S, 1.0) + 1.0  # no step for a while: paused
            twin.sync()
            assert twin.shown_phase() == "idle"
            clocks = twin.clocks()
            idle_w = sum(idle_power_mw(clocks, twin.profile).values()) / 1000.0
            assert _file_watts(twin) == pytest.approx(idle_w, abs=0.05)
            assert _file_watts(twin) < min(seen.values())
            assert twin.energy_j() == energy  # showing a pause moves no virtual time and adds no energy
            wall.t += 0.2
            twin.run_step(BUSY)  # resumed: a gap is not a step, the host's pace is kept
            wall.t += 0.1
            twin.sync()
            assert twin.shown_phase() in (HOST, COMPUTE, OPTIMIZER)


def test_driven_steps_keep_their_exact_energy_and_time() -> None:
    """Playing phases back changes only what the files show: the steps are bit for bit the same."""
    with VirtualOrin() as plain, plain.driven():
        expected = [plain.run_step(BUSY) for _ in range(5)]
        expected_total = plain.energy_j()
    with VirtualOrin() as twin:
        twin.wall_clock = wall = FakeWall()
        with twin.driven():
            got = []
            for _ in range(5):
                got.append(twin.run_step(BUSY))
                wall.t += 0.13
                twin.sync()
    assert [(s.time_s, dict(s.energy_j)) for s in got] == [(s.time_s, dict(s.energy_j)) for s in expected]
    assert twin.energy_j() == expected_total


def test_a_new_run_and_a_new_pace_are_followed() -> None:
    """The host's pace is measured per run, and a lasting change of pace is taken up (not shown as idle)."""
    with VirtualOrin() as twin:
        twin.wall_clock = wall = FakeWall()
        with twin.driven():
            for _ in range(3):
                twin.run_step(BUSY)
                wall.t += 0.01  # a fast run
        wall.t += 60.0
        with twin.driven():
            for _ in range(3):  # a slow one: 2 s a step
                twin.run_step(BUSY)
                wall.t += 2.0
            wall.t -= 1.0  # halfway through the next step
            twin.sync()
            assert twin.shown_phase() != "idle"
        with twin.driven():  # within a run: fast steps, then lastingly slow ones
            for dt in (0.01, 0.01, 0.01, 2.0, 2.0, 2.0):
                twin.run_step(BUSY)
                wall.t += dt
            wall.t -= 1.0
            twin.sync()
            assert twin.shown_phase() != "idle"
            wall.t += 10.0  # then a real pause
            twin.sync()
            assert twin.shown_phase() == "idle"
