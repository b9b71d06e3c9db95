"""The ranges a figure must fall in to be believed, in one place, each bound with its reason.

Workload shapes bound what a flag or an imported cell may ask for. Board figures (power, energy,
rail readings, memory, tegrastats lines) are bounded by the board's profile (`BoardLimits`, from
a device profile: its module power limit, clock tables and memory). A figure outside its range is
refused (or a line skipped) naming the value and the bound; one that is possible but unusual is
kept with a warning. torch-free, and free of the device layer: profiles are read duck-typed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

# --- workload shapes: the CLI's flags and imported cells alike -----------------------------------
MAX_STEPS = 10_000_000  # a million steps is weeks of training on a board; ten times that is a typo
MAX_BATCH = 2**31 - 1  # the memory estimate refuses what the board cannot hold, with the figure
# The largest max_position_embeddings a config may declare (engine.workload.sizing's LIMITS); a
# model's own limit, and the memory estimate, refuse most lengths below it.
MAX_SEQ_LEN = 2**20
MAX_REPEATS = 10_000  # published sweeps repeat a point 3-5 times; ten thousand is a row counter, not a repeat
MAX_SAMPLES = 10**9  # GLUE's largest training set (QQP) has 364k examples; a billion is no sweep point
MAX_EPOCHS = 10_000.0  # fine-tuning runs a few epochs (GLUE recipes: 2-10); ten thousand is a typo
MAX_LORA_RANK = 4096  # as wide as the hidden size of the zoo's largest models; ranks of 4-64 are usual
# --- a sweep point (the CLI's sweep flags and the TUI's Sweep form) ---
MAX_WARMUP_STEPS = 10_000  # unmeasured steps before a point: one or a few settle the clocks and caches
MAX_POINT_STEPS = 100_000  # measured steps of one point: published sweeps measure tens to hundreds
MAX_SWEEP_REPEATS = 1000  # repetitions of a whole space: 3-5 in published sweeps

# --- time ----------------------------------------------------------------------------------------
# A sweep point or an imported run covers minutes to hours of training; a week is past any run on
# one board (published sweeps run each point for minutes). Longer is a unit error (ms as s).
MAX_MEASURED_S = 7 * 24 * 3600.0
# tegrastats writes a line every --interval (1 s by default): a gap between two lines longer than
# GAP_INTERVALS intervals, and a minute, means logging stopped (a suspend, a second recording
# appended to the same file); its energy would be guessed, not measured.
GAP_INTERVALS = 10
MIN_GAP_S = 60.0

# --- power ---------------------------------------------------------------------------------------
# A module's regulators and its input are sized for its power limit (60 W on the AGX Orin 64GB);
# no rail, and no sum of rails, reads twice that. A reading above is a unit slip (mW written as W)
# or a sensor fault. Between the limit and this: possible for a moment (the limit is enforced over
# time; a 32GB stress test drew 40.4 W on GPU_SOC alone), unusual as a point's average: kept, said.
POWER_HEADROOM = 2.0
# The INA3221 reports a signed shunt voltage: at rest a channel may read a step or two below zero
# (its offset, about 80 uV, is 40 mA over the 2 mOhm shunt). More negative than that, current
# would flow back into the supply: a fault (a swapped shunt, a wrong shuntK_resistor), not power.
NEGATIVE_CURRENT_TOLERANCE_MA = 40.0
# The INA3221 measures bus voltages up to 26 V; Jetson rails sit at 5 V (or 19 V input).
MAX_RAIL_MV = 26_000.0


class LimitsSource(Protocol):
    """What the limits read from a device profile (engine.device.twin.profile.TwinProfile, which
    engine/core cannot import: the layers point down)."""

    @property
    def name(self) -> str: ...
    @property
    def module_power_limit_mw(self) -> float: ...
    @property
    def memory_total_mb(self) -> float | None: ...


@dataclass(frozen=True)
class BoardLimits:
    """What one board can plausibly show: from its device profile (`from_profile`)."""

    profile: str  # the device profile the limits come from, e.g. agx-orin-64gb
    power_limit_w: float  # the module's power limit (the profile's module_power_limit_mw)
    memory_mb: float | None = None  # the memory Linux sees (MemTotal, tegrastats' RAM total); None: unknown

    @classmethod
    def from_profile(cls, profile: LimitsSource) -> "BoardLimits":
        """From a device profile (engine.device.twin.profile.TwinProfile)."""
        return cls(profile=str(profile.name), power_limit_w=float(profile.module_power_limit_mw) / 1000.0,
                   memory_mb=profile.memory_total_mb)

    @property
    def max_power_w(self) -> float:
        """No reading or average of this board's rails is above this (POWER_HEADROOM x its limit)."""
        return self.power_limit_w * POWER_HEADROOM

    @property
    def memory_bytes(self) -> int | None:
        return None if self.memory_mb is None else int(self.memory_mb * 2**20)

    def power_problem(self, watts: float, what: str) -> str | None:
        """Why a power (an instant reading or an average) cannot be this board's; None when it can."""
        if not math.isfinite(watts) or watts < 0:
            return f"{what} {watts:g} W is negative" if math.isfinite(watts) else f"{what} is not finite"
        if watts > self.max_power_w:
            return (f"{what} {watts:g} W is above anything {self.profile} draws ({POWER_HEADROOM:g} x its "
                    f"{self.power_limit_w:g} W power limit = {self.max_power_w:g} W): a unit slip (mW as W?) "
                    "or a sensor fault")
        return None

    def power_warning(self, watts: float, what: str) -> str | None:
        """A possible but unusual power: above the module's limit (kept, said)."""
        if self.power_limit_w < watts <= self.max_power_w:
            return f"{what} {watts:g} W is above {self.profile}'s {self.power_limit_w:g} W power limit"
        return None

    def energy_problem(self, energy_j: float, time_s: float | None, what: str = "energy") -> str | None:
        """Why an energy (over `time_s` when known) cannot be one measured on this board."""
        if time_s is not None and time_s > 0:
            return self.power_problem(energy_j / time_s, f"{what} / time =")
        most = self.max_power_w * MAX_MEASURED_S
        if energy_j > most:
            return (f"{what} {energy_j:g} J is more than {self.profile} can draw in a week "
                    f"({self.max_power_w:g} W x {MAX_MEASURED_S:g} s = {most:g} J): a unit slip (mJ as J?)")
        return None

    def rail_problem(self, voltage_mv: float, current_ma: float) -> str | None:
        """Why a rail sensor's reading (bus mV, current mA) is no power of this board; None when plausible."""
        if not (math.isfinite(voltage_mv) and math.isfinite(current_ma)):
            return "not a finite reading"
        if voltage_mv < 0 or voltage_mv > MAX_RAIL_MV:
            return f"{voltage_mv:g} mV is outside the sensor's 0-{MAX_RAIL_MV:g} mV bus range"
        if current_ma < -NEGATIVE_CURRENT_TOLERANCE_MA:
            return (f"negative current {current_ma:g} mA: current cannot flow back into the supply "
                    "(a sensor fault, or a wrong shunt resistor)")
        power_w = voltage_mv * current_ma / 1e6
        return self.power_problem(power_w, "power") if power_w > 0 else None  # within the offset: kept

    def memory_problem(self, total_mb: float, used_mb: float | None = None) -> str | None:
        """Why a memory reading (total, used) cannot be this board's."""
        if used_mb is not None and used_mb > total_mb:
            return f"RAM used {used_mb:g} MB is more than its total {total_mb:g} MB"
        # 5%: L4T's carve-outs move MemTotal a little between releases; another module is far off.
        if self.memory_mb is not None and total_mb > self.memory_mb * 1.05:
            return f"RAM total {total_mb:g} MB is more than {self.profile} has ({self.memory_mb:g} MB)"
        return None


def time_problem(seconds: float, what: str = "time") -> str | None:
    """Why a measured duration cannot be one (see MAX_MEASURED_S); None when it can."""
    if seconds > MAX_MEASURED_S:
        return (f"{what} {seconds:g} s is over a week ({MAX_MEASURED_S:g} s), longer than any measured run: "
                "a unit slip (ms as s?)")
    return None


def log_gap_s(interval_s: float) -> float:
    """The longest gap between two lines of a log written every `interval_s` (see GAP_INTERVALS)."""
    return max(MIN_GAP_S, GAP_INTERVALS * interval_s)
