"""Small helpers over clock tables (Hz), shared by the backend, the tree generator and the sweeps.

Kept free of the dvfs package so that engine/device modules can use them without
importing anything above the device layer.
"""

from __future__ import annotations

from typing import Sequence

from engine.core.errors import DeviceError


def highest_at_most(table: Sequence[int], cap: int | None) -> int:
    """The highest entry of `table` at or below `cap`; the highest of all when `cap` is None;
    the lowest entry when none is at or below it (a cap under the table's floor still
    leaves the domain its lowest step, as nvpmodel does)."""
    if not table:
        raise DeviceError("a clock table is empty", "check the device's frequency lists (`slm-dvfs device`)")
    ordered = sorted(table)
    if cap is None:
        return ordered[-1]
    below = [f for f in ordered if f <= cap]
    return below[-1] if below else ordered[0]


def format_mhz(hz: float) -> str:
    """Hz as MHz in the shortest exact form: 1300500000 -> "1300.5", 816000000 -> "816"."""
    return f"{hz / 1e6:g}"
