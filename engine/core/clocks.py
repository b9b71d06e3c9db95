"""Small helpers over clock tables (Hz), shared by the backend, the tree generator and the sweeps.

Kept free of the dvfs package so that engine/device modules can use them without
importing anything above the device layer.
"""

from __future__ import annotations

import re

from typing import Sequence

from engine.core.errors import ConfigError, DeviceError
from engine.core.text import shown


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


# ASCII digits only (Python's \d also takes other scripts' digits), and a bounded length: see engine.core.userinput.
_MHZ_TEXT = re.compile(r"\s*([0-9]{1,12}(?:\.[0-9]{0,12})?|\.[0-9]{1,12})\s*(?:mhz)?\s*", re.IGNORECASE | re.ASCII)


_SNAP_HZ = 500_000  # a typed MHz this close to a listed step (and equal to 0.1 MHz) means that step


def parse_mhz(text: str, table: Sequence[int] | None = None, *, what: str = "clock") -> int:
    """A clock typed in MHz ("816", "1300.5", "2201.6MHz") -> Hz.

    With `table` (the domain's Hz steps), a value that agrees with a listed step to
    0.1 MHz and lies within 0.5 MHz of it is that step (so "1300.50" is 1300500000);
    anything else stays the exact Hz typed, so the device refuses it naming the nearest
    steps. `what` names the value in the error (e.g. "gpu clock")."""
    m = _MHZ_TEXT.fullmatch(text) if isinstance(text, str) else None
    if m is None:
        raise ConfigError(f"{what} {shown(text)!r} is not a number of MHz", "write MHz as a number, e.g. 816 or 1300.5")
    hz = int(round(float(m.group(1)) * 1e6))
    for f in table or ():
        if abs(f - hz) < _SNAP_HZ and round(f / 1e5) == round(hz / 1e5):
            return int(f)
    return hz
