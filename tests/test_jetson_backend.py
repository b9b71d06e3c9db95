"""The sysfs backend on fake trees of every L4T layout: identity, tables, clocks, sensors,
modes, pin ordering, refusals, permission errors and the settings snapshot."""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
from pathlib import Path

import pytest

import engine.device.sysfs as sysfs_mod
from engine.device.base import ClockDomain, Device, DeviceSettings
from engine.device.jetson import JetsonDevice
from engine.device.jetson.identity import jetpack_for, module_for
from engine.device.sysfs import SysfsTree
from engine.device.treegen import (
    ORIN_64GB_CPU_KHZ,
    ORIN_64GB_EMC_HZ,
    ORIN_64GB_GPU_HZ,
    TreeLayout,
    default_orin_spec,
    render_tree,
)
from engine.device.twin.orin import VirtualOrin
from engine.core.errors import (
    ClockNotAppliedError,
    DeviceError,
    NodeNotFoundError,
    PermissionDeniedError,
    UnsupportedFrequencyError,
)
from engine.core.provenance import Source

GPU, CPU, EMC = ClockDomain.GPU, ClockDomain.CPU, ClockDomain.EMC
PAIRS = {"min_freq": "max_freq", "scaling_min_freq": "scaling_max_freq"}
CUR = {"min_freq": "cur_freq", "max_freq": "cur_freq", "scaling_min_freq": "scaling_cur_freq",
       "scaling_max_freq": "scaling_cur_freq"}  # fmt: skip


