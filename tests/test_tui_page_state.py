"""What a page's keys and lines act on: History's run keys work from the page whatever has the
focus (and are offered only while there are runs); Setup's reasons under the form follow the
fields as they are now."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from engine.device.session import DeviceSession
from engine.results.store import Store
from engine.results.totals import RunTotals
from test_tui_flow import env  # noqa: F401 - that module's autouse isolation
from tui import demo
from tui.screens.compare import CompareScreen
from tui.screens.history import HistoryScreen
from tui_helpers import drive, make_app, plain


# --------------------------------------------------------------------------- History's keys
async def test_history_run_keys_work_from_the_page_whatever_has_the_focus(twin_session: DeviceSession,
                                                                          results_store: Store) -> None:
    ids = demo.fill_store(results_store)
    app = make_app(twin_session, store=results_store)
    async with drive(app, size=(100, 30)) as ui:
        await ui.press("5")
        page = app.screen
        assert isinstance(page, HistoryScreen)
        runs, sweeps = page.query_one("#runs"), page.query_one("#sweeps")
        sweeps.focus()  # as after tab, or coming back from a sweep opened here
        await ui.settle()
        await ui.press("m")
        assert page.marked == [ids["lone"]] and page.focused is runs  # the run it marked is the one shown
        await ui.press("down")
        page.set_focus(None)  # nothing focused, as when the terminal has lost the focus
        await ui.settle()
        await ui.press("m", "down", "m")  # the static run and its MAXN run: the last two marked
        assert page.marked == [ids["static"], ids["maxn"]]
        await ui.press("c")
        assert isinstance(app.screen, CompareScreen)
        assert (app.compare_view.run.id, app.compare_view.base.id) == (ids["static"], ids["maxn"])
        await ui.press("5")
        sweeps.focus()
        await ui.settle()
        await ui.press("e")
        export = Path(os.environ["SLM_DVFS_DATA_DIR"]) / "exports"
        assert [p.name for p in export.glob("*.csv")] == [f"run-{page.selected_run().id}.csv"]
        assert page.focused is runs
        await ui.press("ctrl+c")


async def test_history_offers_run_keys_only_with_runs_and_opens_a_sweep_alone(twin_session: DeviceSession,
                                                                              results_store: Store) -> None:
    demo.fill_store(results_store)
    for run in results_store.list_runs():
        results_store.delete_run(run.id)
    app = make_app(twin_session, store=results_store)
    async with drive(app, size=(100, 30)) as ui:
        await ui.press("5")
        footer = await ui.footer()
        assert "Mark" not in footer and "Delete" not in footer and "Export" not in footer  # no run to act on
        assert "Open" in footer
        await ui.press("m")
        assert app.screen.marked == []
        await ui.press("o")  # the store's only table with rows: its sweep opens
        assert app.screen.PAGE == "sweep" and "from the store" in " ".join(app.sweep_view.log)
        await ui.press("ctrl+c")


# --------------------------------------------------------------------------- Setup's reasons
@pytest.mark.parametrize("field,bad", [("batch_size", "0"), ("seq_len", "x"), ("train_samples", "0")])
async def test_a_setup_reason_goes_when_its_field_is_emptied(twin_session: DeviceSession, results_store: Store,
                                                            field: str, bad: str) -> None:
    app = make_app(twin_session, store=results_store)
    async with drive(app, size=(100, 30)) as ui:
        await ui.press("2")
        setup = app.screen
        await ui.type_into(field, bad)
        reasons = setup.query_one("#setup-errors")
        assert reasons.display and "whole number" in plain(reasons.content)
        await ui.press("backspace")  # blank again: the zoo's default, which is fine
        assert setup.query_one(f"#{field}").value == ""
        assert not reasons.display and plain(reasons.content).strip() == ""
        await ui.press("ctrl+c")


# --------------------------------------------------------------------------- Compare 2 (c) on two marked runs
async def test_compare_two_marked_runs_without_a_maxn_one_says_so(twin_session: DeviceSession,
                                                                   results_store: Store) -> None:
    """`c` on two marked runs takes the MAXN one as the baseline; with none, the page refuses as `slm-dvfs
    compare` does (engine.results.compare.mismatch: a saving is against MAXN only) and names the MAXN run that
    fits, instead of giving a saving against the other static run."""
    from engine.device.setting import DvfsSetting

    ids = demo.fill_store(results_store)
    static = results_store.get_run(ids["static"])
    other = results_store.start_run(policy="static", source=static.source, device=static.device_id,
                                    workload=static.workload_id, seed=0, steps=300, rails="all")
    results_store.finish_run(other, RunTotals(time_s=3.2, rail_energy_j={"VDD_GPU_SOC": 40.0, "VDD_CPU_CV": 5.0}, rails_preset="all", samples=9600, steps=300), setting=DvfsSetting(gpu_hz=612_000_000, nvpmodel=0))
    app = make_app(twin_session, store=results_store)
    async with drive(app, size=(100, 30)) as ui:
        await ui.press("5")
        page = app.screen
        assert isinstance(page, HistoryScreen)
        await ui.press("m", "down", "down", "m")  # newest first: the other static run, lone, static
        assert page.marked == [other, ids["static"]]
        await ui.press("c")
        assert isinstance(app.screen, CompareScreen)
        view = app.compare_view
        assert view.run.id == other and view.base is None and view.saving_pct is None
        assert view.baseline_note == f"not compared with run {ids['static']}"
        assert any(f"run {ids['static']} ran policy static, not the baseline" in n for n in view.notes)
        assert f"the MAXN run that fits run {other}: {ids['maxn']} (History: m on both, then c)" in view.notes
        title = plain(app.screen.query_one("#compare-title").content)
        assert "ran policy static, not the baseline" in " ".join(title.split())
        await ui.press("ctrl+c")
