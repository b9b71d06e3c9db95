"""The sweep driver: a trainer callback that splits one fine-tuning run into sweep points.

Before each point it lets the thermal guard cool the device and applies the point's
setting at a step boundary; it runs W unmeasured steps, then measures S steps in one
power-monitor window (StepBegin of the first measured step to StepEnd of the last) and
records the point. Energy comes only from that window, on a board and on the twin alike;
the point's peak is the highest step-average power of its measured steps (`StepEnergy`).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from engine.core.measurement import Measurement
from engine.device.setting import DvfsSetting
from engine.workload.events import RunCancelled, RunFinished, RunStarted, StepBegin, StepEnd, StepEnergy

POINT_WINDOW = "sweep-point"


class SweepDriver:
    """Splits one run into sweep points; see the module's docstring."""

    def __init__(
        self,
        plan: Sequence[tuple[DvfsSetting, int]],
        *,
        warmup_steps: int,
        steps: int,
        apply: Callable[[DvfsSetting], None],
        record: Callable[[DvfsSetting, int, Measurement, Mapping[str, float], int], None],
        monitor: Any,
        guard: Any = None,
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

    def __call__(self, event: Any) -> None:
        if isinstance(event, RunStarted):
            if self.plan:
                self._begin_point()
        elif isinstance(event, StepBegin):
            if self.done < len(self.plan) and self._in_point == self.warmup_steps:
                self.monitor.begin_window(POINT_WINDOW)
                self._window = True
        elif isinstance(event, StepEnergy):
            if self._window and event.time_s > 0:
                self._peak_w = max(self._peak_w or 0.0, event.avg_power_w)
        elif isinstance(event, StepEnd):
            self._step_end(event)
        elif isinstance(event, (RunFinished, RunCancelled)):
            if self._window:
                self._window = False
                self.monitor.end_window(POINT_WINDOW)

    def _begin_point(self) -> None:
        setting, repeat = self.plan[self.done]
        if self.guard is not None:
            self.guard.before_point(f"{setting.label()} (repeat {repeat + 1})")
        self.apply(setting)
        self._in_point = 0
        self._samples, self._peak_w = 0, None

    def _step_end(self, event: StepEnd) -> None:
        if self.done >= len(self.plan):
            return
        if self.guard is not None:
            self.guard.check()
        self._in_point += 1
        if self._in_point <= self.warmup_steps:
            return
        self._samples += event.samples
        if self._in_point < self.warmup_steps + self.steps:
            return
        setting, repeat = self.plan[self.done]
        window = self.monitor.end_window(POINT_WINDOW)
        self._window = False
        m = Measurement(window.duration_s, window.total_energy_j, self._samples, self._peak_w, window.source)
        self.done += 1
        self.record(setting, repeat, m, dict(window.energy_j), self.done)
        if self.done < len(self.plan):
            self._begin_point()
