"""Open the device a command asked for: a real board under a root, or the digital twin."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.core import paths
from engine.device.base import Device
from engine.core.errors import DeviceError

log = logging.getLogger(__name__)

DEFAULT_TWIN = "agx-orin-64gb"


@dataclass
class DeviceSession:
    """An open device and, on the twin, the `VirtualOrin` that keeps its tree current."""

    device: Device
    twin: Any = None  # engine.device.twin.orin.VirtualOrin when simulated
    notes: list[str] = field(default_factory=list)  # what the user should be told (e.g. fell back to twin)

    @property
    def is_twin(self) -> bool:
        return self.twin is not None

    def close(self) -> None:
        if self.twin is not None:
            self.twin.close()

    def __enter__(self) -> "DeviceSession":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def twin_root(profile: str) -> Path:
    """The persistent tree of a twin, so a pin in one command is seen by the next."""
    return paths.state_dir() / "twin" / profile


def board_present(root: Path) -> bool:
    """True where the root holds a Jetson GPU devfreq node (as discovery finds it)."""
    from engine.device.discovery import discover
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
) -> DeviceSession:
    """Open a board at `sysfs_root` (default `/` or $SLM_DVFS_SYSFS_ROOT), or the named twin.

    With `fallback_to_twin`, a machine with no Jetson opens the default twin and says so.
    The twin keeps its tree under `twin_dir` (default: its persistent folder, so a pin in
    one command is seen by the next); `realtime` lets its idle time follow the wall clock
    (False: virtual time only, so results repeat); `thermal` turns on its thermal model.
    """
    if twin is None:
        root = paths.sysfs_root(sysfs_root)
        if board_present(root):
            from engine.device.jetson import JetsonDevice

            if thermal:
                log.info("--thermal only affects the twin; a board has real temperatures")
            return DeviceSession(JetsonDevice(root))
        if not fallback_to_twin:
            raise DeviceError(
                f"no Jetson GPU clock node found under {root}",
                f"run this on a Jetson (L4T r35/r36), pass --sysfs-root DIR, or use the digital "
                f"twin with --twin {DEFAULT_TWIN}",
            )
        twin = DEFAULT_TWIN
        note = f"no Jetson found under {root}: using the digital twin {twin}"
        log.info(note)
        notes = [note]
    else:
        notes = []
    from engine.device.twin.orin import VirtualOrin

    orin = VirtualOrin(twin, root=twin_dir or twin_root(twin), thermal=thermal)
    orin.start(realtime=realtime)
    return DeviceSession(orin.device(), twin=orin, notes=notes)
