"""Render a complete fake Jetson sysfs tree under a root, strictly as the spec describes it.

Used by tests and by the digital twin (which renders once, then keeps the dynamic files
current through the returned TreeLayout). The backend reads these files exactly as it
reads a real board's, so everything here follows L4T's names, units and links.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from engine.device.base import PowerMode
from engine.core.clocks import highest_at_most
from engine.device.meminfo import render_meminfo
from engine.device.nvpmodel import EMC_CAP_FILE, format_conf, parse_conf
from engine.core.errors import ConfigError
from engine.device.treefs import put_file, resolve_at

log = logging.getLogger(__name__)

LAYOUTS = ("r38", "r36", "r35", "r32")
# Layouts whose devices sit under platform/bus@0 (L4T r36, and r38/r39's 6.8 kernel on Orin).
_BUS0_LAYOUTS = ("r36", "r38")
# "r38": JetPack 7 (L4T r38/r39, kernel 6.8) on the AGX Orin. The nvgpu GPU keeps its devfreq node
# (17000000.gpu) and railgate_enable, but enable_3d_scaling is gone: 3D scaling is the devfreq governor
# (nvhost_podgov on, performance off). Source: jetson-stats commit caffd05d ("Fix static GPU controls on
# JetPack 7.2 Orin", jtop/core/gpu.py, jtop/core/hw_detect.py), https://github.com/rbonghi/jetson_stats.
# NVIDIA's r38.x guides support only Jetson Thor; the Orin gets JetPack 7 with L4T r39 (7.2), hence
# the r38 layout's default release 39.2.0.
_NO_3D_SCALING_NODE = ("r38",)

# AGX Orin 64GB, from the spec (L4T r35.2+/r36).
ORIN_64GB_GPU_HZ: tuple[int, ...] = (
    306000000, 408000000, 510000000, 612000000, 714000000, 816000000,
    918000000, 1020000000, 1122000000, 1224000000, 1300500000,
)  # fmt: skip
ORIN_64GB_CPU_KHZ: tuple[int, ...] = tuple(range(115200, 2188800 + 1, 76800)) + (2201600,)
ORIN_64GB_EMC_HZ: tuple[int, ...] = (204000000, 665600000, 2133000000, 3199000000)
ORIN_64GB_MODES: tuple[PowerMode, ...] = (
    PowerMode(0, "MAXN", online_cpus=12),
    PowerMode(1, "MODE_15W", online_cpus=4, cpu_max_hz=1113600000, gpu_max_hz=408000000, emc_max_hz=2133000000),
    PowerMode(2, "MODE_30W", online_cpus=8, cpu_max_hz=1728000000, gpu_max_hz=612000000),
    PowerMode(3, "MODE_50W", online_cpus=12, cpu_max_hz=1497600000, gpu_max_hz=816000000),
)
ORIN_64GB_DEFAULT_MODE = 2
# MemTotal of the AGX Orin 64GB (tegrastats `RAM 2371/62841MB` on a real board, the spec's line).
ORIN_64GB_MEMTOTAL_KB = 62_841 * 1024
# Thermal zones in the order L4T numbers them on AGX Orin; idle temperatures.
ORIN_THERMAL_ZONES: tuple[tuple[str, float], ...] = (
    ("cpu-thermal", 42.5), ("gpu-thermal", 41.0), ("cv0-thermal", 40.5), ("cv1-thermal", 40.5),
    ("cv2-thermal", 40.5), ("soc0-thermal", 41.5), ("soc1-thermal", 41.0), ("soc2-thermal", 41.0),
    ("tj-thermal", 42.5),
)  # fmt: skip

GPU_GOVERNORS = ("nvhost_podgov", "userspace", "performance", "simple_ondemand")
CPU_GOVERNORS = ("conservative", "ondemand", "userspace", "powersave", "performance", "schedutil")
SHUNT_MOHM = 2  # 2 mOhm shunts: currents are multiples of 20 mA
_I2C_BUS = {"r36": "sys/devices/platform/bus@0/c240000.i2c/i2c-1", "r35": "sys/devices/platform/c240000.i2c/i2c-1"}
_I2C_BUS["r32"] = _I2C_BUS["r35"]
_I2C_BUS["r38"] = _I2C_BUS["r36"]  # estimate: the r36 bus path, not seen on an r39 board


@dataclass(frozen=True)
class RailSpec:
    label: str  # "VDD_GPU_SOC"
    chip: str  # "1-0040" or "1-0041"
    channel: int  # 1..3
    voltage_mv: int  # initial inK_input
    current_ma: int  # initial currK_input


@dataclass(frozen=True)
class FanSpec:
    """A fan as L4T shows it on Orin: `pwm-fan`'s hwmon `pwm1` (0-255) and the tachometer's own
    hwmon node with `rpm` (jetson-stats' jtop/core/fan.py pairs the two)."""

    pwm: int  # 0..255
    rpm: int | None = None  # None: no tachometer node


@dataclass(frozen=True)
class TreeSpec:
    layout: str  # "r38" | "r36" | "r35" | "r32" (r38 = JetPack 7; r32 = old ina3221x iio rails)
    gpu_freqs_hz: tuple[int, ...]
    cpu_freqs_khz: tuple[int, ...]
    emc_rates_hz: tuple[int, ...]
    rails: tuple[RailSpec, ...]
    thermal_zones: tuple[tuple[str, float], ...]  # (type, celsius)
    nvpmodel_conf: str  # full text of the conf file
    nvpmodel_conf_name: str = "nvpmodel_p3701_0000.conf"
    cpu_count: int = 12
    cpu_policies: tuple[int, ...] = (0, 4, 8)
    board_model: str = "NVIDIA Jetson AGX Orin Developer Kit"
    compatible: str = "nvidia,p3737-0000+p3701-0000\0nvidia,p3701-0000\0nvidia,tegra234\0"
    l4t_release: str = "36.3.0"
    hwmon_index: int = 3  # differs per board: discovery must glob it (0x41 gets the next one)
    update_interval_ms: int = 140  # the INA3221's update_interval file (value is estimate-ok)
    # Optional additions:
    nvpmodel_id: int = 0  # the active mode; its caps (online CPUs, max clocks) are applied
    gpu_governors: tuple[str, ...] = GPU_GOVERNORS
    cpu_governors: tuple[str, ...] = CPU_GOVERNORS
    gpu_node: str = ""  # "" = the layout's default (17000000.gpu on r36, 17000000.ga10b before)
    serial: str = ""  # the device tree's serial-number; "" = none written (a board's identity: results, the lock)
    mem_total_kb: int | None = None  # /proc/meminfo's MemTotal; None = no proc/meminfo written
    mem_available_kb: int | None = None  # its MemAvailable; None = none (a twin does not model what the OS holds)
    # Trip points of every thermal zone, (type, celsius), as trip_point_N_type/_temp; () = none
    trip_points: tuple[tuple[str, float], ...] = ()
    fan: FanSpec | None = None  # a pwm-fan and its tachometer (hwmon), as on a developer kit; None = no fan


@dataclass(frozen=True)
class TreeLayout:  # where treegen put things (root-relative strings), for the twin to update
    gpu_devfreq: str  # folder with min_freq/max_freq/cur_freq/governor/...
    gpu_device: str  # folder with load, railgate_enable, tpc_pg_mask (and enable_3d_scaling before r38)
    cpu_policy_dirs: tuple[str, ...]  # cpuN/cpufreq folders of the policy CPUs
    cpu_dirs: tuple[str, ...]  # every cpuN folder (with `online`)
    emc: str  # the debugfs emc folder
    rails: dict[str, tuple[str, str]]  # label -> (voltage file, current file)
    thermal_zones: dict[str, str]  # type -> thermal_zoneN folder
    nvpmodel_conf: str
    nvpmodel_status: str  # var/lib/nvpmodel/status: "pmode:0000 fmode:quiet" as on L4T
    # Optional additions:
    rail_power: dict[str, str] = field(default_factory=dict)  # r32 only: label -> in_powerK_input
    hwmon_dirs: tuple[str, ...] = ()  # INA3221 hwmon (or r32 iio) folders, 0x40 first
    emc_possible_rates: str = "sys/kernel/debug/bpmp/debug/emc/possible_rates"  # kHz
    emc_cap: str = EMC_CAP_FILE.lstrip("/")
    actmon_mc_all: str = "sys/kernel/actmon_avg_activity/mc_all"
    online: str = "sys/devices/system/cpu/online"  # "0-11" style summary
    proc_stat: str = "proc/stat"  # per-CPU jiffies, online CPUs only (proc(5))
    fan_pwm: str = ""  # the fan's pwm1 file; "" = no fan
    fan_rpm: str = ""  # the tachometer's rpm file; "" = none


def default_rails() -> tuple[RailSpec, ...]:
    """AGX Orin 64GB rails at MAXN idle (spec: 2399 / 400 / 4032 / 301 mW)."""
    return (
        RailSpec("VDD_GPU_SOC", "1-0040", 1, 4984, 480),
        RailSpec("VDD_CPU_CV", "1-0040", 2, 4984, 80),
        RailSpec("VIN_SYS_5V0", "1-0040", 3, 5040, 800),
        RailSpec("VDDQ_VDD2_1V8AO", "1-0041", 2, 4984, 60),
    )


def gpu_devfreq_path(layout: str, node: str = "") -> str:
    """Where L4T puts the GPU's devfreq folder for a layout (root-relative)."""
    _check_layout(layout)
    if layout in _BUS0_LAYOUTS:
        node = node or "17000000.gpu"
        return f"sys/devices/platform/bus@0/{node}/devfreq/{node}"
    node = node or "17000000.ga10b"
    return f"sys/devices/{node}/devfreq/{node}"


def default_orin_spec(layout: str = "r36") -> TreeSpec:
    """AGX Orin 64GB developer kit as the spec describes it, for a given L4T layout."""
    _check_layout(layout)
    release = {"r38": "39.2.0", "r36": "36.3.0", "r35": "35.4.1", "r32": "32.7.4"}[layout]
    return TreeSpec(
        layout=layout,
        gpu_freqs_hz=ORIN_64GB_GPU_HZ,
        cpu_freqs_khz=ORIN_64GB_CPU_KHZ,
        emc_rates_hz=ORIN_64GB_EMC_HZ,
        rails=default_rails(),
        thermal_zones=ORIN_THERMAL_ZONES,
        nvpmodel_conf=format_conf(ORIN_64GB_MODES, ORIN_64GB_DEFAULT_MODE, gpu_devfreq=gpu_devfreq_path(layout)),
        l4t_release=release,
        mem_total_kb=ORIN_64GB_MEMTOTAL_KB,
    )


def render_tree(root: Path, spec: TreeSpec) -> TreeLayout:
    """Write every file of `spec` under `root` (created if needed; re-rendering overwrites)."""
    _check_layout(spec.layout)
    if not (spec.gpu_freqs_hz and spec.cpu_freqs_khz and spec.emc_rates_hz):
        raise ConfigError(
            "a tree needs GPU, CPU and EMC clock tables", "fill gpu_freqs_hz, cpu_freqs_khz and emc_rates_hz"
        )
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    modes, _default = parse_conf(spec.nvpmodel_conf)
    mode = next((m for m in modes if m.id == spec.nvpmodel_id), None)
    if mode is None:
        raise ConfigError(
            f"nvpmodel_id {spec.nvpmodel_id} is not a mode of the conf",
            f"use one of {[m.id for m in modes]}",
        )
    w = _Writer(root)
    _identity(w, spec)
    gpu_devfreq, gpu_device = _gpu(w, spec, mode)
    policy_dirs, cpu_dirs = _cpu(w, spec, mode)
    emc = _emc(w, spec, mode)
    rails, rail_power, hwmon_dirs = _rails(w, spec)
    zones = _thermal(w, spec)
    online_n = spec.cpu_count if mode.online_cpus is None else mode.online_cpus
    w.file("proc/stat", proc_stat_text([(0, 0)] * online_n), newline=False)
    fan_pwm, fan_rpm = _fan(w, spec)
    w.file("sys/kernel/actmon_avg_activity/mc_all", 0)
    conf_rel = f"etc/nvpmodel/{spec.nvpmodel_conf_name}"
    w.file(conf_rel, spec.nvpmodel_conf.rstrip("\n"))
    w.link("etc/nvpmodel.conf", conf_rel)
    status = "var/lib/nvpmodel/status"
    w.file(status, f"pmode:{mode.id:04d} fmode:quiet")
    log.debug("rendered a %s Jetson tree under %s", spec.layout, root)
    return TreeLayout(
        gpu_devfreq=gpu_devfreq,
        gpu_device=gpu_device,
        cpu_policy_dirs=policy_dirs,
        cpu_dirs=cpu_dirs,
        emc=emc,
        rails=rails,
        thermal_zones=zones,
        nvpmodel_conf=conf_rel,
        nvpmodel_status=status,
        rail_power=rail_power,
        hwmon_dirs=hwmon_dirs,
        fan_pwm=fan_pwm,
        fan_rpm=fan_rpm,
    )


def proc_stat_text(cores: list[tuple[int, int]]) -> str:
    """/proc/stat's `cpu` and `cpuN` lines for (busy, idle) jiffies per online CPU: busy as user
    time, the other fields zero (proc(5): user nice system idle iowait irq softirq steal guest
    guest_nice)."""
    def line(name: str, busy: int, idle: int) -> str:
        return f"{name} {busy} 0 0 {idle} 0 0 0 0 0 0\n"

    total = line("cpu ", sum(b for b, _i in cores), sum(i for _b, i in cores))
    return total + "".join(line(f"cpu{n}", b, i) for n, (b, i) in enumerate(cores))


# --------------------------------------------------------------------------- pieces


class _Writer:
    """Root-relative file and relative-symlink creation (so a tree can be moved), never through a
    link out of the tree (engine.device.treefs): re-rendering a tree someone changed cannot write
    elsewhere."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def file(self, rel: str, value: object, *, newline: bool = True) -> None:
        put_file(self.root, rel, (f"{value}\n" if newline else str(value)).encode())

    def link(self, rel: str, target_rel: str) -> None:
        dir_fd, name = resolve_at(self.root, rel, make_dirs=True, follow_last=False)
        try:
            try:
                st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            except FileNotFoundError:
                pass
            else:
                if stat.S_ISDIR(st.st_mode):
                    raise ConfigError(f"{self.root / rel} is a folder where a link belongs", "render into an empty folder")
                os.unlink(name, dir_fd=dir_fd)
            os.symlink(os.path.relpath(self.root / target_rel, (self.root / rel).parent), name, dir_fd=dir_fd)
        finally:
            os.close(dir_fd)

    def mkdir(self, rel: str) -> None:
        dir_fd, name = resolve_at(self.root, rel, make_dirs=True, follow_last=False)
        try:
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o755, dir_fd=dir_fd)
        finally:
            os.close(dir_fd)


def _check_layout(layout: str) -> None:
    if layout not in LAYOUTS:
        raise ConfigError(f"unknown tree layout {layout!r}", f"use one of {', '.join(LAYOUTS)}")


def _identity(w: _Writer, spec: TreeSpec) -> None:
    dt = "sys/firmware/devicetree/base"
    # Device-tree strings end in NUL, as on a board; readers must strip it.
    w.file(f"{dt}/model", spec.board_model + "\0", newline=False)
    w.file(f"{dt}/compatible", spec.compatible, newline=False)
    if spec.serial:
        w.file(f"{dt}/serial-number", spec.serial + "\0", newline=False)
    w.link("proc/device-tree", dt)
    if spec.mem_total_kb is not None:
        w.file("proc/meminfo", render_meminfo(spec.mem_total_kb * 1024,
                                                   None if spec.mem_available_kb is None else spec.mem_available_kb * 1024), newline=False)
    parts = (spec.l4t_release.split(".") + ["0", "0"])[:3]
    board = "generic" if spec.layout in _BUS0_LAYOUTS else "t186ref"
    w.file(
        "etc/nv_tegra_release",
        f"# R{parts[0]} (release), REVISION: {parts[1]}.{parts[2]}, GCID: 00000000, BOARD: {board}, "
        f"EABI: aarch64, DATE: Mon Jan  1 00:00:00 UTC 2024",
    )


def _devfreq(
    w: _Writer, device: str, node: str, of_name: str, freqs: tuple[int, ...], max_hz: int, governors: tuple[str, ...]
) -> str:
    devfreq = f"{device}/devfreq/{node}"
    table = sorted(freqs)
    w.file(f"{devfreq}/available_frequencies", " ".join(str(f) for f in table))
    w.file(f"{devfreq}/min_freq", table[0])
    w.file(f"{devfreq}/max_freq", max_hz)
    w.file(f"{devfreq}/cur_freq", table[0])
    w.file(f"{devfreq}/target_freq", table[0])
    w.file(f"{devfreq}/governor", governors[0])
    w.file(f"{devfreq}/available_governors", " ".join(governors))
    w.file(f"{devfreq}/polling_interval", 0)
    w.link(f"{devfreq}/device", device)
    w.link(f"sys/class/devfreq/{node}", devfreq)
    unit = node.split(".", 1)[0]
    fw = f"sys/firmware/devicetree/base/{'bus@0/' if '/bus@0/' in device else ''}{of_name}@{unit}"
    w.file(f"{fw}/name", of_name + "\0", newline=False)
    w.link(f"{device}/of_node", fw)
    return devfreq


def _gpu(w: _Writer, spec: TreeSpec, mode: PowerMode) -> tuple[str, str]:
    devfreq = gpu_devfreq_path(spec.layout, spec.gpu_node)
    device = devfreq.split("/devfreq/")[0]
    node = devfreq.rsplit("/", 1)[1]
    of_name = "gpu" if spec.layout in _BUS0_LAYOUTS else "ga10b"
    max_hz = highest_at_most(spec.gpu_freqs_hz, mode.gpu_max_hz)
    _devfreq(w, device, node, of_name, spec.gpu_freqs_hz, max_hz, spec.gpu_governors)
    w.file(f"{device}/load", 0)
    w.file(f"{device}/railgate_enable", 1)
    w.file(f"{device}/tpc_pg_mask", 0)
    if spec.layout not in _NO_3D_SCALING_NODE:
        w.file(f"{device}/enable_3d_scaling", 1)  # jtop's `echo 1 > .../enable_3d_scaling` (jtop/core/gpu.py)
    # A second devfreq node, so discovery has to look at of_node names.
    vic_dev = "sys/devices/platform/bus@0/15340000.vic" if spec.layout in _BUS0_LAYOUTS else "sys/devices/15340000.vic"
    vic = (115200000, 345600000, 601600000, 729600000)
    _devfreq(w, vic_dev, "15340000.vic", "vic", vic, vic[-1], ("nvhost_podgov", "performance"))
    return devfreq, device


def _clusters(spec: TreeSpec) -> list[tuple[int, list[int]]]:
    starts = sorted(spec.cpu_policies)
    bounds = starts[1:] + [spec.cpu_count]
    return [(p, list(range(p, end))) for p, end in zip(starts, bounds)]


def _cpu(w: _Writer, spec: TreeSpec, mode: PowerMode) -> tuple[tuple[str, ...], tuple[str, ...]]:
    base = "sys/devices/system/cpu"
    online_n = spec.cpu_count if mode.online_cpus is None else mode.online_cpus
    table = sorted(spec.cpu_freqs_khz)
    cap_khz = None if mode.cpu_max_hz is None else mode.cpu_max_hz // 1000
    max_khz = highest_at_most(tuple(table), cap_khz)
    policy_dirs = []
    for policy, cpus in _clusters(spec):
        pol = f"{base}/cpufreq/policy{policy}"
        online = [c for c in cpus if c < online_n]
        w.file(f"{pol}/related_cpus", " ".join(map(str, cpus)))
        w.file(f"{pol}/affected_cpus", " ".join(map(str, online)))
        w.file(f"{pol}/cpuinfo_min_freq", table[0])
        w.file(f"{pol}/cpuinfo_max_freq", table[-1])
        w.file(f"{pol}/cpuinfo_cur_freq", table[0])
        # cpufreq lists frequencies with a trailing space; readers must cope.
        w.file(f"{pol}/scaling_available_frequencies", " ".join(map(str, table)) + " ")
        w.file(f"{pol}/scaling_available_governors", " ".join(spec.cpu_governors))
        w.file(f"{pol}/scaling_governor", "schedutil" if "schedutil" in spec.cpu_governors else spec.cpu_governors[0])
        w.file(f"{pol}/scaling_driver", "tegra194")
        w.file(f"{pol}/scaling_min_freq", table[0])
        w.file(f"{pol}/scaling_max_freq", max_khz)
        w.file(f"{pol}/scaling_cur_freq", table[0])
        for cpu in cpus:
            w.link(f"{base}/cpu{cpu}/cpufreq", pol)
        policy_dirs.append(f"{base}/cpu{policy}/cpufreq")
    cpu_dirs = []
    for cpu in range(spec.cpu_count):
        w.file(f"{base}/cpu{cpu}/online", 1 if cpu < online_n else 0)
        cpu_dirs.append(f"{base}/cpu{cpu}")
    last = spec.cpu_count - 1
    w.file(f"{base}/possible", f"0-{last}")
    w.file(f"{base}/present", f"0-{last}")
    w.file(f"{base}/online", f"0-{online_n - 1}" if online_n > 1 else "0")
    return tuple(policy_dirs), tuple(cpu_dirs)


def _emc(w: _Writer, spec: TreeSpec, mode: PowerMode) -> str:
    emc = "sys/kernel/debug/bpmp/debug/clk/emc"
    table = sorted(spec.emc_rates_hz)
    max_hz = highest_at_most(tuple(table), mode.emc_max_hz)
    w.file(f"{emc}/rate", max_hz)
    w.file(f"{emc}/min_rate", table[0])
    w.file(f"{emc}/max_rate", max_hz)
    w.file(f"{emc}/mrq_rate_locked", 0)
    w.file("sys/kernel/debug/bpmp/debug/emc/possible_rates", " ".join(str(r // 1000) for r in table))
    w.file(EMC_CAP_FILE.lstrip("/"), 0 if mode.emc_max_hz is None else mode.emc_max_hz)
    return emc


def _rails(w: _Writer, spec: TreeSpec) -> tuple[dict[str, tuple[str, str]], dict[str, str], tuple[str, ...]]:
    chips = sorted({r.chip for r in spec.rails})
    rails: dict[str, tuple[str, str]] = {}
    power: dict[str, str] = {}
    dirs: list[str] = []
    bus = _I2C_BUS[spec.layout]
    for i, chip in enumerate(chips):
        on_chip = {r.channel: r for r in spec.rails if r.chip == chip}
        device = f"{bus}/{chip}"
        w.link(f"sys/bus/i2c/devices/{chip}", device)
        if spec.layout == "r32":
            d = f"{device}/iio:device{i}"
            w.file(f"{device}/name", "ina3221x")
            w.link(f"sys/bus/i2c/drivers/ina3221x/{chip}", device)
            for ch, r in sorted(on_chip.items()):
                k = ch - 1  # the iio driver numbers channels from 0
                w.file(f"{d}/rail_name_{k}", r.label)
                w.file(f"{d}/in_voltage{k}_input", r.voltage_mv)
                w.file(f"{d}/in_current{k}_input", r.current_ma)
                w.file(f"{d}/in_power{k}_input", r.voltage_mv * r.current_ma // 1000)
                rails[r.label] = (f"{d}/in_voltage{k}_input", f"{d}/in_current{k}_input")
                power[r.label] = f"{d}/in_power{k}_input"
            dirs.append(d)
            continue
        n = spec.hwmon_index + i
        d = f"{device}/hwmon/hwmon{n}"
        w.link(f"sys/bus/i2c/drivers/ina3221/{chip}", device)
        w.link(f"sys/class/hwmon/hwmon{n}", d)
        # Report the path through the driver folder, as the spec names it.
        dd = f"sys/bus/i2c/drivers/ina3221/{chip}/hwmon/hwmon{n}"
        w.file(f"{d}/name", "ina3221")
        shunt_sum = 0
        curr_sum = 0
        for ch in (1, 2, 3):
            rail = on_chip.get(ch)
            if rail is None:
                if spec.layout == "r35":  # disabled channels are labelled NC on r35
                    w.file(f"{d}/in{ch}_label", "NC")
                    w.file(f"{d}/in{ch}_input", 0)
                    w.file(f"{d}/curr{ch}_input", 0)
                    w.file(f"{d}/in{ch + 3}_input", 0)
                # r36/r38: no label and no input files (the kernel answers ENODATA)
                w.file(f"{d}/in{ch}_enable", 0)
                w.file(f"{d}/shunt{ch}_resistor", SHUNT_MOHM * 1000)
                continue
            w.file(f"{d}/in{ch}_label", rail.label)
            w.file(f"{d}/in{ch}_input", rail.voltage_mv)
            w.file(f"{d}/curr{ch}_input", rail.current_ma)
            w.file(f"{d}/in{ch}_enable", 1)
            w.file(f"{d}/in{ch + 3}_input", rail.current_ma * SHUNT_MOHM)  # shunt voltage, uV
            w.file(f"{d}/shunt{ch}_resistor", SHUNT_MOHM * 1000)  # micro-ohm
            w.file(f"{d}/curr{ch}_max_alarm", 0)
            w.file(f"{d}/curr{ch}_crit_alarm", 0)
            shunt_sum += rail.current_ma * SHUNT_MOHM
            curr_sum += rail.current_ma
            rails[rail.label] = (f"{dd}/in{ch}_input", f"{dd}/curr{ch}_input")
        w.file(f"{d}/in7_label", "sum of shunt voltages")
        w.file(f"{d}/in7_input", shunt_sum)
        w.file(f"{d}/curr4_input", curr_sum)
        w.file(f"{d}/curr4_crit_alarm", 0)
        w.file(f"{d}/samples", 512)
        w.file(f"{d}/update_interval", spec.update_interval_ms)
        dirs.append(dd)
    return rails, power, tuple(dirs)


def _fan(w: _Writer, spec: TreeSpec) -> tuple[str, str]:
    """Orin developer kits: /sys/devices/platform/pwm-fan/hwmon/hwmonN/pwm1 and the tachometer's
    hwmon `rpm` (jetson-stats jtop/core/fan.py); hwmon numbers after the INA3221's."""
    if spec.fan is None:
        return "", ""
    n = spec.hwmon_index + len({r.chip for r in spec.rails})
    pwm_dir = f"sys/devices/platform/pwm-fan/hwmon/hwmon{n}"
    w.file(f"{pwm_dir}/name", "pwmfan")
    w.file(f"{pwm_dir}/pwm1", spec.fan.pwm)
    w.link(f"sys/class/hwmon/hwmon{n}", pwm_dir)
    if spec.fan.rpm is None:
        return pwm_dir + "/pwm1", ""
    tach_dir = f"sys/devices/platform/39c0000.tachometer/hwmon/hwmon{n + 1}"
    w.file(f"{tach_dir}/name", "tachometer")
    w.file(f"{tach_dir}/rpm", spec.fan.rpm)
    w.link(f"sys/class/hwmon/hwmon{n + 1}", tach_dir)
    return pwm_dir + "/pwm1", tach_dir + "/rpm"


def _thermal(w: _Writer, spec: TreeSpec) -> dict[str, str]:
    zones: dict[str, str] = {}
    for i, (kind, celsius) in enumerate(spec.thermal_zones):
        z = f"sys/devices/virtual/thermal/thermal_zone{i}"
        w.file(f"{z}/type", kind)
        w.file(f"{z}/temp", int(round(celsius * 1000)))
        for k, (trip, trip_c) in enumerate(spec.trip_points):
            w.file(f"{z}/trip_point_{k}_type", trip)
            w.file(f"{z}/trip_point_{k}_temp", int(round(trip_c * 1000)))
        w.link(f"sys/class/thermal/thermal_zone{i}", z)
        zones[kind] = z
    return zones
