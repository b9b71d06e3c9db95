"""Device profiles of the digital twin: every parameter of the model, loaded from TOML.

A profile lives in `profiles/devices/<name>.toml`; each value there carries a comment
saying where it comes from (the spec, a datasheet fact, or an estimate/calibration).
All parameters sit in one frozen `TwinProfile` so the model stays a pure function of
(trace, clocks, profile) and a later calibration can fit them with `dataclasses.replace`.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import sys
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, TypeVar

from engine.device.base import PowerMode
from engine.core.errors import ProfileError, SlmDvfsError
from engine.core.paths import data_dir, profiles_dir
from engine.core.plausible import BoardLimits
from engine.core.text import shown
from engine.core.userinput import read_user_file
from engine.device.twin.params import ParamSpread, get_param, with_params

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

log = logging.getLogger(__name__)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib


@dataclass(frozen=True)
class VfCurve:
    """Voltage against frequency: flat at `floor_v` up to `knee_hz`, then rising
    to `max_v` at `max_hz` as ((f - knee) / (max - knee)) ** exponent."""

    floor_v: float
    knee_hz: float
    max_v: float
    max_hz: float
    exponent: float = 1.0

    def volts(self, hz: float) -> float:
        if hz <= self.knee_hz:
            return self.floor_v
        x = (hz - self.knee_hz) / (self.max_hz - self.knee_hz)
        return self.floor_v + (self.max_v - self.floor_v) * x**self.exponent


@dataclass(frozen=True)
class GpuParams:
    table_hz: tuple[int, ...]
    sms: int
    fp32_flops_per_cycle: float  # CUDA cores x 2 (one FMA = 2 FLOPs)
    tensor_flops_per_cycle: float  # dense FP16/BF16 on tensor cores
    matmul_efficiency: float  # achieved fraction of peak on matmul/attention
    vector_efficiency: float  # achieved fraction of the FP32 peak on other kinds
    bytes_per_cycle: float  # what the SMs can move per GPU cycle (caps bandwidth at low clocks)
    kernel_cycles: float  # GPU cycles of per-kernel overhead (ramp-up, tail)
    kernel_fixed_s: float  # clock-independent per-kernel gap on the GPU
    overlap_loss: float  # 0: queueing hides all issue/execute mismatch; 1: none of it
    capacitance_f: float  # effective switched capacitance at activity 1, farad
    activity_compute: float  # switching activity while compute-bound
    activity_memory: float  # while bandwidth-bound (SMs mostly stalled)
    activity_overhead: float  # during per-kernel overhead
    activity_idle: float  # clock tree of an idle, un-gated GPU
    leak_mw: float  # leakage at the floor voltage
    vf: VfCurve
    governor: str  # default devfreq governor
    available_governors: tuple[str, ...]
    podgov_target_load: float  # nvhost_podgov's load_target: it steps the clock towards this load
    idle_hz: int  # where the governor parks an idle GPU
    # The share of the GPU's busy time podgov's load counter reports (1: all of it).
    podgov_load_seen: float = 1.0
    # nvhost_podgov's other tunables (engine/device/twin/dynamics.py), L4T's defaults:
    podgov_load_max: float = 0.9  # a window busier than this jumps a third of the range
    podgov_bias: float = 0.8  # the step towards the target load, per unit of relative load error
    podgov_smooth: float = 10.0  # weight of the past in the averages of load and requests
    podgov_damp: float = 0.7  # weight of the new request against the average request
    podgov_block_s: float = 0.05  # at most one change per block window
    poll_s: float = 0.025  # devfreq's polling interval: one governor window
    load_noise: float = 0.1  # window-to-window relative spread of the load the governor sees


@dataclass(frozen=True)
class CpuParams:
    table_hz: tuple[int, ...]
    cores: int
    cluster_size: int  # cores per cpufreq policy
    launch_cycles: float  # host CPU cycles to launch one kernel from eager PyTorch
    host_overlap: float  # fraction of non-launch host work hidden behind the GPU
    wait_spin_activity: float  # activity of the host thread spinning on the GPU (0: it sleeps)
    capacitance_f: float  # per core, at activity 1
    activity_busy: float
    activity_idle: float  # a core in WFI
    leak_mw_per_core: float  # at the floor voltage
    vf: VfCurve
    governor: str
    available_governors: tuple[str, ...]
    schedutil_headroom: float  # schedutil asks for headroom x utilisation x current clock
    idle_hz: int  # where the governor parks an idle CPU (observed in tegrastats)
    schedutil_half_life_s: float = 0.032  # PELT's utilisation average halves its past in 32 ms
    # The training loop's serial host work (a trace's serial_cycles) on this board, relative to the
    # trace's estimate: Python, CPython and library versions move it; calibration fits it.
    serial_scale: float = 1.0
    load_noise: float = 0.1  # window-to-window relative spread of the utilisation


@dataclass(frozen=True)
class EmcParams:
    table_hz: tuple[int, ...]
    bytes_per_cycle: float  # DRAM bus bytes per EMC clock
    achievable: float  # achievable fraction of the peak bandwidth
    target_util: float  # the automatic governor keeps utilisation below this
    idle_hz: int  # the automatic governor's floor
    gpu_ratio: float  # EMC floor = ratio x (GPU clock / GPU max) x EMC max while the GPU is busy
    gpu_busy_threshold: float  # GPU load above which the GPU's EMC request applies in full
    half_life_s: float = 0.02  # the activity monitor's average halves its past in this time
    load_noise: float = 0.1  # window-to-window relative spread of the traffic


@dataclass(frozen=True)
class RailParams:
    """One INA3221 rail: a static part, parts following EMC clock and DRAM traffic,
    the dynamic power of the domains it feeds, and a share of the others' (conversion)."""

    name: str
    chip: str  # I2C address, "0x40" / "0x41"
    channel: int
    bus_mv: float  # bus voltage the sensor reports at no load
    droop_mv_per_a: float  # how the bus voltage sags with current
    static_mw: float
    emc_mw_per_ghz: float
    traffic_mw_per_gbps: float
    domains: tuple[str, ...] = ()  # "gpu" and/or "cpu"
    conversion_share: float = 0.0  # fraction of the GPU+CPU dynamic power also seen here