class FakeKernel:
    """Wraps SysfsTree.write: records every write, checks min <= max after each one, and
    moves the current-frequency file into [min, max] as the kernel would."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *, follow: bool = True) -> None:
        self.writes: list[tuple[str, str]] = []  # (root-relative path, value)
        self.violations: list[str] = []
        real_write = SysfsTree.write
        kernel = self

        def write(tree: SysfsTree, rel: str, value: int | str) -> None:
            real_write(tree, rel, value)
            path = tree.path(rel)
            kernel.writes.append((tree.rel(path), str(value)))
            name, folder = path.name, path.parent
            lo_name = name if name in PAIRS else next((k for k, v in PAIRS.items() if v == name), None)
            if lo_name is None:
                return
            lo = int((folder / lo_name).read_text())
            hi = int((folder / PAIRS[lo_name]).read_text())
            if lo > hi:
                kernel.violations.append(f"{folder.name}: min {lo} > max {hi} after writing {name}")
            if follow and lo <= hi:
                cur_file = folder / CUR[name]
                cur = int(cur_file.read_text())
                cur_file.write_text(f"{min(max(cur, lo), hi)}\n")

        monkeypatch.setattr(SysfsTree, "write", write)

    def names(self, under: str = "") -> list[tuple[str, str]]:
        return [(p.rsplit("/", 1)[-1], v) for p, v in self.writes if under in p]


def _device(root: Path, **kw: object) -> JetsonDevice:
    kw.setdefault("settle_s", 0.05)
    return JetsonDevice(root, **kw)  # type: ignore[arg-type]


# ---------------------------------------------------------------- identity, tables, sensors


def test_identity_per_layout(orin_tree: tuple[Path, TreeLayout]) -> None:
    root, _ = orin_tree
    dev = _device(root)
    assert isinstance(dev, Device)
    ident = dev.identity()
    assert ident.board == "NVIDIA Jetson AGX Orin Developer Kit"
    assert ident.module == "P3701-0000 (AGX Orin 64GB)"
    expected = {"39": ("39.2.0", "7.2"), "36": ("36.3.0", "6.0"), "35": ("35.4.1", "5.1.2"), "32": ("32.7.4", "4.6.4")}
    assert (ident.l4t, ident.jetpack) == expected[ident.l4t.split(".")[0]]
    assert not ident.is_twin and ident.source is Source.MEASURED and ident.profile is None


def test_twin_marker_labels_the_device(r36_tree: tuple[Path, TreeLayout]) -> None:
    root, _ = r36_tree
    (root / ".slm-dvfs-twin").write_text('profile = "agx-orin-64gb"\n')
    ident = _device(root).identity()
    assert ident.is_twin and ident.profile == "agx-orin-64gb" and ident.source is Source.TWIN
    (root / ".slm-dvfs-twin").write_text("profile = \n")
    with pytest.raises(DeviceError, match="not valid TOML"):
        _device(root).identity()


def test_module_and_jetpack_maps() -> None:
    assert module_for("nvidia,p3737-0000+p3701-0004\0nvidia,p3701-0004\0nvidia,tegra234\0").endswith("32GB)")
    assert "64GB" in module_for("nvidia,p3701-0005\0nvidia,tegra234\0")
    assert jetpack_for("36.4.0") == "6.1" and jetpack_for("36.4.7") == "6.2.1" and jetpack_for("36.4.9") == "6.1/6.2"
    assert jetpack_for("35.3.1") == "5.1.1" and jetpack_for("35.9.9") == "5.1.x"
    assert jetpack_for(None) is None and jetpack_for("99.1") is None


def test_tables_per_layout(orin_tree: tuple[Path, TreeLayout]) -> None:
    dev = _device(orin_tree[0])
    assert dev.clock_table(GPU) == ORIN_64GB_GPU_HZ
    assert dev.clock_table(CPU) == tuple(k * 1000 for k in ORIN_64GB_CPU_KHZ)
    assert dev.clock_table(EMC) == ORIN_64GB_EMC_HZ
    gpu = dev.clock(GPU)
    assert (gpu.min_hz, gpu.max_hz, gpu.governor) == (306000000, 1300500000, "nvhost_podgov")
    assert "userspace" in gpu.available_governors and not gpu.pinned
    cpu = dev.clock(CPU)
    assert (cpu.max_hz, cpu.governor) == (2201600000, "schedutil")
    emc = dev.clock(EMC)
    assert emc.cur_hz == 3199000000 and not emc.locked


def test_rails_per_layout(orin_tree: tuple[Path, TreeLayout]) -> None:
    root, lay = orin_tree
    dev = _device(root)
    rails = {r.name: r for r in dev.rails()}
    # disabled 0x41 channels (absent on r36, "NC" on r35) and in7 (sum of shunts) are skipped
    assert set(rails) == {"VDD_GPU_SOC", "VDD_CPU_CV", "VIN_SYS_5V0", "VDDQ_VDD2_1V8AO"}
    assert rails["VIN_SYS_5V0"].power_mw == pytest.approx(5040 * 800 / 1000)
    # the backend reads live values, not the initial ones
    volt, curr = lay.rails["VDD_GPU_SOC"]
    (root / volt).write_text("5000\n")
    (root / curr).write_text("3000\n")
    assert dev.rail("VDD_GPU_SOC").power_mw == pytest.approx(15000.0)
    assert sum(r.power_mw for r in dev.rails()) == pytest.approx(15000 + 4984 * 80 / 1000 + 4032 + 4984 * 60 / 1000)
    expected = 0.14 if lay.hwmon_dirs[0].startswith("sys/bus/i2c/drivers/ina3221/") else 0.05
    assert dev.rail_update_interval_s() == pytest.approx(expected)


def test_hwmon_index_is_globbed(tmp_path: Path) -> None:
    root = tmp_path / "t"
    render_tree(root, dataclasses.replace(default_orin_spec("r36"), hwmon_index=1, update_interval_ms=430))
    dev = _device(root)
    assert len(dev.rails()) == 4
    assert dev.rail_update_interval_s() == pytest.approx(0.43)


def test_missing_rail_and_missing_gpu_are_clear(r36_tree: tuple[Path, TreeLayout]) -> None:
    root, lay = r36_tree
    dev = _device(root)
    with pytest.raises(NodeNotFoundError) as err:
        dev.rail("VDD_IN")
    assert "VDD_IN" in str(err.value) and "VDD_GPU_SOC" in str(err.value) and err.value.remedy
    (root / "sys/class/devfreq/17000000.gpu").unlink()
    dev = _device(root)
    with pytest.raises(NodeNotFoundError) as err:
        dev.pin(GPU, 612000000)
    msg = str(err.value)
    assert "GPU devfreq" in msg and "15340000.vic (vic)" in msg and "What to do" in msg
    assert len(dev.rails()) == 4  # the rest still works


def test_temperatures_and_load(orin_tree: tuple[Path, TreeLayout]) -> None:
    root, lay = orin_tree
    dev = _device(root)
    temps = {t.zone: t.celsius for t in dev.temperatures()}
    assert len(temps) == 9 and temps["gpu-thermal"] == pytest.approx(41.0)
    (root / lay.thermal_zones["tj-thermal"] / "temp").write_text("67250\n")
    assert {t.zone: t.celsius for t in dev.temperatures()}["tj-thermal"] == pytest.approx(67.25)
    (root / lay.gpu_device / "load").write_text("537\n")
    assert dev.gpu_load() == pytest.approx(0.537)


def test_modes_from_conf_and_status(r36_tree: tuple[Path, TreeLayout]) -> None:
    root, lay = r36_tree
    dev = _device(root)  # no nvpmodel executable: the status file says which mode
    modes = dev.power_modes()
    assert [m.name for m in modes] == ["MAXN", "MODE_15W", "MODE_30W", "MODE_50W"]
    assert modes[1].gpu_max_hz == 408000000 and modes[1].online_cpus == 4
    assert dev.power_mode().name == "MAXN"
    (root / lay.nvpmodel_status).write_text("pmode:0003 fmode:quiet\n")
    assert dev.power_mode().id == 3
    os.unlink(root / "etc/nvpmodel.conf")
    with pytest.raises(NodeNotFoundError, match="nvpmodel conf"):
        _device(root).power_modes()


def test_cpu_policy_fallback_without_related_cpus(r36_tree: tuple[Path, TreeLayout]) -> None:
    root, _ = r36_tree
    for p in (0, 4, 8):
        for name in ("related_cpus", "affected_cpus"):
            (root / f"sys/devices/system/cpu/cpufreq/policy{p}/{name}").unlink()
    policies = _device(root).nodes.cpu_policies
    assert [p.cpu for p in policies] == [0, 4, 8] and policies[1].cpus == (4, 5, 6, 7)


# ---------------------------------------------------------------- pinning


def test_pin_order_going_up_and_down(r36_tree: tuple[Path, TreeLayout], monkeypatch: pytest.MonkeyPatch) -> None:
    root, lay = r36_tree
    kernel = FakeKernel(monkeypatch)
    dev = _device(root)
    state = dev.pin(GPU, 612000000)
    assert (state.min_hz, state.max_hz, state.cur_hz, state.governor) == (612000000, 612000000, 612000000, "userspace")
    assert state.pinned
    kernel.writes.clear()
    dev.pin(GPU, 918000000)  # going up: raise max first
    assert kernel.names("17000000.gpu/") == [("max_freq", "918000000"), ("min_freq", "918000000")]
    kernel.writes.clear()
    dev.pin(GPU, 408000000)  # going down: lower min first
    assert kernel.names("17000000.gpu/") == [("min_freq", "408000000"), ("max_freq", "408000000")]
    # CPU (kHz in the files) on every policy, same ordering rule
    dev.pin(CPU, 729600000)
    kernel.writes.clear()
    dev.pin(CPU, 1497600000)
    assert kernel.names("cpu0/cpufreq") == [("scaling_max_freq", "1497600"), ("scaling_min_freq", "1497600")]
    assert {p.rsplit("/cpufreq", 1)[0].rsplit("/", 1)[1] for p, _ in kernel.writes} == {"cpu0", "cpu4", "cpu8"}
    kernel.writes.clear()
    dev.pin(CPU, 115200000)
    assert kernel.names("cpu8/cpufreq") == [("scaling_min_freq", "115200"), ("scaling_max_freq", "115200")]
    assert dev.clock(CPU).cur_hz == 115200000
    assert kernel.violations == []


def test_unlisted_clock_is_refused_with_the_nearest(r36_tree: tuple[Path, TreeLayout], monkeypatch: pytest.MonkeyPatch) -> None:
    kernel = FakeKernel(monkeypatch)
    dev = _device(r36_tree[0])
    with pytest.raises(UnsupportedFrequencyError) as err:
        dev.pin(GPU, 600000000)
    assert err.value.nearest_hz == (510000000, 612000000)
    assert "612 MHz" in str(err.value) and "510 MHz" in str(err.value)
    with pytest.raises(UnsupportedFrequencyError, match="2201.6 MHz"):
        dev.pin(CPU, 2300000000)
    assert kernel.writes == []  # nothing was touched


def test_gpu_without_userspace_keeps_its_governor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "t"
    render_tree(root, dataclasses.replace(default_orin_spec("r35"), gpu_governors=("nvhost_podgov", "performance")))
    FakeKernel(monkeypatch)
    state = _device(root).pin(GPU, 816000000)
    assert state.governor == "nvhost_podgov" and state.min_hz == state.max_hz == 816000000


def test_emc_lock_then_rate_and_unpin(r36_tree: tuple[Path, TreeLayout], monkeypatch: pytest.MonkeyPatch) -> None:
    root, lay = r36_tree
    kernel = FakeKernel(monkeypatch)
    dev = _device(root)
    state = dev.pin(EMC, 2133000000)
    assert kernel.names(lay.emc) == [("mrq_rate_locked", "1"), ("rate", "2133000000")]
    assert state.locked and state.pinned and state.cur_hz == 2133000000
    assert not dev.unpin(EMC).locked


def test_pin_not_followed_raises_with_what_was_read(r36_tree: tuple[Path, TreeLayout], monkeypatch: pytest.MonkeyPatch) -> None:
    FakeKernel(monkeypatch, follow=False)  # a kernel that ignores the request
    dev = _device(r36_tree[0], settle_s=0.05)
    with pytest.raises(ClockNotAppliedError) as err:
        dev.pin(GPU, 918000000)
    assert "918 MHz" in str(err.value) and "cur_freq = 306 MHz" in str(err.value)


def test_offline_cluster_is_not_clocked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "t"
    render_tree(root, dataclasses.replace(default_orin_spec("r36"), nvpmodel_id=1))  # 4 cores online
    kernel = FakeKernel(monkeypatch)
    dev = _device(root)
    dev.pin(CPU, 729600000)
    touched = {p.split("/cpufreq")[0].rsplit("/", 1)[1] for p, _ in kernel.writes}
    assert touched == {"cpu0"}


def test_permission_error_names_the_file(r36_tree: tuple[Path, TreeLayout], monkeypatch: pytest.MonkeyPatch) -> None:
    root, lay = r36_tree
    target = root / lay.gpu_devfreq / "max_freq"
    target.chmod(0o444)
    if os.access(target, os.W_OK):  # root ignores the mode bits: make the open for writing refuse instead
        real_open = sysfs_mod._open_write

        def refusing_open(path, *a, **kw):  # type: ignore[no-untyped-def]
            if Path(path).resolve() == target.resolve():
                raise PermissionError(13, "Permission denied", str(path))
            return real_open(path, *a, **kw)

        monkeypatch.setattr(sysfs_mod, "_open_write", refusing_open)
    with pytest.raises(PermissionDeniedError) as err:
        _device(root).pin(GPU, 1300500000)
    assert Path(err.value.path).resolve() == target.resolve()
    assert err.value.path.endswith("17000000.gpu/max_freq") and err.value.path in str(err.value)
    assert "sudo" in err.value.remedy


# ---------------------------------------------------------------- unpin, modes, snapshot


def test_unpin_restores_governor_and_mode_range(
    r36_tree: tuple[Path, TreeLayout], monkeypatch: pytest.MonkeyPatch, fake_tools
) -> None:
    root, lay = r36_tree
    fake_tools(root)
    kernel = FakeKernel(monkeypatch)
    dev = _device(root)
    dev.pin(GPU, 1224000000)
    dev.pin(CPU, 2201600000)
    (root / lay.nvpmodel_status).write_text("pmode:0002 fmode:quiet\n")  # MODE_30W: GPU 612, CPU 1728
    gpu = dev.unpin(GPU)
    assert (gpu.min_hz, gpu.max_hz, gpu.governor) == (306000000, 612000000, "nvhost_podgov")
    cpu = dev.unpin(CPU)
    assert (cpu.min_hz, cpu.max_hz, cpu.governor) == (115200000, 1728000000, "schedutil")
    assert kernel.violations == []


def test_power_mode_via_nvpmodel(r36_tree: tuple[Path, TreeLayout], fake_tools) -> None:
    root, lay = r36_tree
    fake_tools(root)
    dev = _device(root)
    assert dev.power_mode().name == "MAXN"
    dev.set_power_mode(2)
    mode = dev.power_mode()
    assert (mode.id, mode.name, mode.gpu_max_hz) == (2, "MODE_30W", 612000000)
    assert (root / "nvpmodel.calls").read_text().splitlines() == ["-q", "-m 2", "-q"]
    assert not (root / "usr/sbin/nvpmodel").exists()  # run in-process: nothing under the root is executed
    with pytest.raises(DeviceError, match=r"power mode 9 is not defined"):
        dev.set_power_mode(9)


def test_jetson_clocks_store_and_restore(r36_tree: tuple[Path, TreeLayout], fake_tools, tmp_path: Path) -> None:
    root, _ = r36_tree
    fake_tools(root)
    dev = _device(root)
    store = tmp_path / "state" / "clocks.conf"
    dev.jetson_clocks(store=store)
    dev.jetson_clocks_restore(store)
    calls = (root / "jetson_clocks.calls").read_text().splitlines()
    assert calls == [f"--store {store}", "", f"--restore {store}"]
    with pytest.raises(DeviceError, match="no jetson_clocks state file"):
        dev.jetson_clocks_restore(tmp_path / "missing")
    (root / ".slm-dvfs-fake-l4t").unlink()  # a handed tree that is no twin or test tree: no tool runs
    with pytest.raises(DeviceError, match="never from a tree it was handed"):
        dev.jetson_clocks()


def test_settings_round_trip(r36_tree: tuple[Path, TreeLayout], monkeypatch: pytest.MonkeyPatch, fake_tools) -> None:
    root, lay = r36_tree
    fake_tools(root)
    kernel = FakeKernel(monkeypatch)
    dev = _device(root)
    before = dev.read_settings()
    assert before.nvpmodel_id == 0 and before.online_cpus == tuple(range(12))
    assert before.domain(GPU).governor == "nvhost_podgov" and not before.domain(EMC).locked
    assert DeviceSettings.from_json(before.to_json()) == before

    dev.pin(GPU, 408000000)
    dev.pin(CPU, 1113600000)
    dev.pin(EMC, 665600000)
    for cpu in (10, 11):
        (root / lay.cpu_dirs[cpu] / "online").write_text("0\n")
    (root / lay.nvpmodel_status).write_text("pmode:0001 fmode:quiet\n")
    changed = dev.read_settings()
    assert changed != before and changed.domain(EMC).rate_hz == 665600000

    dev.apply_settings(before)
    assert dev.read_settings() == before
    assert kernel.violations == []
    # and back again: a locked EMC and pinned clocks are restored too
    dev.apply_settings(changed)
    assert dev.read_settings() == changed
    assert kernel.violations == []


def test_describe_reopens(r36_tree: tuple[Path, TreeLayout]) -> None:
    root, _ = r36_tree
    dev = JetsonDevice(root)
    d = dev.describe()
    assert d == {"kind": "jetson", "root": str(root.resolve())}  # no tool paths to execute
    again = JetsonDevice.from_description(d)
    assert again.describe() == d and again.clock_table(GPU) == ORIN_64GB_GPU_HZ
    with pytest.raises(DeviceError, match="cannot reopen"):
        JetsonDevice.from_description({**d, "kind": "twin"})


def test_missing_emc_says_root_is_needed(r36_tree: tuple[Path, TreeLayout]) -> None:
    root, lay = r36_tree
    shutil.rmtree(root / lay.emc)
    dev = _device(root)
    with pytest.raises(NodeNotFoundError) as err:
        dev.pin(EMC, 2133000000)
    assert "debugfs" in err.value.remedy
    assert {d.domain for d in dev.read_settings().domains} == {GPU, CPU}


def test_a_channel_answering_enodata_is_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    from engine.device.treegen import RailSpec

    spec = default_orin_spec("r36")
    spec = dataclasses.replace(spec, rails=spec.rails + (RailSpec("VDD_DISABLED", "1-0041", 1, 0, 0),))
    root = tmp_path / "t"
    render_tree(root, spec)
    real_read = sysfs_mod.read_fd

    def enodata_read(fd, path):  # type: ignore[no-untyped-def]
        if str(path).endswith("1-0041/hwmon/hwmon4/in1_input"):
            raise OSError(errno.ENODATA, "No data available", str(path))
        return real_read(fd, path)

    monkeypatch.setattr(sysfs_mod, "read_fd", enodata_read)
    names = [r.name for r in _device(root).rails()]
    assert names == ["VDD_GPU_SOC", "VDD_CPU_CV", "VIN_SYS_5V0", "VDDQ_VDD2_1V8AO"]


# ---------------------------------------------------------------- restoring across modes, best effort


def _policy_files(root: Path, cpu: int) -> tuple[str, str]:
    p = root / f"sys/devices/system/cpu/cpu{cpu}/cpufreq"
    return (p / "scaling_min_freq").read_text().strip(), (p / "scaling_max_freq").read_text().strip()


def _refuse_offline_policies(dev: JetsonDevice, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Make this device's tree answer like the kernel for a cluster whose CPUs are all offline:
    its cpufreq files refuse reads and writes (EBUSY). The twin's nvpmodel runs in another
    process, so it is not affected. Returns the refused paths."""
    tree, refused = dev.tree, []
    real_write, real_read = tree.write, tree.read_str

    def offline_policy(rel: str) -> bool:
        m = re.match(r"sys/devices/system/cpu/cpu(\d+)/cpufreq/", tree.rel(tree.path(rel)))
        if not m:
            return False
        first = int(m.group(1)) // 4 * 4
        online = [tree.path(f"sys/devices/system/cpu/cpu{c}/online") for c in range(first, first + 4)]
        return all(f.is_file() and f.read_text().strip() == "0" for f in online)

    def write(rel: str, value: int | str) -> None:
        if offline_policy(rel):
            refused.append(rel)
            raise DeviceError(f"cannot write {rel}: Device or resource busy", "bring the cluster online")
        real_write(rel, value)

    def read_str(rel: str) -> str:
        if offline_policy(rel):
            raise DeviceError(f"cannot read {rel}: Device or resource busy", "bring the cluster online")
        return real_read(rel)

    monkeypatch.setattr(tree, "write", write)
    monkeypatch.setattr(tree, "read_str", read_str)
    return refused


