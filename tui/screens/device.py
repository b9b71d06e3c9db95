"""Page 1: the live device dashboard (rails, clocks, temperatures)."""

from __future__ import annotations

from typing import Mapping

from textual.app import ComposeResult
from textual.containers import Grid
from textual.screen import Screen
from textual.widgets import Footer, Static

from engine.device.base import ClockDomain
from engine.device.snapshot import DeviceSnapshot
from tui.widgets.device_panes import ClocksPane, IdentityBar, RailsPane, TemperaturesPane


class DeviceScreen(Screen):
    """What the board (or twin) is doing now; refreshed by the app's poll worker."""

    def compose(self) -> ComposeResult:
        yield IdentityBar(id="identity")
        with Grid(id="device-grid"):
            yield RailsPane(id="rails", classes="pane")
            yield TemperaturesPane(id="temps", classes="pane")
            yield ClocksPane(id="clocks", classes="pane")
            yield Static(id="notes", classes="pane")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#notes", Static).border_title = "Notes"

    def show(
        self,
        snap: DeviceSnapshot,
        pinned_by_us: bool,
        notes: list[str],
        tables: Mapping[ClockDomain, tuple[int, ...]],
    ) -> None:
        self.query_one(IdentityBar).show(snap, pinned_by_us)
        self.query_one(RailsPane).show(snap)
        self.query_one(ClocksPane).show(snap, tables)
        self.query_one(TemperaturesPane).show(snap)
        lines = list(notes) + [f"{k}: {v}" for k, v in snap.errors.items() if k != "rails"]
        self.query_one("#notes", Static).update("\n".join(lines) or "—")
