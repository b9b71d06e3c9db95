"""Rail sets: which INA3221 rails a Jetson reports, which of them is its total, and which are parts.

A module's power monitor reports either the module's input with some of its parts, or only parts:
- Orin Nano and Orin NX (and Xavier NX, the same three channels): VDD_IN is the module's input, the
  total; VDD_CPU_GPU_CV (CPU, GPU and CV cores) and VDD_SOC (the SoC core: memory system, engines)
  are parts of it. Summing all three counts the parts twice (about 37% too much on a busy board).
- AGX Orin: no input rail; the total is the sum of VDD_GPU_SOC, VDD_CPU_CV, VIN_SYS_5V0 and
  VDDQ_VDD2_1V8AO (JetPack 7's tegrastats prints only the first three: their sum).
- Jetson Nano (JetPack 4): POM_5V_IN is the input, POM_5V_GPU and POM_5V_CPU its parts; TX1/TX2:
  VDD_IN is the input. AGX Xavier: no input rail, the sum.
Sources: NVIDIA Jetson Linux Developer Guide, Platform Power and Performance, "Software-Based Power
Consumption Modeling" (the INA3221 channels of each module):
  https://docs.nvidia.com/jetson/archives/r36.3/DeveloperGuide/SD/PlatformPowerAndPerformance/JetsonOrinNanoSeriesJetsonOrinNxSeriesAndJetsonAgxOrinSeries.html
  https://docs.nvidia.com/jetson/archives/l4t-archived/l4t-3275/Tegra%20Linux%20Driver%20Package%20Development%20Guide/power_management_tx2_32.html
  https://developer.nvidia.cn/embedded/dlc/l4t-documentation-32-1 (Jetson Nano)
and jetson-stats' total rule (jtop/core/power.py `total_power`: a rail named VDD_IN or POM_5V_IN is the
total, else the sum; it cites https://forums.developer.nvidia.com/t/orin-nx-power-data-from-jtop/242804/5
and https://forums.developer.nvidia.com/t/xavier-jetson-total-power-consumption/81016).

The `gpu+cpu` preset names the rails of the compute domains. On AGX Orin they are VDD_GPU_SOC and
VDD_CPU_CV (what published Orin studies report), which hold the GPU, CPU, CV cores and the SoC core; on
Orin Nano/NX the same domains are VDD_CPU_GPU_CV and VDD_SOC, so the preset is those two: the same scope
on every Orin (VDD_CPU_GPU_CV alone would leave the SoC core, and the memory system in it, out).

A set of rails the catalogue does not know is totalled by jetson-stats' rule, with a warning that says
so: its input rail where it has one (VDD_IN, POM_5V_IN), else the sum of every rail.
A device profile may name its total rail; this catalogue is what it names it by.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from engine.core.errors import ConfigError

log = logging.getLogger(__name__)

# Rails that are a module's input wherever they appear (jetson-stats' rule, above).
INPUT_RAILS = ("VDD_IN", "POM_5V_IN")

# The presets a `--rails` flag takes besides a list of rail names, and what each means.
PRESETS: dict[str, str] = {
    "all": "the module's total (its input rail where it has one, VDD_IN on Orin Nano/NX; else every rail, "
           "as on AGX Orin)",
    "gpu+cpu": "the compute rails (VDD_GPU_SOC + VDD_CPU_CV on AGX Orin, VDD_CPU_GPU_CV + VDD_SOC on Orin Nano/NX)",
}

_DOC_ORIN = ("NVIDIA Jetson Linux Developer Guide r36.3, Platform Power and Performance, Jetson Orin "
             "(Software-Based Power Consumption Modeling); jetson-stats jtop/core/power.py")
_DOC_R32 = "NVIDIA L4T r32 Development Guide, power management (Software-Based Power Consumption Modeling); jetson-stats"


@dataclass(frozen=True)
class RailSet:
    """The rails a module reports; `total`: the rail that is the module's total (None: the sum of all)."""

    name: str
    modules: str
    rails: tuple[str, ...]
    total: str | None
    gpu_cpu: tuple[str, ...]  # the `gpu+cpu` preset's rails (() where the set has none)
    source: str
    known: bool = True  # False: a set the catalogue does not know, totalled by jetson-stats' rule

    @property
    def parts(self) -> tuple[str, ...]:
        """The rails that are parts of the total (every rail, where the total is their sum)."""
        return tuple(r for r in self.rails if r != self.total)

    def total_rails(self, available: Iterable[str]) -> tuple[str, ...]:
        """The rails, among `available` (in their order), whose sum is the module's total."""
        if self.total is not None:
            return (self.total,)
        return tuple(r for r in available if r in self.rails)

    def total_of(self, values: Mapping[str, float]) -> float:
        """The total of per-rail values (mW, or J), over the rails that make it."""
        return float(sum(values.get(r, 0.0) for r in self.total_rails(values)))


