"""The twin's folder: the kernel tree a profile's board renders to, what its INA3221 rails
read for a power, and the file operations that keep the tree usable while it changes
(atomic replaces, control files kept across a re-render, a memory-backed temp folder)."""

from __future__ import annotations

import logging
import os
import sys
import threading
from dataclasses import replace
from pathlib import Path

from engine.core.errors import DeviceError
from engine.device.discovery import discover
from engine.device.nvpmodel import EMC_CAP_FILE, format_conf
from engine.device.sysfs import SysfsTree
from engine.device.treegen import RailSpec, TreeSpec, default_orin_spec, gpu_devfreq_path
from engine.device.twin.model import Clocks, idle_power_mw
from engine.device.twin.profile import RailParams, TwinProfile
from engine.device.twin.thermal import idle_zone_temps_c

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

log = logging.getLogger(__name__)

_MV_STEP = 8  # INA3221 bus voltage LSB
_MA_STEP = 20  # current LSB with the 2 mOhm shunt
SHUNT_MOHM = 2


def tree_spec(profile: TwinProfile, layout: str = "r36") -> TreeSpec:
    """The treegen spec of a profile's board, at its idle state in its initial mode."""
    base = default_orin_spec(layout)
    idle = idle_power_mw(
        Clocks(profile.gpu.idle_hz, profile.cpu.idle_hz, profile.emc.idle_hz),
        profile,
        online_cpus=profile.mode(profile.initial_mode).online_cpus,
    )
    rails = []
    for r in profile.rails:
        mv, ma = ina_reading(idle[r.name], r)
        rails.append(RailSpec(r.name, f"1-00{r.chip[2:]}", r.channel, mv, ma))
    policies = tuple(range(0, profile.cpu.cores, profile.cpu.cluster_size))
    zones = tuple((t, c) for t, c in idle_zone_temps_c(profile.thermal).items())
    return replace(
        base,
        gpu_freqs_hz=profile.gpu.table_hz,
        cpu_freqs_khz=tuple(f // 1000 for f in profile.cpu.table_hz),
        emc_rates_hz=profile.emc.table_hz,
        rails=tuple(rails),
        thermal_zones=zones or base.thermal_zones,
        nvpmodel_conf=format_conf(
            profile.modes,
            profile.default_mode,
            gpu_devfreq=gpu_devfreq_path(layout),
            cpu_count=profile.cpu.cores,
            cpu_policies=policies,
        ),
        nvpmodel_conf_name=profile.identity.nvpmodel_conf,
        cpu_count=profile.cpu.cores,
        cpu_policies=policies,
        board_model=profile.identity.dt_model,
        l4t_release=profile.identity.l4t if layout == "r36" else base.l4t_release,
        nvpmodel_id=profile.initial_mode,
        gpu_governors=_default_first(profile.gpu.available_governors, profile.gpu.governor),
        cpu_governors=_default_first(profile.cpu.available_governors, profile.cpu.governor),
    )


def ina_reading(power_mw: float, rail: RailParams) -> tuple[int, int]:
    """What an INA3221 channel shows for this power: (mV multiple of 8, mA multiple of 20)."""
    amps = max(power_mw, 0.0) / rail.bus_mv
    mv = int(round((rail.bus_mv - rail.droop_mv_per_a * amps) / _MV_STEP)) * _MV_STEP
    ma = int(round(max(power_mw, 0.0) / (mv / 1000.0) / _MA_STEP)) * _MA_STEP
    return mv, ma


def marker_layout(marker: Path, profile_name: str, default: str) -> str:
    """The tree layout a twin's marker file records (`default` where it cannot be read)."""
    try:
        data = tomllib.loads(marker.read_text())
    except (tomllib.TOMLDecodeError, OSError):
        return default
    if data.get("profile") not in (None, profile_name):
        log.warning("twin root %s was made for profile %s; re-rendering it as %s", marker.parent, data.get("profile"), profile_name)
    layout = str(data.get("layout", default))
    if layout != default:
        log.info("twin root %s keeps its %s layout", marker.parent, layout)
    return layout


def fast_tmp() -> str | None:
    """A memory-backed folder for temporary twins where there is one: the sync thread
    replaces files many times a second, which a journalling disk makes slow."""
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK | os.X_OK) else None


def put_text(path: Path, text: str) -> None:
    """Replace a file's content atomically, so a concurrent reader never sees it empty."""
    tmp = path.parent / f".{path.name}.{threading.get_ident()}.tmp"
    tmp.write_text(text if text.endswith("\n") else text + "\n")
    os.replace(tmp, path)


def save_controls(tree: SysfsTree) -> dict[str, str]:
    """The files a user or the Jetson backend may have written, to survive a re-render."""
    nodes = discover(tree)
    files = [f for _cpu, f in nodes.cpu_online if f] + ["sys/devices/system/cpu/online", "var/lib/nvpmodel/status"]
    for pol in nodes.cpu_policies:
        files += [f"{pol.path}/{n}" for n in ("scaling_governor", "scaling_min_freq", "scaling_max_freq")]
    if nodes.gpu_devfreq:
        files += [f"{nodes.gpu_devfreq}/{n}" for n in ("governor", "min_freq", "max_freq")]
    if nodes.emc:
        files += [f"{nodes.emc}/{n}" for n in ("mrq_rate_locked", "rate", "min_rate", "max_rate")]
    files.append(EMC_CAP_FILE.lstrip("/"))
    saved = {}
    for rel in files:
        try:
            saved[rel] = tree.read_str(rel)
        except DeviceError:
            continue
    return saved


def _default_first(available: tuple[str, ...], default: str) -> tuple[str, ...]:
    return (default,) + tuple(g for g in available if g != default)
