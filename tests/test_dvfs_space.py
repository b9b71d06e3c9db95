"""The DVFS setting space: settings as values, spaces built from the device's tables."""

from __future__ import annotations

import pytest

from engine.device.base import ClockDomain, PowerMode
from engine.device.twin.orin import VirtualOrin
from engine.device.setting import MAXN, MAXN_PINNED, DvfsSetting, check_clocks, check_setting
from engine.core.clocks import parse_mhz
from engine.dvfs.space import setting_space, thin_table
from engine.core.errors import ConfigError, UnsupportedFrequencyError

MHZ = 1_000_000
GPU_STEPS, CPU_STEPS, EMC_STEPS = 11, 29, 4  # the spec's 64GB tables


@pytest.fixture(scope="module")
def device():
    with VirtualOrin() as twin:
        yield twin.device()


def test_tables_are_the_spec_ones(device):
    assert len(device.clock_table(ClockDomain.GPU)) == GPU_STEPS
    assert len(device.clock_table(ClockDomain.CPU)) == CPU_STEPS
    assert len(device.clock_table(ClockDomain.EMC)) == EMC_STEPS


def test_gpu_space_is_every_gpu_step_plus_maxn(device):
    space = setting_space(device, "gpu")
    assert len(space) == GPU_STEPS + 1
    assert space[0] == MAXN
    pinned = space[1:]
    assert [s.gpu_hz for s in pinned] == list(device.clock_table(ClockDomain.GPU))
    assert all(s.cpu_hz is None and s.emc_hz is None and s.nvpmodel == 0 and not s.jetson_clocks for s in pinned)


def test_gpu_emc_space(device):
    space = setting_space(device, "gpu+emc")
    assert len(space) == GPU_STEPS * EMC_STEPS + 1
    assert len(set(space)) == len(space)
    assert {s.emc_hz for s in space[1:]} == set(device.clock_table(ClockDomain.EMC))
    assert all(s.cpu_hz is None for s in space)


@pytest.mark.parametrize("stride, cpu_points", [(1, 29), (4, 8), (7, 5), (29, 1), (100, 1)])
def test_full_space_with_cpu_stride(device, stride, cpu_points):
    space = setting_space(device, "full", cpu_stride=stride)
    assert len(space) == GPU_STEPS * cpu_points * EMC_STEPS + 1
    cpus = {s.cpu_hz for s in space[1:]}
    assert len(cpus) == cpu_points
    assert max(device.clock_table(ClockDomain.CPU)) in cpus  # the top step is always kept


def test_without_maxn(device):
    space = setting_space(device, "gpu", include_maxn=False)
    assert len(space) == GPU_STEPS and MAXN not in space


def test_modes_space(device):
    space = setting_space(device, "modes")
    assert [s.nvpmodel for s in space] == [0, 1, 2, 3]
    assert space[0] == MAXN and len(setting_space(device, "modes", include_maxn=False)) == 3


@pytest.mark.parametrize("bad", ["cpu", "", "gpu+cpu", "everything"])
def test_unknown_space_is_a_config_error(device, bad):
    with pytest.raises(ConfigError) as err:
        setting_space(device, bad)
    assert "gpu+emc" in err.value.remedy


@pytest.mark.parametrize("stride", [0, -1, 1.5, True])
def test_bad_cpu_stride(device, stride):
    with pytest.raises(ConfigError):
        setting_space(device, "full", cpu_stride=stride)


def test_thin_table_counts_down_from_the_top():
    assert thin_table((1, 2, 3, 4, 5, 6, 7), 3) == (1, 4, 7)
    assert thin_table((1, 2, 3, 4, 5, 6), 4) == (2, 6)


def test_label():
    assert DvfsSetting(gpu_hz=816 * MHZ, nvpmodel=0).label() == "GPU 816 · CPU gov · EMC gov · mode 0"
    s = DvfsSetting(gpu_hz=1_300_500_000, cpu_hz=2_201_600_000, emc_hz=3199 * MHZ)
    assert s.label() == "GPU 1300.5 · CPU 2201.6 · EMC 3199 · mode as is"
    assert MAXN.label() == "GPU gov · CPU gov · EMC gov · mode 0"
    assert MAXN_PINNED.label() == "jetson_clocks · mode 0"


