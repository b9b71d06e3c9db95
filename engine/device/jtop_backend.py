"""Optional jetson-stats (jtop): rails from `j.power`, nvpmodel/jetson_clocks through its service.

jtop talks to the root `jtop.service` over `/run/jtop.sock`; it cannot set GPU min/max
clocks, so it is a power source and a mode switch, never a replacement for the sysfs
backend. Everything here degrades to a clear message when the service is absent.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import time
from pathlib import Path
from typing import Callable, Mapping, Protocol, TypedDict, TypeVar

from engine.device.base import RailReading
from engine.core.errors import DeviceError
from engine.core.optional import import_optional
from engine.device.power import PowerSample
from engine.device.rails import INPUT_RAILS
from engine.core.provenance import Source

log = logging.getLogger(__name__)

SOCKET = "run/jtop.sock"
_INSTALL = "install jetson-stats (`sudo pip3 install -U jetson-stats`) and reboot, or use the sysfs backend"


def jtop_available(root: str | os.PathLike[str] = "/") -> tuple[bool, str]:
    """Whether jtop can be used here, and why not when it cannot."""
    if importlib.util.find_spec("jtop") is None:
        return False, f"the jtop module (jetson-stats) is not installed: {_INSTALL}"
    sock = Path(root) / SOCKET
    if not sock.exists():
        return False, f"the jtop service is not running ({sock} is missing): `sudo systemctl restart jtop.service`"
    if not os.access(sock, os.R_OK | os.W_OK):
        return False, f"no access to {sock}: add your user to group jtop (`sudo usermod -aG jtop $USER`), log in again"
    return True, f"jtop service at {sock}"


class JtopRail(TypedDict, total=False):
    """One rail of jtop's `power["rail"]` (mV, mA, mW)."""

    online: bool
    volt: float
    curr: float
    power: float


class JtopTotal(TypedDict, total=False):
    power: float  # mW, the sum of the rails on AGX Orin
    name: str  # the input rail it is, where the module has one (VDD_IN on Orin Nano/NX)
    volt: float
    curr: float
    online: bool


class JtopPower(TypedDict, total=False):
    """jtop's `power` dict, the parts read here."""

    rail: Mapping[str, JtopRail]
    tot: JtopTotal


class JtopMode(Protocol):
    """jtop's nvpmodel reading."""

    @property
    def id(self) -> int: ...
    @property
    def name(self) -> str: ...


class Jtop(Protocol):
    """What this module uses of a `jtop.jtop` connection (jetson-stats ships no types)."""

    def start(self) -> None: ...
    def close(self) -> None: ...
    @property
    def power(self) -> JtopPower | None: ...
    @property
    def nvpmodel(self) -> JtopMode | None: ...
    @nvpmodel.setter
    def nvpmodel(self, mode_id: int) -> None: ...  # the service switches the mode
    @property
    def jetson_clocks(self) -> bool: ...
    @jetson_clocks.setter
    def jetson_clocks(self, on: bool) -> None: ...


T = TypeVar("T")


def _open_jtop(interval_s: float) -> Jtop:
    jtop: Callable[..., Jtop] = import_optional("jtop", "the jtop backend (jetson-stats)", _INSTALL,
                                                error=DeviceError).jtop
    return jtop(interval=interval_s)


class _JtopSession:
    """Owns a jtop connection (opened here) or borrows one (passed in, e.g. a test double)."""

    def __init__(
        self,
        jetson: Jtop | None = None,
        *,
        interval_s: float = 0.5,
        factory: Callable[[float], Jtop] = _open_jtop,
    ) -> None:
        self._jetson = jetson
        self._owned = jetson is None
        self._interval_s = interval_s
        self._factory = factory

    def open(self) -> Jtop:
        if self._jetson is None:
            j = self._factory(self._interval_s)
            try:
                j.start()
            except Exception as exc:  # JtopException and socket errors: say what to do, don't crash
                raise DeviceError(f"cannot connect to the jtop service: {exc}", _service_remedy()) from None
            self._jetson = j
        return self._jetson

    def close(self) -> None:
        if self._jetson is not None and self._owned:
            try:
                self._jetson.close()
            except Exception as exc:  # closing a dead connection must not mask the real error
                log.debug("jtop close failed: %s", exc)
            self._jetson = None

    def __enter__(self) -> "_JtopSession":
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _guard(self, what: str, fn: Callable[[Jtop], T]) -> T:
        j = self.open()
        try:
            return fn(j)
        except DeviceError:
            raise
        except Exception as exc:
            raise DeviceError(f"jtop could not {what}: {exc}", _service_remedy()) from None


def _service_remedy() -> str:
    return (
        "check the service (`systemctl status jtop.service`), that your user is in group jtop, "
        "and that jetson-stats has the same version as the service; or use the sysfs backend"
    )


class JtopPowerSource(_JtopSession):
    """Rail readings from jtop's `power` dict (mV, mA, mW per rail); a monitor PowerSource.

    jtop refreshes at its own interval, so that is the fastest useful sampling rate.
    """

    source = Source.MEASURED

    @property
    def min_interval_s(self) -> float:
        return self._interval_s

    def read(self) -> PowerSample:
        return PowerSample(time.monotonic(), {r.name: r.power_mw for r in self.rails()})

    def energy_counter(self) -> None:
        return None  # jtop has no energy counter either: the monitor integrates

    def rails(self) -> tuple[RailReading, ...]:
        power = self._guard("read power", lambda j: j.power) or {}
        rails: dict[str, JtopRail | JtopTotal] = dict(power.get("rail") or {})
        # jtop moves the input rail (VDD_IN on an Orin Nano/NX) out of its rails into `tot`
        # (jtop/core/power.py total_power): put it back, so the total is the module's (engine.device.rails).
        tot = power.get("tot") or {}
        if tot.get("name") in INPUT_RAILS and tot["name"] not in rails:
            rails = {tot["name"]: tot, **rails}
        out = []
        for name, values in rails.items():
            if not values.get("online", True):
                continue
            try:
                out.append(RailReading(name=name, voltage_mv=float(values["volt"]), current_ma=float(values["curr"])))
            except (KeyError, TypeError, ValueError):
                log.debug("jtop rail %s has no volt/curr: %s", name, values)
        return tuple(out)

    def total_mw(self) -> float | None:
        """jtop's own total (the sum of the rails on AGX Orin), None when it gives none."""
        power = self._guard("read power", lambda j: j.power) or {}
        tot = power.get("tot") or {}
        return float(tot["power"]) if "power" in tot else None


class JtopControl(_JtopSession):
    """nvpmodel and jetson_clocks through the jtop service (it cannot set GPU min/max)."""

    def power_mode(self) -> tuple[int, str]:
        def read(j: Jtop) -> tuple[int, str]:
            mode = j.nvpmodel
            if mode is None:
                raise DeviceError("jtop reports no nvpmodel on this board", "use the sysfs backend's nvpmodel")
            return int(mode.id), str(mode.name)

        return self._guard("read the power mode", read)

    def set_power_mode(self, mode_id: int) -> None:
        def write(j: Jtop) -> None:
            j.nvpmodel = int(mode_id)

        self._guard(f"switch to power mode {mode_id}", write)

    def set_jetson_clocks(self, on: bool) -> None:
        def write(j: Jtop) -> None:
            j.jetson_clocks = bool(on)

        self._guard("turn jetson_clocks " + ("on" if on else "off"), write)
