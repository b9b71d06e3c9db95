"""Page 3: the experiment in progress: power, energy, clocks, temperatures, progress, events."""

from __future__ import annotations

from collections.abc import Mapping

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid
from textual.widgets import Log

from engine.device.base import ClockDomain
from engine.device.snapshot import DeviceSnapshot
from tui.runstate import RunView
from tui.screens.base import PageScreen
from tui.widgets.charts import BlockChart
from tui.widgets.device_panes import ClocksPane, TemperaturesPane
from tui.widgets.run_panes import ProgressPane, RunPowerPane


class RunScreen(PageScreen):
    PAGE = "run"
    TITLE_TEXT = "3 Run"
    BINDINGS = [
        Binding("space", "app.pause_resume", "Pause/resume"),
        Binding("x", "app.cancel_run", "Cancel run"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self._log_total = 0
        self.selector_line = ""
        self.last_view: RunView | None = None

    def compose_body(self) -> ComposeResult:
        with Grid(id="run-top", classes="run-row"):
            yield RunPowerPane(id="run-rails", classes="pane")
            yield ProgressPane(id="run-progress", classes="pane")
        yield BlockChart(id="run-chart", classes="pane")
        with Grid(id="run-mid", classes="run-row"):
            yield ClocksPane(id="run-clocks", classes="pane", compact=True)
            yield TemperaturesPane(id="run-temps", classes="pane", columns=3)
        yield Log(id="run-log", max_lines=500, classes="pane")

    def on_mount(self) -> None:
        self.query_one("#run-chart").border_title = "Total power (W)"
        self.query_one("#run-log", Log).border_title = "Events"

    def show_device(
        self,
        snap: DeviceSnapshot,
        pinned_by_us: bool,
        notes: list[str],
        tables: Mapping[ClockDomain, tuple[int, ...]],
    ) -> None:
        super().show_device(snap, pinned_by_us, notes, tables)
        self.query_one(ClocksPane).show(snap, tables)
        self.query_one(TemperaturesPane).show(snap)

    def show_run(self, view: RunView) -> None:
        self.last_view = view
        self.query_one(RunPowerPane).show(view)
        chart = self.query_one("#run-chart", BlockChart)
        span = f"last {view.chart_span_s:.3g} s" if view.chart_span_s else "no steps yet"
        chart.border_title = Text(f"Total power (W), {span} [{view.source.value}]")
        chart.plot(view.chart_w, None)
        self.query_one(ProgressPane).show(view, self.selector_line)
        log = self.query_one("#run-log", Log)
        count = view.log_count or len(view.log)
        if count < self._log_total:  # a new tracker: start the log again
            log.clear()
            self._log_total = 0
        new = count - self._log_total
        if new > 0:
            log.write_lines(view.log[-min(new, len(view.log)):])
        self._log_total = count

    def new_run(self) -> None:
        """A new experiment: its log starts afresh."""
        self.query_one("#run-log", Log).clear()
        self._log_total = 0
        self.selector_line = ""

    def show_selector(self, line: str) -> None:
        self.selector_line = line
        if self.last_view is not None:
            self.query_one(ProgressPane).show(self.last_view, line)