def test_restore_gives_a_cluster_its_range_before_the_mode_takes_it_offline(monkeypatch: pytest.MonkeyPatch) -> None:
    # Start in mode 2 (8 cores: cpu8-11 offline), run in mode 0 with the CPU pinned at the top, restore.
    with VirtualOrin() as twin:
        dev = twin.device()
        dev.set_power_mode(2)
        refused = _refuse_offline_policies(dev, monkeypatch)
        before = dev.read_settings()
        assert {d.policy for d in before.domains if d.domain is CPU} == {0, 4}  # cpu8's cluster is offline
        dev.set_power_mode(0)
        dev.pin(CPU, 2_201_600_000)
        assert _policy_files(twin.root, 8) == ("2201600", "2201600")
        dev.apply_settings(before)
        assert dev.power_mode().id == 2 and dev.read_settings() == before
        # written while still online, so it does not come back with a raised minimum
        assert _policy_files(twin.root, 8) == ("115200", "1728000")
        assert not any("cpu8" in r for r in refused)


def test_each_cpu_policy_gets_its_own_range_back() -> None:
    with VirtualOrin() as twin:
        dev = twin.device()
        (twin.root / "sys/devices/system/cpu/cpu4/cpufreq/scaling_max_freq").write_text("1497600\n")
        before = dev.read_settings()
        by_policy = {d.policy: d for d in before.domains if d.domain is CPU}
        assert by_policy[4].max_hz == 1_497_600_000 and by_policy[0].max_hz == 2_201_600_000
        assert DeviceSettings.from_json(before.to_json()) == before
        dev.pin(CPU, 729_600_000)
        dev.apply_settings(before)
        assert _policy_files(twin.root, 0) == ("115200", "2201600")
        assert _policy_files(twin.root, 4) == ("115200", "1497600")


