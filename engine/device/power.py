"""Where rail power comes from: the PowerSource protocol, the sources over a Device and the twin,
and which of their rails a preset (`all`, `gpu+cpu`, a list) names.

The tegrastats source lives in `engine/device/tegrastats.py`; the jetson-stats one in
`engine/device/jtop_backend.py`. The monitor (`engine/monitor.py`) samples any of them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, Protocol, Sequence, runtime_checkable

from engine.core.errors import ConfigError, DeviceError, ImplausibleReadingError
from engine.device.base import Device
from engine.device.rails import PRESETS, preset_rails, total_of
from engine.core.provenance import Source


# The presets' names and meanings; the rails each names depend on the board's rail set (engine/device/rails.py).
RAIL_PRESETS = PRESETS


def resolve_rails(preset: str | Sequence[str], available: Iterable[str]) -> tuple[str, ...]:
    """The rails a preset (`all`, `gpu+cpu`, or `A,B,...`) names, checked against the source's: `all` is
    the module's total (VDD_IN alone on Orin Nano/NX, every rail on AGX Orin; engine/device/rails.py)."""
    have = tuple(available)
    if isinstance(preset, str):
        key = preset.strip()
        if key.lower() in RAIL_PRESETS and not have:
            raise DeviceError("the power source reports no rails", "check the board's INA3221 driver (`slm-dvfs device`)")
        wanted = preset_rails(key, have)
        if wanted is None:
            wanted = tuple(r.strip() for r in key.split(",") if r.strip())
    else:
        wanted = tuple(preset)
    if not wanted:
        raise ConfigError(f"empty rail selection {preset!r}", f"use all, gpu+cpu or a comma list of {', '.join(have)}")
    missing = [r for r in wanted if r not in have]
    if missing:
        raise ConfigError(
            f"rail{'s' if len(missing) > 1 else ''} {', '.join(missing)} not reported by this power source",
            f"the source has: {', '.join(have) or '(none)'}; pick from those or use --rails all",
        )
    return wanted


@dataclass(frozen=True)
class PowerSample:
    """Instant power of every rail a source reports, at time `t` (seconds, in the source's timebase)."""

    t: float  # monotonic seconds on a board, virtual seconds on the twin
    rails_mw: Mapping[str, float]

    @property
    def total_mw(self) -> float:
        """The module's power: its input rail where it reports one, else the sum of its rails."""
        return total_of(self.rails_mw)


@runtime_checkable
class PowerSource(Protocol):
    """Anything the power monitor can sample.

    Sources may also offer `now() -> float` (their timebase, used by the monitor as
    its clock), `interval_reason` (why new values come no faster than `min_interval_s`,
    said when the monitor samples slower than asked) and `close()`; none is required.
    """

    source: Source  # measured on a board, twin when simulated
    min_interval_s: float  # how often the sensor produces a new value

    def read(self) -> PowerSample: ...

    def energy_counter(self) -> tuple[float, dict[str, float]] | None:
        """(time, cumulative joules per rail) where the source knows energy exactly, else None."""
        ...


class DeviceRailSource:
    """Rail power from any Device (the Jetson sysfs backend, on a board or on the twin's tree).

    A reading the board cannot show (engine.core.plausible, by its profile: a negative current, a
    power over twice the module's limit) raises ImplausibleReadingError naming the rail: summed, it
    would make every energy after it wrong (the monitor bridges a brief one, stops on a lasting one)."""

    def __init__(self, device: Device, clock: Callable[[], float] = time.monotonic) -> None:
        from engine.device.twin.profile import board_limits

        self.device = device
        self._clock = clock
        # Read once: the sensor's update interval does not change while we sample.
        self.min_interval_s = float(device.rail_update_interval_s())
        self.interval_reason = f"the INA3221 sensor updates only every {self.min_interval_s * 1000:.0f} ms"
        identity = device.identity()
        self.source = identity.source
        self.limits = board_limits(identity.profile or identity.module_profile)

    def now(self) -> float:
        return self._clock()

    def read(self) -> PowerSample:
        readings = self.device.rails()
        for r in readings:
            problem = self.limits.rail_problem(r.voltage_mv, r.current_ma)
            if problem:
                raise ImplausibleReadingError(
                    f"rail {r.name} reads {r.voltage_mv:g} mV, {r.current_ma:g} mA, which is implausible: {problem}",
                    "check the board's INA3221 (its shunt resistor files and driver; `slm-dvfs device` flags the "
                    "rail); nothing is measured from it until it reads sensibly", rail=r.name)
        return PowerSample(self._clock(), {r.name: r.power_mw for r in readings})

    def energy_counter(self) -> None:
        return None  # the INA3221 has no energy counter: the monitor integrates


class TwinMeter(Protocol):
    """What TwinSource reads of the twin (engine.device.twin.orin.VirtualOrin, or a test's stand-in);
    an optional `rail_update_interval_s()` gives the tick its clock moves in while it idles."""

    def now(self) -> float: ...
    def rail_powers_mw(self) -> Mapping[str, float]: ...
    def energy_j(self) -> Mapping[str, float]: ...


class TwinSource:
    """Rail power and exact energy straight from the digital twin (`VirtualOrin`).

    Duck-typed on `now()`, `rail_powers_mw()` and `energy_j()` so the engine does not
    import the twin unless one is used. The monitor takes its samples from the counter (the
    mean power since the last sample); `read()`, the twin's power at this instant, gives the first.
    """

    source = Source.TWIN

    def __init__(self, orin: TwinMeter) -> None:
        for name in ("now", "rail_powers_mw", "energy_j"):
            if not callable(getattr(orin, name, None)):
                raise TypeError(f"TwinSource needs an object with {name}(); got {type(orin).__name__}")
        self.orin = orin
        interval = getattr(orin, "rail_update_interval_s", None)
        # The twin's figures are exact at any rate, but while it idles on the wall clock its time
        # (and so its rails) moves only once a tick: faster sampling would only read the same
        # sample again. Its windows still sample at every edge (their time moves with the steps).
        self.min_interval_s = float(interval()) if callable(interval) else 0.0
        self.interval_reason = f"the twin's clock moves in {self.min_interval_s * 1000:.0f} ms ticks while it idles"

    def now(self) -> float:
        return float(self.orin.now())

    def read(self) -> PowerSample:
        # Time and power are two reads: retry if a step landed between them, so a sample
        # never pairs one step's end with the next step's power.
        while True:
            t = float(self.orin.now())
            rails = dict(self.orin.rail_powers_mw())
            if float(self.orin.now()) == t:
                return PowerSample(t, rails)

    def energy_counter(self) -> tuple[float, dict[str, float]]:
        # Two reads as well: retry if a step landed between them (the time must be the energy's).
        while True:
            t = float(self.orin.now())
            energy = {k: float(v) for k, v in self.orin.energy_j().items()}
            if float(self.orin.now()) == t:
                return t, energy
