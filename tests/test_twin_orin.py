"""VirtualOrin: the twin's tree, fake tools, time, energy and temperature."""

from __future__ import annotations

import dataclasses
import math
import os
import subprocess
import threading
import time
from pathlib import Path

import pytest
from traces import BERT_BASE_LIKE as BUSY

from engine.device.base import ClockDomain
from engine.device.sysfs import SysfsTree
from engine.device.twin.model import idle_power_mw
from engine.device.twin.orin import TWIN_MARKER, VirtualOrin
from engine.device.twin.profile import load_profile
from engine.core.errors import ConfigError

MHZ = 1_000_000
GPU = "sys/class/devfreq/17000000.gpu"
CPU0 = "sys/devices/system/cpu/cpu0/cpufreq"
EMC = "sys/kernel/debug/bpmp/debug/clk/emc"
STATUS = "var/lib/nvpmodel/status"
SPEC_IDLE_MW = {"VDD_GPU_SOC": 2399, "VDD_CPU_CV": 400, "VIN_SYS_5V0": 4032, "VDDQ_VDD2_1V8AO": 301}

# A GPU-bound step of roughly BERT-base size (fp32, batch 32, seq 128).


def read(root: Path, rel: str) -> str:
    """Through the tree's own reader, which has the twin render the file first (it keeps its state in memory)."""
    return SysfsTree(root).read_str(rel)


def write(root: Path, rel: str, value: object) -> None:
    (root / rel).write_text(f"{value}\n")


def tool(root: Path, rel: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(root / rel), *args], capture_output=True, text=True, timeout=60)


@pytest.fixture
def twin():
    with VirtualOrin() as t:
        yield t


# --------------------------------------------------------------------------- the tree


def test_tree_has_the_spec_files(twin):
    root = twin.root
    assert read(root, f"{GPU}/available_frequencies").split()[0] == "306000000"
    assert read(root, f"{GPU}/device/of_node/name").rstrip("\0") == "gpu"
    assert read(root, f"{GPU}/governor") == "nvhost_podgov"
    assert len(read(root, f"{CPU0}/scaling_available_frequencies").split()) == 29
    assert read(root, f"{CPU0}/scaling_governor") == "schedutil"
    for name in ("rate", "min_rate", "max_rate", "mrq_rate_locked"):
        assert (root / EMC / name).is_file()
    hwmon = sorted((root / "sys/bus/i2c/drivers/ina3221/1-0040/hwmon").glob("hwmon*"))
    assert [read(root, str(hwmon[0] / f"in{k}_label")) for k in (1, 2, 3)] == ["VDD_GPU_SOC", "VDD_CPU_CV", "VIN_SYS_5V0"]
    assert (root / "sys/kernel/actmon_avg_activity/mc_all").is_file()
    assert read(root, STATUS).startswith("pmode:0000")
    assert "POWER_MODEL" in (root / "etc/nvpmodel.conf").read_text()
    assert 'profile = "agx-orin-64gb"' in read(root, TWIN_MARKER)
    for rel in ("usr/sbin/nvpmodel", "usr/bin/jetson_clocks"):
        assert os.access(root / rel, os.X_OK)


def test_rails_are_quantised_like_an_ina3221(twin):
    hwmon = next((twin.root / "sys/bus/i2c/drivers/ina3221/1-0040/hwmon").glob("hwmon*"))
    with twin.driven():
        twin.run_step(BUSY)
    for k in (1, 2, 3):
        assert int(read(twin.root, str(hwmon / f"in{k}_input"))) % 8 == 0
        assert int(read(twin.root, str(hwmon / f"curr{k}_input"))) % 20 == 0


