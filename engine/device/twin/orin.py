"""VirtualOrin: a digital twin of a Jetson AGX Orin that lives in a folder.

It renders the board's kernel files under a root (with `engine.device.treegen`, from
`twin/tree.py`'s spec), installs fake `nvpmodel` and `jetson_clocks` there, and keeps
the files current: `sync()` reads the control files the user (or the Jetson backend)
wrote, lets the governors and mode caps settle, and writes back current clocks, GPU
load, INA3221 rails, temperatures and memory activity (through `twin/files.py`).
`run_step(trace)` advances virtual time by one training step and accumulates its
energy exactly (power is piecewise constant). So `JetsonDevice(twin.root)` runs
unchanged against it.

The state lives in memory: its files are rendered when this process reads them (SysfsTree
and OpenFiles tell the twin first: `tree_read`), and for other processes on a coarse tick
of the sync thread, which also reads the control files again for writers it is not told of.
A step touches no file.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Mapping, Sequence

from engine.device.rails import total_of
from engine.core.errors import ConfigError, DeviceError, errno_text
from engine.core.provenance import Source
from engine.core.trace import StepMix, StepTrace
from engine.device.sysfs import TWIN_MARKER, SysfsTree, unwatch_tree, watch_tree
from engine.device.treegen import TreeLayout, render_tree
from engine.device.twin import fake_tools
from engine.device.twin.files import TwinFiles
from engine.device.twin.governors import ControlState, DomainControl, resolve
from engine.device.twin.model import Clocks, StepEstimate, idle_power_mw
from engine.device.twin.phases import Phase, phase_at, step_phases
from engine.device.twin.profile import TwinProfile, load_profile
from engine.device.twin.thermal import ThermalState, idle_zone_temps_c, throttling, zone_temps_c
from engine.device.twin.tree import (check_folder, fast_tmp, marker_layout, put_text, save_controls, tree_remedy,
                                      tree_spec)

if TYPE_CHECKING:
    from engine.device.jetson import JetsonDevice

log = logging.getLogger(__name__)

__all__ = ["TWIN_MARKER", "TwinStep", "VirtualOrin"]

# While a run drives the twin, its rail files play each step's phases back over the wall
# time the host takes per step; once no step has come for this long (or for GAP_STEPS
# host steps, whichever is longer) the run is paused, evaluating or between runs: idle.
IDLE_AFTER_S = 0.5
GAP_STEPS = 3.0
# The sync thread renders the files and reads the controls again for other processes (this
# process's readers and writers are served when they read or write): every RENDER_TICK_S
# while anything read the twin in the last QUIET_AFTER_S, else every QUIET_TICK_S.
RENDER_TICK_S = 0.25
QUIET_AFTER_S = 5.0
QUIET_TICK_S = 1.0

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
        return total_of(self.energy_j)  # the module's input rail where it has one, else the sum

    @property
    def source(self) -> Source:
        return Source.TWIN



class VirtualOrin:
    """A Jetson AGX Orin twin under `root` (a temporary folder by default). `serial` writes a device-tree
    serial-number (twins of one module are then told apart, as boards are); a reopened twin keeps its own."""

    def __init__(
        self,
        profile: str | TwinProfile = "agx-orin-64gb",
        root: str | os.PathLike[str] | None = None,
        *,
        thermal: bool = False,
        layout: str = "r36",
        serial: str | None = None,
    ) -> None:
        self.profile = profile if isinstance(profile, TwinProfile) else load_profile(profile)
        self._temporary = root is None
        self.root = Path(tempfile.mkdtemp(prefix="slm-dvfs-twin-", dir=fast_tmp()) if root is None else root).absolute()
        self.thermal_enabled = thermal
        self.tree = SysfsTree(self.root)
        saved: dict[str, str] = {}
        try:
            if not self._temporary:
                check_folder(self.root)  # before anything is read or written there
            if self.tree.exists(TWIN_MARKER):
                layout = marker_layout(self.root, self.profile.name, layout)
                saved = save_controls(self.tree)
                log.info("reopening the twin at %s (keeping %d control files)", self.root, len(saved))
            elif self.root.exists() and any(self.root.iterdir()):
                raise ConfigError(
                    f"{self.root} is not empty and holds no twin (no {TWIN_MARKER} file)",
                    "give the twin an empty or new folder (or leave root unset for a temporary one)",
                )
            self.layout_name = layout
            self.layout: TreeLayout = render_tree(self.root, replace(tree_spec(self.profile, layout), serial=serial or ""))
            for rel, text in saved.items():
                put_text(self.root, rel, text)
            put_text(self.root, TWIN_MARKER, f'profile = "{self.profile.name}"\nlayout = "{layout}"\n')
            fake_tools.install(self.root)
        except OSError as exc:  # a full disk, a folder we may not write: what, where, and what to do
            if self._temporary:
                shutil.rmtree(self.root, ignore_errors=True)
            raise DeviceError(f"cannot write the twin's tree at {self.root} ({errno_text(exc.errno, exc.strerror)})",
                              tree_remedy(exc.errno)) from None
        except BaseException:
            if self._temporary:
                shutil.rmtree(self.root, ignore_errors=True)
            raise

        self._lock = threading.RLock()
        self._files = TwinFiles(self.root, self.layout, self.profile)
        self._t = 0.0
        self._energy = {name: 0.0 for name in self.profile.rail_names}
        self._trace: StepTrace | StepMix | None = None  # the load the state shows (None: idle)
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
        # what the rail files play back while driven (see _shown): the last step, when the
        # host began it (wall clock), and the host's wall time per step
        self.wall_clock = time.monotonic
        self._last_step: tuple[StepTrace, Clocks, StepEstimate, int] | None = None
        self._phases: tuple[Phase, ...] | None = None
        self._step_wall: float | None = None
        self._step_period: float | None = None
        self._long_gaps = 0  # long gaps in a row before the last step
        self._last_read = -float("inf")  # when this process last read the twin (files or meter)
        self._settling = False  # inside _refresh (a reentrant read, from a signal handler, waits for none)
        _clocks, _est, power = self._refresh(None)
        if thermal:
            self._thermal = ThermalState.steady(total_of(power), self.profile.thermal)
            self._write_temps(power)
        self._files.flush()  # the tree shows the state it opens in, to any process
        watch_tree(self.root, self)

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> "VirtualOrin":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"VirtualOrin({self.profile.name!r}, root={str(self.root)!r})"

    def start(self, tick_s: float = 0.02, realtime: bool = True) -> None:
        """Answer control writes and keep the files current, in tick_s steps: on each read by this
        process, and from a background thread on a coarse tick for other processes (see
        RENDER_TICK_S). With realtime, virtual time also advances by wall time at idle power
        (except while driven), in tick_s steps."""
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
        with self._lock:
            unwatch_tree(self.root, self)
            if not self._temporary:  # the next command's twin opens on this tree
                with contextlib.suppress(DeviceError):
                    self._files.flush()
            self._closed = True
            self._files.close()
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
            if self._driven == 1:  # a new run: its host pace is its own
                self._step_wall = self._step_period = None
                self._long_gaps = 0
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
        """Read the control files, settle governors and caps, and render the state's files."""
        with self._lock:
            self._files.stale = True
            self._refresh(self._trace)
            self._files.flush()

    def run_step(self, trace: StepTrace | StepMix) -> TwinStep:
        """One training step at the current control state: advances virtual time by its
        duration, adds its exact energy, and leaves the rails showing its power. A StepMix
        (dynamic padding) runs each part for its weight of a step, in order: the step's time
        and energy are the weighted means of the parts' (engine.device.twin.fast.mix_estimate),
        and the state it leaves is the whole step's (its mean power, its heaviest part's clocks),
        not its last part's."""
        if isinstance(trace, StepMix):
            if not trace.is_single:
                return self._run_mix(trace)
            trace = trace.parts[0][1]
        with self._lock:
            self._note_step()
            self._files.check()  # a control written by a process that did not tell us
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

    def _run_mix(self, mix: StepMix) -> TwinStep:
        with self._lock:
            self._note_step()
            self._files.check()
            time_s, util = 0.0, 0.0
            energy: dict[str, float] = {}
            for weight, part in mix.parts:
                _clocks, est, power = self._refresh(part)
                assert est is not None
                self._accumulate(power, weight * est.time_s)
                self._write_temps(power)
                time_s += weight * est.time_s
                util += weight * est.gpu_util * est.time_s
                for name, joules in est.energy_j.items():
                    energy[name] = energy.get(name, 0.0) + weight * joules
            # What the board shows after the step (its power, clocks and files, and what the sync
            # thread keeps re-resolving) is the step as a whole, not its last, rarest part.
            clocks, _est, _power = self._refresh(mix)
            return TwinStep(time_s=time_s, energy_j=energy, gpu_hz=clocks.gpu_hz, cpu_hz=clocks.cpu_hz,
                            emc_hz=clocks.emc_hz, power_mw={n: 1000.0 * j / time_s for n, j in energy.items()},
                            gpu_util=util / time_s)

    def advance_idle(self, seconds: float) -> None:
        """Let the board sit idle for `seconds` of virtual time."""
        if seconds < 0:
            raise ConfigError(f"cannot advance by {seconds} s", "pass a duration of zero or more")
        with self._lock:
            self._trace = None
            self._last_step = None
            self._files.check()
            _clocks, _est, power = self._refresh(None)
            self._accumulate(power, seconds)
            self._write_temps(power)

    def now(self) -> float:
        with self._lock:
            self._meter_read()
            return self._t

    def rail_update_interval_s(self) -> float:
        """How often its time and rails move by themselves: once a tick while it follows the
        wall clock (started with realtime), else 0 (they move only with steps and idles)."""
        with self._lock:
            return self._tick_s if self._realtime and self._thread is not None else 0.0

    def energy_j(self) -> dict[str, float]:
        with self._lock:
            self._meter_read()
            return dict(self._energy)

    def rail_powers_mw(self) -> dict[str, float]:
        with self._lock:
            self._meter_read()
            return dict(self._power)

    def temperatures_c(self) -> dict[str, float]:
        with self._lock:
            self._meter_read()
            return dict(self._temps)

    def clocks(self) -> Clocks:
        """The clocks the board runs at now (after the last sync)."""
        with self._lock:
            self._meter_read()
            return self._clocks

    # ------------------------------------------------------------------ readers and writers

    def tree_read(self, rels: Sequence[str]) -> None:
        """This process is about to read these files of the tree (SysfsTree, OpenFiles): settle the
        state if a tick has passed or a control was written, then render those files."""
        self._last_read = time.monotonic()
        with self._lock:
            if self._closed or self._settling:  # a read from a signal handler amid a settle: files as they are
                return
            try:
                self._catch_up(reread=True)
                self._files.flush(rels)
            except (DeviceError, OSError) as exc:  # the reader then reads what the file held
                log.warning("twin: cannot render %s: %s", ", ".join(rels), exc)

    def tree_written(self, rel: str) -> None:
        """This process wrote a file of the tree: read the controls again before the next settle."""
        with self._lock:
            if not self._closed:
                self._files.written_by_other(rel)

    # ------------------------------------------------------------------ internals

    def _loop(self) -> None:
        while not self._stop.wait(self._loop_period()):
            try:
                with self._lock:
                    self._files.stale = True  # another process may have written a control file
                    self._tick()
                    self._files.flush()  # for readers in other processes
            except Exception:  # keep the board alive; a reader may have raced a writer
                if not self.root.exists():
                    log.warning("twin root %s vanished; stopping the sync thread", self.root)
                    return
                log.exception("twin sync failed")

    def _loop_period(self) -> float:
        """Coarse while something reads the twin (this process's readers are served when they read),
        slower once nothing has for QUIET_AFTER_S."""
        quiet = time.monotonic() - self._last_read > QUIET_AFTER_S
        return max(self._tick_s, QUIET_TICK_S if quiet else RENDER_TICK_S)

    def _tick(self) -> None:
        """One tick of the board: idle time passes (realtime, undriven), or the state is settled again."""
        now = time.monotonic()
        dt, self._wall = now - self._wall, now
        if self._realtime and self._driven == 0:
            self.advance_idle(dt)
        else:
            self._refresh(self._trace)

    def _catch_up(self, *, reread: bool) -> None:
        """Tick now if a control file was written, or (started) if the thread would have: a tick has
        passed since the last; `reread`: see then whether another process wrote a control file. A
        twin not started moves only with steps, syncs and writes."""
        if self._thread is not None and time.monotonic() - self._wall >= self._tick_s:
            if reread:
                self._files.check()
        elif not self._files.stale:
            return
        self._tick()

    def _meter_read(self) -> None:
        """A read of the twin's figures: while it idles on the wall clock, its time first catches up."""
        self._last_read = time.monotonic()
        if self._realtime and self._driven == 0:
            self._catch_up(reread=False)

    def _accumulate(self, power: Mapping[str, float], dt: float) -> None:
        for name, mw in power.items():
            self._energy[name] = self._energy.get(name, 0.0) + mw * dt / 1000.0
        self._t += dt
        if self._thermal is not None:
            self._thermal = self._thermal.advance(total_of(power), dt, self.profile.thermal)

    def _refresh(self, trace: StepTrace | StepMix | None) -> tuple[Clocks, StepEstimate | None, dict[str, float]]:
        """Settle the state on `trace` (None: idle) at the control files' settings and put it in the
        state files (in memory: rendered when read, or on the sync thread's tick).
        A multi-part StepMix shows its mean power (fast.mix_estimate) and its heaviest part's clocks,
        load and phases; the estimate returned is then that part's."""
        self._settling = True
        try:
            return self._settle(trace)
        finally:
            self._settling = False

    def _settle(self, trace: StepTrace | StepMix | None) -> tuple[Clocks, StepEstimate | None, dict[str, float]]:
        self._trace = trace
        control = self._read_control()
        cap = self.profile.thermal.throttle_gpu_hz if throttling(self._temps, self.profile.thermal) and self._thermal else None
        step = max(trace.parts, key=lambda p: p[0])[1] if isinstance(trace, StepMix) else trace
        clocks, est = resolve(step, control, self.profile, gpu_cap_hz=cap)
        if isinstance(trace, StepMix) and not trace.is_single:
            from engine.device.twin.fast import mix_estimate

            power = dict(mix_estimate(trace, control, self.profile, gpu_cap_hz=cap).power_mw)
        elif est is not None:
            power = dict(est.power_mw)
        else:
            power = idle_power_mw(clocks, self.profile, online_cpus=control.online_cpus)
        self._clocks = clocks
        self._power = power
        self._write_state(clocks, est, power, control, step)
        return clocks, est, power

    def _read_control(self) -> ControlState:
        try:
            control, policies, main = self._files.read_control()
        except (DeviceError, ValueError) as exc:
            if self._control is None:
                raise
            log.debug("twin: control files mid-write (%s); keeping the last state", exc)
            return self._control
        self._control, self._policy_ctl, self._main_policy = control, policies, main
        return control

    def _write_state(self, clocks: Clocks, est: StepEstimate | None, power: Mapping[str, float], control: ControlState,
                     step: StepTrace | None) -> None:
        lay = self.layout
        self._files.put(f"{lay.gpu_devfreq}/cur_freq", clocks.gpu_hz)
        self._files.put(f"{lay.gpu_devfreq}/target_freq", clocks.gpu_hz)
        if est is not None and step is not None:
            last = self._last_step
            if last is None or last[0] is not step or last[1] != clocks or last[3] != control.online_cpus:
                self._phases = None
            self._last_step = (step, clocks, est, control.online_cpus)
        phase, rails, util = self._shown(power, est.gpu_util if est else 0.0)
        self._files.put(f"{lay.gpu_device}/load", int(round(1000 * util)))
        self._files.write_cpu_stat(time.monotonic(), self._core_shares(est, phase, control), control.online_cpus)
        for i, (p, ctl) in enumerate(zip(lay.cpu_policy_dirs, self._policy_ctl)):
            if i == self._main_policy:
                hz = clocks.cpu_hz
            else:  # other clusters only run background work: their governors sit idle
                hz = resolve(None, replace(control, cpu=ctl), self.profile)[0].cpu_hz
            self._files.put(f"{p}/scaling_cur_freq", hz // 1000)
            self._files.put(f"{p}/cpuinfo_cur_freq", hz // 1000)
        self._files.put_emc_rate(clocks.emc_hz)
        emc_util = est.emc_util if est else 0.0
        # in the unit jetson-stats reads (jtop/core/memory.py): mc_all / (EMC rate in kHz) = percent
        self._files.put(lay.actmon_mc_all, int(round(emc_util * 100 * clocks.emc_hz / 1000)))
        self._files.write_rails(rails)
        self._write_temps(power)

    def _core_shares(self, est: StepEstimate | None, phase: str, control: ControlState) -> dict[int, float]:
        """Each online core's busy share for /proc/stat: the training loop's core (the first of the
        policy that runs the work) at the step's CPU share, the rest of its busy core-equivalents
        spread over the other online cores; nothing while idle (background work is not modelled)."""
        if est is None or phase == "idle":
            return {}
        main = self._main_policy * self.profile.cpu.cluster_size
        shares = {main: est.cpu_util}
        others = [c for c in range(control.online_cpus) if c != main]
        rest = max(0.0, est.cpu_busy_cores - est.cpu_util)
        for c in others:
            shares[c] = rest / len(others)
        return shares

    def _note_step(self) -> None:
        """A step arrives: the host's wall time per step is the time since the last one,
        unless that was a gap (a pause, an evaluation), which is no step."""
        now = self.wall_clock()
        if self._step_wall is not None:
            gap = now - self._step_wall
            long = self._step_period is not None and gap > GAP_STEPS * max(self._step_period, IDLE_AFTER_S / GAP_STEPS)
            self._long_gaps = self._long_gaps + 1 if long else 0
            if not long or self._long_gaps >= 2:  # two long gaps in a row: the host's pace changed
                self._step_period = gap
        self._step_wall = now

    def _shown(self, power: Mapping[str, float], util: float) -> tuple[str, Mapping[str, float], float]:
        """(phase, rail power, GPU load) the files show: the state itself, except while a run
        drives the twin, when they show the phase of the step the host is in (a sensor sampling
        faster than steps sees the phases; the energy counter keeps the exact step), and idle
        power once steps stop coming. Only the files: the exact counter, rail_powers_mw() (the
        monitor's samples) and the temperatures stay the step's, so runs repeat exactly."""
        if not self._driven or self._last_step is None or self._step_wall is None:
            return ("step" if self._trace is not None else "idle"), power, util
        trace, clocks, est, online = self._last_step
        since = self.wall_clock() - self._step_wall
        period = self._step_period
        if since > max(IDLE_AFTER_S, GAP_STEPS * period if period else 0.0):
            return "idle", idle_power_mw(clocks, self.profile, online_cpus=online), 0.0
        if period is None:  # the first step: the host's pace is not known yet
            return "step", power, util
        if self._phases is None:
            self._phases = step_phases(trace, clocks, self.profile, est, online_cpus=online)
        frac = (since / period) % 1.0 if period > 0 else 0.0
        phase = phase_at(self._phases, frac * est.time_s)
        return phase.name, phase.power_mw, phase.gpu_util

    def shown_phase(self) -> str:
        """The phase the rail files show now: a step phase, "step" (undriven) or "idle"."""
        with self._lock:
            return self._shown(self._power, 0.0)[0]

    def _write_temps(self, power: Mapping[str, float]) -> None:
        if self._thermal is not None:
            self._temps = zone_temps_c(self._thermal.junction_c, power, self.profile.thermal)
        self._files.write_temps(self._temps)

