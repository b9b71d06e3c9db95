"""Page 1: the live device dashboard, jtop's habits: a graph per rail and of the total,
the clocks with their history, the temperatures with the hottest zone's history, and the board's
details (module, memory, mode, per-core CPU, GPU and EMC load, fan, throttling)."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Static

from tui.live_model import DeviceHistory
from tui.screens.base import PageScreen
from tui.state import DeviceReading
from tui.fmt import fit, title_room
from tui.widgets.device_panes import ActivityPane, ClocksPane, TemperaturesPane, temps_titles
from tui.widgets.quiet import set_title, show
from tui.widgets.live import GraphStack, plot_clocks, plot_load, plot_rails, plot_temps


def span_text(history: DeviceHistory) -> str:
    """What the averages and peaks are over: to 10 s below two minutes, then in minutes (to the
    second, the title, and the graphs under it, would change at every poll while the history fills)."""
    s = history.span_s
    return f"{s / 60:.0f} min" if s >= 120 else f"{s // 10 * 10:.0f} s"


class DeviceScreen(PageScreen):
    """What the board (or twin) is doing now and did lately; fed by the app's poll worker."""

    PAGE = "device"
    TITLE_TEXT = "1 Device"

    def __init__(self, history: DeviceHistory) -> None:
        super().__init__()
        self.history = history  # the app's poll history: it fills while the page is hidden

    def compose_body(self) -> ComposeResult:
        with Horizontal(id="device-body"):
            yield GraphStack(id="dev-power", classes="pane live")
            with Vertical(id="dev-right"):
                with Vertical(id="dev-clocks", classes="pane live"):
                    yield ClocksPane(id="clocks", auto_compact=True)
                    yield GraphStack(id="dev-clock-graphs")
                with Vertical(id="dev-temps", classes="pane live"):
                    yield TemperaturesPane(id="temps", columns=3)
                    yield GraphStack(id="dev-temp-graphs")
        yield ActivityPane(id="activity", classes="pane")
        yield Static(id="notes", classes="pane")

    def on_mount(self) -> None:
        self.query_one("#notes", Static).border_title = "Notes"
        self.query_one("#dev-power").border_title = "Power"
        self.query_one("#dev-clocks").border_title = "Clocks (MHz)"
        self.query_one("#dev-temps").border_title = "Temperatures °C"

    def draw_device(self, reading: DeviceReading) -> None:
        super().draw_device(reading)
        snap, tables = reading.snapshot, reading.tables or {}
        history = self.history
        src = snap.identity.source.value
        over = span_text(history)
        power = self.query_one("#dev-power", GraphStack)
        set_title(power, Text(f"Power W [{src}] avg/pk {over}"))
        plot_rails(power, history, [r.name for r in snap.rails])
        self.query_one(ClocksPane).show(snap, tables)
        set_title(self.query_one("#dev-clocks"), Text(f"Clocks MHz [{src}] now avg pk"))
        clock_graphs = self.query_one("#dev-clock-graphs", GraphStack)
        plot_clocks(clock_graphs, history, tables)
        plot_load(clock_graphs, history)
        self.query_one(TemperaturesPane).show(snap)
        temps = self.query_one("#dev-temps")
        set_title(temps, fit(title_room(temps), *temps_titles(src)))
        plot_temps(self.query_one("#dev-temp-graphs", GraphStack), history, ("max", "gpu-thermal", "cpu-thermal"))
        self.query_one(ActivityPane).show(snap)
        lines = list(reading.notes) + [f"{k}: {v}" for k, v in snap.errors.items() if k != "rails"]
        lines += [f"{part}: {why}" for part, why in (snap.activity.errors if snap.activity else ())]
        if "rails" in snap.errors:
            lines.append(f"rails: {snap.errors['rails']}")
        notes_pane = self.query_one("#notes", Static)
        notes_pane.display = bool(lines)  # no empty box: its rows go to the graphs
        show(notes_pane, "\n".join(lines))
