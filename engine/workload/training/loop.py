"""The step-boundary skeleton every run goes through, trained or simulated; torch-free.

Pause, resume and cancel take effect only at step boundaries, where `StepLoop`
emits `Paused` / `Resumed` and `StepBegin`. The Trainer and the twin-only simulation
both drive it, so the two honour a `TrainControl` identically. The loop also delivers the
run's events (`loop.emit`) and keeps the first `RunControl.stop` a callback answers: the run
then ends at the next boundary as a cancel does, with the stop's reason.

    loop = StepLoop(control, callbacks)
    while step < total or loop.stopping:
        if loop.boundary(step, epoch):   # True: cancelled (or stopped) here
            ...; break
        ... one step ...; loop.emit(StepEnd(...))
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Iterable

from engine.workload.events import Callback, Paused, Resumed, RunControl, StepBegin, TrainerEvent, first_stop

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
    """The boundary between two steps: waits out a pause, sees a cancel or a callback's stop,
    announces the next step; and the run's one way to deliver an event to its callbacks.

    `paused_s` is the host time spent paused so far (callers leave it out of elapsed times)."""

    def __init__(self, control: TrainControl | None, callbacks: Iterable[Callback],
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.control = control or TrainControl()
        self.callbacks = list(callbacks)
        self.clock = clock
        self.paused_s = 0.0
        self.stopped: RunControl | None = None  # the first stop a callback answered

    def emit(self, event: TrainerEvent) -> None:
        """Every callback, in order, gets the event; the first stop any of them answers is kept."""
        for callback in self.callbacks:
            self.stopped = first_stop(self.stopped, callback(event))

    @property
    def stopping(self) -> bool:
        """A callback asked the run to stop: the next boundary ends it."""
        return self.stopped is not None

    @property
    def reason(self) -> str:
        if self.stopped is not None:
            return self.stopped.reason or "stopped"
        return self.control.reason or "cancelled"

    def boundary(self, step: int, epoch: int) -> bool:
        """Before step `step + 1`: True when the run is cancelled or stopped here (no StepBegin is emitted)."""
        if self.stopping:
            return True
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
        return self.stopping  # a stop answered to StepBegin: the step does not run
