"""The DVFS setting space: which clock settings a device offers, as values.

A `DvfsSetting` names what to be in: an nvpmodel mode, optionally jetson_clocks, and a
pinned clock per domain (None = left to that domain's dynamic governor). A setting
space is a tuple of them built from the device's own clock tables and modes:

- `gpu`: every GPU step, CPU and EMC left to their governors (as published Orin
  studies sweep), in the board's uncapped mode (MAXN, mode 0, on an AGX Orin; MAXN_SUPER on an
  Orin Nano or NX, whatever its id: engine.device.baseline);
- `gpu+emc`: GPU steps x EMC rates, CPU left to its governor;
- `full`: GPU x CPU x EMC, the CPU table thinned by `cpu_stride` (counted down from
  the maximum, so the top step is always in);
- `modes`: each nvpmodel mode with its default governors.

That mode with every governor dynamic is the baseline every comparison is made against,
so it is included unless asked not to be.
"""

from __future__ import annotations

import itertools
import logging

from engine.device.base import ClockDomain, Device
from engine.device.baseline import baseline_setting
from engine.device.setting import DvfsSetting
from engine.core.errors import ConfigError

log = logging.getLogger(__name__)

SPACES = ("gpu", "gpu+emc", "full", "modes")


def setting_space(
    device: Device, space: str = "gpu", *, cpu_stride: int = 4, include_maxn: bool = True
) -> tuple[DvfsSetting, ...]:
    """The settings a sweep covers on this device (the baseline first when included)."""
    key = space.strip().lower()
    if key not in SPACES:
        raise ConfigError(f"unknown setting space {space!r}", f"use one of {', '.join(SPACES)}")
    if isinstance(cpu_stride, bool) or not isinstance(cpu_stride, int) or cpu_stride < 1:
        raise ConfigError(
            f"CPU stride must be a positive integer, got {cpu_stride!r}", "use e.g. 4 (every 4th CPU step)"
        )

    modes = device.power_modes()
    baseline = baseline_setting(modes)  # no caps, so every table entry can be pinned
    if key == "modes":
        points = [DvfsSetting(nvpmodel=m.id) for m in sorted(modes, key=lambda m: m.id)]
    else:
        gpu = device.clock_table(ClockDomain.GPU)
        cpu: tuple[int | None, ...] = (None,)
        emc: tuple[int | None, ...] = (None,)
        if key in ("gpu+emc", "full"):
            emc = device.clock_table(ClockDomain.EMC)
        if key == "full":
            cpu = thin_table(device.clock_table(ClockDomain.CPU), cpu_stride)
        points = [
            DvfsSetting(gpu_hz=g, cpu_hz=c, emc_hz=e, nvpmodel=baseline.nvpmodel)
            for g, c, e in itertools.product(gpu, cpu, emc)
        ]
    out = [p for p in points if p != baseline]
    if include_maxn:
        out.insert(0, baseline)
    log.debug("setting space %s: %d settings", key, len(out))
    return tuple(out)


def thin_table(table: tuple[int, ...], stride: int) -> tuple[int, ...]:
    """Every `stride`-th entry counted down from the top (the maximum always stays), ascending."""
    ordered = sorted(table)
    return tuple(sorted(ordered[::-1][::stride]))


