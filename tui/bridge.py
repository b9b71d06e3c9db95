"""The engine's callback into the UI: fold every event into a tracker, post seldom.

An EventBridge is what the TUI passes to run_experiment / run_sweep as a callback. It
runs on the worker thread: it feeds the tracker (cheap), and posts a payload-less
message only when the UI has taken the previous one and either something other than a
step happened or `min_interval_s` has passed (the app's RUN_REFRESH_S, a second). So the
UI redraws at that pace however fast steps come, and never falls behind.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from engine.run.events import Event

MIN_INTERVAL_S = 0.5


class Tracker(Protocol):
    """What a bridge folds events into (tui.runstate.RunTracker, tui.sweep_model.SweepTracker,
    tui.fleet_model.FleetSweepTracker): True when the event is news to post at once."""

    def feed(self, event: Event) -> bool: ...


class EventBridge:
    def __init__(
        self,
        tracker: Tracker,
        post: Callable[[], object],
        *,
        min_interval_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.tracker = tracker
        self.post = post
        self.min_interval_s = MIN_INTERVAL_S if min_interval_s is None else min_interval_s
        self.clock = clock
        self.posted = 0
        self._pending = False
        self._last = -float("inf")
        self._lock = threading.Lock()

    def __call__(self, event: Event) -> None:
        urgent = self.tracker.feed(event)
        self.poke(urgent)

    def poke(self, urgent: bool = True) -> None:
        """Post if the UI is free for it (also for news that came from elsewhere)."""
        with self._lock:
            if self._pending:
                return  # the UI has not drawn the last one; it will see this state then
            now = self.clock()
            if not urgent and now - self._last < self.min_interval_s:
                return
            self._pending = True
            self._last = now
            self.posted += 1
        self.post()

    def taken(self) -> None:
        """The UI took the message: call before reading the tracker, so nothing is missed."""
        with self._lock:
            self._pending = False
