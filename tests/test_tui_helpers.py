"""The TUI tests' waits (tests/tui_helpers.py) fail as they should: a message that never comes,
an engine error nobody waits for; and settle() follows a key to the page it opens."""

from __future__ import annotations

import pytest

from engine.device.session import DeviceSession
from engine.results.store import Store
from tui.messages import SelectorTrained, SweepDone
from tui.screens.setup import SetupScreen
from tui_helpers import drive, make_app


async def test_a_message_that_never_comes_fails_the_wait_and_says_what_was_awaited(
        twin_session: DeviceSession) -> None:
    app = make_app(twin_session, poll=False, handle_signals=False)
    async with drive(app) as ui:
        with pytest.raises(AssertionError, match="no SweepDone within"):
            await ui.wait_for(SweepDone, timeout=0.2)  # nothing started a sweep


async def test_an_engine_error_fails_a_wait_for_success_at_once(twin_session: DeviceSession,
                                                                 results_store: Store) -> None:
    app = make_app(twin_session, store=results_store, poll=False, handle_signals=False)
    async with drive(app) as ui:
        app.train_selector()  # an empty store: nothing to learn from
        with pytest.raises(AssertionError, match="the selector training failed: .*holds no twin sweep points"):
            await ui.wait_for(SelectorTrained)
        await ui.workers_done()


async def test_settle_follows_a_key_to_the_page_it_opens(twin_session: DeviceSession) -> None:
    app = make_app(twin_session, poll=False, handle_signals=False)
    async with drive(app) as ui:
        await ui.press("2")
        assert isinstance(app.screen, SetupScreen) and app.screen.composed
        assert ui.pages[-2:] == ["device", "setup"]
