"""The twin's folder: the kernel tree a profile's board renders to, what its INA3221 rails
read for a power, and the file operations that keep the tree usable while it changes
(atomic replaces, control files kept across a re-render, a memory-backed temp folder), and
the check that nobody else can change the folder under us."""

from __future__ import annotations

import errno
import logging
import os
import stat
import sys
from dataclasses import replace
from pathlib import Path

from engine.core import paths
from engine.core.errors import ConfigError, DeviceError
from engine.device.jetson.discovery import discover
from engine.device.nvpmodel import EMC_CAP_FILE, format_conf
from engine.device.sysfs import TWIN_MARKER, SysfsTree
from engine.device.treefs import put_file
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
    module = profile.module
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
        compatible=module.compatible if module is not None else base.compatible,
        l4t_release=profile.identity.l4t if layout == "r36" else base.l4t_release,
        nvpmodel_id=profile.initial_mode,
        gpu_governors=_default_first(profile.gpu.available_governors, profile.gpu.governor),
        cpu_governors=_default_first(profile.cpu.available_governors, profile.cpu.governor),
        # the memory Linux sees, as the profile has it (/proc/meminfo: what memory fit reads)
        mem_total_kb=None if profile.memory_total_mb is None else round(profile.memory_total_mb * 1024),
        # the twin throttles its GPU at throttle_c and would shut down at shutdown_c: a board's
        # passive and critical trips (thermal sysfs); both figures are the profile's
        trip_points=(("passive", profile.thermal.throttle_c), ("critical", profile.thermal.shutdown_c)),
    )


def ina_reading(power_mw: float, rail: RailParams) -> tuple[int, int]:
    """What an INA3221 channel shows for this power: (mV multiple of 8, mA multiple of 20)."""
    amps = max(power_mw, 0.0) / rail.bus_mv
    mv = int(round((rail.bus_mv - rail.droop_mv_per_a * amps) / _MV_STEP)) * _MV_STEP
    ma = int(round(max(power_mw, 0.0) / (mv / 1000.0) / _MA_STEP)) * _MA_STEP
    return mv, ma


def marker_layout(root: Path, profile_name: str, default: str) -> str:
    """The tree layout a twin's marker file records (`default` where it cannot be read)."""
    try:
        data = tomllib.loads(SysfsTree(root).read_str(TWIN_MARKER))
    except (tomllib.TOMLDecodeError, DeviceError):
        return default
    if data.get("profile") not in (None, profile_name):
        log.warning("twin root %s was made for profile %s; re-rendering it as %s", root, data.get("profile"), profile_name)
    layout = str(data.get("layout", default))
    if layout != default:
        log.info("twin root %s keeps its %s layout", root, layout)
    return layout


def tree_remedy(err: int | None) -> str:
    """What to do when the twin's tree cannot be written, by why (a full disk is not a wrong path)."""
    if err in (errno.ENOSPC, errno.EDQUOT):
        return "free space on its disk (`df -h`), or give the twin a folder on another disk ($SLM_DVFS_TWIN_DIR)"
    if err in (errno.EACCES, errno.EPERM, errno.EROFS):
        return "give the twin a folder you may write ($SLM_DVFS_TWIN_DIR), then try again"
    return ("give the twin an empty or new folder (a path through a file, or one that holds something else, "
            "cannot hold its tree; $SLM_DVFS_TWIN_DIR), then try again")


def check_folder(root: Path) -> None:
    """Refuse a twin folder that someone else could change under us: links put in it (or the folder
    swapped for another) would have us read or write files outside it, with root's rights when we
    are root. It must be ours (our effective uid) and writable by nobody else (tightened when it is
    ours); as root, every folder above it must be root's and writable by nobody else, unless sticky
    (/tmp), where another user can neither rename nor replace it."""
    uid = os.geteuid()
    real = Path(os.path.realpath(root))
    chain = [p for p in (Path(os.path.abspath(root)), *Path(os.path.abspath(root)).parents) if p.exists() or p.is_symlink()]
    chain += [p for p in (real, *real.parents) if p not in chain and p.exists()]
    for p in chain:
        st = os.lstat(p)
        here = p in (real, Path(os.path.abspath(root)))
        why = None
        if here and not stat.S_ISLNK(st.st_mode):
            if st.st_uid != uid:
                why = f"it is owned by uid {st.st_uid}, not by you (uid {uid})"
            elif st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
                os.chmod(p, stat.S_IMODE(st.st_mode) & ~(stat.S_IWGRP | stat.S_IWOTH))
                log.info("made the twin folder %s writable by its owner alone", p)
        elif uid == 0:
            if st.st_uid != 0:
                why = f"{p}, above it, is owned by uid {st.st_uid}"
            elif not stat.S_ISLNK(st.st_mode) and st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) \
                    and not st.st_mode & stat.S_ISVTX:
                why = f"{p}, above it, is writable by others (mode {stat.S_IMODE(st.st_mode):o})"
        if why:
            raise ConfigError(
                f"the twin folder {root} is not safe to use: {why}; another user could put links in it "
                "that make slm-dvfs read or write files outside it" + (" as root" if uid == 0 else ""),
                "give the twin a folder of your own that nobody else can change: as root, a private twins' "
                "folder (`export SLM_DVFS_TWIN_DIR=$(mktemp -d)`), never a fixed path under /tmp or another "
                f"user's folder; or, if you made {root} yourself, remove it and start again",
            )


def fast_tmp() -> str | None:
    """A memory-backed folder for temporary twins where there is one: the twin renders its files
    while it runs, which a journalling disk makes slow."""
    shm = paths.memory_dir()
    return None if shm is None else str(shm)


def put_text(root: Path, rel: str, text: str) -> None:
    """Replace a tree file's content atomically (a concurrent reader never sees it empty), never
    through a link out of the tree."""
    put_file(root, rel, (text if text.endswith("\n") else text + "\n").encode())


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
