"""One reading of everything a dashboard shows about a device, taken in one go."""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping, TypeVar

from engine.device.base import (
    ClockDomain,
    ClockState,
    Device,
    DeviceIdentity,
    PowerMode,
    RailReading,
    TemperatureReading,
)
from engine.core.errors import SlmDvfsError
from engine.device.rails import rail_set_of
from engine.device.activity import ActivitySource, DeviceActivity, Throttle, gpu_cap

T = TypeVar("T")
D = TypeVar("D")


@dataclass(frozen=True)
class DeviceSnapshot:
    t: float  # time.monotonic() when taken
    identity: DeviceIdentity
    mode: PowerMode | None
    clocks: tuple[ClockState, ...]
    rails: tuple[RailReading, ...]
    temperatures: tuple[TemperatureReading, ...]
    gpu_load: float | None
    # A domain or reading that failed, with why: one missing node must not hide the rest.
    errors: Mapping[str, str] = field(default_factory=dict)
    # Rails whose reading the board cannot show (engine.core.plausible), with why: never summed.
    implausible: Mapping[str, str] = field(default_factory=dict)
    # jtop's other details (per-core CPU, EMC load, fan, memory, trips); None: a device without them
    activity: DeviceActivity | None = None
    throttle: Throttle = field(default_factory=Throttle)

    @property
    def total_power_mw(self) -> float:
        """The module's total (its rail set's: VDD_IN alone on an Orin Nano/NX), over the plausible rails only."""
        names = tuple(r.name for r in self.rails)
        in_total = set(rail_set_of(names).total_rails(names))
        return sum(r.power_mw for r in self.rails if r.name in in_total and r.name not in self.implausible)

    def clock(self, domain: ClockDomain) -> ClockState | None:
        return next((c for c in self.clocks if c.domain == domain), None)


def take_snapshot(device: Device, identity: DeviceIdentity | None = None) -> DeviceSnapshot:
    """Read clocks, rails, temperatures, load and mode; failures are recorded, not raised."""
    errors: dict[str, str] = {}

    def attempt(key: str, fn: Callable[[], T], default: D) -> T | D:
        try:
            return fn()
        except SlmDvfsError as exc:
            errors[key] = exc.what
            return default

    from engine.device.twin.profile import board_limits

    clocks = []
    for domain in ClockDomain:
        state = attempt(domain.value, functools.partial(device.clock, domain), None)
        if state is not None:
            clocks.append(state)
    identity = identity or device.identity()
    rails = attempt("rails", device.rails, ())
    limits = board_limits(identity.profile or identity.module_profile)
    implausible = {r.name: why for r in rails if (why := limits.rail_problem(r.voltage_mv, r.current_ma))}
    mode = attempt("nvpmodel", device.power_mode, None)
    temperatures = attempt("temperatures", device.temperatures, ())
    activity = None
    if isinstance(device, ActivitySource):
        emc = next((c for c in clocks if c.domain is ClockDomain.EMC), None)
        activity = attempt("activity", functools.partial(device.activity, emc.cur_hz if emc else None, temperatures), None)
    gpu = next((c for c in clocks if c.domain is ClockDomain.GPU), None)
    table = attempt("gpu table", functools.partial(device.clock_table, ClockDomain.GPU), ()) if gpu else ()
    return DeviceSnapshot(
        t=time.monotonic(),
        identity=identity,
        mode=mode,
        clocks=tuple(clocks),
        rails=rails,
        temperatures=temperatures,
        gpu_load=attempt("gpu_load", device.gpu_load, None),
        errors=errors,
        implausible=implausible,
        activity=activity,
        throttle=Throttle(activity.trips if activity else (), gpu_cap(gpu, table, mode)),
    )
