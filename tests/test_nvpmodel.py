"""nvpmodel: conf syntax both ways, `-q` parsing, and every failure of the command."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.device.base import PowerMode
from engine.device.jetson.l4t_tools import nvpmodel_query as query, nvpmodel_switch as switch
from engine.device.nvpmodel import format_conf, parse_conf, parse_query
from engine.device.treegen import ORIN_64GB_MODES, TreeLayout
from engine.core.errors import DeviceError

# Excerpt in the layout L4T ships (Nano conf: a 4-core cluster, inline comments, odd spacing).
NANO_CONF = """
< PARAM TYPE=FILE NAME=CPU_ONLINE >
CORE_0 /sys/devices/system/cpu/cpu0/online
CORE_1 /sys/devices/system/cpu/cpu1/online
CORE_2 /sys/devices/system/cpu/cpu2/online
CORE_3 /sys/devices/system/cpu/cpu3/online

< PARAM TYPE=CLOCK NAME=CPU_A57 >
FREQ_TABLE /sys/devices/system/cpu/cpu0/cpufreq/scaling_available_frequencies
MAX_FREQ /sys/devices/system/cpu/cpu0/cpufreq/scaling_max_freq

< PARAM TYPE=CLOCK NAME=GPU >
MAX_FREQ /sys/devices/gpu.0/devfreq/57000000.gpu/max_freq

# MAXN is the NONE power model to release all constraints
< POWER_MODEL ID=0 NAME=MAXN >
CPU_ONLINE CORE_0 1
CPU_ONLINE CORE_1 1
CPU_ONLINE CORE_2 1
CPU_ONLINE CORE_3 1
CPU_A57 MIN_FREQ  0
CPU_A57 MAX_FREQ -1\t# 1479000[Hz]
GPU_POWER_CONTROL_ENABLE GPU_PWR_CNTL_EN on
GPU MIN_FREQ  0
GPU MAX_FREQ -1
EMC MAX_FREQ 0

< POWER_MODEL ID=1 NAME=5W >
CPU_ONLINE CORE_0 1
CPU_ONLINE CORE_1 1
CPU_ONLINE CORE_2 0
CPU_ONLINE CORE_3 0
CPU_A57 MAX_FREQ 918000
GPU MAX_FREQ 640000000
EMC MAX_FREQ 1600000000

< PM_CONFIG DEFAULT=1 >
"""


def test_parse_an_l4t_style_conf() -> None:
    modes, default = parse_conf(NANO_CONF)
    assert default == 1
    assert modes[0] == PowerMode(0, "MAXN", online_cpus=4)
    assert modes[1] == PowerMode(1, "5W", online_cpus=2, cpu_max_hz=918000000, gpu_max_hz=640000000, emc_max_hz=1600000000)


def test_format_then_parse_round_trips() -> None:
    text = format_conf(ORIN_64GB_MODES, 2)
    assert "< PARAM TYPE=CLOCK NAME=GPU >" in text and "< PM_CONFIG DEFAULT=2 >" in text
    assert "CPU_A78_1 MAX_FREQ 1113600" in text and "CPU_ONLINE CORE_4 0" in text  # kHz, 4 cores
    assert parse_conf(text) == (ORIN_64GB_MODES, 2)
    r35 = format_conf(ORIN_64GB_MODES, 0, gpu_devfreq="sys/devices/17000000.ga10b/devfreq/17000000.ga10b")
    assert "MAX_FREQ /sys/devices/17000000.ga10b/devfreq/17000000.ga10b/max_freq" in r35


def test_a_cluster_without_cap_means_no_cpu_cap() -> None:
    text = format_conf([PowerMode(5, "MIXED", cpu_max_hz=1497600000)], 5)
    text = text.replace("CPU_A78_2 MAX_FREQ 1497600", "CPU_A78_2 MAX_FREQ -1")
    (mode,), _ = parse_conf(text)
    assert mode.cpu_max_hz is None


def test_bad_confs_are_refused() -> None:
    with pytest.raises(DeviceError, match="no POWER_MODEL"):
        parse_conf("< PARAM TYPE=FILE NAME=CPU_ONLINE >\n")
    with pytest.raises(DeviceError, match="line 1"):
        parse_conf("< POWER_MODEL ID=x NAME=BAD >\n")
    with pytest.raises(DeviceError, match="default mode 9"):
        format_conf(ORIN_64GB_MODES, 9)


def test_parse_query_output() -> None:
    assert parse_query("NV Fan Mode:quiet\nNV Power Mode: MAXN\n0\n") == (0, "MAXN")
    assert parse_query("NV Power Mode: MODE_30W\n2\n") == (2, "MODE_30W")
    with pytest.raises(DeviceError, match="could not read the power mode"):
        parse_query("NVPM ERROR: failed\n")


def test_query_and_switch_in_process_on_a_test_tree(r36_tree: tuple[Path, TreeLayout], fake_tools) -> None:
    root, lay = r36_tree
    fake_tools(root)
    assert query(root) == (0, "MAXN")
    switch(root, 3)
    assert (root / lay.nvpmodel_status).read_text().startswith("pmode:0003")
    assert query(root) == (3, "MODE_50W")
    with pytest.raises(DeviceError) as err:
        switch(root, 7)  # the tool exits non-zero
    assert "exit 1" in str(err.value) and "NVPM ERROR" in str(err.value) and err.value.remedy


def test_a_handed_tree_never_runs_its_own_tools(r36_tree: tuple[Path, TreeLayout], tmp_path: Path) -> None:
    from engine.device.jetson import l4t_tools

    root, lay = r36_tree
    evil = root / "usr/sbin/nvpmodel"  # case 6: --sysfs-root DIR must not run DIR/usr/sbin/nvpmodel
    evil.parent.mkdir(parents=True, exist_ok=True)
    evil.write_text(f"#!/bin/sh\ntouch {tmp_path}/ran\necho 'NV Power Mode: MAXN'\necho 0\n")
    evil.chmod(0o755)
    assert l4t_tools.route(root) == l4t_tools.NONE and not l4t_tools.available(root, "nvpmodel")
    with pytest.raises(DeviceError, match="never from a tree it was handed"):
        query(root)
    with pytest.raises(DeviceError, match="never from a tree it was handed"):
        switch(root, 1)
    assert not (tmp_path / "ran").exists()
    # a marker that others may write does not make the tree trusted
    marker = root / ".slm-dvfs-fake-l4t"
    marker.write_text("x\n")
    marker.chmod(0o666)
    assert l4t_tools.route(root) == l4t_tools.NONE
    marker.chmod(0o644)
    assert l4t_tools.route(root) == l4t_tools.IN_PROCESS
    assert l4t_tools.route(root / ".." / root.name) == l4t_tools.IN_PROCESS
    assert l4t_tools.route("/") == l4t_tools.SYSTEM


def test_refusal_by_a_non_root_tool(tmp_path: Path) -> None:
    from engine.device.nvpmodel import run_tool

    script = tmp_path / "nvpmodel"  # run_tool itself only ever gets the fixed system paths
    script.write_text("#!/bin/sh\necho 'NVPM ERROR: This program must be run as root' >&2\nexit 1\n")
    script.chmod(0o755)
    with pytest.raises(DeviceError) as err:
        run_tool([str(script), "-m", "0"], 10.0)
    assert "refused" in str(err.value) and "sudo" in err.value.remedy
