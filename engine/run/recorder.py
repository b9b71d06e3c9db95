"""The run recorder: one run's time, energy per rail and power trace, from the monitor.

A trainer callback that opens one power-monitor window when the run starts and closes
it after the last training step (the final evaluation is not part of the run's figures),
on a board and on the twin alike. Its power trace is that window's (`WindowResult.trace`,
kept by the monitor as the samples arrive): the samples inside it with its edges, whose
trapezoid is the window's energy, so a stored trace always agrees with the run's figures.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.device.power import PowerSample
from engine.results.totals import RunTotals
from engine.run.events import RunCancelled, RunControl, RunFinished, RunListener, RunStarted, StepEnd

if TYPE_CHECKING:
    from engine.device.monitor import PowerMonitor, WindowResult

RUN_WINDOW = "experiment-run"


class RunRecorder(RunListener):
    """Totals one run (RunTotals) from a monitor window over its training steps, with its power trace."""

    def __init__(self, monitor: PowerMonitor, *, keep_samples: bool = True) -> None:
        self.monitor = monitor
        self.keep_samples = keep_samples
        self.samples: list[PowerSample] = []  # the run's power trace, once its window has closed
        self.total_steps = 0
        self.steps = 0
        self.n_samples = 0
        self._window: WindowResult | None = None
        self._open = False

    def on_run_started(self, event: RunStarted) -> RunControl | None:
        self.total_steps = event.total_steps
        self.monitor.begin_window(RUN_WINDOW, trace=self.keep_samples)
        self._open = True
        return None

    def on_step_end(self, event: StepEnd) -> RunControl | None:
        self.steps = event.step
        self.n_samples += event.samples
        if event.step >= self.total_steps:
            self._close()  # the window covers training, not the final evaluation
        return None

    def on_finished(self, event: RunFinished) -> RunControl | None:
        self._close()
        return None

    def on_cancelled(self, event: RunCancelled) -> RunControl | None:
        self._close()
        return None

    def _close(self) -> None:
        if self._open:
            self._window = self.monitor.end_window(RUN_WINDOW)
            self.samples = list(self._window.trace)
            self._open = False

    def totals(self, *, rails: tuple[str, ...] | None = None, rails_preset: str | None = None) -> RunTotals | None:
        """The training steps' time, energy (per rail; the total over `rails`, default the window's),
        samples, steps and power trace, labelled by the monitor's source; None if no step ran."""
        if self.steps == 0 or self._window is None:
            return None
        return RunTotals.from_window(self._window, samples=self.n_samples, steps=self.steps, rails=rails,
                                     rails_preset=rails_preset)
