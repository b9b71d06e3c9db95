"""Open the device a command asked for: a real board under a root, or the digital twin.

The session is also what a run needs from the device, so that nothing outside
engine/device/ asks whether the board is a twin: its power source, how to idle and
refresh, the hook that advances the twin after each training step, its rails and
thermal limits, and what it can do (simulate, fast sweeps, warm up between runs).
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, ContextManager

from engine.core import paths
from engine.core.errors import ConfigError, DeviceError, errno_text
from engine.core.trace import StepMix, StepTrace
from engine.device.base import Device
from engine.device.power import DeviceRailSource, PowerSource, TwinSource

if TYPE_CHECKING:  # the twin is imported when one is opened
    from engine.device.twin.orin import VirtualOrin
    from engine.device.twin.profile import ThermalGuardParams, TwinProfile

log = logging.getLogger(__name__)

DEFAULT_TWIN = "agx-orin-64gb"


@dataclass
class DeviceSession:
    """An open device and, on the twin, the `VirtualOrin` that keeps its tree current."""

    device: Device
    twin: VirtualOrin | None = None  # when simulated
    notes: list[str] = field(default_factory=list)  # what the user should be told (e.g. fell back to twin)

    @property
    def is_twin(self) -> bool:
        return self.twin is not None

    # ------------------------------------------------------------------ what a run needs
    @property
    def profile_name(self) -> str | None:
        """The twin profile simulated, None on a board."""
        return None if self.twin is None else str(self.twin.profile.name)

    @property
    def can_simulate(self) -> bool:
        """Whether a run may skip training and only advance the device's model (the twin)."""
        return self.twin is not None

    @property
    def warms_up(self) -> bool:
        """Whether one run leaves heat that biases the next (real silicon; the twin's runs
        start from its model, so a baseline needs no cool-down there)."""
        return self.twin is None

    def power_source(self) -> PowerSource:
        """Where the power monitor reads rails: the twin's exact counter, or the board's rails."""
        return TwinSource(self.twin) if self.twin is not None else DeviceRailSource(self.device)

    def rail_names(self) -> tuple[str, ...]:
        """The rails this device reports."""
        if self.twin is not None:
            return tuple(self.twin.profile.rail_names)
        return tuple(r.name for r in self.device.rails())

    @property
    def virtual_time(self) -> bool:
        """Whether `idle` advances a model's clock (the twin) rather than waiting."""
        return self.twin is not None

    def idle(self, seconds: float, sleep: Callable[[float], None] = time.sleep) -> None:
        """Let the device sit idle: the twin advances its virtual time, a board waits."""
        if self.twin is not None:
            self.twin.advance_idle(seconds)
        else:
            sleep(seconds)

    def step_hook(self, trace_for: Callable[[int, int], StepTrace | StepMix]) -> Callable[[int, int], None] | None:
        """What a run calls after each training step with (rows, seq_len): on the twin,
        advance it by that step's trace (`trace_for`; a StepMix for a simulated step of
        dynamically padded batches); on a board nothing (None)."""
        twin = self.twin
        if twin is None:
            return None

        def advance(rows: int, seq_len: int) -> None:
            twin.run_step(trace_for(rows, seq_len))

        return advance

    def driven(self) -> ContextManager[object]:
        """While a run steps: the twin's time moves only with its steps (no wall-clock idle)."""
        if self.twin is not None:
            return self.twin.driven()
        return contextlib.nullcontext()

    def thermal_guard_params(self) -> tuple[ThermalGuardParams, str] | None:
        """(the profile's [thermal_guard] table, its origin) on a twin that has one; None: defaults."""
        if self.twin is None or self.twin.profile.thermal_guard is None:
            return None
        return self.twin.profile.thermal_guard, f"profile {self.twin.profile.name}"

    def memory_total_bytes(self) -> int | None:
        """The memory Linux sees on this device (MemTotal of /proc/meminfo under its root: the
        board's `/`, or the twin's tree, rendered from its profile); None where it cannot be read.
        Unified memory: the CPU and the GPU share it."""
        from engine.device.meminfo import mem_total_bytes

        root = self.twin.root if self.twin is not None else getattr(self.device, "root", None)
        return mem_total_bytes(root) if isinstance(root, (str, Path)) else None

    def fast_model(self) -> TwinProfile:
        """The twin profile fast sweeps compute points from; a board has none."""
        if self.twin is None:
            raise ConfigError("--fast computes points from the digital twin's model; a board has to be measured",
                              "add --twin (e.g. --twin agx-orin-64gb), or drop --fast on a board")
        return self.twin.profile

    def close(self) -> None:
        close_device = getattr(self.device, "close", None)  # the rail files it keeps open
        if callable(close_device):
            close_device()
        if self.twin is not None:
            self.twin.close()

    def __enter__(self) -> "DeviceSession":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def twin_root(profile: str) -> Path:
    """The persistent tree of a twin, so a pin in one command is seen by the next (engine.core.paths.twin_dir)."""
    return paths.twin_dir() / profile


