"""Page 3: the experiment in progress: power per rail and in total, progress, clocks and
temperatures with their history, events.

While a run is measured, the poll's reading is drawn with the run's next progress (one redraw
about once a second, not two: each costs the CPU the run is measured on)."""

from __future__ import annotations

import contextlib
import time

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid, Horizontal, Vertical
from textual.css.query import NoMatches
from textual.reactive import var
from textual.widgets import Log

from engine.device.base import ClockDomain
from tui.live_model import DeviceHistory, time_columns
from tui.runstate import RunView
from tui.screens.base import PageScreen
from tui.state import DeviceReading
from tui.widgets.charts import BlockChart
from tui.fmt import fit, title_room
from tui.widgets.device_panes import ClocksPane, TemperaturesPane, temps_titles
from tui.widgets.live import GraphStack, plot_clocks, plot_temps
from tui.widgets.run_panes import ProgressPane, RunPowerPane
from tui.widgets.quiet import set_title

LABEL_W = 6  # the block chart's y-axis labels


class RunScreen(PageScreen):
    PAGE = "run"
    TITLE_TEXT = "3 Run"
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (120, "-wide")]  # styles.tcss: the progress pane's width
    BINDINGS = [
        Binding("space", "app.pause_resume", "Pause/resume"),
        Binding("x", "app.cancel_run", "Cancel run"),
    ]

    # Bound to the app's (tui.state.AppState): the run's view, the selector's short line (or its
    # forms, longest first), and the count of experiments started (a new one starts its log afresh).
    run_view: var[RunView | None] = var(None, init=False)
    selector_short: var[str | tuple[str, ...]] = var("", init=False)
    runs_started: var[int] = var(0, init=False)

    def __init__(self, history: DeviceHistory, refresh_s: float) -> None:
        super().__init__()
        self.history = history  # the app's poll history: it fills while the page is hidden
        self.refresh_s = refresh_s  # the app's redraw pace while a run is measured
        self._log_total = 0
        self._new_log = False
        self.last_view: RunView | None = None  # the run's view drawn last
        self._progress_drawn_at = -float("inf")  # monotonic
        self._device_behind = False  # a reading held back, to be drawn with the run's next progress

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

    def watch_reading(self, reading: DeviceReading | None) -> None:
        view = self.run_view
        if (reading is not None and self.on_view() and view is not None and view.status == "running"
                and time.monotonic() - self._progress_drawn_at < 2 * self.refresh_s):
            self._device_behind = True  # drawn with the run's next progress: one redraw, not two
            return
        self._device_behind = False
        super().watch_reading(reading)

    def draw_device(self, reading: DeviceReading) -> None:
        super().draw_device(reading)
        snap, tables = reading.snapshot, reading.tables or {}
        src = snap.identity.source.value
        history = self.history
        self.query_one(ClocksPane).show(snap, tables)
        set_title(self.query_one("#run-clocks-box"), Text(f"Clocks MHz [{src}] now avg pk"))
        plot_clocks(self.query_one("#run-clock-graphs", GraphStack), history, tables, (ClockDomain.GPU,))
        self.query_one(TemperaturesPane).show(snap)
        temps = self.query_one("#run-temps-box")
        set_title(temps, fit(title_room(temps), *temps_titles(src)))
        plot_temps(self.query_one("#run-temp-graphs", GraphStack), history)

    def watch_runs_started(self) -> None:
        self._new_log = True  # the next view drawn is a new experiment's

    def watch_run_view(self, view: RunView | None) -> None:
        if view is not None:
            self.paint("run", lambda: self._draw_progress(view))

    def _draw_progress(self, view: RunView) -> None:
        """The run's view, and the poll's latest reading if it was held back for it (or once the run stopped)."""
        self.draw_run(view)
        self._progress_drawn_at = time.monotonic()
        behind, self._device_behind = self._device_behind, False
        if (behind or view.status != "running") and self.reading is not None:
            self.draw_device(self.reading)

    def watch_selector_short(self, line: str | tuple[str, ...]) -> None:
        view = self.last_view
        if view is not None:
            self.paint("selector", lambda: self.query_one(ProgressPane).show(view, line))

    def draw_run(self, view: RunView) -> None:
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
        set_title(chart, title)
        chart.plot(values, None)
        self.query_one(ProgressPane).show(view, self.selector_short)
        log = self.query_one("#run-log", Log)
        count = view.log_count or len(view.log)
        if self._new_log or count < self._log_total:  # a new tracker: start the log again
            self._new_log = False
            log.clear()
            self._log_total = 0
        new = count - self._log_total
        if new > 0:
            log.write_lines(view.log[-min(new, len(view.log)):])
        self._log_total = count

    def on_resize(self) -> None:
        self.call_after_refresh(self._redraw_run)  # the charts' columns follow the new width

    def _redraw_run(self) -> None:
        if self.last_view is not None and self.on_view():  # hidden: drawn to its width when shown
            with contextlib.suppress(NoMatches):
                self.draw_run(self.last_view)
