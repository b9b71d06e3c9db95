"""The step-boundary skeleton every run goes through, trained or simulated; torch-free.

Pause, resume and cancel take effect only at step boundaries, where `StepLoop`
emits `Paused` / `Resumed` and `StepBegin`. The Trainer and the twin-only simulation
both drive it, so the two honour a `TrainControl` identically.

    loop = StepLoop(control, emit)
    while step < total:
        if loop.boundary(step, epoch):   # True: cancelled here
            ...; break
        ... one step ...
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

from engine.workload.events import Paused, Resumed, StepBegin

# What a run calls after each step with (rows, seq_len) of its batch: built where the
# run is assembled (e.g. to advance the digital twin by the step's trace); None: nothing.
StepHook = Callable[[int, int], None]


class TrainControl:
    """Pause, resume and cancel a run from another thread; honoured at step boundaries."""

    def __init__(self) -> None:
        self._running = threading.Event()
        self._running.set()
        self._cancelled = threading.Event()
        self.reason = ""

    def pause(self) -> None:
        self._running.clear()

    def resume(self) -> None:
        self._running.set()

    def cancel(self, reason: str = "cancelled") -> None:
        self.reason = reason
        self._cancelled.set()
        self._running.set()  # a paused loop must wake up to see the cancel

    @property
    def paused(self) -> bool:
        return not self._running.is_set()

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def wait_until_running(self, poll_s: float = 0.2) -> None:
        while not self._running.wait(poll_s):
            pass


class StepLoop:
    """The boundary between two steps: waits out a pause, sees a cancel, announces the next step.

    `paused_s` is the host time spent paused so far (callers leave it out of elapsed times)."""

    def __init__(self, control: TrainControl | None, emit: Callable[[Any], None],
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.control = control or TrainControl()
        self.emit = emit
        self.clock = clock
        self.paused_s = 0.0

    @property
    def reason(self) -> str:
        return self.control.reason or "cancelled"

    def boundary(self, step: int, epoch: int) -> bool:
        """Before step `step + 1`: True when the run is cancelled here (no StepBegin is emitted)."""
        control = self.control
        if control.paused and not control.cancelled:
            self.emit(Paused(step))
            p0 = self.clock()
            control.wait_until_running()
            self.paused_s += self.clock() - p0
            if not control.cancelled:
                self.emit(Resumed(step))
        if control.cancelled:
            return True
        self.emit(StepBegin(step + 1, epoch))
        return False
