"""The TUI's data flow as Textual intends it (issue 21): attributes down, messages up.

A page tells the app what the user asked for with a typed message (tui.messages) and never
calls the app's own methods; the app answers by setting its reactive state (tui.state), which
the pages bind, and never calls a page nor tells one page class from another. A page hidden
while its state changes draws the latest state once it is shown, not every change it missed.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from textual.app import App

from engine.device.session import DeviceSession
from engine.results.store import Store
from test_tui_flow import env  # noqa: F401 - the flow tests' isolation and frozen trace
from tui import demo
from tui.messages import RecordsRequested, RunHighlighted, RunOpenRequested
from tui.state import StoredRecords
from tui_helpers import drive, make_app, plain, spy_run_draws

TUI = Path(__file__).resolve().parent.parent / "tui"
# The app's side: what handles the pages' messages and sets the state they bind.
APP_SIDE = tuple(p for p in (TUI / "app.py", TUI / "lifecycle.py", TUI / "commands.py", TUI / "state.py",
                              *sorted((TUI / "actions").glob("*.py"))) if p.exists())
PAGE_SIDE = (*sorted((TUI / "screens").glob("*.py")), *sorted((TUI / "widgets").glob("*.py")))
PAGE_MODULES = {f"tui.screens.{n}" for n in ("device", "setup", "run", "compare", "history", "sweep", "fleet")}


async def test_history_asks_with_messages_and_draws_what_the_app_sets(twin_session: DeviceSession,
                                                                     results_store: Store) -> None:
    """History shown → RecordsRequested up → the app's `records` down into the table; enter on a
    run → RunOpenRequested up → the app's comparison down onto Compare."""
    demo.fill_store(results_store)
    app = make_app(twin_session, store=results_store)
    async with drive(app) as ui:
        await ui.press("5")
        await ui.wait_for(RecordsRequested)
        await ui.wait_for(RunHighlighted)
        assert isinstance(app.records, StoredRecords)
        table = app.screen.query_one("#runs")
        assert table.row_count == len(app.records.runs) == len(results_store.list_runs(limit=500))
        highlighted = app.screen.selected_run().id
        assert app.highlighted_run == highlighted  # told up, for the palette's export and delete
        await ui.press("enter")
        opened = await ui.wait_for(RunOpenRequested)
        assert opened is not None and opened.run_id == highlighted
        assert app.screen.PAGE == "compare" and app.compare_view is not None
        assert app.screen.view is app.compare_view  # bound, not handed over by a call
        assert app.compare_view.run.id == highlighted
        assert f"run {highlighted} " in plain(app.screen.query_one("#compare-title").content, width=200)
        await ui.press("q")
    assert app.return_code == 0


async def test_a_hidden_page_draws_the_latest_state_once_shown_not_what_it_missed(
        twin_session: DeviceSession, results_store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    drawn = spy_run_draws(monkeypatch)
    app = make_app(twin_session, store=results_store)
    async with drive(app) as ui:
        await ui.press("3", "1")  # the Run page composed, then hidden
        drawn.clear()
        app.run_view = demo.run_view(steps_done=40)
        app.run_view = demo.run_view(steps_done=120)
        await ui.settle()
        assert drawn == []  # hidden: nothing drawn
        await ui.press("3")
        assert drawn and set(drawn) == {120}, drawn  # the latest, not the step it missed
        assert app.screen.last_view is app.run_view
        await ui.press("q")


def _attribute_chains(path: Path) -> list[tuple[int, str, str]]:
    """(line, object, attribute) of every `x.y` whose x is a name or an attribute."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Attribute):
            inner = node.value
            owner = inner.attr if isinstance(inner, ast.Attribute) else getattr(inner, "id", "")
            found.append((node.lineno, owner, node.attr))
    return found


def test_pages_use_only_textuals_app_never_the_apps_own_methods() -> None:
    """Messages up: a page or widget reaches `self.app` only for what Textual's App offers every
    app (post a message, push a dialog, its size...), so none needs an `attr-defined` ignore."""
    reached = [f"{p.relative_to(TUI.parent)}:{line}: app.{attr}" for p in PAGE_SIDE
               for line, owner, attr in _attribute_chains(p) if owner == "app" and not hasattr(App, attr)]
    assert reached == []
    ignores = [p.name for p in (*PAGE_SIDE, *APP_SIDE) if "ignore[attr-defined]" in p.read_text()]
    assert ignores == []


def test_the_app_never_calls_a_page_nor_tells_page_classes_apart() -> None:
    """Attributes down: the app's side sets state; it imports no page class (only tui.app, to install
    them), so it holds no isinstance chain over pages, and it calls no page's draw or show method."""
    problems = []
    for path in APP_SIDE:
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module in PAGE_MODULES and path.name != "app.py":
                problems.append(f"{path.name}:{node.lineno} imports {node.module}")
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "isinstance" and len(node.args) == 2:
                names = {n.id for n in ast.walk(node.args[1]) if isinstance(n, ast.Name)}
                pages = {n for n in names if n.endswith("Screen") and n not in ("ModalScreen", "HelpScreen")}
                if pages:
                    problems.append(f"{path.name}:{node.lineno} isinstance(..., {sorted(pages)})")
        for line, _owner, attr in _attribute_chains(path):
            if attr.startswith(("show_", "draw_")):
                problems.append(f"{path.name}:{line} calls .{attr}")
    assert problems == []