def _own_twin_dir(folder: Path) -> None:
    """The folder that holds the persistent twins, ours and writable by nobody else (on /dev/shm anyone
    may make folders: one someone else made first is refused, as check_folder refuses any twin folder
    not ours)."""
    from engine.device.twin.tree import check_folder, tree_remedy

    check_folder(folder)  # the folders above it, before anything is made there
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        folder.mkdir(mode=0o755, exist_ok=True)  # others may read a board (the clock service's members), not write
    except OSError as exc:
        raise DeviceError(f"cannot write the twin's tree at {folder} ({errno_text(exc.errno, exc.strerror)})",
                          tree_remedy(exc.errno)) from None
    check_folder(folder)


def board_present(root: Path) -> bool:
    """True where the root holds a Jetson GPU devfreq node (as discovery finds it)."""
    from engine.device.jetson.discovery import discover
    from engine.device.sysfs import SysfsTree

    return discover(SysfsTree(root)).gpu_devfreq is not None


def open_device(
    *,
    twin: str | None = None,
    sysfs_root: str | Path | None = None,
    fallback_to_twin: bool = False,
    realtime: bool = True,
    twin_dir: Path | None = None,
    thermal: bool = False,
    twin_serial: str | None = None,
) -> DeviceSession:
    """Open a board at `sysfs_root` (default `/` or $SLM_DVFS_SYSFS_ROOT), or the named twin.

    With `fallback_to_twin`, a machine with no Jetson opens the default twin and says so.
    The twin keeps its tree under `twin_dir` (default: its persistent folder, so a pin in
    one command is seen by the next); `realtime` lets its idle time follow the wall clock
    (False: virtual time only, so results repeat); `thermal` turns on its thermal model;
    `twin_serial` gives a new twin a device-tree serial (a fleet's twins are distinct boards).
    """
    if twin is None:
        root = paths.sysfs_root(sysfs_root)
        if board_present(root):
            from engine.device.jetson import JetsonDevice

            if thermal:
                log.info("--thermal only affects the twin; a board has real temperatures")
            from engine.device.clockd.client import attach_service

            return DeviceSession(attach_service(JetsonDevice(root)))  # writes via the clock service where needed
        if not fallback_to_twin:
            raise DeviceError(
                f"no Jetson GPU clock node found under {root}",
                f"run this on a Jetson (L4T r35 to r39), pass --sysfs-root DIR, or use the digital "
                f"twin with --twin {DEFAULT_TWIN}",
            )
        twin = DEFAULT_TWIN
        note = f"no Jetson found under {root}: using the digital twin {twin}"
        log.info(note)
        notes = [note]
    else:
        notes = []
    from engine.device.twin.orin import VirtualOrin

    if twin_dir is None:
        _own_twin_dir(twin_root(twin).parent)
    orin = VirtualOrin(twin, root=twin_dir or twin_root(twin), thermal=thermal, serial=twin_serial)
    orin.start(realtime=realtime)
    return DeviceSession(orin.device(), twin=orin, notes=notes)
