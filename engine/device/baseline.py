"""The baseline of every comparison: the board's uncapped nvpmodel mode, found by name, with its
default dynamic governors.

Its id differs per module, so nothing may assume mode 0. On an AGX Orin it is MAXN, mode 0 (L4T's
nvpmodel_p3701_0000.conf); on an Orin Nano or NX with JetPack 6.2 it is MAXN_SUPER, and mode 0 may be
a capped one: in NVIDIA's nvpmodel_p3767_0003_super.conf (Orin Nano 8GB, JetPack 6.2) mode 0 is 15W,
1 is 25W and MAXN_SUPER is mode 2; in nvpmodel_p3767_0000_super.conf (Orin NX 16GB) MAXN_SUPER is mode 0
and 1-4 are 10W, 15W, 25W and 40W (both as republished in github.com/LineageOS/
android_device_nvidia_concord, nvpmodel/; NVIDIA documents the modes in the Jetson Linux Developer
Guide, "Platform Power and Performance", Supported Modes and Power Efficiency).
`engine.device.setting.MAXN` stays the AGX Orin's (mode 0): the twin's AGX profile, stored runs and
the selector's settings speak it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Protocol, Sequence

from engine.core.errors import ConfigError
from engine.device.base import PowerMode
from engine.device.setting import MAXN, DvfsSetting


class HasModes(Protocol):
    """What has a board's nvpmodel modes: a device profile (engine.device.twin.profile.TwinProfile)."""

    @property
    def modes(self) -> Sequence[PowerMode]: ...

BASELINE_NAMES = ("MAXN_SUPER", "MAXN")  # NVIDIA's names of the uncapped mode, the Super one first


def _norm(name: str) -> str:
    return name.strip().upper().replace("-", "_").replace(" ", "_")


def maxn_named(mode: PowerMode) -> bool:
    """Whether NVIDIA's conf names the mode as its uncapped one (MAXN, MAXN_SUPER)."""
    name = _norm(mode.name)
    return name == "MAXN" or name.startswith("MAXN_")


def uncapped(mode: PowerMode) -> bool:
    """Whether the mode caps no clock (its CPU, GPU and EMC maxima are the tables')."""
    return mode.cpu_max_hz is None and mode.gpu_max_hz is None and mode.emc_max_hz is None


def uncapped_mode(modes: Sequence[PowerMode]) -> PowerMode:
    """The board's uncapped mode: the MAXN-named one (an uncapped one first, then MAXN_SUPER before
    MAXN, then the lowest id), else the one mode that caps nothing (most CPUs online, lowest id).
    A conf with neither is refused: a baseline in a capped mode would overstate every saving."""
    named = [m for m in modes if maxn_named(m)]
    if named:
        return min(named, key=lambda m: (not uncapped(m), _norm(m.name) != "MAXN_SUPER", m.id))
    free = [m for m in modes if uncapped(m)]
    if free:
        return min(free, key=lambda m: (-(m.online_cpus or 0), m.id))
    listed = ", ".join(mode_label(m) for m in sorted(modes, key=lambda m: m.id)) or "none"
    raise ConfigError(
        f"the board's nvpmodel conf has no uncapped mode to compare against (no MAXN or MAXN_SUPER, and every "
        f"mode caps a clock); its modes: {listed}",
        "install the nvpmodel conf JetPack ships for this module (/etc/nvpmodel.conf; JetPack 6.2 adds MAXN_SUPER "
        "on Orin Nano and NX), or run one mode by id with --policy mode:N and no --compare",
    )


def baseline_setting(modes: Sequence[PowerMode], *, jetson_clocks: bool = False) -> DvfsSetting:
    """The baseline as a setting: the uncapped mode with its dynamic governors (`jetson_clocks`:
    every clock pinned at that mode's maximum, the maxn-pinned policy)."""
    return DvfsSetting(nvpmodel=uncapped_mode(modes).id, jetson_clocks=jetson_clocks)


def mode_label(mode: PowerMode) -> str:
    """How the UI and reports name a mode: `MAXN_SUPER (mode 2)`."""
    return f"{mode.name} (mode {mode.id})"


@dataclass(frozen=True)
class Baseline:
    """A board's baseline as a value: its setting (the uncapped mode, every governor dynamic) and its
    mode's name, so a client recognises the baseline point of a sweep and names it."""

    setting: DvfsSetting
    name: str = "MAXN"

    @property
    def label(self) -> str:
        """`MAXN_SUPER (mode 2)`, as mode_label names a mode."""
        return f"{self.name} (mode {self.setting.nvpmodel})"

    def is_it(self, setting: DvfsSetting) -> bool:
        """Whether `setting` is this baseline: its mode with no clock pinned and no jetson_clocks."""
        return setting == self.setting

    def in_its_mode(self, setting: DvfsSetting) -> DvfsSetting:
        """A setting in the selector's terms (the uncapped mode as mode 0: the shipped selectors' and features'
        mode) on this board: the same clocks pinned in MAXN_SUPER (mode 2) on an Orin Nano 8GB, whose mode 0
        is capped, and the selector's mode 2 (the board's mode 0, 15W) back in mode 0 (swap_uncapped)."""
        mode, uncapped = setting.nvpmodel, self.setting.nvpmodel
        if mode is None or uncapped is None:
            return setting
        return replace(setting, nvpmodel=swap_uncapped(mode, uncapped))


def swap_uncapped(mode: int, uncapped: int) -> int:
    """A mode id between a board's terms and the selector's: the uncapped mode and mode 0 trade ids (the swap
    is its own inverse). The one convention of engine.selector.features.SettingEncoder and Baseline."""
    return 0 if mode == uncapped else uncapped if mode == 0 else mode


# What a record names no board's modes for (a run or sweep stored before modes were named, an import of
# an AGX Orin's table): the AGX Orin's MAXN, mode 0.
AGX_MAXN = Baseline(MAXN, "MAXN")


def board_baseline(modes: Sequence[PowerMode]) -> Baseline:
    """The baseline of a board with these nvpmodel modes (refused as uncapped_mode refuses)."""
    mode = uncapped_mode(modes)
    return Baseline(DvfsSetting(nvpmodel=mode.id), mode.name)


def is_baseline(setting: DvfsSetting, modes: Sequence[PowerMode] | None = None) -> bool:
    """Whether `setting` is the baseline of a board with these modes; without modes, the AGX Orin's MAXN
    (mode 0), which stored records that name no modes mean."""
    return (board_baseline(modes) if modes else AGX_MAXN).is_it(setting)


def profile_baseline(profile: HasModes | None) -> Baseline:
    """The baseline of a device profile's modes (`orin-nano-8gb`: MAXN_SUPER, mode 2); AGX_MAXN for no profile
    or one with no uncapped mode (what records from before modes were named meant)."""
    if profile is None:
        return AGX_MAXN
    try:
        return board_baseline(profile.modes)
    except ConfigError:
        return AGX_MAXN
