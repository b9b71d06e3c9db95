"""GPU 3D scaling: whether the GPU's clock follows its load, read where each L4T keeps it.

Up to JetPack 6 (L4T r35/r36) the GPU device has an `enable_3d_scaling` node (1 = on). JetPack 7's
kernel (L4T r38/r39 on the AGX Orin) has no such node: 3D scaling is the devfreq governor itself,
`nvhost_podgov` on and `performance` off (jetson-stats commit caffd05d, jtop/core/gpu.py:
https://github.com/rbonghi/jetson_stats). Pinning uses the governor either way (device.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.device.jetson.discovery import JetsonNodes
from engine.device.sysfs import SysfsTree

# Linux devfreq's static governors: the clock does not follow the load under them.
STATIC_GOVERNORS = ("performance", "powersave", "userspace")


@dataclass(frozen=True)
class GpuScaling:
    enabled: bool  # the GPU's clock follows its load
    via: str  # where that was read: "enable_3d_scaling" or "governor <name>"


def read_gpu_scaling(tree: SysfsTree, nodes: JetsonNodes) -> GpuScaling:
    """The GPU's 3D scaling state; a DeviceError (what was looked for) where the GPU is missing."""
    if nodes.gpu_3d_scaling is not None:
        return GpuScaling(tree.read_int(nodes.gpu_3d_scaling) == 1, "enable_3d_scaling")
    governor = tree.read_str(f"{nodes.require_gpu()}/governor")
    return GpuScaling(governor not in STATIC_GOVERNORS, f"governor {governor}")