@dataclass(frozen=True)
class ThermalZoneParams:
    type: str  # thermal_zoneN/type
    offset_c: float  # above the modelled junction temperature
    hotspot_c_per_w: float = 0.0  # extra degrees per W of the zone's own rail (hot spot)
    rail: str = ""


@dataclass(frozen=True)
class ThermalParams:
    ambient_c: float
    r_c_per_w: float  # junction-to-ambient thermal resistance
    tau_s: float  # time constant (R x C)
    idle_c: float  # temperature reported when the thermal model is off
    throttle_c: float  # software throttling starts
    shutdown_c: float  # the board shuts down
    throttle_gpu_hz: int  # GPU cap while throttling
    zones: tuple[ThermalZoneParams, ...]


@dataclass(frozen=True)
class ThermalGuardParams:
    """When experiments pause or stop for heat (engine.run.thermal): the hottest zone's limits."""

    wait_c: float = 75.0  # above this before a point/run: idle until cooldown_c
    abort_c: float = 85.0  # above this at any time: stop the experiment
    cooldown_c: float = 65.0  # waiting ends at or below this
    poll_s: float = 5.0  # how often the temperatures are read while waiting


@dataclass(frozen=True)
class IdentityParams:
    board: str
    module: str
    dt_model: str  # /proc/device-tree/model
    l4t: str
    jetpack: str
    nvpmodel_conf: str  # file name under etc/nvpmodel/