CATALOGUE: tuple[RailSet, ...] = (
    RailSet("orin-nano-nx", "Jetson Orin Nano, Orin NX (Xavier NX has the same channels)",
            ("VDD_IN", "VDD_CPU_GPU_CV", "VDD_SOC"), "VDD_IN", ("VDD_CPU_GPU_CV", "VDD_SOC"), _DOC_ORIN),
    RailSet("agx-orin", "Jetson AGX Orin", ("VDD_GPU_SOC", "VDD_CPU_CV", "VIN_SYS_5V0", "VDDQ_VDD2_1V8AO"),
            None, ("VDD_GPU_SOC", "VDD_CPU_CV"), _DOC_ORIN),
    RailSet("jetson-nano", "Jetson Nano (JetPack 4)", ("POM_5V_IN", "POM_5V_GPU", "POM_5V_CPU"), "POM_5V_IN",
            ("POM_5V_GPU", "POM_5V_CPU"), _DOC_R32),
    RailSet("tx2", "Jetson TX1/TX2 (JetPack 4)", ("VDD_IN", "VDD_CPU", "VDD_GPU", "VDD_SOC", "VDD_WIFI", "VDD_DDR"),
            "VDD_IN", ("VDD_GPU", "VDD_CPU"), _DOC_R32),
    RailSet("agx-xavier", "Jetson AGX Xavier (JetPack 4/5)", ("GPU", "CPU", "SOC", "CV", "VDDRQ", "SYS5V"), None,
            ("GPU", "CPU"), "jetson-stats jtop/core/power.py (no input rail: the sum)"),
)


def rail_set_of(names: Iterable[str]) -> RailSet:
    """The rail set a source's rails belong to: a catalogue entry whose rails hold them all (and its
    total, or its compute rails where the total is a sum); else an unknown set, said once per set."""
    return _rail_set(frozenset(names))


@functools.lru_cache(maxsize=64)
def _rail_set(have: frozenset[str]) -> RailSet:
    for rs in CATALOGUE:
        key = {rs.total} if rs.total is not None else set(rs.gpu_cpu)
        if have <= set(rs.rails) and key <= have:
            return rs
    ordered = tuple(sorted(have))
    total = next((r for r in INPUT_RAILS if r in have), None)
    if have:
        if total is not None:
            log.warning("rail set %s is not one this project knows: taking %s, the module's input, as the total "
                        "(jetson-stats' rule)", ", ".join(ordered), total)
        else:
            log.warning("rail set %s is not one this project knows: the total is the sum of every rail; if one of "
                        "them is the module's input that overstates it (name the rails with --rails A,B)",
                        ", ".join(ordered))
    return RailSet("unknown", "unknown module", ordered, total, (), "jetson-stats' total rule", known=False)


def total_rails(names: Sequence[str]) -> tuple[str, ...]:
    """The rails among `names` whose sum is the module's total."""
    return rail_set_of(names).total_rails(names)


def total_of(values: Mapping[str, float]) -> float:
    """The module's total of per-rail values (mW or J): its input rail, or the sum of its parts."""
    return rail_set_of(values).total_of(values)


def preset_rails(preset: str, available: Sequence[str]) -> tuple[str, ...] | None:
    """The rails a preset (`all`, `gpu+cpu`) names on a source with rails `available`; None when
    `preset` is not a preset's name (a list of rails)."""
    key = preset.strip().lower()
    if key not in PRESETS:
        return None
    have = tuple(available)
    rs = rail_set_of(have)
    if key == "all":
        return rs.total_rails(have)
    if not rs.gpu_cpu:
        raise ConfigError(
            f"the gpu+cpu preset is not known for rails {', '.join(have) or '(none)'}",
            f"name the rails instead, e.g. --rails {','.join(have[:2]) or 'NAME,NAME'}")
    return rs.gpu_cpu