def test_writing_min_max_then_sync_moves_cur_freq(twin):
    root = twin.root
    assert read(root, f"{GPU}/cur_freq") == "306000000"  # idle under podgov
    write(root, f"{GPU}/max_freq", 816000000)
    write(root, f"{GPU}/min_freq", 816000000)
    twin.sync()
    assert read(root, f"{GPU}/cur_freq") == "816000000"
    write(root, f"{CPU0}/scaling_max_freq", 1497600)
    write(root, f"{CPU0}/scaling_min_freq", 1497600)
    write(root, f"{EMC}/mrq_rate_locked", 1)
    write(root, f"{EMC}/rate", 665600000)
    twin.sync()
    assert read(root, f"{CPU0}/scaling_cur_freq") == "1497600"
    assert read(root, f"{EMC}/rate") == "665600000"
    with twin.driven():
        step = twin.run_step(BUSY)
    assert (step.gpu_hz, step.cpu_hz, step.emc_hz) == (816 * MHZ, 1497600000, 665600000)
    assert int(read(root, f"{GPU}/device/load")) > 900


def test_idle_rails_as_in_the_spec(twin):
    hwmon = {}
    for chip in ("1-0040", "1-0041"):
        for d in (twin.root / f"sys/bus/i2c/drivers/ina3221/{chip}/hwmon").glob("hwmon*"):
            for label in d.glob("in*_label"):
                k = label.name[2]
                if (d / f"curr{k}_input").exists():
                    hwmon[label.read_text().strip()] = (d / f"in{k}_input", d / f"curr{k}_input")
    for rail, mw in SPEC_IDLE_MW.items():
        volt, curr = hwmon[rail]
        assert int(volt.read_text()) * int(curr.read_text()) / 1000 == pytest.approx(mw, rel=0.03), rail
        assert twin.rail_powers_mw()[rail] == pytest.approx(mw, rel=0.02)


# --------------------------------------------------------------------------- fake tools


def test_fake_nvpmodel_queries_and_switches(twin):
    root = twin.root
    q = tool(root, "usr/sbin/nvpmodel", "-q")
    assert q.returncode == 0
    assert q.stdout.splitlines()[:2] == ["NV Power Mode: MAXN", "0"]
    assert tool(root, "usr/sbin/nvpmodel", "-m", "1").returncode == 0
    assert read(root, STATUS).startswith("pmode:0001")
    assert read(root, f"{GPU}/max_freq") == "408000000"
    assert read(root, f"{CPU0}/scaling_max_freq") == "1113600"
    assert [read(root, f"sys/devices/system/cpu/cpu{c}/online") for c in (3, 4, 11)] == ["1", "0", "0"]
    with twin.driven():
        step = twin.run_step(BUSY)
    assert step.gpu_hz == 408 * MHZ and step.emc_hz <= 2133 * MHZ and step.cpu_hz <= 1113600000
    assert tool(root, "usr/sbin/nvpmodel", "-q").stdout.splitlines()[:2] == ["NV Power Mode: MODE_15W", "1"]
    bad = tool(root, "usr/sbin/nvpmodel", "-m", "9")
    assert bad.returncode != 0 and "9" in bad.stderr
    assert tool(root, "usr/sbin/nvpmodel", "-m", "0").returncode == 0
    assert read(root, f"{GPU}/max_freq") == "1300500000"
    assert read(root, "sys/devices/system/cpu/cpu11/online") == "1"


def test_fake_jetson_clocks_pins_stores_and_restores(twin, tmp_path):
    root = twin.root
    store = tmp_path / "l4t_dfs.conf"
    assert tool(root, "usr/bin/jetson_clocks", "--store", str(store)).returncode == 0
    assert tool(root, "usr/bin/jetson_clocks").returncode == 0
    twin.sync()
    assert read(root, f"{GPU}/cur_freq") == "1300500000"
    assert read(root, f"{CPU0}/scaling_cur_freq") == "2201600"
    assert read(root, f"{EMC}/rate") == "3199000000" and read(root, f"{EMC}/mrq_rate_locked") == "1"
    shown = tool(root, "usr/bin/jetson_clocks", "--show").stdout
    assert "GPU MinFreq=1300500000 MaxFreq=1300500000 CurrentFreq=1300500000" in shown
    assert tool(root, "usr/bin/jetson_clocks", "--restore", str(store)).returncode == 0
    twin.sync()
    assert read(root, f"{GPU}/min_freq") == "306000000"
    assert read(root, f"{GPU}/cur_freq") == "306000000"  # idle under podgov again
    assert read(root, f"{EMC}/mrq_rate_locked") == "0"
    assert read(root, f"{EMC}/rate") == "2133000000"


