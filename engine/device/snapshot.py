"""One reading of everything a dashboard shows about a device, taken in one go."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Mapping

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

    @property
    def total_power_mw(self) -> float:
        return sum(r.power_mw for r in self.rails)

    def clock(self, domain: ClockDomain) -> ClockState | None:
        return next((c for c in self.clocks if c.domain == domain), None)


def take_snapshot(device: Device, identity: DeviceIdentity | None = None) -> DeviceSnapshot:
    """Read clocks, rails, temperatures, load and mode; failures are recorded, not raised."""
    errors: dict[str, str] = {}

    def attempt(key: str, fn, default):  # type: ignore[no-untyped-def]
        try:
            return fn()
        except SlmDvfsError as exc:
            errors[key] = exc.what
            return default

    clocks = []
    for domain in ClockDomain:
        state = attempt(domain.value, lambda d=domain: device.clock(d), None)
        if state is not None:
            clocks.append(state)
    return DeviceSnapshot(
        t=time.monotonic(),
        identity=identity or device.identity(),
        mode=attempt("nvpmodel", device.power_mode, None),
        clocks=tuple(clocks),
        rails=attempt("rails", device.rails, ()),
        temperatures=attempt("temperatures", device.temperatures, ()),
        gpu_load=attempt("gpu_load", device.gpu_load, None),
        errors=errors,
    )