def test_a_journal_without_policies_restores_every_cluster(
    r36_tree: tuple[Path, TreeLayout], monkeypatch: pytest.MonkeyPatch
) -> None:
    root, _ = r36_tree
    FakeKernel(monkeypatch)
    dev = _device(root)
    data = dev.read_settings().to_json()
    cpu = [d for d in data["domains"] if d["domain"] == "cpu"]
    data["domains"] = [d for d in data["domains"] if d["domain"] != "cpu"] + [
        {k: v for k, v in cpu[0].items() if k != "policy"}  # as an older slm-dvfs wrote it
    ]
    old = DeviceSettings.from_json(data)
    assert [d.policy for d in old.domains if d.domain is CPU] == [None]
    dev.pin(CPU, 1_497_600_000)
    dev.apply_settings(old)
    for cpu_n in (0, 4, 8):
        assert _policy_files(root, cpu_n) == ("115200", "2201600")


def test_unpin_reaches_a_cluster_a_mode_switch_took_offline() -> None:
    with VirtualOrin() as twin:
        dev = twin.device()
        dev.pin(CPU, 2_201_600_000)
        dev.set_power_mode(2)  # nvpmodel caps every cluster at 1728 MHz and takes cpu8-11 offline
        assert _policy_files(twin.root, 8) == ("1728000", "1728000")
        dev.unpin(CPU)
        assert _policy_files(twin.root, 8) == ("115200", "1728000")
        dev.set_power_mode(0)
        assert _policy_files(twin.root, 8)[0] == "115200"  # back online without a raised minimum


