"""The digital twin of a Jetson AGX Orin: a profile, a pure model, and a board in a folder.

- `profile`: every parameter, from `profiles/devices/<name>.toml` (`load_profile`).
- `model`: step time and per-rail power/energy of a StepTrace at given clocks (pure).
- `governors`: where the dynamic governors and nvpmodel caps settle for a load.
- `thermal`: a first-order temperature model, off unless asked for.
- `orin`: `VirtualOrin`, the sysfs tree plus fake `nvpmodel`/`jetson_clocks`, kept current
  (`tree`: the spec it renders and the folder's file helpers; `files`: its reads and writes while it runs).
Equations and sources: docs/twin.md.
"""

from engine.device.twin.governors import ControlState, DomainControl, default_control, pin_gpu, resolve
from engine.device.twin.model import Clocks, Load, StepEstimate, estimate_step, idle_power_mw, rail_powers_mw
from engine.device.twin.orin import TWIN_MARKER, TwinStep, VirtualOrin
from engine.device.twin.profile import TwinProfile, available_profiles, load_profile

__all__ = [
    "TWIN_MARKER",
    "Clocks",
    "ControlState",
    "DomainControl",
    "Load",
    "StepEstimate",
    "TwinProfile",
    "TwinStep",
    "VirtualOrin",
    "available_profiles",
    "default_control",
    "estimate_step",
    "idle_power_mw",
    "load_profile",
    "pin_gpu",
    "rail_powers_mw",
    "resolve",
]
