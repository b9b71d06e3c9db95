"""Page 7: the fleet of boards a Ray cluster holds (docs/fleet.md): each board's identity, whether
it is busy and with what, its power now and lately, its hottest zone; the fleet's total power.

Connecting (Ray starts in ~10 s) and polling `Fleet.boards()` run in the app's workers
(tui.actions.fleet); the page binds the FleetView they leave (tui.state) and draws it. Not
connected, it says how to connect, and `c` asks the app to connect to what its field names (an
address, or `twins:N`); connected, `d` to disconnect (a local fleet's Ray stops)."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.reactive import var
from textual.widgets import Button, Input, Label, Log, Static

from tui.fleet_model import (
    STATUS_CONNECTED,
    STATUS_CONNECTING,
    STATUS_FAILED,
    FleetView,
    sparkline,
)
from engine.core.provenance import Source
from tui.fmt import SOURCE_STYLE, tag
from tui.messages import FleetConnectRequested, FleetDisconnectRequested, FleetWatched
from tui.screens.base import PageScreen
from tui.widgets.device_panes import TEMP_HOT_C, TEMP_WARN_C
from tui.widgets.quiet import set_title, show

WIDE = 120  # from this many columns on, each board gets its serial and a power graph
SPARK_W = 24
STATE_STYLE = {"busy": "bold yellow", "free": "green", "gone": "bold red"}


def temp_text(hottest: tuple[str, float] | None) -> Text:
    """`tj 77!!`: the hottest zone (without `-thermal`), marked at 60 and 75 °C so it reads without colour."""
    if hottest is None:
        return Text("-", style="dim")
    zone, c = hottest
    mark, style = ("!!", "bold red") if c >= TEMP_HOT_C else ("!", "yellow") if c >= TEMP_WARN_C else ("", "")
    return Text(f"{zone.removesuffix('-thermal')} {c:.0f}{mark}", style=style)


def boards_table(view: FleetView, wide: bool) -> Table | Text:
    """The boards as a table; `wide` adds the serial and each board's power over the last polls. In a
    fleet of boards and twins a `src` column says whose figures are which (`meas` = [measured])."""
    if not view.boards:
        return Text("no boards yet" if view.status == STATUS_CONNECTED else "", style="dim")
    mixed = view.source is None
    table = Table(box=None, padding=(0, 1, 0, 0), expand=True, show_edge=False)
    table.add_column("board", no_wrap=True, max_width=24 if wide else 14, overflow="ellipsis")
    if wide:
        table.add_column("serial", no_wrap=True, max_width=16, overflow="ellipsis")
    table.add_column("module", no_wrap=True, max_width=15 if wide else 13, overflow="ellipsis")
    table.add_column("L4T", no_wrap=True)
    table.add_column("state", no_wrap=True)
    table.add_column("runs", no_wrap=True, overflow="ellipsis", ratio=1, min_width=8)
    table.add_column("W", justify="right", no_wrap=True, min_width=4)
    if mixed:
        table.add_column("src", no_wrap=True)
    if wide:
        table.add_column("power (last polls)", no_wrap=True, width=SPARK_W)
    table.add_column("hot °C", no_wrap=True)
    top = max((max(b.power_trace) for b in view.boards if b.power_trace), default=0.0)
    for b in view.boards:
        cells: list[Text | str] = [b.name]
        if wide:
            cells.append(b.serial)
        cells += [b.module, b.l4t, Text(b.state, style=STATE_STYLE.get(b.state, "")),
                  Text(b.running or "-", style="" if b.running else "dim"),
                  "-" if b.power_w is None else f"{b.power_w:.1f}"]
        if mixed:
            cells.append(Text("twin" if b.source is Source.TWIN else "meas", style=SOURCE_STYLE.get(b.source, "")))
        if wide:
            cells.append(Text(sparkline(b.power_trace, SPARK_W, top), style="cyan"))
        cells.append(temp_text(b.hottest))
        table.add_row(*cells)
    return table


def summary_text(view: FleetView, wide: bool) -> Text:
    text = Text(no_wrap=False)
    style = {STATUS_CONNECTED: "bold green", STATUS_CONNECTING: "bold yellow", STATUS_FAILED: "bold red"}
    text.append(view.summary(), style=style.get(view.status, "bold"))
    if view.status == STATUS_CONNECTED and view.total_w is not None and view.source is not None:
        text.append(" ")
        text.append_text(tag(view.source))
    if view.status == STATUS_CONNECTED and view.total_trace and view.source is not None:  # a mixed fleet: per board
        text.append("\ntotal W ")
        text.append(sparkline(view.total_trace, 60 if wide else 40), style="cyan")
    if view.note:
        text.append(f"\n{view.note}", style="dim" if view.status != STATUS_FAILED else "red")
    return text


class FleetScreen(PageScreen):
    PAGE = "fleet"
    TITLE_TEXT = "7 Fleet"
    BINDINGS = [
        Binding("c", "connect", "Connect", tooltip="Connect to the fleet the field names (an address, or twins:N)"),
        Binding("d", "disconnect", "Disconnect", tooltip="Disconnect from the fleet (a local fleet's Ray stops)"),
        Binding("escape", "leave_form", "Leave form", show=False),
    ]

    # Bound to the app's fleet_view: after each poll of the boards and each batch of a fleet sweep's events.
    fleet_view: var[FleetView | None] = var(None, init=False)

    def __init__(self) -> None:
        super().__init__()
        self.view: FleetView | None = None  # the view drawn last

    def compose_body(self) -> ComposeResult:
        with Vertical(id="fleet-body"):
            yield Static(id="fleet-summary", classes="pane")
            with Horizontal(id="fleet-connect", classes="field"):
                yield Label("connect to", classes="field-label")
                yield Input(placeholder="HOST:6379 (blank: RAY_ADDRESS) or twins:N", id="fleet-target", compact=True)
                yield Button("Connect (c)", id="fleet-go", compact=True)
            yield Static(id="fleet-boards", classes="pane")
            yield Log(id="fleet-log", classes="pane", max_lines=200)

    def on_screen_resume(self) -> None:  # (PageScreen's own runs too: Textual calls each class's handler)
        self.tell(FleetWatched(True))

    def on_screen_suspend(self) -> None:
        self.tell(FleetWatched(False))

    def on_mount(self) -> None:
        self.query_one("#fleet-summary").border_title = "Fleet"
        self.query_one("#fleet-boards").border_title = "Boards"
        self.query_one("#fleet-log").border_title = "Events"
        self._log_lines: tuple[str, ...] = ()
        self._wide: bool | None = None

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "connect":  # shown only while there is something to connect to
            view = self.view
            return view is None or view.status not in (STATUS_CONNECTED, STATUS_CONNECTING)
        if action == "disconnect":  # and this only while connected
            return self.view is not None and self.view.status == STATUS_CONNECTED
        return super().check_action(action, parameters)

    def watch_fleet_view(self, view: FleetView | None) -> None:
        if view is not None:
            self.paint("fleet", lambda: self.draw_fleet(view))

    def draw_fleet(self, view: FleetView) -> None:
        changed_status = self.view is None or self.view.status != view.status
        self.view = view
        wide = self.app.size.width >= WIDE
        self._wide = wide
        show(self.query_one("#fleet-summary", Static), summary_text(view, wide))
        self.query_one("#fleet-connect").display = view.status not in (STATUS_CONNECTED, STATUS_CONNECTING)
        boards = self.query_one("#fleet-boards", Static)
        boards.display = bool(view.boards)
        source = view.source
        set_title(boards, Text.assemble("Boards: W and °C ", tag(source)) if source is not None else
                  Text.assemble("Boards: src twin ", tag(Source.TWIN), ", meas ", tag(Source.MEASURED)))
        boards.update(boards_table(view, wide))
        log = self.query_one("#fleet-log", Log)
        log.display = bool(view.log)
        if view.log != self._log_lines:
            log.clear()
            log.write_lines(view.log)
            self._log_lines = view.log
        if changed_status:
            self.refresh_bindings()

    def on_resize(self) -> None:
        view = self.fleet_view  # the latest (a hidden page has it to draw when shown)
        if view is not None and self.view is not None and self._wide != (self.app.size.width >= WIDE):
            self.paint("fleet", lambda: self.draw_fleet(view))

    def target(self) -> str:
        return self.query_one("#fleet-target", Input).value

    @on(Button.Pressed, "#fleet-go")
    def _go(self, event: Button.Pressed) -> None:
        event.stop()
        self.action_connect()

    @on(Input.Submitted, "#fleet-target")
    def _submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.action_connect()

    def action_connect(self) -> None:
        self.tell(FleetConnectRequested(self.target()))

    def action_disconnect(self) -> None:
        self.tell(FleetDisconnectRequested())

    def action_leave_form(self) -> None:
        self.set_focus(None)

