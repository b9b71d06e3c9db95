"""The TUI at 80x24 and 160x45 (footer, help, layout) and the screens that went stale: the
selector's preview of another model, the Run page under the cancel dialog, the Sweep page's
workload, and a policy that needs a sweep."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from engine.core.interval import Interval
from engine.device.session import DeviceSession
from engine.results.store import Store
from engine.workload.spec import WorkloadSpec
from test_tui_flow import _start_long_run, env  # noqa: F401 - env: the flow tests' isolation and frozen trace
from tui import demo, forms
from tui.messages import EngineFailed, RunProgress, SelectorPreviewed, SnapshotTaken, SweepDone
from tui.screens.help import HelpScreen, policy_help
from tui.screens.modals import ConfirmScreen
from tui.screens.run import RunScreen
from tui.screens.setup import SetupScreen
from tui.screens.sweep import SweepScreen
from tui_helpers import TWIN, Ui, drive, make_app, plain, screen_text, spy_run_draws

PAGES = ("1", "2", "3", "4", "5", "6")


async def _footer_has_help_and_quit(ui: Ui) -> str:
    line = await ui.footer()
    assert "? Help" in line and "q Quit" in line, f"page {ui.app.screen.PAGE}: {line!r}"
    return line


async def test_every_page_shows_help_and_quit_in_the_footer_at_80x24(twin_session: DeviceSession,
                                                                     results_store: Store) -> None:
    demo.fill_store(results_store)
    app = make_app(twin_session, store=results_store)
    async with drive(app, size=(80, 24)) as ui:
        for key in PAGES:
            await ui.press(key)
            assert app.screen.PAGE == ("device", "setup", "run", "compare", "history", "sweep")[int(key) - 1]
            await _footer_has_help_and_quit(ui)
        await ui.press("2")
        await ui.type_into("model", "bert")  # a field takes ? and q: the footer names the keys that still work
        line = await ui.footer()
        assert "f1 Help" in line and "^c Quit" in line, line
        await ui.press("ctrl+c")
    assert app.return_code == 0


@pytest.mark.parametrize("key", ["question_mark", "f1"])
async def test_help_opens_on_question_mark_and_f1_and_explains_fields_policies_and_the_store(
        twin_session: DeviceSession, results_store: Store, key: str) -> None:
    app = make_app(twin_session, store=results_store)
    async with drive(app, size=(80, 24)) as ui:
        await ui.press("2", key)
        assert isinstance(app.screen, HelpScreen)
        text = "\n".join(plain(s.content, width=200) for s in app.screen.query(".help-part"))
        for label in ("model", "batch size", "task", "seq length", "data", "precision", "policy", "mode",
                      "objective", "train samples", "slowdown ≤", "length", "compare with MAXN", "simulate"):
            assert label in forms.FIELD_HELP and f"{label}  " in text, label
        for name, meaning in policy_help():  # the engine's own descriptions
            assert name in text and meaning.split()[0] in text
        assert {n.split(":")[0] for n, _ in policy_help()} >= {"maxn", "oracle", "ml", "online", "static"}
        assert str(results_store.path) in text  # where this app's results go
        assert "Pause/resume" in text and "Start/resume" in text and "Compare 2" in text  # every page's keys
        await ui.press("escape")
        assert isinstance(app.screen, SetupScreen)
        await ui.press("question_mark", "q")  # q closes the help, it does not quit
        assert isinstance(app.screen, SetupScreen) and app.return_code is None
        await ui.press("ctrl+p", *"Help")
        await ui.workers_done()
        await ui.press("enter")
        assert isinstance(app.screen, HelpScreen)
        await ui.press("question_mark")
        assert isinstance(app.screen, SetupScreen)
        await ui.press("q")


async def test_checkboxes_read_without_colour(twin_session: DeviceSession, results_store: Store) -> None:
    app = make_app(twin_session, store=results_store, poll=False)
    async with drive(app) as ui:
        await ui.press("2")
        compare, simulate = app.screen.query_one("#compare"), app.screen.query_one("#simulate")
        assert compare.value and not simulate.value
        assert str(compare.render()).startswith("[X]") and str(simulate.render()).startswith("[ ]")
        simulate.value = True
        await ui.settle()
        assert str(simulate.render()).startswith("[X]")
        await ui.press("q")


@pytest.mark.parametrize("year, when", [("2025", "01-02 03:04"), ("2026", "2025-01-02")])
async def test_history_shows_when_whole_at_80x24(twin_session: DeviceSession, results_store: Store,
                                                 monkeypatch: pytest.MonkeyPatch, year: str, when: str) -> None:
    from tui.screens import history

    monkeypatch.setattr(history, "this_year_text", lambda: year)  # the demo's runs are of 2025-01-02 03:04
    demo.fill_store(results_store)
    app = make_app(twin_session, store=results_store, poll=False)
    async with drive(app, size=(80, 24)) as ui:
        await ui.press("5")
        await ui.footer()
        rows = [line for line in screen_text(app).splitlines() if "bert-tiny/sst2" in line or "pythia" in line]
        assert len(rows) == 4  # three runs, one sweep
        for row in rows:
            assert when in row and "twin" in row, row
        assert "finished" in rows[0]  # the runs' last column too
        await ui.press("q")


@pytest.mark.parametrize("size", [(80, 24), (160, 45)])
async def test_compare_charts_grow_with_the_terminal(twin_session: DeviceSession, results_store: Store,
                                                     size: tuple[int, int]) -> None:
    ids = demo.fill_store(results_store)
    app = make_app(twin_session, store=results_store, poll=False)
    async with drive(app, size=size) as ui:
        # with the engine's board estimate, as after an experiment on the twin: the tallest title
        estimate = Interval(0.05, 0.2, 0.9, "twin ensemble of 32 agx-orin-64gb profiles, paired")
        app.open_run(ids["static"], estimate=estimate)
        await ui.settle()
        assert "as an estimate of a board's: " in screen_text(app)
        charts = app.screen.query_one("#compare-charts")
        run_chart = app.screen.query_one("#chart-run")
        await ui.until(lambda: run_chart.size.height > 0, "the charts are laid out")
        assert run_chart.size.height >= (3 if size == (80, 24) else 12)
        empty = size[1] - 1 - (charts.region.bottom)  # rows between the charts and the footer
        assert empty <= 1
        await ui.press("q")


# --------------------------------------------------------------------------- stale screens
async def test_the_selector_preview_of_another_model_is_cleared(twin_session: DeviceSession,
                                                                 results_store: Store) -> None:
    app = make_app(twin_session, store=results_store)
    async with drive(app) as ui:
        await ui.press("2", "p")
        await ui.wait_for(SelectorPreviewed)
        await ui.workers_done()
        selector = app.screen.query_one("#selector")
        assert "none available" in plain(selector.content)  # about bert-tiny
        await ui.type_into("model", "bert-mini")
        assert "press p to ask" in plain(selector.content) and app.selector_line == ""
        await ui.press("escape", "4", "2")  # and not brought back when the page is shown again
        assert "press p to ask" in plain(app.screen.query_one("#selector").content)
        app.selector_line = "selector chooses GPU 816; vs MAXN: 13.0% less energy, 21.4% slower [predicted]"
        await ui.footer()
        assert "slower [predicted]" in screen_text(app)  # the source tag is text, not markup
        await ui.press("q")


async def test_the_run_page_keeps_updating_under_the_cancel_dialog(twin_session: DeviceSession, results_store: Store,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    shown = spy_run_draws(monkeypatch)
    app = make_app(twin_session, store=results_store)
    async with drive(app) as ui:
        await _start_long_run(ui, twin_session)
        await ui.press("3", "x")
        assert isinstance(app.screen, ConfirmScreen)
        at_open = app.run_view.step
        shown.clear()
        await ui.wait_for(RunProgress, until=lambda: app.run_view.step > at_open + 5)
        assert shown and max(shown) > at_open  # the page under the dialog was drawn with the new steps
        await ui.press("n")
        assert isinstance(app.screen, RunScreen)
        assert shown[-1] == app.run_view.step  # and synced when the dialog closed
        await ui.press("q")


async def test_the_sweep_page_follows_setups_workload_and_is_still_before_a_sweep(
        twin_session: DeviceSession, results_store: Store) -> None:
    app = make_app(twin_session, store=results_store)
    async with drive(app) as ui:
        await ui.press("6")
        sweep = app.screen
        assert not sweep.query_one("#sweep-progress").display  # no bar (and no animation) before a sweep
        await ui.press("2")
        await ui.type_into("model", "bert-mini")
        await ui.type_into("batch_size", "16")
        app.screen.query_one("#task").value = "mrpc"
        await ui.press("escape", "6")
        assert sweep.query_one("#sw-model").value == "bert-mini"
        values = sweep.values()
        assert values["task"] == "mrpc" and values["workload"]["batch_size"] == 16
        assert "batch 16" in plain(sweep.query_one("#sw-workload").content)
        await ui.type_into("sw-model", "bert-tiny")  # an edit here stays while Setup does not change
        await ui.press("escape", "2", "6")
        assert sweep.query_one("#sw-model").value == "bert-tiny"
        await ui.press("q")


async def _setup_asks_for_an_oracle_sweep(ui: Ui, app: Any) -> None:
    """On Setup with policy oracle, the note says the workload has no sweep."""
    await ui.press("2")
    await ui.type_into("policy", "oracle")
    note = app.screen.query_one("#policy-note")
    assert note.display and "oracle needs a sweep of bert-tiny/sst2" in plain(note.content)


async def test_oracle_without_a_sweep_is_said_on_setup_and_a_fast_sweep_offered(twin_session: DeviceSession,
                                                                               results_store: Store) -> None:
    app = make_app(twin_session, store=results_store)
    async with drive(app, size=(100, 40)) as ui:
        await _setup_asks_for_an_oracle_sweep(ui, app)
        app.screen.query_one("#simulate").value = True
        await ui.press("escape", "s")
        assert isinstance(app.screen, ConfirmScreen) and app.engine_busy is None  # asked, nothing started
        assert "run a fast one now?" in plain(app.screen.query_one("#confirm-question").content)
        await ui.press("y")
        await ui.wait_for(SweepDone)
        await ui.workers_done()
        assert isinstance(app.screen, SweepScreen) and app.sweep_view.status == "finished"
        (sweep,) = results_store.list_sweeps()
        assert sweep.space.get("method") == "fast" or "fast" in str(sweep.space)
        assert any("oracle has its sweep now: start the run on Setup (2)" in str(n.message)
                   for n in app._notifications)
        await ui.press("2")
        assert not app.screen.query_one("#policy-note").display  # the sweep now exists
        await ui.press("s")
        await ui.wait_for(RunProgress, EngineFailed, until=lambda: app.run_view.status in ("finished", "failed"))
        await ui.workers_done()
        assert app.last_result is not None and app.last_result.run.policy == "oracle"
        await ui.press("q")


async def test_a_sweep_of_fixed_length_batches_is_not_the_oracles_for_setup(twin_session: DeviceSession,
                                                                          results_store: Store) -> None:
    """Setup's runs pad batches dynamically: a stored sweep at --pad max is another workload (the
    engine's oracle would not find it), so Setup still says the oracle needs a sweep."""
    from engine.cli import main

    assert main(["sweep", "--model", "bert-tiny", "--task", "sst2", "--twin", "--fast", "--pad", "max",
                 "--db", str(results_store.path)]) == 0
    assert results_store.list_sweeps()
    app = make_app(twin_session, store=results_store)
    async with drive(app, size=(100, 40)) as ui:
        await _setup_asks_for_an_oracle_sweep(ui, app)
        await ui.press("q")