# --------------------------------------------------------------------------- time, energy, heat


def test_energy_is_exact_over_steps_and_idle(twin):
    with twin.driven():
        steps = [twin.run_step(BUSY) for _ in range(3)]
        twin.advance_idle(2.5)
    idle = idle_power_mw(twin.clocks(), twin.profile)
    total = twin.energy_j()
    for rail in twin.profile.rail_names:
        expected = sum(s.energy_j[rail] for s in steps) + idle[rail] * 2.5 / 1000.0
        assert total[rail] == pytest.approx(expected, rel=1e-12)
        assert steps[0].energy_j[rail] == pytest.approx(steps[0].power_mw[rail] * steps[0].time_s / 1000, rel=1e-12)
    assert twin.now() == pytest.approx(sum(s.time_s for s in steps) + 2.5, rel=1e-12)
    assert str(steps[0].source) == "twin"


def test_run_step_leaves_rails_at_the_step_power(twin):
    with twin.driven():
        step = twin.run_step(BUSY)
    assert twin.rail_powers_mw() == pytest.approx(dict(step.power_mw))
    assert sum(step.power_mw.values()) > 2 * sum(SPEC_IDLE_MW.values())


def test_realtime_advances_with_wall_time_unless_driven(twin):
    twin.start(tick_s=0.01, realtime=True)
    time.sleep(0.3)
    t = twin.now()
    assert 0.1 < t < 5.0
    idle_total = sum(idle_power_mw(twin.clocks(), twin.profile).values())
    assert sum(twin.energy_j().values()) == pytest.approx(idle_total * twin.now() / 1000, rel=0.01)
    with twin.driven():
        before = twin.now()
        time.sleep(0.15)
        assert twin.now() == before
        twin.run_step(BUSY)
        assert twin.now() > before + 0.5
    twin.stop()


