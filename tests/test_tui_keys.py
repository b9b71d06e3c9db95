"""Keys reach what they were typed for: a burst typed faster than the app handles it (the app
busy with a run) lands key by key where each was meant (tui.keys)."""

from __future__ import annotations

from typing import Any

from textual import events

from engine.device.session import DeviceSession
from engine.results.store import Store
from test_tui_flow import _start_long_run, env  # noqa: F401 - env: that module's autouse isolation
from tui import demo
from tui.screens.compare import CompareScreen
from tui_helpers import drive, make_app

CHARS = {"escape": "\x1b", "tab": "\t", "enter": "\r", "space": " "}


def burst(app: Any, *keys: str) -> None:
    """Keys as a terminal delivers a burst: all queued at once, none waiting for the one before."""
    for key in keys:
        app.post_message(events.Key(key, CHARS.get(key, key if len(key) == 1 else None)))


# --------------------------------------------------------------------------- a burst while a run steps
async def test_a_burst_typed_while_a_run_steps_lands_where_each_key_was_meant(twin_session: DeviceSession,
                                                                              results_store: Store) -> None:
    ids = demo.fill_store(results_store)
    app = make_app(twin_session, store=results_store)
    async with drive(app, size=(100, 30)) as ui:
        await _start_long_run(ui, twin_session)  # the engine steps in its thread the whole time
        # Setup: tab to the batch size, type 4, leave the field; History: mark two runs; compare them
        burst(app, "2", "tab", "tab", "tab", "4", "escape", "5", "down", "m", "down", "m", "c")
        await ui.settle()
        assert app.get_screen("setup").query_one("#batch_size").value == "4"  # the 4 after the tabs
        history = app.get_screen("history")
        assert history.marked == [ids["lone"], ids["static"]]  # below the running run: newest first
        assert isinstance(app.screen, CompareScreen)  # `c` on History, not in a field
        assert (app.compare_view.run.id, app.compare_view.base.id) == (ids["lone"], ids["static"])
        assert app.engine_busy == "experiment"  # none of it reached the run
        await ui.press("ctrl+c")
