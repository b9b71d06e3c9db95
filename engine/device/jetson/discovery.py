"""Find a Jetson's kernel nodes the portable way the spec describes (never by fixed index).

The result is a value of root-relative paths. A piece that is missing is None or
empty; it only becomes an error when someone asks for it (`require_*`, `rail`), and
then the error names what was looked for and what was found instead.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

from engine.device.sysfs import SysfsTree
from engine.core.errors import DeviceError, NodeNotFoundError, UnsupportedBoardError

log = logging.getLogger(__name__)

GPU_OF_NAMES = ("gpu", "ga10b")
# Known GPU devfreq folders, tried only when sys/class/devfreq is missing altogether.
_KNOWN_GPU_DEVFREQ = (
    "sys/devices/platform/bus@0/17000000.gpu/devfreq/17000000.gpu",
    "sys/devices/17000000.ga10b/devfreq/17000000.ga10b",
)
_DEFAULT_POLICIES = (0, 4, 8)  # AGX Orin: three clusters of four
_SKIP_LABELS = ("", "NC")
EMC_DIR = "sys/kernel/debug/bpmp/debug/clk/emc"
EMC_POSSIBLE_RATES = "sys/kernel/debug/bpmp/debug/emc/possible_rates"
NVPMODEL_CONF = "etc/nvpmodel.conf"
NVPMODEL_STATUS = "var/lib/nvpmodel/status"
# The Jetson AGX Thor (T5000 module p3834, SoC tegra264): its GPU is a PCI device of nvidia.ko with two
# devfreq domains, GPC and NVD (jetson-stats jtop/core/hw_detect.py and thor_power.py,
# https://github.com/rbonghi/jetson_stats). The device layer cannot drive it yet: see _refuse_thor.
THOR_GPU_DEVFREQ = ("gpu-gpc-0", "gpu-nvd-0")
THOR_COMPATIBLE = ("nvidia,tegra264", "p3834-")


@dataclass(frozen=True)
class RailNode:
    name: str  # the label the board gives the rail, e.g. "VDD_GPU_SOC"
    voltage: str  # mV file
    current: str  # mA file
    power: str | None = None  # mW file (r32 iio only)


@dataclass(frozen=True)
class CpuPolicy:
    cpu: int  # the policy CPU (first of the cluster)
    path: str  # sys/devices/system/cpu/cpuN/cpufreq
    cpus: tuple[int, ...]  # the CPUs that share this policy


@dataclass(frozen=True)
class JetsonNodes:
    gpu_devfreq: str | None
    gpu_device: str | None
    devfreq_seen: tuple[str, ...]  # "node (of_node name)" of every devfreq node looked at
    cpu_policies: tuple[CpuPolicy, ...]
    cpu_online: tuple[tuple[int, str | None], ...]  # (cpu, its `online` file or None)
    emc: str | None
    emc_possible_rates: str | None
    emc_note: str  # why EMC is missing, when it is
    rails: tuple[RailNode, ...]
    rail_driver: str | None  # "ina3221" (hwmon) | "ina3221x" (iio) | None
    rail_update_interval: str | None  # the INA3221 update_interval file (ms)
    thermal_zones: tuple[tuple[str, str], ...]  # (type, thermal_zoneN folder)
    nvpmodel_conf: str | None
    nvpmodel_status: str | None
    # Optional additions:
    gpu_3d_scaling: str | None = None  # the GPU's enable_3d_scaling node (L4T r35/r36; none on JetPack 7)

    def require_gpu(self) -> str:
        if self.gpu_devfreq is None:
            seen = ", ".join(self.devfreq_seen) or "none"
            raise NodeNotFoundError(
                f"no GPU devfreq node (of_node name {' or '.join(GPU_OF_NAMES)}) under sys/class/devfreq; "
                f"found: {seen}",
                "check that this is a Jetson running L4T r35 to r39 (JetPack 5 to 7) with the GPU driver loaded "
                "(or use --twin); `slm-dvfs device` lists what was found",
            )
        return self.gpu_devfreq

    def require_gpu_device(self) -> str:
        self.require_gpu()
        assert self.gpu_device is not None
        return self.gpu_device

    def require_cpu(self) -> tuple[CpuPolicy, ...]:
        if not self.cpu_policies:
            raise NodeNotFoundError(
                "no cpufreq policy under sys/devices/system/cpu/cpu*/cpufreq",
                "check that the cpufreq driver is loaded (`ls /sys/devices/system/cpu/cpu0/cpufreq`)",
            )
        return self.cpu_policies

    def require_emc(self) -> str:
        if self.emc is None:
            raise NodeNotFoundError(
                f"no EMC clock folder at {EMC_DIR} ({self.emc_note})",
                "EMC control needs debugfs, which only root can read: run as root "
                "(`sudo slm-dvfs ...`) and check that debugfs is mounted",
            )
        return self.emc

    def rail(self, name: str) -> RailNode:
        for r in self.rails:
            if r.name == name:
                return r
        found = ", ".join(r.name for r in self.rails) or "none"
        raise NodeNotFoundError(
            f"power rail {name!r} not found; the board's INA3221 rails are: {found}",
            "use one of the listed rail names (labels differ between modules and L4T releases)",
        )


def discover(tree: SysfsTree) -> JetsonNodes:
    """Look at the tree once and say where everything is; a board we cannot drive yet (the AGX Thor)
    is refused here, with what is missing, before anything of it is read as an Orin's."""
    _refuse_thor(tree)
    gpu, gpu_dev, seen = _find_gpu(tree)
    emc, emc_note = _find_emc(tree)
    rails, driver, interval = _find_rails(tree)
    nodes = JetsonNodes(
        gpu_devfreq=gpu,
        gpu_device=gpu_dev,
        devfreq_seen=seen,
        cpu_policies=_find_cpu_policies(tree),
        cpu_online=_find_online(tree),
        emc=emc,
        emc_possible_rates=EMC_POSSIBLE_RATES if emc and _exists(tree, EMC_POSSIBLE_RATES) else None,
        emc_note=emc_note,
        rails=rails,
        rail_driver=driver,
        rail_update_interval=interval,
        thermal_zones=_find_thermal(tree),
        nvpmodel_conf=NVPMODEL_CONF if _exists(tree, NVPMODEL_CONF) else None,
        nvpmodel_status=NVPMODEL_STATUS if _exists(tree, NVPMODEL_STATUS) else None,
        gpu_3d_scaling=f"{gpu_dev}/enable_3d_scaling" if gpu_dev and _exists(tree, f"{gpu_dev}/enable_3d_scaling")
        else None,
    )
    log.debug("discovered %s", nodes)
    return nodes


