"""The TUI at rest (issue 24): a page repaints only what a reading changed, and a page not on view
does not poll. Counted through the app's own start-up and its message path (Textual's pilot): the
repaints Textual is asked for, and the fleet's polls, over a number of device readings; no clocks."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from textual.widget import Widget

from engine.device.session import DeviceSession
from engine.device.snapshot import DeviceSnapshot, take_snapshot
from tui import demo
from tui.live_model import rail_key, temp_key
from tui.messages import FleetPolled, SnapshotTaken
from tui.widgets.live import GraphStack
from tui_helpers import drive, make_app

POLL_S = 0.5  # the app's idle poll
FILL = 130  # readings that fill every graph's columns at 100x30 (until then each reading adds a column)


class Repaints:
    """Every widget Textual is asked to repaint (Widget.refresh) while counting."""

    def __init__(self) -> None:
        self.on = False
        self.widgets: list[Widget] = []

    def of(self, widget: Widget) -> int:
        return sum(w is widget for w in self.widgets)

    def names(self) -> list[str]:
        return sorted({f"{type(w).__name__}#{w.id}" for w in self.widgets})


@pytest.fixture
def repaints(monkeypatch: pytest.MonkeyPatch) -> Repaints:
    seen = Repaints()
    original = Widget.refresh

    def refresh(self: Widget, *args: Any, **kwargs: Any) -> Any:
        if seen.on:
            seen.widgets.append(self)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Widget, "refresh", refresh)
    return seen


def reading(session: DeviceSession) -> DeviceSnapshot:
    device = session.device
    return take_snapshot(device, device.identity())


async def filled(app: Any, ui: Any, snap: DeviceSnapshot) -> None:
    """The page laid out and every graph's columns filled with `snap` (until then each reading adds one)."""
    await feed(app, ui, snap, FILL)
    await ui.pilot.pause()  # the graphs made by the first reading are laid out (a size of their own)
    await feed(app, ui, snap, 2)
    await ui.pilot.pause()


async def feed(app: Any, ui: Any, snap: DeviceSnapshot, n: int) -> None:
    """`n` polls of `snap`, through the message the poll worker posts, half a second apart as the app
    polls (only the time differs); back once the app has handled them."""
    target = app.device_history.readings + n
    last = app.last_snapshot.t if app.last_snapshot is not None else snap.t
    for i in range(1, n + 1):
        app.post_message(SnapshotTaken(dataclasses.replace(snap, t=last + POLL_S * i)))
    await ui.wait_for(SnapshotTaken, until=lambda: app.device_history.readings >= target)
    await ui.settle()


async def test_an_idle_device_page_repaints_nothing_while_the_readings_stay_the_same(
        twin_session: DeviceSession, repaints: Repaints) -> None:
    """Main redrew every title and the notes pane (a layout pass) on each poll, equal or not, and the
    Power title's span changed every second: the idle Device page cost 5-9% of a core. A reading
    equal to the last one (but for its time) now asks for no repaint."""
    app = make_app(twin_session, poll=False)
    async with drive(app, size=(100, 30)) as ui:
        snap = reading(twin_session)
        await filled(app, ui, snap)  # 66 s of history: the title says 60 s until 70 s
        before = app.device_history.readings
        repaints.on = True
        await feed(app, ui, snap, 6)
        repaints.on = False
        assert app.device_history.readings == before + 6
        assert repaints.widgets == [], f"an unchanged reading repainted {repaints.names()}"
        await ui.press("q")


async def test_a_changed_reading_repaints_its_graphs_and_a_change_too_small_to_show_does_not(
        twin_session: DeviceSession, repaints: Repaints) -> None:
    app = make_app(twin_session, poll=False)
    async with drive(app, size=(100, 30)) as ui:
        snap = reading(twin_session)
        await filled(app, ui, snap)
        power = app.screen.query_one("#dev-power", GraphStack)
        temps = app.screen.query_one("#dev-temp-graphs", GraphStack)
        first = snap.rails[0]

        def with_current(ma: float) -> DeviceSnapshot:
            return dataclasses.replace(snap, rails=(dataclasses.replace(first, current_ma=ma), *snap.rails[1:]))

        # 1 µW more on a rail: no figure (W to 2 places) and no bar (an eighth of a row) moves
        repaints.on = True
        await feed(app, ui, with_current(first.current_ma + 1e-3 / first.voltage_mv), 3)
        repaints.on = False
        assert repaints.widgets == [], f"an invisible change repainted {repaints.names()}"

        # 5 W more: that rail's graph and the total's repaint, the temperatures' do not
        repaints.on = True
        await feed(app, ui, with_current(first.current_ma + 5e6 / first.voltage_mv), 1)
        repaints.on = False
        assert repaints.of(power.graphs[rail_key(first.name)]) == 1
        assert repaints.of(power.graphs[rail_key("total")]) == 1
        assert repaints.of(temps.graphs[temp_key("max")]) == 0
        await ui.press("q")


class CountingFleet:
    """A connected fleet without Ray that counts how often its boards are read."""

    def __init__(self) -> None:
        self.polls = 0
        self.closed = False

    def boards(self) -> tuple[Any, ...]:
        self.polls += 1
        return tuple(demo.fleet_boards())

    def close(self) -> None:
        self.closed = True


async def test_the_fleet_is_polled_only_while_its_page_is_on_view(twin_session: DeviceSession,
                                                                  results_store: Any) -> None:
    """Main read every board once a second whatever page was shown (a Ray call to each)."""
    fleet = CountingFleet()
    app = make_app(twin_session, store=results_store, handle_signals=False, fleet=fleet, fleet_twins=3)
    app.fleet_refresh_s = 0.01  # five fleet polls to each device poll, were it polled while hidden
    async with drive(app) as ui:
        await ui.wait_for(FleetPolled)  # once on connecting: the Sweep page's `f` needs the boards
        for _ in range(10):
            await ui.wait_for(SnapshotTaken)
        assert fleet.polls == 1
        await ui.press("7")
        await ui.wait_for(FleetPolled, until=lambda: fleet.polls >= 3)  # on view: polled
        await ui.press("1")
        await ui.wait_for(SnapshotTaken)
        left_at = fleet.polls
        for _ in range(10):
            await ui.wait_for(SnapshotTaken)
        assert fleet.polls <= left_at + 1  # at most the one under way when the page was left
        await ui.press("q")