@dataclass(frozen=True)
class ModuleFacts:
    """What a profile's module is, beside its physics (the `[module]` table; optional, so a profile
    without one, and every figure it gives, stays as it was). engine/device/jetson/identity.py names
    each part's profile; tests/test_module_profiles.py checks the two agree."""

    family: str  # "agx-orin" | "orin-nx" | "orin-nano": docs/modules/<family>.md
    parts: tuple[str, ...]  # device-tree part numbers this profile stands for, e.g. ("p3767-0003", "p3767-0005")
    compatible: str  # /proc/device-tree/compatible of its developer kit, carrier first ("\0"-separated)
    total_rail: str = ""  # the rail that is the module's input (VDD_IN on Orin Nano/NX); "": the sum of the rails
    memory_bandwidth_gbps: float | None = None  # the data sheet's peak DRAM bandwidth at the top EMC rate
    cuda_cores: int | None = None  # the data sheet's CUDA cores (SMs x 128 on Ampere)
    l4t_min: str = ""  # the first L4T release whose nvpmodel conf has the profile's modes ("36.4.3": JetPack 6.2)


@dataclass(frozen=True)
class TwinProfile:
    name: str
    description: str
    identity: IdentityParams
    module_power_limit_mw: float
    gpu: GpuParams
    cpu: CpuParams
    emc: EmcParams
    rails: tuple[RailParams, ...]
    thermal: ThermalParams
    modes: tuple[PowerMode, ...]
    default_mode: int  # PM_CONFIG DEFAULT of the conf file
    initial_mode: int  # the mode a fresh twin starts in
    thermal_guard: ThermalGuardParams | None = None  # experiments' heat limits; None: engine.run.thermal's defaults
    uncertainty: tuple[ParamSpread, ...] = ()  # the uncertain numbers (engine.device.twin.params)
    base: str = ""  # a calibrated profile: the profile its [params] overlay
    memory_total_mb: float | None = None  # the memory Linux sees (MemTotal); None: not known
    module: ModuleFacts | None = None  # part numbers, compatible, total rail; None: the AGX Orin 64GB's defaults
    source_path: str = field(default="", compare=False)

    def mode(self, mode_id: int) -> PowerMode:
        for m in self.modes:
            if m.id == mode_id:
                return m
        raise ProfileError(
            f"profile {self.name} has no nvpmodel mode {mode_id}",
            f"use one of {', '.join(str(m.id) for m in self.modes)}",
        )

    def rail(self, name: str) -> RailParams:
        for r in self.rails:
            if r.name == name:
                return r
        raise ProfileError(f"profile {self.name} has no rail {name}", "check the rail names in the profile")

    @property
    def rail_names(self) -> tuple[str, ...]:
        return tuple(r.name for r in self.rails)

    @property
    def limits(self) -> BoardLimits:
        """What this board can plausibly show (engine.core.plausible)."""
        return BoardLimits.from_profile(self)


DEFAULT_PROFILE = "agx-orin-64gb"  # the board the project is written against (shared/spec)
MAX_PROFILE_BYTES = 1 << 20  # the shipped profile is 15 KB


def limits_for(profile: str | None) -> BoardLimits:
    """The plausible ranges of the profile a user named; the default profile's where none is named."""
    return load_profile(profile or DEFAULT_PROFILE).limits


@functools.lru_cache(maxsize=16)  # read on every poll of a dashboard: a profile's limits do not change while we run
def board_limits(profile: str | None) -> BoardLimits:
    """The plausible ranges of a board whose identity names `profile` (a twin's; None on a board:
    the spec's AGX Orin 64GB); the default profile's where that one cannot be loaded (logged)."""
    try:
        return limits_for(profile)
    except ProfileError as exc:
        log.warning("plausible ranges from %s, not %s: %s", DEFAULT_PROFILE, profile, exc.what)
        return limits_for(None)


def devices_dir() -> Path:
    return profiles_dir() / "devices"


def user_profiles_dir() -> Path:
    """Where calibrated profiles are written (`slm-dvfs calibrate`): the data dir's, not the shipped."""
    return data_dir() / "profiles"