# --------------------------------------------------------------------------- pieces


def _exists(tree: SysfsTree, rel: str) -> bool:
    try:
        return tree.exists(rel)  # in a tree other than `/`: inside the tree only
    except OSError:  # debugfs answers EACCES to non-root users
        return False


def _read_opt(tree: SysfsTree, rel: str) -> str | None:
    """The stripped text of a file, or None when it is missing, unreadable or has no data."""
    try:
        return tree.read_str(rel).replace("\0", "").strip()
    except DeviceError:
        return None


def _refuse_thor(tree: SysfsTree) -> None:
    """Raise UnsupportedBoardError on an AGX Thor, told by its compatible string or its GPU's devfreq nodes."""
    try:
        compatible = tree.read_str("proc/device-tree/compatible").replace("\0", " ")
    except (DeviceError, UnicodeDecodeError):
        compatible = ""
    marks = [c for c in compatible.split() if any(m in c for m in THOR_COMPATIBLE)]
    nodes = [n for n in THOR_GPU_DEVFREQ if _exists(tree, f"sys/class/devfreq/{n}")]
    if not (marks or nodes):
        return
    seen = []
    if marks:
        seen.append(f"compatible {', '.join(marks)}")
    if nodes:
        seen.append(f"GPU devfreq {' and '.join(nodes)}")
    found = "; ".join(seen)
    missing = (
        "a device profile of the T5000 module: GPU, CPU and EMC clock tables, nvpmodel modes and their caps",
        "its power rails and which of them is the total",
        "GPU clock control over both devfreq domains, gpu-gpc-0 and gpu-nvd-0",
        "GPU load: Thor's GPU (nvidia.ko) has no devfreq `load` file; jetson-stats reads it through NVML",
        "a digital twin of it",
    )
    raise UnsupportedBoardError(
        f"this is a Jetson AGX Thor ({found}), which slm-dvfs does not support yet; missing: " + "; ".join(missing),
        "run slm-dvfs on a Jetson Orin (JetPack 5 to 7), or use the digital twin (--twin agx-orin-64gb); "
        "docs/device.md says what Thor support needs",
        board="AGX Thor",
        missing=missing,
    )


def _find_gpu(tree: SysfsTree) -> tuple[str | None, str | None, tuple[str, ...]]:
    seen: list[str] = []
    nodes = tree.glob("sys/class/devfreq/*")
    for node in nodes:
        name = _read_opt(tree, f"{node}/device/of_node/name")
        seen.append(f"{node.rsplit('/', 1)[-1]} ({name or '?'})")
        if name in GPU_OF_NAMES:
            return node, f"{node}/device", tuple(seen)
    if not nodes:
        # No devfreq class at all (an unusual kernel or a partial tree): try known places.
        for path in _KNOWN_GPU_DEVFREQ:
            if _exists(tree, f"{path}/available_frequencies"):
                return path, path.split("/devfreq/")[0], tuple(seen)
    return None, None, tuple(seen)