def test_sync_thread_and_steps_run_concurrently(twin):
    with twin.driven():
        one = twin.run_step(BUSY)
    twin.start(tick_s=0.002, realtime=False)
    errors = []

    def steps():
        try:
            with twin.driven():
                for _ in range(30):
                    twin.run_step(BUSY)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    workers = [threading.Thread(target=steps) for _ in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    twin.stop()
    assert not errors
    assert twin.now() == pytest.approx(61 * one.time_s, rel=1e-9)
    assert sum(twin.energy_j().values()) == pytest.approx(61 * one.total_energy_j, rel=1e-9)


def test_thermal_model_heats_under_load_and_cools_at_idle():
    with VirtualOrin(thermal=True) as twin, twin.driven():
        start = twin.temperatures_c()["gpu-thermal"]
        for _ in range(200):  # ~150 s of BERT-base-like steps
            twin.run_step(BUSY)
        hot = twin.temperatures_c()["gpu-thermal"]
        assert hot > start + 15
        assert int(read(twin.root, "sys/class/thermal/thermal_zone1/temp")) == pytest.approx(hot * 1000, abs=250)
        twin.advance_idle(600.0)
        cooled = twin.temperatures_c()["gpu-thermal"]
        assert cooled < start + 1.0


def test_without_thermal_model_temperatures_stay():
    with VirtualOrin() as twin, twin.driven():
        before = twin.temperatures_c()
        for _ in range(50):
            twin.run_step(BUSY)
        assert twin.temperatures_c() == before


def test_hot_twin_throttles_the_gpu():
    p = load_profile("agx-orin-64gb")
    hot = dataclasses.replace(p, thermal=dataclasses.replace(p.thermal, throttle_c=60.0, throttle_gpu_hz=612 * MHZ))
    with VirtualOrin(hot, thermal=True) as twin, twin.driven():
        first = twin.run_step(BUSY)
        assert first.gpu_hz == 1300500000
        steps = [twin.run_step(BUSY) for _ in range(150)]
        assert max(twin.temperatures_c().values()) > 55
        assert any(s.gpu_hz == 612 * MHZ for s in steps)


# --------------------------------------------------------------------------- roots


def test_temporary_root_is_removed_on_close():
    twin = VirtualOrin()
    root = twin.root
    assert root.is_dir()
    twin.close()
    assert not root.exists()


def test_refuses_a_folder_that_is_not_a_twin(tmp_path):
    (tmp_path / "etc").mkdir()
    with pytest.raises(ConfigError):
        VirtualOrin(root=tmp_path)


def test_reopened_persistent_root_keeps_pinned_clocks(tmp_path):
    root = tmp_path / "twin"
    with VirtualOrin(root=root) as first:
        dev = first.device()
        dev.pin(ClockDomain.GPU, 816 * MHZ)
        dev.pin(ClockDomain.EMC, 2133 * MHZ)
    assert root.is_dir()  # a given root outlives the twin
    with VirtualOrin(root=root) as second:
        assert read(root, f"{GPU}/min_freq") == read(root, f"{GPU}/max_freq") == "816000000"
        assert read(root, f"{GPU}/cur_freq") == "816000000"
        assert read(root, f"{EMC}/mrq_rate_locked") == "1"
        with second.driven():
            step = second.run_step(BUSY)
        assert (step.gpu_hz, step.emc_hz) == (816 * MHZ, 2133 * MHZ)
        dev = second.device()
        dev.unpin(ClockDomain.GPU)
        dev.unpin(ClockDomain.EMC)
        time.sleep(0.1)
        assert dev.clock(ClockDomain.GPU).governor == "nvhost_podgov"


# --------------------------------------------------------------------------- through the Jetson backend


def test_jetson_backend_reads_the_twin(twin):
    dev = twin.device()
    ident = dev.identity()
    assert ident.is_twin and ident.profile == "agx-orin-64gb"
    assert str(ident.source) == "twin"
    assert dev.clock_table(ClockDomain.GPU) == twin.profile.gpu.table_hz
    assert dev.clock_table(ClockDomain.CPU) == twin.profile.cpu.table_hz
    assert dev.clock_table(ClockDomain.EMC) == twin.profile.emc.table_hz
    rails = {r.name: r.power_mw for r in dev.rails()}
    assert set(rails) == set(SPEC_IDLE_MW)
    for rail, mw in SPEC_IDLE_MW.items():
        assert rails[rail] == pytest.approx(mw, rel=0.03)
    assert [m.name for m in dev.power_modes()] == ["MAXN", "MODE_15W", "MODE_30W", "MODE_50W"]
    assert dev.power_mode().id == 0
    assert {t.zone for t in dev.temperatures()} >= {"cpu-thermal", "gpu-thermal", "tj-thermal"}


def test_jetson_backend_pins_and_switches_modes_on_the_twin(twin):
    dev = twin.device()
    before = dev.read_settings()
    assert dev.pin(ClockDomain.GPU, 612 * MHZ).cur_hz == 612 * MHZ
    assert dev.pin(ClockDomain.CPU, 1497600000).cur_hz == 1497600000
    with twin.driven():
        step = twin.run_step(BUSY)
    assert (step.gpu_hz, step.cpu_hz) == (612 * MHZ, 1497600000)
    dev.set_power_mode(3)
    assert dev.power_mode().name == "MODE_50W"
    dev.apply_settings(before)
    time.sleep(0.1)
    assert dev.power_mode().id == 0
    with twin.driven():
        step = twin.run_step(BUSY)
    assert step.gpu_hz == 1300500000  # MAXN Mode 0 with dynamic governors again


@pytest.mark.parametrize("layout", ["r35", "r32"])
def test_older_layouts_render_and_read(layout):
    with VirtualOrin(layout=layout) as twin:
        dev = twin.device()
        assert dev.clock_table(ClockDomain.GPU) == twin.profile.gpu.table_hz
        rails = {r.name: r.power_mw for r in dev.rails()}
        assert rails["VIN_SYS_5V0"] == pytest.approx(4032, rel=0.03)
        with twin.driven():
            twin.run_step(BUSY)
        assert math.isclose(sum(r.power_mw for r in dev.rails()), sum(twin.rail_powers_mw().values()), rel_tol=0.05)
