"""The run recorder: one run's time, energy per rail and power trace, from the monitor.

A trainer callback that opens one power-monitor window when the run starts and closes
it after the last training step (the final evaluation is not part of the run's figures),
on a board and on the twin alike. Its power trace is the monitor's samples inside that
window (on the twin one per step at least, taken at the step windows' edges; on a board the
sampler's, at its rate), pulled from the monitor's ring buffer as the run goes.
"""

from __future__ import annotations

import math
from typing import Any

from engine.device.power import PowerSample
from engine.workload.events import RunCancelled, RunFinished, RunStarted, StepEnd

RUN_WINDOW = "experiment-run"


class RunRecorder:
    """Totals one run from a monitor window over its training steps; keeps its power trace."""

    def __init__(self, monitor: Any, *, keep_samples: bool = True) -> None:
        self.monitor = monitor
        self.keep_samples = keep_samples
        self.samples: list[PowerSample] = []
        self.total_steps = 0
        self.steps = 0
        self.n_samples = 0
        self._window: Any = None
        self._open = False
        self._last_t = -math.inf

    def __call__(self, event: Any) -> None:
        if isinstance(event, RunStarted):
            self.total_steps = event.total_steps
            # The ring buffer still holds samples from before this run (in a comparison, the
            # other run's tail): the trace keeps only those newer than the last one taken
            # before the window opened (so the sample taken at its start is in).
            before = self.monitor.latest()
            self.monitor.begin_window(RUN_WINDOW)
            self._open = True
            self._last_t = before.t if before is not None else -math.inf
        elif isinstance(event, StepEnd):
            self.steps = event.step
            self.n_samples += event.samples
            if event.step >= self.total_steps:
                self._close()  # the window covers training, not the final evaluation
            else:
                self._pull_samples()
        elif isinstance(event, (RunFinished, RunCancelled)):
            self._close()

    def _pull_samples(self) -> None:
        if not (self.keep_samples and self._open):
            return
        fresh = self.monitor.since(self._last_t)
        if fresh:
            self.samples.extend(fresh)
            self._last_t = fresh[-1].t

    def _close(self) -> None:
        if self._open:
            self._window = self.monitor.end_window(RUN_WINDOW)
            self._pull_samples()
            self._open = False

    def figures(self) -> tuple[float, dict[str, float], int, int] | None:
        """(time s, joules per rail, training samples, steps) of the training steps; None if none ran."""
        if self.steps == 0 or self._window is None:
            return None
        return self._window.duration_s, dict(self._window.energy_j), self.n_samples, self.steps
