"""A first-order thermal model: one junction temperature relaxing towards
ambient + R x P with time constant tau, plus per-zone offsets and hot spots.

Power is piecewise constant in the twin, so each interval is integrated exactly:
    T(t + dt) = T_ss + (T(t) - T_ss) * exp(-dt / tau),   T_ss = ambient + R * P.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

from engine.device.twin.profile import ThermalParams


@dataclass(frozen=True)
class ThermalState:
    junction_c: float

    @classmethod
    def steady(cls, power_mw: float, params: ThermalParams) -> "ThermalState":
        return cls(steady_c(power_mw, params))

    def advance(self, power_mw: float, dt_s: float, params: ThermalParams) -> "ThermalState":
        """The state after dt_s seconds at constant power."""
        if dt_s <= 0.0:
            return self
        target = steady_c(power_mw, params)
        decay = math.exp(-dt_s / params.tau_s) if params.tau_s > 0 else 0.0
        return ThermalState(target + (self.junction_c - target) * decay)


def steady_c(power_mw: float, params: ThermalParams) -> float:
    return params.ambient_c + params.r_c_per_w * power_mw / 1000.0


def zone_temps_c(junction_c: float, rail_mw: Mapping[str, float], params: ThermalParams) -> dict[str, float]:
    """Temperature per thermal zone type: junction + offset + hot spot of its rail."""
    out: dict[str, float] = {}
    for z in params.zones:
        hot = z.hotspot_c_per_w * rail_mw.get(z.rail, 0.0) / 1000.0 if z.rail else 0.0
        out[z.type] = junction_c + z.offset_c + hot
    return out


def idle_zone_temps_c(params: ThermalParams) -> dict[str, float]:
    """What a twin without the thermal model reports: constant idle temperatures."""
    return {z.type: params.idle_c + z.offset_c for z in params.zones}


def throttling(temps_c: Mapping[str, float], params: ThermalParams) -> bool:
    return bool(temps_c) and max(temps_c.values()) >= params.throttle_c