def test_a_failed_restore_step_does_not_stop_the_others(
    r36_tree: tuple[Path, TreeLayout], monkeypatch: pytest.MonkeyPatch, fake_tools
) -> None:
    from engine.core.errors import SlmDvfsError
    from engine.device.jetson import fake_l4t

    root, lay = r36_tree
    fake_tools(root)
    kernel = FakeKernel(monkeypatch)
    dev = _device(root)
    before = dev.read_settings()
    dev.pin(GPU, 408_000_000)
    dev.pin(CPU, 1_113_600_000)
    dev.pin(EMC, 665_600_000)
    (root / lay.nvpmodel_status).write_text("pmode:0001 fmode:quiet\n")

    def broken(tree, mode):  # nvpmodel refuses the switch
        raise SlmDvfsError("cannot set mode", "")

    monkeypatch.setattr(fake_l4t, "apply_mode", broken)
    with pytest.raises(DeviceError) as err:
        dev.apply_settings(before)
    assert "nvpmodel mode 0" in str(err.value) and "1 setting(s)" in str(err.value)
    after = dev.read_settings()
    for domain in (GPU, CPU, EMC):  # every pin was still undone
        assert after.domain(domain) == before.domain(domain)
    assert [d for d in after.domains if d.domain is CPU] == [d for d in before.domains if d.domain is CPU]
    assert kernel.violations == []
