"""VirtualOrin: a digital twin of a Jetson AGX Orin that lives in a folder.

It renders the board's kernel files under a root (with `engine.device.treegen`),
installs fake `nvpmodel` and `jetson_clocks` there, and keeps the files current:
`sync()` reads the control files the user (or the Jetson backend) wrote, lets the
governors and mode caps settle, and writes back current clocks, GPU load, INA3221
rails, temperatures and memory activity. `run_step(trace)` advances virtual time by
one training step and accumulates its energy exactly (power is piecewise constant).
So `JetsonDevice(twin.root)` runs unchanged against it.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Mapping

from engine.device.discovery import discover
from engine.device.nvpmodel import EMC_CAP_FILE, format_conf
from engine.device.sysfs import SysfsTree
from engine.device.treegen import RailSpec, TreeLayout, TreeSpec, default_orin_spec, gpu_devfreq_path, render_tree
from engine.device.twin import fake_tools
from engine.device.twin.governors import ControlState, DomainControl, resolve
from engine.device.twin.model import Clocks, StepEstimate, idle_power_mw
from engine.device.twin.profile import RailParams, TwinProfile, load_profile
from engine.device.twin.thermal import ThermalState, idle_zone_temps_c, throttling, zone_temps_c
from engine.core.errors import ConfigError, DeviceError
from engine.core.provenance import Source
from engine.core.trace import StepTrace

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

if TYPE_CHECKING:
    from engine.device.jetson import JetsonDevice

log = logging.getLogger(__name__)

TWIN_MARKER = ".slm-dvfs-twin"  # the same name engine.device.jetson looks for
_MV_STEP = 8  # INA3221 bus voltage LSB
_MA_STEP = 20  # current LSB with the 2 mOhm shunt
_SHUNT_MOHM = 2


@dataclass(frozen=True)
class TwinStep:
    """What one training step cost on the twin."""

    time_s: float
    energy_j: Mapping[str, float]  # per rail
    gpu_hz: int
    cpu_hz: int
    emc_hz: int
    power_mw: Mapping[str, float] = field(default_factory=dict)  # per rail, average
    gpu_util: float = 0.0

    @property
    def total_energy_j(self) -> float:
        return sum(self.energy_j.values())

    @property
    def source(self) -> Source:
        return Source.TWIN


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


class VirtualOrin:
    """A Jetson AGX Orin twin under `root` (a temporary folder by default)."""

    def __init__(
        self,
        profile: str | TwinProfile = "agx-orin-64gb",
        root: str | os.PathLike[str] | None = None,
        *,
        thermal: bool = False,
        layout: str = "r36",
    ) -> None:
        self.profile = profile if isinstance(profile, TwinProfile) else load_profile(profile)
        self._temporary = root is None
        self.root = Path(tempfile.mkdtemp(prefix="slm-dvfs-twin-", dir=_fast_tmp()) if root is None else root).absolute()
        self.thermal_enabled = thermal
        marker = self.root / TWIN_MARKER
        saved: dict[str, str] = {}
        if marker.is_file():
            layout = self._marker_layout(marker, layout)
            saved = _save_controls(SysfsTree(self.root))
            log.info("reopening the twin at %s (keeping %d control files)", self.root, len(saved))
        elif self.root.exists() and any(self.root.iterdir()):
            raise ConfigError(
                f"{self.root} is not empty and holds no twin (no {TWIN_MARKER} file)",
                "give the twin an empty or new folder (or leave root unset for a temporary one)",
            )
        self.layout_name = layout
        self.tree = SysfsTree(self.root)
        try:
            self.layout: TreeLayout = render_tree(self.root, tree_spec(self.profile, layout))
            for rel, text in saved.items():
                _put_text(self.root / rel, text)
            marker.write_text(f'profile = "{self.profile.name}"\nlayout = "{layout}"\n')
            fake_tools.install(self.root)
        except BaseException:
            if self._temporary:
                shutil.rmtree(self.root, ignore_errors=True)
            raise

        self._lock = threading.RLock()
        self._abs: dict[str, str] = {}
        self._written: dict[str, str] = {}
        self._t = 0.0
        self._energy = {name: 0.0 for name in self.profile.rail_names}
        self._trace: StepTrace | None = None
        self._driven = 0
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._realtime = False
        self._tick_s = 0.02
        self._wall = time.monotonic()
        self._control: ControlState | None = None
        self._policy_ctl: list[DomainControl] = []
        self._main_policy = 0
        self._power: dict[str, float] = {}
        self._temps: dict[str, float] = idle_zone_temps_c(self.profile.thermal)
        self._thermal: ThermalState | None = None
        self._closed = False
        _clocks, _est, power = self._refresh(None)
        if thermal:
            self._thermal = ThermalState.steady(sum(power.values()), self.profile.thermal)
            self._write_temps(power)

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> "VirtualOrin":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"VirtualOrin({self.profile.name!r}, root={str(self.root)!r})"

    def start(self, tick_s: float = 0.02, realtime: bool = True) -> None:
        """Keep the files current from a background thread (every tick_s). With realtime,
        virtual time also advances by wall time at idle power (except while driven)."""
        with self._lock:
            self._tick_s = tick_s
            self._realtime = realtime
            self._wall = time.monotonic()
            if self._thread is not None and self._thread.is_alive():
                return
            self._stop.clear()
            self._thread = threading.Thread(target=self._loop, name="slm-dvfs-twin", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5.0)
        self._thread = None

    def close(self) -> None:
        """Stop the thread; remove the root if it is the twin's temporary folder."""
        if self._closed:
            return
        self.stop()
        self._closed = True
        if self._temporary:
            shutil.rmtree(self.root, ignore_errors=True)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @contextmanager
    def driven(self) -> Iterator["VirtualOrin"]:
        """While active, virtual time advances only through run_step / advance_idle."""
        with self._lock:
            self._driven += 1
        try:
            yield self
        finally:
            with self._lock:
                self._driven -= 1
                self._wall = time.monotonic()

    def device(self) -> "JetsonDevice":
        """The Jetson backend over this twin's root. Starts the sync thread (without
        real-time advance) if it is not running, so clock writes get answered."""
        from engine.device.jetson import JetsonDevice

        if not self.running:
            self.start(realtime=False)
        return JetsonDevice(self.root)

    # ------------------------------------------------------------------ time and energy

    def sync(self) -> None:
        """Read the control files, settle governors and caps, write the current state."""
        with self._lock:
            self._refresh(self._trace)

    def run_step(self, trace: StepTrace) -> TwinStep:
        """One training step at the current control state: advances virtual time by its
        duration, adds its exact energy, and leaves the rails showing its power."""
        with self._lock:
            clocks, est, power = self._refresh(trace)
            assert est is not None
            self._accumulate(power, est.time_s)
            self._write_temps(power)
            return TwinStep(
                time_s=est.time_s,
                energy_j=dict(est.energy_j),
                gpu_hz=clocks.gpu_hz,
                cpu_hz=clocks.cpu_hz,
                emc_hz=clocks.emc_hz,
                power_mw=dict(power),
                gpu_util=est.gpu_util,
            )

    def advance_idle(self, seconds: float) -> None:
        """Let the board sit idle for `seconds` of virtual time."""
        if seconds < 0:
            raise ConfigError(f"cannot advance by {seconds} s", "pass a duration of zero or more")
        with self._lock:
            self._trace = None
            _clocks, _est, power = self._refresh(None)
            self._accumulate(power, seconds)
            self._write_temps(power)

    def now(self) -> float:
        with self._lock:
            return self._t

    def energy_j(self) -> dict[str, float]:
        with self._lock:
            return dict(self._energy)

    def rail_powers_mw(self) -> dict[str, float]:
        with self._lock:
            return dict(self._power)

    def temperatures_c(self) -> dict[str, float]:
        with self._lock:
            return dict(self._temps)

    def clocks(self) -> Clocks:
        """The clocks the board runs at now (after the last sync)."""
        with self._lock:
            return self._clocks

    # ------------------------------------------------------------------ internals

    def _loop(self) -> None:
        while not self._stop.wait(self._tick_s):
            try:
                with self._lock:
                    now = time.monotonic()
                    dt, self._wall = now - self._wall, now
                    if self._realtime and self._driven == 0:
                        self.advance_idle(dt)
                    else:
                        self.sync()
            except Exception:  # keep the board alive; a reader may have raced a writer
                if not self.root.exists():
                    log.warning("twin root %s vanished; stopping the sync thread", self.root)
                    return
                log.exception("twin sync failed")

    def _accumulate(self, power: Mapping[str, float], dt: float) -> None:
        for name, mw in power.items():
            self._energy[name] = self._energy.get(name, 0.0) + mw * dt / 1000.0
        self._t += dt
        if self._thermal is not None:
            self._thermal = self._thermal.advance(sum(power.values()), dt, self.profile.thermal)

    def _refresh(self, trace: StepTrace | None) -> tuple[Clocks, StepEstimate | None, dict[str, float]]:
        self._trace = trace
        control = self._read_control()
        cap = self.profile.thermal.throttle_gpu_hz if throttling(self._temps, self.profile.thermal) and self._thermal else None
        clocks, est = resolve(trace, control, self.profile, gpu_cap_hz=cap)
        if est is not None:
            power = dict(est.power_mw)
        else:
            power = idle_power_mw(clocks, self.profile, online_cpus=control.online_cpus)
        self._clocks = clocks
        self._power = power
        self._write_state(clocks, est, power, control)
        return clocks, est, power

    def _read_control(self) -> ControlState:
        try:
            control, policies, main = self._read_control_files()
        except (DeviceError, ValueError) as exc:
            if self._control is None:
                raise
            log.debug("twin: control files mid-write (%s); keeping the last state", exc)
            return self._control
        self._control, self._policy_ctl, self._main_policy = control, policies, main
        return control

    def _read_control_files(self) -> tuple[ControlState, list[DomainControl], int]:
        rd, ri, lay = self._read, self._read_int, self.layout
        g = lay.gpu_devfreq
        gpu = DomainControl(ri(f"{g}/min_freq"), ri(f"{g}/max_freq"), rd(f"{g}/governor"), ri(f"{g}/cur_freq"))
        online = [i for i, d in enumerate(lay.cpu_dirs) if ri(f"{d}/online") == 1]
        policies = [
            DomainControl(
                ri(f"{p}/scaling_min_freq") * 1000,
                ri(f"{p}/scaling_max_freq") * 1000,
                rd(f"{p}/scaling_governor"),
                ri(f"{p}/scaling_cur_freq") * 1000,
            )
            for p in lay.cpu_policy_dirs
        ]
        main = self._first_online_policy(online)
        e = lay.emc
        emc = DomainControl(
            ri(f"{e}/min_rate"), ri(f"{e}/max_rate"), None, ri(f"{e}/rate"), locked=ri(f"{e}/mrq_rate_locked") != 0
        )
        m = re.search(r"pmode:(\d+)", rd(lay.nvpmodel_status))
        mode_id = int(m.group(1)) if m else self.profile.initial_mode
        control = ControlState(gpu=gpu, cpu=policies[main], emc=emc, online_cpus=max(len(online), 1), mode_id=mode_id)
        return control, policies, main

    def _read(self, rel: str) -> str:
        """A fast read of a tree file (the sync thread reads a few dozen per tick)."""
        path = self._abs.get(rel)
        if path is None:
            path = self._abs[rel] = os.path.realpath(os.path.join(self.root, rel))
        try:
            fd = os.open(path, os.O_RDONLY)
            try:
                return os.read(fd, 65536).decode().strip()
            finally:
                os.close(fd)
        except OSError as exc:
            raise DeviceError(f"cannot read {path}: {exc.strerror}", "re-create the twin") from None

    def _read_int(self, rel: str) -> int:
        text = self._read(rel)
        try:
            return int(text.split()[0])
        except (ValueError, IndexError):
            raise DeviceError(f"{rel} holds {text!r}, not a number", "write an integer there") from None

    def _first_online_policy(self, online: list[int]) -> int:
        size = self.profile.cpu.cluster_size
        for i, p in enumerate(self.layout.cpu_policy_dirs):
            first = int(re.search(r"cpu(\d+)/cpufreq", p).group(1))  # type: ignore[union-attr]
            if any(first <= c < first + size for c in online):
                return i
        return 0

    def _write_state(self, clocks: Clocks, est: StepEstimate | None, power: Mapping[str, float], control: ControlState) -> None:
        lay = self.layout
        self._put(f"{lay.gpu_devfreq}/cur_freq", clocks.gpu_hz)
        self._put(f"{lay.gpu_devfreq}/target_freq", clocks.gpu_hz)
        self._put(f"{lay.gpu_device}/load", int(round(1000 * (est.gpu_util if est else 0.0))))
        for i, (p, ctl) in enumerate(zip(lay.cpu_policy_dirs, self._policy_ctl)):
            if i == self._main_policy:
                hz = clocks.cpu_hz
            else:  # other clusters only run background work: their governors sit idle
                hz = resolve(None, replace(control, cpu=ctl), self.profile)[0].cpu_hz
            self._put(f"{p}/scaling_cur_freq", hz // 1000)
            self._put(f"{p}/cpuinfo_cur_freq", hz // 1000)
        self._put_emc_rate(clocks.emc_hz)
        emc_util = est.emc_util if est else 0.0
        self._put(lay.actmon_mc_all, int(round(emc_util * clocks.emc_hz / 1000)))
        self._write_rails(power)
        self._write_temps(power)

    def _put_emc_rate(self, hz: int) -> None:
        """The EMC rate file is both control and state: the automatic scaling rewrites it
        while unlocked; a rate someone locked since our last write stands."""
        rel = f"{self.layout.emc}/rate"
        try:
            current = self._read(rel)
            locked = self._read_int(f"{self.layout.emc}/mrq_rate_locked") != 0
        except DeviceError:
            return
        if current == str(hz):
            self._written[rel] = current
            return
        if locked and self._written.get(rel) != current:
            return
        self._put(rel, hz, force=True)

    def _write_rails(self, power: Mapping[str, float]) -> None:
        sums: dict[str, list[int]] = {}
        for rail in self.profile.rails:
            files = self.layout.rails.get(rail.name)
            if files is None:
                continue
            mv, ma = ina_reading(power.get(rail.name, 0.0), rail)
            volt, curr = files
            self._put(volt, mv)
            self._put(curr, ma)
            if rail.name in self.layout.rail_power:
                self._put(self.layout.rail_power[rail.name], mv * ma // 1000)
            m = re.match(r"(.*)/in(\d)_input$", volt)
            if m:  # hwmon: shunt voltage (uV) and the per-chip sums
                self._put(f"{m.group(1)}/in{int(m.group(2)) + 3}_input", ma * _SHUNT_MOHM)
                sums.setdefault(m.group(1), []).append(ma)
        for d, currents in sums.items():
            self._put(f"{d}/in7_input", sum(currents) * _SHUNT_MOHM)
            self._put(f"{d}/curr4_input", sum(currents))

    def _write_temps(self, power: Mapping[str, float]) -> None:
        if self._thermal is not None:
            self._temps = zone_temps_c(self._thermal.junction_c, power, self.profile.thermal)
        for kind, zone in self.layout.thermal_zones.items():
            if kind in self._temps:  # Orin's sensors report in steps of 0.5 C
                self._put(f"{zone}/temp", int(round(self._temps[kind] * 2)) * 500)

    def _put(self, rel: str, value: object, *, force: bool = False) -> None:
        text = f"{value}"
        if not force and self._written.get(rel) == text:
            return
        _put_text(self.root / rel, text)
        self._written[rel] = text

    def _marker_layout(self, marker: Path, default: str) -> str:
        try:
            data = tomllib.loads(marker.read_text())
        except (tomllib.TOMLDecodeError, OSError):
            return default
        if data.get("profile") not in (None, self.profile.name):
            log.warning("twin root %s was made for profile %s; re-rendering it as %s", self.root, data.get("profile"), self.profile.name)
        layout = str(data.get("layout", default))
        if layout != default:
            log.info("twin root %s keeps its %s layout", self.root, layout)
        return layout


def _fast_tmp() -> str | None:
    """A memory-backed folder for temporary twins where there is one: the sync thread
    replaces files many times a second, which a journalling disk makes slow."""
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK | os.X_OK) else None


def _put_text(path: Path, text: str) -> None:
    """Replace a file's content atomically, so a concurrent reader never sees it empty."""
    tmp = path.parent / f".{path.name}.{threading.get_ident()}.tmp"
    tmp.write_text(text if text.endswith("\n") else text + "\n")
    os.replace(tmp, path)


def _save_controls(tree: SysfsTree) -> dict[str, str]:
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
