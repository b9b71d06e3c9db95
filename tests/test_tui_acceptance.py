"""Issue 11's acceptance, as a user meets it: at 80x24, a run set up and started by keyboard
on the twin trains bert-tiny for real (random weights, generated data), and the screen shows
quit and help in the footer, help on `?`, a history graph that changes while the run steps,
and the run's accuracy marked not meaningful on the Run and Compare pages."""

from __future__ import annotations

from typing import Any

import pytest

from engine.device.session import DeviceSession
from engine.results.store import Store
from tui.messages import ExperimentDone, RunProgress
from tui.runstate import RunView
from tui.screens.compare import CompareScreen
from tui.screens.help import HelpScreen
from tui.widgets.live import GraphStack
from tui.widgets.run_panes import ProgressPane
from tui_helpers import Ui, drive, make_app, plain

NOT_MEANINGFUL = "not meaningful (random weights / generated data)"


async def _footer_has_help_and_quit(ui: Ui) -> None:
    line = await ui.footer()
    assert "? Help" in line and "q Quit" in line, line


@pytest.mark.slow  # trains bert-tiny twice (the run and its MAXN baseline): torch and transformers
async def test_a_run_at_80x24_is_honest_live_and_helped(twin_session: DeviceSession, results_store: Store,
                                                        isolated_env: Any) -> None:
    app = make_app(twin_session, store=results_store, refresh_s=0.05)
    async with drive(app, size=(80, 24)) as ui:
        await _footer_has_help_and_quit(ui)
        await ui.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await ui.press("escape")
        assert app.screen.PAGE == "device"

        await ui.press("2")
        for field, value in (("batch_size", "2"), ("seq_len", "16"), ("train_samples", "64"),
                             ("policy", "static:gpu=816"), ("amount", "120")):
            await ui.type_into(field, value)
        await ui.press("escape", "s")
        await ui.wait_for(RunProgress, until=lambda: app.run_view.step > 0, timeout=120)
        assert app.screen.PAGE == "run"
        await _footer_has_help_and_quit(ui)

        # the Run page's total-power graph is redrawn from the run's own steps as they come
        rails = app.screen.query_one("#run-rails", GraphStack)
        await ui.until(lambda: bool(rails.graphs), "the Run page drew its power graphs")
        total = next(g for key, g in rails.graphs.items() if "total" in key)
        first_view: RunView = app.run_view
        drawn_first = plain(total.render())
        await ui.wait_for(RunProgress, until=lambda: app.run_view.step >= first_view.step + 20, timeout=120)
        await ui.until(lambda: plain(total.render()) != drawn_first, "the total-power graph moved", timeout=30)

        await ui.wait_for(ExperimentDone, timeout=300)
        await ui.workers_done()
        assert isinstance(app.screen, CompareScreen)
        await _footer_has_help_and_quit(ui)
        accuracy = {f.name: f for f in app.screen.view.figures}["accuracy"]
        assert accuracy.meaningful is False and accuracy.source_text == "not meaningful"
        assert "not meaningful" in plain(app.screen.query_one("#compare-figures").content, width=200)
        assert NOT_MEANINGFUL in plain(app.screen.query_one("#compare-title").content, width=200)  # and why

        await ui.press("3")
        progress = plain(app.screen.query_one(ProgressPane).content, width=200)
        # at 80 columns the eval line says "not meaningful"; its reasons are the Compare page's and the log's
        assert any(line.startswith("eval ") and "accuracy" in line and line.endswith("not meaningful")
                   for line in progress.splitlines()), progress
        assert "[measured" not in progress.split("eval", 1)[1]
        await ui.press("q")
    assert app.return_code == 0