def available_profiles() -> tuple[str, ...]:
    """Names of the shipped device profiles and of the calibrated ones in the data dir."""
    names = {p.stem for p in devices_dir().glob("*.toml")}
    if user_profiles_dir().is_dir():
        names |= {p.stem for p in user_profiles_dir().glob("*.toml")}
    return tuple(sorted(names))


CALIBRATED_SUFFIX = "-calibrated"  # what `slm-dvfs calibrate` names a calibration of a profile


def calibrated_or(name: str) -> str:
    """`<name>-calibrated` when `slm-dvfs calibrate` has written one to the data dir, else `name`:
    what intervals of predictions for this board's kind rest on when no profile is named."""
    candidate = f"{name}{CALIBRATED_SUFFIX}"
    return candidate if (user_profiles_dir() / f"{candidate}.toml").is_file() else name


def profile_path(name_or_path: str | Path) -> Path:
    """The TOML file of a profile name (shipped first, then the data dir's) or path."""
    text_name = str(name_or_path)
    path = Path(text_name)
    try:
        if path.suffix == ".toml" or path.is_file():
            return path
    except OSError as exc:  # ENAMETOOLONG and the like: no profile of that name
        raise ProfileError(f"no device profile {shown(text_name)!r} ({exc.strerror or exc})",
                           f"use one of: {', '.join(available_profiles())}; or the path of a profile TOML file",
                           ) from None
    shipped = devices_dir() / f"{text_name}.toml"
    user = user_profiles_dir() / f"{text_name}.toml"
    return shipped if shipped.is_file() or not user.is_file() else user


def load_profile(name_or_path: str | Path) -> TwinProfile:
    """Load a profile by name ("agx-orin-64gb", or a calibrated "agx-orin-64gb-calibrated" in the
    data dir) or by path to a TOML file. A file with `base = NAME` is an overlay: the base
    profile with its `[params]` numbers replaced (paths as in engine.device.twin.params)."""
    return _load(name_or_path, seen=())


def _load(name_or_path: str | Path, seen: tuple[str, ...]) -> TwinProfile:
    path = profile_path(name_or_path)
    if not path.is_file():
        names = ", ".join(available_profiles()) or "(none found)"
        raise ProfileError(
            f"no device profile {str(name_or_path)!r} (looked for {path})",
            f"use one of: {names}; or pass the path of a profile TOML file",
        )
    data = _read_toml(path)
    if "base" in data:
        profile = _overlay(data, path, seen)
    else:
        profile = _build(TwinProfile, data, "", path)
    profile = dataclasses.replace(profile, source_path=str(path))
    _check(profile, path)
    return profile


def _read_toml(path: Path) -> dict[str, object]:
    try:
        raw = read_user_file(path, "device profile", max_bytes=MAX_PROFILE_BYTES,
                             remedy="give a profile TOML file (profiles/devices/ shows one)")
    except SlmDvfsError as exc:
        raise ProfileError(exc.what, exc.remedy) from None
    try:
        return tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ProfileError(
            f"device profile {path} is not valid TOML: {shown(exc, 200)}",
            "fix the syntax there, or restore the shipped file",
        ) from None
    except RecursionError:
        raise ProfileError(f"device profile {path} nests too deeply to be read", "restore the shipped file") from None


