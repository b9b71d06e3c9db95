"""Page 3: the experiment in progress: power per rail and in total, progress, clocks and
temperatures with their history, events."""

from __future__ import annotations

from collections.abc import Mapping

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid, Horizontal, Vertical
from textual.widgets import Log

from engine.device.base import ClockDomain
from engine.device.snapshot import DeviceSnapshot
from tui.history import DeviceHistory, time_columns
from tui.runstate import RunView
from tui.screens.base import PageScreen
from tui.widgets.charts import BlockChart
from tui.fmt import fit, title_room
from tui.widgets.device_panes import ClocksPane, TemperaturesPane, temps_titles
from tui.widgets.live import GraphStack, show_clocks, show_temps
from tui.widgets.run_panes import ProgressPane, RunPowerPane

LABEL_W = 6  # the block chart's y-axis labels


class RunScreen(PageScreen):
    PAGE = "run"
    TITLE_TEXT = "3 Run"
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (120, "-wide")]  # styles.tcss: the progress pane's width
    BINDINGS = [
        Binding("space", "app.pause_resume", "Pause/resume"),
        Binding("x", "app.cancel_run", "Cancel run"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self._log_total = 0
        self.selector_line: str | tuple[str, ...] = ""  # the selector's short line, or its forms longest first
        self.last_view: RunView | None = None

    def compose_body(self) -> ComposeResult:
        with Grid(id="run-top", classes="run-row"):
            yield RunPowerPane(id="run-rails", classes="pane live")
            yield ProgressPane(id="run-progress", classes="pane")
        yield BlockChart(id="run-chart", classes="pane")
        with Horizontal(id="run-mid"):
            with Vertical(id="run-clocks-box", classes="pane live"):
                yield ClocksPane(id="run-clocks", auto_compact=True)
                yield GraphStack(id="run-clock-graphs")
            with Vertical(id="run-temps-box", classes="pane live"):
                yield TemperaturesPane(id="run-temps", columns=3)
                yield GraphStack(id="run-temp-graphs")
        yield Log(id="run-log", max_lines=500, classes="pane")

    def on_mount(self) -> None:
        self.query_one("#run-chart").border_title = "Total power (W)"
        self.query_one("#run-log", Log).border_title = "Events"
        self.query_one("#run-clocks-box").border_title = "Clocks MHz"
        self.query_one("#run-temps-box").border_title = "Temps °C"

    def show_device(
        self,
        snap: DeviceSnapshot,
        pinned_by_us: bool,
        notes: list[str],
        tables: Mapping[ClockDomain, tuple[int, ...]],
    ) -> None:
        super().show_device(snap, pinned_by_us, notes, tables)
        src = snap.identity.source.value
        history: DeviceHistory | None = getattr(self.app, "device_history", None)
        if history is None:
            history = DeviceHistory()
            history.add(snap)
        self.query_one(ClocksPane).show(snap, tables)
        self.query_one("#run-clocks-box").border_title = Text(f"Clocks MHz [{src}] now avg pk")
        show_clocks(self.query_one("#run-clock-graphs", GraphStack), history, tables, (ClockDomain.GPU,))
        self.query_one(TemperaturesPane).show(snap)
        temps = self.query_one("#run-temps-box")
        temps.border_title = fit(title_room(temps), *temps_titles(src))
        show_temps(self.query_one("#run-temp-graphs", GraphStack), history)

    def show_run(self, view: RunView) -> None:
        self.last_view = view
        self.query_one(RunPowerPane).show(view)
        chart = self.query_one("#run-chart", BlockChart)
        # one column per time bucket of the chart's own width: continuous however steps fall
        width = max(1, chart.content_size.width - LABEL_W) if chart.content_size.width else 60
        values, span = time_columns(view.spans, width, view.rails or None)
        title = Text(f"Total power W, last {span:.3g} s " if span else "Total power W, no steps yet ")
        title.append(f"[{view.source.value}]")
        if view.spans:
            peak = view.total_peak_w
            title.append(f" · step {view.total_now_w:.2f} avg {view.total_avg_w:.2f}"
                         + (f" pk {peak:.2f}" if peak is not None else ""))
        chart.border_title = title
        chart.plot(values, None)
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

    def on_resize(self) -> None:
        if self.last_view is not None:  # the charts' columns follow the new width
            self.call_after_refresh(self.show_run, self.last_view)

    def new_run(self) -> None:
        """A new experiment: its log starts afresh."""
        self.query_one("#run-log", Log).clear()
        self._log_total = 0
        self.selector_line = ""

    def show_selector(self, line: str | tuple[str, ...]) -> None:
        self.selector_line = line
        if self.last_view is not None:
            self.query_one(ProgressPane).show(self.last_view, line)