def _find_emc(tree: SysfsTree) -> tuple[str | None, str]:
    try:
        if tree.path(f"{EMC_DIR}/rate").exists():
            return EMC_DIR, ""
        return None, "not present"
    except PermissionError:
        return None, "debugfs is not readable by this user"
    except OSError as exc:
        return None, exc.strerror or "unreadable"


def _find_rails(tree: SysfsTree) -> tuple[tuple[RailNode, ...], str | None, str | None]:
    rails: list[RailNode] = []
    interval: str | None = None
    for hw in tree.glob("sys/bus/i2c/drivers/ina3221/*/hwmon/hwmon*"):
        if interval is None and _exists(tree, f"{hw}/update_interval"):
            interval = f"{hw}/update_interval"
        for label_file in tree.glob(f"{hw}/in*_label"):
            m = re.search(r"/in(\d+)_label$", label_file)
            if not m:
                continue
            k = m.group(1)
            label = _read_opt(tree, label_file)
            volt, curr = f"{hw}/in{k}_input", f"{hw}/curr{k}_input"
            # No current file: not a rail (in7 is "sum of shunt voltages").
            if label in _SKIP_LABELS or label is None or not _exists(tree, curr):
                continue
            if not _readable(tree, volt):
                log.info("skipping INA3221 channel %s (%s): no data", label_file, label)
                continue
            rails.append(RailNode(label, volt, curr))
    if rails:
        return tuple(rails), "ina3221", interval
    # L4T r32: the ina3221x iio driver
    for dev in tree.glob("sys/bus/i2c/drivers/ina3221x/*/iio:device*"):
        for name_file in tree.glob(f"{dev}/rail_name_*"):
            k = name_file.rsplit("_", 1)[-1]
            label = _read_opt(tree, name_file)
            volt, curr, power = (f"{dev}/in_voltage{k}_input", f"{dev}/in_current{k}_input", f"{dev}/in_power{k}_input")
            if label in _SKIP_LABELS or label is None or not _readable(tree, volt):
                continue
            rails.append(RailNode(label, volt, curr, power if _exists(tree, power) else None))
    return tuple(rails), ("ina3221x" if rails else None), None


def _readable(tree: SysfsTree, rel: str) -> bool:
    """A disabled INA3221 channel answers ENODATA (or has no file at all)."""
    try:
        tree.read_bytes(rel)  # as every tree file is read: no FIFO, no link out of the tree
        return True
    except NodeNotFoundError:
        return False
    except DeviceError as exc:
        log.warning("cannot read %s: %s", rel, exc.what)
        return False


def _cpu_num(path: str) -> int:
    m = re.search(r"/cpu(\d+)(?:/|$)", path)
    return int(m.group(1)) if m else -1


def _find_cpu_policies(tree: SysfsTree) -> tuple[CpuPolicy, ...]:
    folders = {_cpu_num(p): p for p in tree.glob("sys/devices/system/cpu/cpu[0-9]*/cpufreq")}
    if not folders:
        return ()
    groups: dict[int, tuple[int, ...]] = {}
    for cpu in sorted(folders):
        text = _read_opt(tree, f"{folders[cpu]}/related_cpus") or _read_opt(tree, f"{folders[cpu]}/affected_cpus")
        if not text:
            groups = {}
            break
        try:
            cpus = tuple(sorted(int(t) for t in text.split()))
        except ValueError:
            groups = {}
            break
        groups.setdefault(cpus[0], cpus)
    if not groups:
        # No related_cpus: assume the Orin clusters (policy CPUs 0, 4, 8) that exist.
        firsts = [c for c in _DEFAULT_POLICIES if c in folders]
        bounds = firsts[1:] + [max(folders) + 1]
        groups = {p: tuple(c for c in range(p, end) if c in folders) for p, end in zip(firsts, bounds)}
    return tuple(
        CpuPolicy(cpu=p, path=f"sys/devices/system/cpu/cpu{p}/cpufreq", cpus=cpus)
        for p, cpus in sorted(groups.items())
        if p in folders
    )


def _find_online(tree: SysfsTree) -> tuple[tuple[int, str | None], ...]:
    cpus = [p for p in tree.glob("sys/devices/system/cpu/cpu[0-9]*") if re.search(r"/cpu\d+$", p)]
    out = []
    for d in sorted(cpus, key=_cpu_num):
        online = f"{d}/online"
        out.append((_cpu_num(d), online if _exists(tree, online) else None))
    return tuple(out)


def _find_thermal(tree: SysfsTree) -> tuple[tuple[str, str], ...]:
    zones = tree.glob("sys/class/thermal/thermal_zone*")
    out = []
    for z in sorted(zones, key=lambda p: int(re.sub(r"\D", "", p.rsplit("/", 1)[-1]) or 0)):
        kind = _read_opt(tree, f"{z}/type")
        if kind:
            out.append((kind, z))
    return tuple(out)
