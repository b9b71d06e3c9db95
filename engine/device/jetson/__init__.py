"""The Jetson backend: one job, a board (or its twin) seen through its kernel files under a root.

- `device`: `JetsonDevice`, the Device protocol over those files;
- `discovery`: where its kernel nodes are (`JetsonNodes`), found the portable way;
- `identity`: who the board is (module, L4T and JetPack, serial, twin marker);
- `writes`: clock writes in an order the kernel accepts, CPU hot-plug;
- `settings`: every setting the backend may change, read and restored (what the guard journals);
- `l4t_tools`: L4T's `nvpmodel` and `jetson_clocks`, from their fixed system paths only, or
  their in-process stand-ins in `fake_l4t` on a twin or test tree.
"""

from engine.device.jetson.device import JetsonDevice

__all__ = ["JetsonDevice"]