async def test_history_reads_a_page_at_a_time_and_shows_rows_past_the_first(twin_session: DeviceSession,
                                                                          results_store: Store) -> None:
    """Issue 24: History reads the store a page at a time; moving onto the last row read asks for the
    next page (a message up), and the older runs and sweeps show below, each table's cursor on the row it
    was on."""
    from engine.core.provenance import Source
    from engine.results.history import PAGE_ROWS
    from engine.results.store import DeviceRecord, SweepPoint, WorkloadRecord
    from engine.results.store.sweep_tables import FinishedSweep

    device = DeviceRecord("NVIDIA Jetson AGX Orin Developer Kit", "P3701-0005 (AGX Orin 64GB)", profile="agx-orin-64gb",
                          is_twin=True)
    workload = WorkloadRecord("bert-tiny", "sst2", 32, 128, "fp32")
    extra = 7
    for i in range(PAGE_ROWS + extra):
        results_store.start_run(policy="maxn", source=Source.TWIN, device=device, workload=workload, seed=i, steps=1)
    results_store.add_finished_sweeps(device, [
        FinishedSweep(workload=workload, space={"space": "gpu", "n": i}, repeats=1, source=Source.TWIN,
                      points=(SweepPoint(sweep_id=0, setting={"gpu_hz": 306_000_000, "nvpmodel_id": 0}, repeat=0,
                                         time_s=1.0, energy_j=2.0, samples=8),))
        for i in range(PAGE_ROWS + extra)])
    app = make_app(twin_session, store=results_store)
    async with drive(app) as ui:
        await ui.press("5")
        first = await ui.wait_for(RecordsRequested)
        assert first is not None and first.more is None
        await ui.wait_for(RunHighlighted)
        runs, sweeps = app.screen.query_one("#runs"), app.screen.query_one("#sweeps")
        assert runs.row_count == PAGE_ROWS and app.records.more_runs  # one page read, not the store
        assert sweeps.row_count == PAGE_ROWS and app.records.more_sweeps
        runs.move_cursor(row=PAGE_ROWS - 1)
        asked = await ui.wait_for(RecordsRequested, until=lambda: runs.row_count == PAGE_ROWS + extra)
        assert asked is not None and asked.more == "runs"
        assert not app.records.more_runs and app.records.runs[-1].id == 1  # the oldest run, past the first page
        assert runs.cursor_row == PAGE_ROWS - 1  # where it was
        sweeps.focus()
        sweeps.move_cursor(row=PAGE_ROWS - 1)
        await ui.until(lambda: sweeps.row_count == PAGE_ROWS + extra, "the sweeps' next page")
        assert app.records.sweeps[-1][0].id == 1 and app.records.sweeps[-1][2] == 1
        assert sweeps.cursor_row == PAGE_ROWS - 1  # where it was, as the runs' (not row 0)
        assert runs.cursor_row == PAGE_ROWS - 1  # the sweeps' page left the runs' cursor alone
        await ui.press("q")
    assert app.return_code == 0