def test_json_round_trip():
    for s in (MAXN, MAXN_PINNED, DvfsSetting(gpu_hz=612 * MHZ, emc_hz=2133 * MHZ, nvpmodel=0), DvfsSetting()):
        assert DvfsSetting.from_json(s.to_json()) == s
    with pytest.raises(ConfigError):
        DvfsSetting.from_json({"gpu_hz": 1, "fan": 3})
    with pytest.raises(ConfigError):
        DvfsSetting.from_json({"gpu_hz": "fast"})


def test_setting_fields_are_checked():
    with pytest.raises(ConfigError):
        DvfsSetting(gpu_hz=816.0)  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        DvfsSetting(nvpmodel=-1)
    assert DvfsSetting(gpu_hz=816 * MHZ).pinned == {ClockDomain.GPU: 816 * MHZ}


def test_check_setting(device):
    assert check_setting(device, DvfsSetting(gpu_hz=816 * MHZ, nvpmodel=0)).id == 0
    with pytest.raises(UnsupportedFrequencyError) as err:
        check_setting(device, DvfsSetting(gpu_hz=800 * MHZ, nvpmodel=0))
    assert err.value.nearest_hz == (714 * MHZ, 816 * MHZ)
    with pytest.raises(ConfigError) as err2:
        check_setting(device, DvfsSetting(gpu_hz=816 * MHZ, nvpmodel=1))  # MODE_15W caps the GPU at 408
    assert "408 MHz cap" in err2.value.what
    with pytest.raises(ConfigError) as err3:
        check_setting(device, DvfsSetting(nvpmodel=9))
    assert "MODE_15W" in err3.value.remedy


ORIN_GPU_HZ = (306 * MHZ, 612 * MHZ, 816 * MHZ, 1_300_500_000)


@pytest.mark.parametrize("text, hz", [
    ("816", 816 * MHZ), ("1300.5", 1_300_500_000), ("2201.6MHz", 2_201_600_000), (" 612 mhz ", 612 * MHZ),
    ("612.", 612 * MHZ), (".5", 500_000), ("1300.500001", 1_300_500_001),
])
def test_parse_mhz_as_typed(text, hz):
    assert parse_mhz(text) == hz


@pytest.mark.parametrize("text, hz", [
    ("1300.500001", 1_300_500_000),  # float noise or extra digits: that listed step
    ("1300.50", 1_300_500_000), ("816", 816 * MHZ),
    ("1300.4", 1_300_400_000),  # not the step at 0.1 MHz: kept, so the device names the nearest
    ("1300", 1_300_000_000), ("850", 850 * MHZ),
])
def test_parse_mhz_snaps_only_to_the_step_that_was_meant(text, hz):
    assert parse_mhz(text, ORIN_GPU_HZ) == hz


@pytest.mark.parametrize("text", ["", "fast", "8 16", "-5", "1e3", "0x10", "816 GHz"])
def test_parse_mhz_refuses_what_is_not_mhz(text):
    with pytest.raises(ConfigError, match="gpu clock .* is not a number of MHz") as err:
        parse_mhz(text, what="gpu clock")
    assert "816" in err.value.remedy


def test_check_clocks_without_a_device():
    mode = PowerMode(1, "MODE_15W", gpu_max_hz=408 * MHZ)
    tables = {ClockDomain.GPU: ORIN_GPU_HZ}
    check_clocks(DvfsSetting(gpu_hz=306 * MHZ), tables, mode)
    with pytest.raises(UnsupportedFrequencyError, match="nearest are 816 MHz, 1300.5 MHz"):
        check_clocks(DvfsSetting(gpu_hz=1_000 * MHZ), tables, None)
    with pytest.raises(ConfigError, match="GPU 612 MHz is above the 408 MHz cap of nvpmodel mode 1"):
        check_clocks(DvfsSetting(gpu_hz=612 * MHZ), tables, mode)
