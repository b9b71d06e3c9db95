"""What a board is doing beyond its clocks and rails, as jtop shows it: per-core CPU load and
clock, EMC load, the fan, the memory Linux sees, and whether anything throttles it.

Values only, and the rules that read them; the Jetson backend's reader
(`engine/device/jetson/activity.py`) fills them from the board's (or the twin's) files. A
reading the board does not have is None (the fan of a fanless board, the EMC load without its
rate), never a guess.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from engine.core.clocks import highest_at_most
from engine.device.base import ClockState, PowerMode, TemperatureReading
from engine.device.meminfo import MemInfo

# Linux thermal sysfs trip types that mean the zone is being cooled by slowing it down, or is
# about to be shut down (Documentation/driver-api/thermal/sysfs-api.rst, "trip_point_[0-*]_type").
# `active` trips switch a fan's steps on: crossing one is no throttling.
THROTTLE_TRIPS = ("passive", "hot", "critical")


@dataclass(frozen=True)
class CoreLoad:
    """One CPU core: online or not, its busy share since the last reading and its clock."""

    cpu: int
    online: bool
    load: float | None  # 0..1 since the previous reading; None offline or before a second reading
    cur_hz: int | None  # its cpufreq policy's scaling_cur_freq; None offline or without cpufreq


@dataclass(frozen=True)
class FanReading:
    """A fan as hwmon shows it (jetson-stats jtop/core/fan.py reads the same files)."""

    name: str  # the hwmon node's `name`, e.g. "pwmfan"
    pwm_percent: float | None  # pwm1 (0-255) as a percentage
    rpm: int | None  # the tachometer's reading; None where the board has no tachometer


MemoryReading = MemInfo  # /proc/meminfo: what Linux sees of the board's memory (engine/device/meminfo.py)


@dataclass(frozen=True)
class TripCrossed:
    """A thermal zone at or past one of its throttling trip points."""

    zone: str
    kind: str  # the trip's type: passive, hot or critical
    trip_c: float
    temp_c: float

    def describe(self) -> str:
        return f"{self.zone} {self.temp_c:.1f}°C ≥ {self.kind} trip {self.trip_c:g}°C"


@dataclass(frozen=True)
class Throttle:
    """Whether the board is throttled now, and why (each reason is one line a user can check)."""

    trips: tuple[TripCrossed, ...] = ()
    gpu_cap: str = ""  # e.g. "GPU max 612 MHz, below the mode's 1300.5 MHz"; "" when none

    @property
    def throttled(self) -> bool:
        return bool(self.trips or self.gpu_cap)

    def reasons(self) -> tuple[str, ...]:
        return tuple(t.describe() for t in self.trips) + ((self.gpu_cap,) if self.gpu_cap else ())


@dataclass(frozen=True)
class DeviceActivity:
    """One reading of everything above; a part the board lacks (or that failed) is None/empty,
    and `errors` says why where a read failed."""

    cores: tuple[CoreLoad, ...] = ()
    emc_load: float | None = None  # 0..1
    fan: FanReading | None = None
    memory: MemoryReading | None = None
    trips: tuple[TripCrossed, ...] = ()
    errors: tuple[tuple[str, str], ...] = ()  # (part, why)


@runtime_checkable
class ActivitySource(Protocol):
    """A device that can read its activity (the Jetson backend, and the clock service's client
    through it). `emc_hz`: the EMC clock as already read (debugfs may be root's only);
    `temperatures`: the zones as already read, checked against their trip points."""

    def activity(self, emc_hz: int | None = None,
                 temperatures: tuple[TemperatureReading, ...] = ()) -> DeviceActivity: ...


def gpu_cap(clock: ClockState | None, table: tuple[int, ...], mode: PowerMode | None) -> str:
    """Why the GPU cannot reach what its mode allows, or "": its devfreq max below the table top
    (capped by the mode's GPU limit) while it is not pinned (min == max is a pin, ours or a
    user's, not a throttle). L4T's thermal cooling and a user's cap both lower `max_freq`."""
    if clock is None or not table or clock.pinned:
        return ""
    allowed = highest_at_most(table, None if mode is None else mode.gpu_max_hz)
    if clock.max_hz >= allowed:
        return ""
    whose = "the mode's" if mode is not None and mode.gpu_max_hz is not None else "its table top"
    return f"GPU max {clock.max_hz / 1e6:g} MHz, below {whose} {allowed / 1e6:g} MHz"


def emc_load(mc_all: int, emc_hz: int) -> float | None:
    """The EMC's busy share from actmon's `mc_all` and the EMC rate, as jetson-stats computes it
    (jtop/core/memory.py: `mc_all // (rate in kHz)` is the percentage, after NVIDIA's forum answer
    https://forums.developer.nvidia.com/t/real-time-emc-bandwidth-with-sysfs/107479/3)."""
    khz = emc_hz // 1000
    if khz <= 0:
        return None
    return min(1.0, max(0.0, mc_all / khz / 100.0))
