"""The values of an imported sweep file's cells, checked against the board they were measured on:
clocks in its tables (MHz or Hz), nvpmodel modes by id or name, rail sets named by its rails.

torch-free: `slm-dvfs import-sweep` checks a file without building any model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from engine.core.errors import ConfigError
from engine.core.plausible import BoardLimits
from engine.core.text import shown
from engine.core.userinput import number_value
from engine.device.base import PowerMode
from engine.device.monitor import RAIL_PRESETS
from engine.device.rails import preset_rails

if TYPE_CHECKING:  # annotations only: the twin loads when a profile is read
    from engine.device.twin.profile import TwinProfile

NEAR_HZ = 1_000_000  # a clock within 1 MHz of exactly one table entry is that entry (1300 -> 1300.5 MHz)


class CellError(ConfigError):
    """One cell's value is wrong; the reader adds where (file, line, column)."""


@dataclass(frozen=True)
class BoardTables:
    """What a board can be set to and which rails it reports: the checks an imported row must pass."""

    profile: str  # the device profile the tables come from, e.g. agx-orin-64gb
    gpu_hz: tuple[int, ...]
    cpu_hz: tuple[int, ...]
    emc_hz: tuple[int, ...]
    rails: tuple[str, ...]
    modes: tuple[PowerMode, ...]
    board: str = ""
    module: str = ""
    limits: BoardLimits | None = None  # what its power, energy and memory can plausibly be; None: unchecked

    @classmethod
    def from_profile(cls, profile: TwinProfile) -> "BoardTables":
        """From a device profile (engine.device.twin.profile.TwinProfile): its tables, rails, modes and limits."""
        return cls(profile=profile.name, gpu_hz=tuple(profile.gpu.table_hz), cpu_hz=tuple(profile.cpu.table_hz),
                   emc_hz=tuple(profile.emc.table_hz), rails=tuple(profile.rail_names), modes=tuple(profile.modes),
                   board=profile.identity.board, module=profile.identity.module,
                   limits=BoardLimits.from_profile(profile))

    def table(self, domain: str) -> tuple[int, ...]:
        return {"gpu": self.gpu_hz, "cpu": self.cpu_hz, "emc": self.emc_hz}[domain]


def number(text: object, what: str) -> float:
    """A finite number from a cell (a JSON number, or text like `12.5`), read strictly
    (engine.core.userinput: no `2_5`, no 5000 digits)."""
    return number_value(text, what)


def positive(text: object, what: str, unit: str) -> float:
    value = number(text, what)
    if value <= 0:
        raise CellError(f"{what} must be positive, got {value:g} {unit}", f"give the {what} in {unit}")
    return value


def whole(text: object, what: str, low: int, high: int) -> int:
    """A whole number in [low, high] (`32` or `32.0`); `high` is the bound engine.core.plausible gives it."""
    value = number(text, what)
    if value != int(value) or value < low:
        raise CellError(f"{what} must be a whole number >= {low}, got {text!r}", f"give a whole number >= {low}")
    if value > high:
        raise CellError(f"{what} {value:g} is more than any run has ({high:,} at most)",
                        f"give the {what} as measured, from {low} to {high:,}")
    return int(value)


def clock_hz(text: object, domain: str, unit: str, tables: BoardTables) -> int:
    """A clock cell as one of the board's table entries (Hz). `unit` is "MHz" or "Hz" (from the
    column's name). A value within 1 MHz of exactly one entry is that entry (1300 and 1300.5 MHz
    both name 1300500000 Hz); anything else is refused with the table."""
    value = number(text, f"the {domain.upper()} clock")
    hz = value * 1e6 if unit == "MHz" else value
    table = tables.table(domain)
    near = [t for t in table if abs(t - hz) <= NEAR_HZ]
    if len(near) == 1:
        return near[0]
    listed = ", ".join(f"{t / 1e6:g}" for t in table)
    if near:
        raise CellError(f"the {domain.upper()} clock {value:g} {unit} is ambiguous on {tables.profile}: it is within "
                        f"1 MHz of {' and '.join(f'{t / 1e6:g}' for t in near)} MHz",
                        f"write the table's value exactly; {tables.profile}'s {domain.upper()} table (MHz): {listed}")
    raise CellError(f"{tables.profile} has no {domain.upper()} clock {value:g} {unit}",
                    f"use one of its {domain.upper()} table (MHz): {listed}"
                    + (" (the column's name says Hz: a value in MHz belongs in a *_mhz column)"
                       if unit == "Hz" and value < 1e5 else ""))


