"""The fake tree follows the spec's paths, units and quirks (layouts r36, r35, r32)."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from engine.device.nvpmodel import parse_conf
from engine.device.treegen import (
    ORIN_64GB_CPU_KHZ,
    ORIN_64GB_GPU_HZ,
    TreeLayout,
    default_orin_spec,
    render_tree,
)
from engine.core.errors import ConfigError


def _read(root: Path, rel: str) -> str:
    return (root / rel).read_text()


def test_spec_tables_match_the_orin_64gb_spec() -> None:
    assert len(ORIN_64GB_GPU_HZ) == 11 and ORIN_64GB_GPU_HZ[-1] == 1300500000
    assert len(ORIN_64GB_CPU_KHZ) == 29
    assert ORIN_64GB_CPU_KHZ[0] == 115200 and ORIN_64GB_CPU_KHZ[-2:] == (2188800, 2201600)


def test_r36_paths_and_links(r36_tree: tuple[Path, TreeLayout]) -> None:
    root, lay = r36_tree
    assert lay.gpu_devfreq == "sys/devices/platform/bus@0/17000000.gpu/devfreq/17000000.gpu"
    link = root / "sys/class/devfreq/17000000.gpu"
    assert link.is_symlink() and link.resolve() == (root / lay.gpu_devfreq).resolve()
    assert _read(root, "sys/class/devfreq/17000000.gpu/device/of_node/name").rstrip("\0") == "gpu"
    assert _read(root, "sys/class/devfreq/15340000.vic/device/of_node/name").rstrip("\0") == "vic"
    freqs = [int(x) for x in _read(root, f"{lay.gpu_devfreq}/available_frequencies").split()]
    assert tuple(freqs) == ORIN_64GB_GPU_HZ
    assert _read(root, f"{lay.gpu_devfreq}/governor").strip() == "nvhost_podgov"
    assert _read(root, f"{lay.gpu_device}/load").strip() == "0"
    # hwmon index is the spec's (3 for 0x40, next for 0x41), reached through the driver folder
    v, c = lay.rails["VDD_GPU_SOC"]
    assert v == "sys/bus/i2c/drivers/ina3221/1-0040/hwmon/hwmon3/in1_input"
    assert _read(root, v) == "4984\n" and _read(root, c) == "480\n"
    hw41 = root / "sys/bus/i2c/drivers/ina3221/1-0041/hwmon/hwmon4"
    assert not (hw41 / "in1_label").exists() and not (hw41 / "in1_input").exists()
    assert (hw41 / "in2_label").read_text().strip() == "VDDQ_VDD2_1V8AO"
    hw40 = root / "sys/bus/i2c/drivers/ina3221/1-0040/hwmon/hwmon3"
    assert (hw40 / "in7_label").read_text().strip() == "sum of shunt voltages"
    for name in ("in4_input", "curr4_input", "shunt1_resistor", "samples", "update_interval"):
        assert (hw40 / name).is_file(), name
    assert _read(root, "etc/nv_tegra_release").startswith("# R36 (release), REVISION: 3.0, GCID:")
    assert _read(root, "proc/device-tree/model") == "NVIDIA Jetson AGX Orin Developer Kit\0"
    assert "nvidia,p3701-0000\0" in _read(root, "proc/device-tree/compatible")


def test_r35_and_r32_layouts(tmp_path: Path) -> None:
    root = tmp_path / "r35"
    lay = render_tree(root, default_orin_spec("r35"))
    assert lay.gpu_devfreq == "sys/devices/17000000.ga10b/devfreq/17000000.ga10b"
    assert _read(root, "sys/class/devfreq/17000000.ga10b/device/of_node/name").rstrip("\0") == "ga10b"
    assert _read(root, "sys/bus/i2c/drivers/ina3221/1-0041/hwmon/hwmon4/in1_label").strip() == "NC"

    root = tmp_path / "r32"
    lay = render_tree(root, default_orin_spec("r32"))
    iio = root / "sys/bus/i2c/drivers/ina3221x/1-0040/iio:device0"
    assert (iio / "rail_name_0").read_text().strip() == "VDD_GPU_SOC"
    assert int((iio / "in_power0_input").read_text()) == 4984 * 480 // 1000
    assert not (root / "sys/bus/i2c/drivers/ina3221").exists()
    assert set(lay.rail_power) == set(lay.rails)


def test_cpufreq_policies_are_shared_by_their_cpus(r36_tree: tuple[Path, TreeLayout]) -> None:
    root, lay = r36_tree
    assert lay.cpu_policy_dirs == tuple(f"sys/devices/system/cpu/cpu{c}/cpufreq" for c in (0, 4, 8))
    assert len(lay.cpu_dirs) == 12
    pol = root / "sys/devices/system/cpu/cpu5/cpufreq"
    assert pol.resolve() == (root / "sys/devices/system/cpu/cpufreq/policy4").resolve()
    assert (pol / "related_cpus").read_text().split() == ["4", "5", "6", "7"]
    avail = tuple(int(x) for x in (pol / "scaling_available_frequencies").read_text().split())
    assert avail == ORIN_64GB_CPU_KHZ
    assert (pol / "scaling_governor").read_text().strip() == "schedutil"


def test_emc_thermal_and_nvpmodel(r36_tree: tuple[Path, TreeLayout]) -> None:
    root, lay = r36_tree
    assert lay.emc == "sys/kernel/debug/bpmp/debug/clk/emc"
    assert _read(root, f"{lay.emc}/mrq_rate_locked") == "0\n"
    assert _read(root, lay.emc_possible_rates).split() == ["204000", "665600", "2133000", "3199000"]
    assert _read(root, f"{lay.thermal_zones['gpu-thermal']}/temp") == "41000\n"
    assert (root / "sys/class/thermal/thermal_zone1/type").read_text().strip() == "gpu-thermal"
    assert (root / "etc/nvpmodel.conf").is_symlink()
    modes, default = parse_conf(_read(root, "etc/nvpmodel.conf"))
    assert default == 2 and [m.name for m in modes] == ["MAXN", "MODE_15W", "MODE_30W", "MODE_50W"]
    assert _read(root, lay.nvpmodel_status).strip() == "pmode:0000 fmode:quiet"
    assert _read(root, lay.actmon_mc_all).strip() == "0"


def test_an_active_mode_caps_the_tree(tmp_path: Path) -> None:
    spec = dataclasses.replace(default_orin_spec("r36"), nvpmodel_id=1)  # MODE_15W
    root = tmp_path / "t"
    lay = render_tree(root, spec)
    assert _read(root, f"{lay.gpu_devfreq}/max_freq") == "408000000\n"
    assert _read(root, f"{lay.cpu_policy_dirs[0]}/scaling_max_freq") == "1113600\n"
    assert _read(root, f"{lay.emc}/max_rate") == "2133000000\n"
    online = [_read(root, f"{d}/online").strip() for d in lay.cpu_dirs]
    assert online == ["1"] * 4 + ["0"] * 8
    assert _read(root, lay.nvpmodel_status).startswith("pmode:0001")


def test_hwmon_index_and_rerender(tmp_path: Path) -> None:
    spec = dataclasses.replace(default_orin_spec("r36"), hwmon_index=1)
    root = tmp_path / "t"
    render_tree(root, spec)
    lay = render_tree(root, spec)  # rendering twice must not fail on existing links
    assert "hwmon1" in lay.rails["VDD_GPU_SOC"][0]
    assert os.path.islink(root / "sys/class/hwmon/hwmon1")


def test_bad_specs_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="layout"):
        render_tree(tmp_path, dataclasses.replace(default_orin_spec(), layout="r99"))
    with pytest.raises(ConfigError, match="nvpmodel_id 7"):
        render_tree(tmp_path, dataclasses.replace(default_orin_spec(), nvpmodel_id=7))
