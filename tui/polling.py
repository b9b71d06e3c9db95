"""The poll worker's view of the device: the nvpmodel mode read seldom.

`Device.power_mode()` asks the nvpmodel tool, a subprocess (on the twin, a Python script).
At the poll's 2 Hz that is a fork and exec twice a second, which costs a small board, and
the run being measured, more than everything else the TUI does together. The mode changes
only when something sets it, so the poll reads it at most every `ttl_s` seconds and at
once after `invalidate()` (the app calls it when a run starts or ends).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from engine.device.base import Device, PowerMode

MODE_TTL_S = 15.0


class SlowModeDevice:
    """Delegates to a Device, caching `power_mode()` for `ttl_s` seconds."""

    def __init__(self, device: Device, ttl_s: float = MODE_TTL_S, clock: Callable[[], float] = time.monotonic) -> None:
        self._device = device
        self._ttl_s = ttl_s
        self._clock = clock
        self._lock = threading.Lock()
        self._mode: PowerMode | None = None
        self._read_at = -float("inf")
        self.queries = 0  # how often the tool actually ran

    def __getattr__(self, name: str) -> Any:
        return getattr(self._device, name)

    def power_mode(self) -> PowerMode:
        with self._lock:
            now = self._clock()
            if self._mode is None or now - self._read_at >= self._ttl_s:
                self._mode = self._device.power_mode()  # errors propagate: the snapshot records them
                self._read_at = now
                self.queries += 1
            return self._mode

    def invalidate(self) -> None:
        with self._lock:
            self._read_at = -float("inf")