def _overlay(data: Mapping[str, object], path: Path, seen: tuple[str, ...]) -> TwinProfile:
    base = data["base"]
    if not isinstance(base, str) or not base:
        raise _bad(path, "base", f"should name a profile, found {base!r}")
    if base in seen or base == path.stem:
        raise _bad(path, "base", f"names {base!r}, which leads back to this profile")
    parent = _load(base, seen + (path.stem,))
    params = data.get("params", {})
    if not isinstance(params, Mapping):
        raise _bad(path, "params", "should be a table of parameter paths and numbers")
    numbers: dict[str, float] = {}
    for key, value in params.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _bad(path, f"params.{key}", f"should be a number, found {value!r}")
        numbers[key] = value  # an int stays an int: with_params keeps integers integers
    try:
        profile = with_params(parent, numbers)
    except ProfileError as exc:
        raise ProfileError(f"device profile {path}: {exc.what}", exc.remedy) from None
    # Any: _convert has checked each value against its field's type, read at run time (see below)
    changes: dict[str, Any] = {"base": base}
    for key in ("name", "description"):
        if key in data:
            changes[key] = _convert(str, data[key], key, path)
    if "uncertainty" in data:
        changes["uncertainty"] = _convert(tuple[ParamSpread, ...], data["uncertainty"], "uncertainty", path)
    return dataclasses.replace(profile, **changes)


# --- generic TOML -> frozen dataclass mapping, with errors naming file and key ---------
# The field types are read at run time (typing.get_type_hints), so a converted value is an `object`
# to the checker: each conversion checks it against its field's type before the dataclass takes it.

D = TypeVar("D", bound="DataclassInstance")


def _build(cls: type[D], table: object, where: str, path: Path) -> D:
    if not isinstance(table, Mapping):
        raise _bad(path, where, f"should be a table, found {type(table).__name__}")
    hints = typing.get_type_hints(cls)
    kwargs: dict[str, object] = {}
    for f in dataclasses.fields(cls):
        if f.name == "source_path":
            continue
        key = f"{where}.{f.name}" if where else f.name
        if f.name not in table:
            if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING:
                continue
            raise ProfileError(
                f"device profile {path} lacks key '{key}'",
                f"add '{f.name}' to the [{where or 'top level'}] table (see profiles/devices/agx-orin-64gb.toml)",
            )
        kwargs[f.name] = _convert(hints[f.name], table[f.name], key, path)
    return cls(**kwargs)


def _convert(tp: object, value: object, key: str, path: Path) -> object:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        if value is None:
            return None
        return _convert(inner[0], value, key, path)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _build(tp, value, key, path)
    if origin is tuple:
        if not isinstance(value, list):
            raise _bad(path, key, f"should be a list, found {value!r}")
        return tuple(_convert(args[0], v, f"{key}[{i}]", path) for i, v in enumerate(value))
    if tp is bool:
        if not isinstance(value, bool):
            raise _bad(path, key, f"should be true or false, found {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise _bad(path, key, f"should be an integer, found {value!r}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _bad(path, key, f"should be a number, found {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise _bad(path, key, f"should be a string, found {value!r}")
        return value
    return value


def _bad(path: Path, key: str, why: str) -> ProfileError:
    return ProfileError(f"device profile {path}: key '{key}' {why}", "correct that value (the shipped profile shows the expected form)")


def _check(p: TwinProfile, path: Path) -> None:
    """Consistency the model relies on."""
    for key, table in (("gpu.table_hz", p.gpu.table_hz), ("cpu.table_hz", p.cpu.table_hz), ("emc.table_hz", p.emc.table_hz)):
        if not table or list(table) != sorted(set(table)):
            raise _bad(path, key, "should be a non-empty ascending list of distinct frequencies")
    ids = [m.id for m in p.modes]
    for key, mode_id in (("default_mode", p.default_mode), ("initial_mode", p.initial_mode)):
        if mode_id not in ids:
            raise _bad(path, key, f"names mode {mode_id}, but the profile's modes are {ids}")
    for spread in p.uncertainty:
        spread.check(get_param(p, spread.path), str(path))
    if p.module is not None and p.module.total_rail and p.module.total_rail not in p.rail_names:
        raise _bad(path, "module.total_rail", f"names {p.module.total_rail!r}, which is none of the rails {list(p.rail_names)}")
    for r in p.rails:
        for d in r.domains:
            if d not in ("gpu", "cpu"):
                raise _bad(path, f"rails.{r.name}.domains", f"holds {d!r}; allowed are 'gpu' and 'cpu'")
