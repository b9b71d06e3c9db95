"""The Device protocol: what the rest of the engine may ask of a board or its twin.

All frequencies are in Hz, whatever unit the kernel file uses (cpufreq speaks kHz).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Mapping, Protocol, runtime_checkable

from engine.core.provenance import Source
from engine.core.jsontypes import JsonObject, as_int, as_list, as_object


class ClockDomain(str, Enum):
    GPU = "gpu"
    CPU = "cpu"
    EMC = "emc"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class DeviceIdentity:
    board: str  # e.g. "NVIDIA Jetson AGX Orin Developer Kit"
    module: str  # e.g. "P3701-0000 (AGX Orin 64GB)"
    l4t: str | None  # e.g. "36.3.0"; None when it cannot be read
    jetpack: str | None  # e.g. "6.0"
    is_twin: bool
    profile: str | None = None  # device profile name, e.g. "agx-orin-64gb"
    serial: str | None = None  # the device tree's serial-number; None where it has none (tells boards of a module apart)
    # The shipped device profile of the module (profiles/devices/), on a board as on a twin; for an
    # unknown module (module_known False) the profile it falls back to. None: not read.
    module_profile: str | None = None
    module_known: bool = True
    memory_total_mb: float | None = None  # /proc/meminfo's MemTotal in MiB; None where it cannot be read

    @property
    def source(self) -> Source:
        return Source.TWIN if self.is_twin else Source.MEASURED


@dataclass(frozen=True)
class ClockState:
    domain: ClockDomain
    cur_hz: int
    min_hz: int
    max_hz: int
    governor: str | None  # None where the domain has no governor file (EMC)
    available_governors: tuple[str, ...] = ()
    locked: bool = False  # EMC: mrq_rate_locked is set

    @property
    def pinned(self) -> bool:
        return self.locked or self.min_hz == self.max_hz


@dataclass(frozen=True)
class RailReading:
    name: str  # label as the board writes it, e.g. "VDD_GPU_SOC"
    voltage_mv: float
    current_ma: float

    @property
    def power_mw(self) -> float:
        return self.voltage_mv * self.current_ma / 1000.0


@dataclass(frozen=True)
class TemperatureReading:
    zone: str  # thermal_zoneN/type, e.g. "gpu-thermal"
    celsius: float


@dataclass(frozen=True)
class PowerMode:
    """One nvpmodel mode and its caps (None = no cap)."""

    id: int
    name: str
    online_cpus: int | None = None
    cpu_max_hz: int | None = None
    gpu_max_hz: int | None = None
    emc_max_hz: int | None = None


@dataclass(frozen=True)
class DomainSettings:
    """Everything we may change in one clock domain, as it was before we changed it."""

    domain: ClockDomain
    min_hz: int
    max_hz: int
    governor: str | None = None
    locked: bool = False  # EMC only
    rate_hz: int | None = None  # EMC only: the locked rate
    policy: int | None = None  # CPU only: the cpufreq policy (its first CPU); None = every policy

    def to_json(self) -> JsonObject:
        data: JsonObject = {
            "domain": self.domain.value,
            "min_hz": self.min_hz,
            "max_hz": self.max_hz,
            "governor": self.governor,
            "locked": self.locked,
            "rate_hz": self.rate_hz,
        }
        if self.policy is not None:  # older journals have no key: they mean every policy
            data["policy"] = self.policy
        return data

    @classmethod
    def from_json(cls, data: object) -> "DomainSettings":
        data = as_object(data)
        governor = data.get("governor")
        return cls(
            domain=ClockDomain(data["domain"]),
            min_hz=as_int(data["min_hz"]),
            max_hz=as_int(data["max_hz"]),
            governor=None if governor is None else str(governor),
            locked=bool(data.get("locked", False)),
            rate_hz=None if data.get("rate_hz") is None else as_int(data["rate_hz"]),
            policy=None if data.get("policy") is None else as_int(data["policy"]),
        )


@dataclass(frozen=True)
class DeviceSettings:
    """A snapshot of every setting the tool may touch; what the clock guard restores."""

    nvpmodel_id: int | None
    domains: tuple[DomainSettings, ...]
    online_cpus: tuple[int, ...] = field(default=())

    def domain(self, domain: ClockDomain) -> DomainSettings | None:
        return next((d for d in self.domains if d.domain == domain), None)

    def to_json(self) -> JsonObject:
        return {
            "nvpmodel_id": self.nvpmodel_id,
            "domains": [d.to_json() for d in self.domains],
            "online_cpus": list(self.online_cpus),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> "DeviceSettings":
        return cls(
            nvpmodel_id=None if data.get("nvpmodel_id") is None else as_int(data["nvpmodel_id"]),
            domains=tuple(DomainSettings.from_json(d) for d in as_list(data.get("domains", []))),
            online_cpus=tuple(as_int(c) for c in as_list(data.get("online_cpus", []))),
        )


@runtime_checkable
class Device(Protocol):
    """A Jetson board or its digital twin, as seen by the engine."""

    def identity(self) -> DeviceIdentity: ...

    def clock_table(self, domain: ClockDomain) -> tuple[int, ...]:
        """Available frequencies in Hz, ascending."""
        ...

    def clock(self, domain: ClockDomain) -> ClockState: ...

    def pin(self, domain: ClockDomain, hz: int) -> ClockState:
        """Pin a domain to a listed frequency, safely ordered, verified; raises
        UnsupportedFrequencyError for an unlisted one."""
        ...

    def unpin(self, domain: ClockDomain) -> ClockState:
        """Give the domain back to its dynamic governor over the mode's full range."""
        ...

    def rails(self) -> tuple[RailReading, ...]: ...

    def rail_update_interval_s(self) -> float:
        """How often the power sensor produces a new value (bounds the sampling rate)."""
        ...

    def temperatures(self) -> tuple[TemperatureReading, ...]: ...

    def gpu_load(self) -> float:
        """GPU busy fraction, 0..1."""
        ...

    def power_modes(self) -> tuple[PowerMode, ...]: ...

    def power_mode(self) -> PowerMode: ...

    def set_power_mode(self, mode_id: int) -> None: ...

    def jetson_clocks(self, store: Path | None = None) -> None:
        """Pin CPU, GPU and EMC to the mode's maximum (storing the state first if asked)."""
        ...

    def jetson_clocks_restore(self, store: Path) -> None: ...

    def read_settings(self) -> DeviceSettings: ...

    def apply_settings(self, settings: DeviceSettings) -> None: ...

    def describe(self) -> JsonObject:
        """How to reopen this device in another process (the guard's journal keeps it)."""
        ...


@runtime_checkable
class ServiceWriter(Protocol):
    """A device whose writes go through the clock service (engine/device/clockd), which takes
    the snapshot, journals it, holds the board lock and restores it, also when this process
    dies. A ClockGuard around one asks it for the snapshot instead of journalling and locking
    itself, and restores through `apply_settings` of that snapshot as for any device."""

    def service_snapshot(self) -> DeviceSettings: ...