def power_mode(text: object, tables: BoardTables) -> int:
    """An nvpmodel mode by id (`0`) or name (`MAXN`, `MODE_15W`, `15W`), as the board's modes name them."""
    raw = str(text).strip()
    ids = {m.id for m in tables.modes}
    try:
        value = number(raw, "mode")
        mode_id = int(value) if value.is_integer() else -1
    except ConfigError:
        key = raw.upper().replace("-", "_").replace(" ", "_")
        found = [m.id for m in tables.modes if m.name.upper() in (key, "MODE_" + key)]
        if found:
            return found[0]
        mode_id = -1
    if mode_id in ids:
        return mode_id
    known = ", ".join(f"{m.id} ({m.name})" for m in tables.modes)
    raise CellError(f"{tables.profile} has no power mode {shown(raw)!r}", f"use one of its nvpmodel modes: {known}")


def check_caps(mode_id: int, clocks: dict[str, int | None], tables: BoardTables) -> None:
    """Refuse a pinned clock above what the mode allows (a board in that mode could not have run it)."""
    mode = next((m for m in tables.modes if m.id == mode_id), None)
    if mode is None:  # not a mode of the board: power_mode() refused it already
        return
    for domain, hz in clocks.items():
        cap = getattr(mode, f"{domain}_max_hz", None)
        if hz is not None and cap is not None and hz > cap:
            raise CellError(f"{domain.upper()} {hz / 1e6:g} MHz is above power mode {mode_id} ({mode.name})'s cap "
                            f"of {cap / 1e6:g} MHz", "check the mode column (mode 0, MAXN, has no caps)")


def rail_set(text: str, tables: BoardTables) -> tuple[str, tuple[str, ...]]:
    """A rail selection (`all`, `gpu+cpu`, `VDD_GPU_SOC+VDD_CPU_CV`, `A,B`) as (the sweep's rails
    preset, the rails): a preset when it names one's rails (so `run --rails gpu+cpu` finds it),
    else the names in the board's order joined by commas, as `--rails A,B` writes them."""
    raw = str(text).strip()
    if not raw:
        raise CellError("no rails given", "name the rails the energy sums, e.g. gpu+cpu or VDD_GPU_SOC+VDD_CPU_CV")
    try:
        preset = preset_rails(raw, tables.rails)
    except ConfigError as exc:
        raise CellError(exc.what, exc.remedy) from None
    if preset is not None:
        names: tuple[str, ...] = preset
    else:
        by_upper = {r.upper(): r for r in tables.rails}
        parts = [p.strip() for p in raw.replace("+", ",").split(",") if p.strip()]
        unknown = [p for p in parts if p.upper() not in by_upper]
        if unknown:
            raise CellError(f"{tables.profile} has no rail{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}",
                            f"its rails are {', '.join(tables.rails)} (or write all, or gpu+cpu)")
        names = tuple(by_upper[p.upper()] for p in parts)
    chosen = tuple(r for r in tables.rails if r in set(names))
    # The preset whose rails these are on this board (`all`: its total, VDD_IN alone on an Orin Nano).
    for name in RAIL_PRESETS:
        try:
            rails = preset_rails(name, tables.rails)
        except ConfigError:  # gpu+cpu on a rail set that has no such rails
            continue
        if rails is not None and set(rails) == set(chosen):
            return name, chosen
    return ",".join(chosen), chosen
