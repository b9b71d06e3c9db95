"""A DVFS setting as a value: an nvpmodel mode, optionally jetson_clocks, and a pinned clock
per domain (None = left to that domain's dynamic governor); and the checks that refuse,
before anything changes, a setting a device cannot take.

It lives in the device layer because it is the board's vocabulary: the twin's fast model,
the results store and the dvfs policies all speak it.
"""

from __future__ import annotations

import logging
import numbers
from dataclasses import dataclass
from typing import Mapping, Sequence

from engine.core.units import format_mhz
from engine.core.errors import ConfigError, DeviceError, UnsupportedFrequencyError
from engine.core.jsontypes import JsonObject, as_int
from engine.device.base import ClockDomain, Device, PowerMode

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DvfsSetting:
    """One DVFS setting; frequencies in Hz."""

    gpu_hz: int | None = None  # None: left to the governor
    cpu_hz: int | None = None
    emc_hz: int | None = None
    nvpmodel: int | None = None  # the mode to be in; None: leave as is
    jetson_clocks: bool = False  # maxn-pinned: every domain at the mode's maximum

    def __post_init__(self) -> None:
        for name in ("gpu_hz", "cpu_hz", "emc_hz", "nvpmodel"):
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
                raise ConfigError(
                    f"DVFS setting field {name} = {value!r} is not a non-negative integer",
                    "give frequencies as integers in Hz and the nvpmodel mode as its id",
                )
            object.__setattr__(self, name, int(value))  # NumPy integers from a sweep table: plain ints
        if not isinstance(self.jetson_clocks, bool):
            raise ConfigError(f"DVFS setting jetson_clocks = {self.jetson_clocks!r} is not a bool", "use True or False")

    @classmethod
    def pinning(cls, domain: ClockDomain, hz: int) -> DvfsSetting:
        """The setting that pins one domain to `hz` and leaves the others to their governors."""
        return cls(gpu_hz=hz if domain is ClockDomain.GPU else None, cpu_hz=hz if domain is ClockDomain.CPU else None,
                   emc_hz=hz if domain is ClockDomain.EMC else None)

    def clock(self, domain: ClockDomain) -> int | None:
        """The pinned frequency of a domain, or None when its governor decides."""
        return {ClockDomain.GPU: self.gpu_hz, ClockDomain.CPU: self.cpu_hz, ClockDomain.EMC: self.emc_hz}[
            ClockDomain(domain)
        ]

    @property
    def pinned(self) -> dict[ClockDomain, int]:
        """The domains this setting pins, with their frequencies."""
        return {d: hz for d in ClockDomain if (hz := self.clock(d)) is not None}

    def label(self) -> str:
        """Short human form, e.g. "GPU 816 · CPU gov · EMC gov · mode 0" (MHz)."""
        if self.jetson_clocks and not self.pinned:
            parts = ["jetson_clocks"]
        else:
            parts = [
                f"{d.value.upper()} {format_mhz(hz) if (hz := self.clock(d)) is not None else 'gov'}"
                for d in ClockDomain
            ]
            if self.jetson_clocks:
                parts.append("jetson_clocks")
        parts.append("mode as is" if self.nvpmodel is None else f"mode {self.nvpmodel}")
        return " · ".join(parts)

    def __str__(self) -> str:
        return self.label()

    def to_json(self) -> JsonObject:
        return {
            "gpu_hz": self.gpu_hz,
            "cpu_hz": self.cpu_hz,
            "emc_hz": self.emc_hz,
            "nvpmodel": self.nvpmodel,
            "jetson_clocks": self.jetson_clocks,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, object]) -> "DvfsSetting":
        unknown = set(d) - {"gpu_hz", "cpu_hz", "emc_hz", "nvpmodel", "jetson_clocks"}
        if unknown:
            raise ConfigError(
                f"unknown field(s) {', '.join(sorted(unknown))} in a stored DVFS setting",
                "the record was written by a newer slm-dvfs; read it with that version",
            )

        def opt_int(key: str) -> int | None:
            v = d.get(key)
            if v is None:
                return None
            try:
                return as_int(v)
            except (TypeError, ValueError):
                raise ConfigError(f"stored DVFS setting has {key} = {v!r}", "it must be an integer or null") from None

        return cls(
            gpu_hz=opt_int("gpu_hz"),
            cpu_hz=opt_int("cpu_hz"),
            emc_hz=opt_int("emc_hz"),
            nvpmodel=opt_int("nvpmodel"),
            jetson_clocks=d.get("jetson_clocks", False) in (True, 1),
        )


# The AGX Orin's baseline, "MAXN Mode 0": no caps, default dynamic governors. Another module's uncapped
# mode may have another id (MAXN_SUPER is mode 2 on an Orin Nano 8GB): a board's is engine.device.baseline's.
MAXN = DvfsSetting(nvpmodel=0)


MAXN_PINNED = DvfsSetting(nvpmodel=0, jetson_clocks=True)


def check_setting(device: Device, setting: DvfsSetting) -> PowerMode | None:
    """Refuse, before anything changes, a setting the device cannot take: an undefined
    mode (ConfigError), an unlisted clock (UnsupportedFrequencyError naming the nearest),
    a clock above the mode's cap (ConfigError). Returns the mode the setting runs in
    (None when the device cannot tell its modes and the setting names none)."""
    mode: PowerMode | None = None
    try:
        modes = device.power_modes()
    except DeviceError:
        if setting.nvpmodel is not None:
            raise
        modes = ()
    if setting.nvpmodel is not None:
        mode = next((m for m in modes if m.id == setting.nvpmodel), None)
        if mode is None:
            listed = ", ".join(f"{m.id} ({m.name})" for m in sorted(modes, key=lambda m: m.id))
            raise ConfigError(
                f"nvpmodel mode {setting.nvpmodel} is not defined on this device",
                f"use one of: {listed} (`slm-dvfs device` lists them)",
            )
    elif modes:
        try:
            current = device.power_mode()
        except DeviceError as exc:
            log.warning("power mode unknown, clock caps not checked: %s", exc.what)
        else:
            mode = next((m for m in modes if m.id == current.id), current)
    check_clocks(setting, {d: device.clock_table(d) for d in setting.pinned}, mode)
    return mode


def check_clocks(setting: DvfsSetting, tables: Mapping[ClockDomain, Sequence[int]], mode: PowerMode | None) -> None:
    """Refuse a pinned clock its domain's table does not list (UnsupportedFrequencyError
    naming the nearest) or one above `mode`'s cap (ConfigError). `tables` holds at least
    the pinned domains; the device check and the twin's fast sweep share this."""
    for domain, hz in setting.pinned.items():
        table = tuple(tables[domain])
        if hz not in table:
            raise UnsupportedFrequencyError(domain.value, hz, table)
        cap = _mode_cap(mode, domain)
        if cap is not None and hz > cap:
            assert mode is not None  # a cap comes from a mode
            raise ConfigError(
                f"{domain.value.upper()} {format_mhz(hz)} MHz is above the {format_mhz(cap)} MHz cap of nvpmodel mode "
                f"{mode.id} ({mode.name})",
                "pick a clock at or below the cap, or a mode without it (MAXN or MAXN_SUPER: `slm-dvfs device` lists "
                "the modes)",
            )


def _mode_cap(mode: PowerMode | None, domain: ClockDomain) -> int | None:
    if mode is None:
        return None
    caps = {ClockDomain.GPU: mode.gpu_max_hz, ClockDomain.CPU: mode.cpu_max_hz, ClockDomain.EMC: mode.emc_max_hz}
    return caps[domain]
