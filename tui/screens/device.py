"""Page 1: the live device dashboard (rails, clocks, temperatures)."""

from __future__ import annotations

from collections.abc import Mapping

from textual.app import ComposeResult
from textual.containers import Grid
from textual.widgets import Static

from engine.device.base import ClockDomain
from engine.device.snapshot import DeviceSnapshot
from tui.screens.base import PageScreen
from tui.widgets.device_panes import ClocksPane, RailsPane, TemperaturesPane


class DeviceScreen(PageScreen):
    """What the board (or twin) is doing now; refreshed by the app's poll worker."""

    PAGE = "device"
    TITLE_TEXT = "1 Device"

    def compose_body(self) -> ComposeResult:
        with Grid(id="device-grid"):
            yield RailsPane(id="rails", classes="pane")
            yield TemperaturesPane(id="temps", classes="pane")
            yield ClocksPane(id="clocks", classes="pane")
            yield Static(id="notes", classes="pane")

    def on_mount(self) -> None:
        self.query_one("#notes", Static).border_title = "Notes"

    def show_device(
        self,
        snap: DeviceSnapshot,
        pinned_by_us: bool,
        notes: list[str],
        tables: Mapping[ClockDomain, tuple[int, ...]],
    ) -> None:
        super().show_device(snap, pinned_by_us, notes, tables)
        self.query_one(RailsPane).show(snap)
        self.query_one(ClocksPane).show(snap, tables)
        self.query_one(TemperaturesPane).show(snap)
        lines = list(notes) + [f"{k}: {v}" for k, v in snap.errors.items() if k != "rails"]
        self.query_one("#notes", Static).update("\n".join(lines) or "—")

    # kept for callers of the first version of this page
    show = show_device
