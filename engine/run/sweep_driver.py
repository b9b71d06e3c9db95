"""The sweep driver: a trainer callback that splits one fine-tuning run into sweep points.

Before each point it lets the thermal guard cool the device and applies the point's
setting at a step boundary; it runs W unmeasured steps, then measures S steps in one
power-monitor window (StepBegin of the first measured step to StepEnd of the last) and
records the point. Energy comes only from that window, on a board and on the twin alike;
the point's peak is the highest step-average power of its measured steps (`StepEnergy`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Mapping, Sequence

from engine.core.measurement import Measurement
from engine.device.setting import DvfsSetting
from engine.run.events import (
    RunCancelled,
    RunControl,
    RunFinished,
    RunListener,
    RunStarted,
    StepBegin,
    StepEnd,
    StepEnergy,
)

if TYPE_CHECKING:
    from engine.device.monitor import PowerMonitor
    from engine.run.thermal import ThermalGuard

POINT_WINDOW = "sweep-point"


class SweepDriver(RunListener):
    """Splits one run into sweep points; see the module's docstring. The thermal guard's abort, at a
    step or before a point, is its answer to the run (a stop with the abort), never raised here."""

    def __init__(
        self,
        plan: Sequence[tuple[DvfsSetting, int]],
        *,
        warmup_steps: int,
        steps: int,
        apply: Callable[[DvfsSetting], None],
        record: Callable[[DvfsSetting, int, Measurement, Mapping[str, float], int], None],
        monitor: PowerMonitor,
        guard: ThermalGuard | None = None,
    ) -> None:
        self.plan = list(plan)
        self.warmup_steps = warmup_steps
        self.steps = steps
        self.apply = apply
        self.record = record
        self.monitor = monitor
        self.guard = guard
        self.done = 0
        self._in_point = 0
        self._samples = 0
        self._peak_w: float | None = None
        self._window = False

    def on_run_started(self, event: RunStarted) -> RunControl | None:
        return self._begin_point() if self.plan else None

    def on_step_begin(self, event: StepBegin) -> RunControl | None:
        if self.done < len(self.plan) and self._in_point == self.warmup_steps:
            self.monitor.begin_window(POINT_WINDOW)
            self._window = True
        return None

    def on_step_energy(self, event: StepEnergy) -> RunControl | None:
        if self._window and event.time_s > 0:
            self._peak_w = max(self._peak_w or 0.0, event.avg_power_w)
        return None

    def on_finished(self, event: RunFinished) -> RunControl | None:
        self._end_window()
        return None

    def on_cancelled(self, event: RunCancelled) -> RunControl | None:
        self._end_window()
        return None

    def _end_window(self) -> None:
        if self._window:
            self._window = False
            self.monitor.end_window(POINT_WINDOW)

    def _begin_point(self) -> RunControl | None:
        """Cool down, then apply the next point's setting; the guard's abort as the run's stop."""
        setting, repeat = self.plan[self.done]
        if self.guard is not None:
            stop = self.guard.point_control(f"{setting.label()} (repeat {repeat + 1})")
            if stop is not None:
                return stop
        self.apply(setting)
        self._in_point = 0
        self._samples, self._peak_w = 0, None
        return None

    def on_step_end(self, event: StepEnd) -> RunControl | None:
        if self.done >= len(self.plan):
            return None
        if self.guard is not None:
            stop = self.guard.step_control()
            if stop is not None:
                return stop
        self._in_point += 1
        if self._in_point <= self.warmup_steps:
            return None
        self._samples += event.samples
        if self._in_point < self.warmup_steps + self.steps:
            return None
        setting, repeat = self.plan[self.done]
        window = self.monitor.end_window(POINT_WINDOW)
        self._window = False
        m = Measurement(window.duration_s, window.total_energy_j, self._samples, self._peak_w, window.source)
        self.done += 1
        self.record(setting, repeat, m, dict(window.energy_j), self.done)
        if self.done < len(self.plan):
            return self._begin_point()
        return None