async def test_oracle_on_a_board_points_to_the_sweep_page(tmp_path: Path, results_store: Store) -> None:
    from engine.device.jetson import JetsonDevice
    from engine.device.treegen import default_orin_spec, render_tree

    root = tmp_path / "board"
    render_tree(root, default_orin_spec("r36"))
    app = make_app(DeviceSession(JetsonDevice(root)), store=results_store)
    async with drive(app) as ui:
        await ui.wait_for(SnapshotTaken)
        await ui.press("2")
        await ui.type_into("policy", "oracle")
        assert "run one on the Sweep page (6)" in plain(app.screen.query_one("#policy-note").content)
        await ui.press("escape", "s")
        assert "open the Sweep page?" in plain(app.screen.query_one("#confirm-question").content)
        await ui.press("y")
        assert isinstance(app.screen, SweepScreen) and app.engine_busy is None  # shown, not started
        assert results_store.list_runs() == [] and results_store.list_sweeps() == []
        await ui.press("q")


async def test_the_oracles_error_points_to_the_sweep_page(twin_session: DeviceSession, results_store: Store) -> None:
    from engine.run.experiment import ExperimentSpec

    app = make_app(twin_session, store=results_store)
    async with drive(app) as ui:
        app.start_experiment(ExperimentSpec(WorkloadSpec("bert-tiny", "sst2"), policy="oracle", steps=3, twin=TWIN,
                                            simulate=True))
        await ui.wait_for(EngineFailed)
        await ui.workers_done()
        (note,) = [n for n in app._notifications if n.title == "The experiment failed"]
        assert "the Sweep page (6)" in str(note.message) and "slm-dvfs sweep" not in str(note.message)
        await ui.press("q")


async def test_ml_without_a_selector_is_said_before_start(twin_session: DeviceSession, results_store: Store) -> None:
    app = make_app(twin_session, store=results_store)
    async with drive(app) as ui:
        await ui.press("2")
        await ui.type_into("policy", "ml")
        assert "ml needs a trained selector" in plain(app.screen.query_one("#policy-note").content)
        await ui.press("escape")  # focusing the field again selects its text: typing replaces it
        await ui.type_into("policy", "online")  # online profiles during the run: it needs nothing first
        assert not app.screen.query_one("#policy-note").display
        await ui.press("escape")
        await ui.type_into("policy", "ml")
        await ui.press("escape", "s")
        assert isinstance(app.screen, SetupScreen) and app.engine_busy is None
        notes = [(n.title, str(n.message)) for n in app._notifications]
        assert any(t == "Cannot start" and "ml needs a trained selector" in m for t, m in notes), notes
        await ui.press("q")
