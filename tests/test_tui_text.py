"""What the TUI says, at 80x24 and at 160x45: every figure whole with its unit and source, a sweep
opened from History shown with its own workload, durations and ranges that cannot be misread,
savings in words, and help without the code's names."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from engine.core.provenance import Source
from engine.device.session import DeviceSession
from engine.device.setting import MAXN, DvfsSetting
from engine.results.store import Store
from engine.workload.spec import WorkloadSpec
from engine.results.totals import RunTotals
from test_tui_flow import env, pace, simulated_spec  # noqa: F401 - env: the flow tests' isolation and frozen trace
from tui import demo
from tui.messages import RunProgress
from tui.screens.help import HelpScreen
from tui.screens.sweep import SweepScreen
from tui_helpers import drive, make_app, plain, screen_text

SIZES = pytest.mark.parametrize("size", [(80, 24), (160, 45)], ids=["80x24", "160x45"])
MHZ = 1_000_000


def cancel_after(points: int) -> Any:
    """A TrainControl cancelled from point `points + 1` on. A fast sweep's events come after its one
    commit, so a cancel comes through the control its loop reads before each point (as the TUI's does)."""
    from engine.workload.training.loop import TrainControl

    class CancelAfter(TrainControl):
        reads = 0

        @property
        def cancelled(self) -> bool:
            self.reads += 1
            return self.reads > points

    return CancelAfter()


def region_text(app: Any, selector: str) -> str:
    """What the terminal shows inside a widget's region (its border included), one line a row."""
    region = app.screen.query_one(selector).region
    rows = screen_text(app).splitlines()
    return "\n".join(row[region.x:region.right] for row in rows[region.y:region.bottom])


def assert_whole(app: Any, *selectors: str) -> str:
    """None of the widgets cuts anything (no `…` inside their regions, titles included)."""
    texts = []
    for selector in selectors:
        text = region_text(app, selector)
        assert "…" not in text, f"{selector} at {app.size}:\n{text}"
        texts.append(text)
    return "\n".join(texts)


async def laid_out(ui: Any, open_stored: Any, record_id: int) -> None:
    """A stored run or sweep opened (app.open_run / open_sweep), once its page is laid out."""
    open_stored(record_id)
    await ui.settle()
    await ui.footer()


async def open_from_history(ui: Any, app: Any, sweep_id: int) -> None:
    """On History, with its sweeps' table focused: the sweep's row highlighted, then opened (enter)."""
    history = app.screen
    for _ in range(len(history._sweeps)):
        if history.selected_sweep().id == sweep_id:
            break
        await ui.press("down")
    await ui.press("enter")


def add_pythia_sweep(store: Store) -> int:
    """A finished GPU sweep of pythia-70m/rte at batch 16, length 128 (the demo store's other workload)."""
    from engine.results.store import DeviceRecord, SweepPoint, WorkloadRecord

    device = store.ensure_device(DeviceRecord.from_identity(demo.IDENTITY))
    workload = store.ensure_workload(WorkloadRecord("pythia-70m", "rte", 16, 128, "fp32", "full", family="pythia"))
    sweep = store.find_or_create_sweep(device=device, workload=workload, space={"space": "gpu", "method": "fast",
                                                                                 "rails": "all"},
                                       warmup_steps=1, steps=5, repeats=1, source=Source.TWIN, label="test")
    for setting, jps in ((MAXN, 0.031), (DvfsSetting(gpu_hz=612 * MHZ, nvpmodel=0), 0.026),
                         (DvfsSetting(gpu_hz=1020 * MHZ, nvpmodel=0), 0.029)):
        store.add_point(SweepPoint(sweep_id=sweep.id, setting=setting.to_json(), repeat=0, time_s=0.5,
                                   energy_j=jps * 160, samples=160, source=Source.TWIN))
    store.finish_sweep(sweep.id, "finished")
    return sweep.id


# --------------------------------------------------------------------------- History's sweep on the Sweep page
@SIZES
async def test_a_sweep_opened_from_history_shows_its_own_workload_not_setups(
        twin_session: DeviceSession, results_store: Store, size: tuple[int, int]) -> None:
    demo.fill_store(results_store)  # Setup's workload (bert-tiny/sst2) has a sweep of its own too
    pythia = add_pythia_sweep(results_store)
    app = make_app(twin_session, store=results_store, poll=False)
    async with drive(app, size=size) as ui:
        await ui.press("6")  # the Sweep page follows Setup: bert-tiny/sst2
        sweep_page = app.screen
        assert sweep_page.query_one("#sw-model").value == "bert-tiny"
        await ui.press("5", "tab")  # the sweeps' table
        history = app.screen
        for _ in range(len(results_store.list_sweeps())):
            if history.selected_sweep().id == pythia:
                break
            await ui.press("down")
        await ui.press("enter")
        assert app.screen is sweep_page and isinstance(sweep_page, SweepScreen)
        await ui.footer()
        # the form holds the sweep's own workload, shape and padding included, so `s` resumes that sweep
        assert sweep_page.query_one("#sw-model").value == "pythia-70m"
        values = sweep_page.values()
        assert values["task"] == "rte" and values["workload"]["batch_size"] == 16
        assert values["workload"]["max_seq_len"] == 128 and values["workload"]["padding"] == "max_length"
        shown = assert_whole(app, "#sweep-form", "#sweep-summary", "#sweep-heat")
        assert "batch 16, seq 128, fp32, full, padded to 128" in re.sub(r"\s*│\s*│?\s*", " ", shown)
        assert "of pythia-70m/rte" in plain(sweep_page.query_one("#sweep-summary").content)
        assert f"sweep {pythia}: pythia-70m/rte" in region_text(app, "#sweep-heat")
        # Setup changes: the form follows it again, and the heat map still names the sweep it is of
        await ui.press("2")
        await ui.type_into("model", "bert-mini")
        await ui.press("escape", "6")
        assert sweep_page.query_one("#sw-model").value == "bert-mini"
        assert "of pythia-70m/rte" in plain(sweep_page.query_one("#sweep-summary").content)
        assert f"sweep {pythia}: pythia-70m/rte" in region_text(app, "#sweep-heat")
        await ui.press("q")


async def test_start_on_an_opened_unfinished_sweep_resumes_that_sweep(
        twin_session: DeviceSession, results_store: Store) -> None:
    """A sweep that is not the form's (a fixed-length batch 8, length 32 workload, not Setup's; the
    gpu+emc space, 2 warm-up and 7 measured steps, 2 repeats, seed 3), cancelled after 3 points:
    opened from History, `s` resumes that very sweep (the same id) to the points it plans."""
    from engine.run.sweep import SweepSpec, run_sweep
    from tui.messages import SweepDone

    spec = SweepSpec(WorkloadSpec("bert-tiny", "sst2", batch_size=8, seq_len=32, padding="max_length", seed=3),
                     space="gpu+emc", warmup_steps=2, steps=7, repeats=2, fast=True, twin="agx-orin-64gb")
    first = run_sweep(spec, store=results_store, session=twin_session, control=cancel_after(3))
    (stored,) = results_store.list_sweeps()
    assert (first.status, stored.status, len(results_store.completed_points(stored.id))) == ("cancelled", "cancelled", 3)
    assert stored.planned is not None and stored.planned > 3
    app = make_app(twin_session, store=results_store, poll=False)
    async with drive(app) as ui:
        await ui.press("5")  # History: only sweeps, so their table has the focus
        await ui.press("enter")
        page = app.screen
        assert isinstance(page, SweepScreen)
        await ui.footer()
        assert "batch 8, seq 32, fp32, full, padded to 32" in plain(page.query_one("#sw-workload").content)
        values = page.values()  # the sweep's own parameters, not the form's defaults (gpu, 1, 5, 1)
        assert (values["space"], values["warmup"], values["steps"], values["repeats"], values["fast"]) == \
            ("gpu+emc", "2", "7", "2", True)
        summary = plain(page.query_one("#sweep-summary").content)
        assert f"CANCELLED  sweep {stored.id}  3/{stored.planned} points, resumable: s resumes it" in summary
        await ui.press("s")
        done = await ui.wait_for(SweepDone)
        await ui.workers_done()
        assert done.result.sweep_id == stored.id and done.result.resumed == 3 and done.result.status == "finished"
        assert len(results_store.completed_points(stored.id)) == stored.planned
        assert [sw.id for sw in results_store.list_sweeps()] == [stored.id]  # resumed, no new sweep
        summary = plain(page.query_one("#sweep-summary").content)  # the sweep's points, not this invocation's
        assert f"FINISHED  sweep {stored.id}  {stored.planned}/{stored.planned} points" in summary
        await ui.press("q")


async def test_an_abandoned_sweep_shows_its_stored_points_of_those_planned(
        twin_session: DeviceSession, results_store: Store, tmp_path: Path) -> None:
    """A board's sweep killed after 15 of its 60 points (12 settings x 5 repeats) over 12 settings: History
    and the Sweep page say 15/60 and `abandoned, resumable`, as `slm-dvfs sweeps` does (it read 12/12 with
    a full bar, and `15` alone); a sweep stored before its plan was says `3/?` and shows no bar."""
    from engine.results.store import DeviceRecord, SweepPoint, WorkloadRecord
    from textual.widgets import ProgressBar

    board = results_store.ensure_device(DeviceRecord("NVIDIA Jetson AGX Orin Developer Kit",
                                                     "P3701-0005 (AGX Orin 64GB)", serial="1422921012345"))
    workload = results_store.ensure_workload(WorkloadRecord("pythia-70m", "rte", 16, 128, "fp32"))
    common = dict(device=board, workload=workload, space={"space": "gpu", "method": "run", "rails": "all"},
                  warmup_steps=1, source=Source.MEASURED)
    old = results_store.find_or_create_sweep(**common, steps=5, repeats=1)
    with results_store._tx("a sweep from before schema v11: no plan recorded") as conn:
        conn.execute("UPDATE sweeps SET planned = NULL WHERE id = ?", (old.id,))
    killed = results_store.find_or_create_sweep(**common, steps=50, repeats=5, planned=60,
                                                owner_lock=str(tmp_path / "state" / "sessions" / "1-2.lock"))
    clocks = [306 + 102 * i for i in range(12)]
    for sweep_id, points in ((old.id, [(mhz, 0) for mhz in clocks[:3]]),
                             (killed.id, [(mhz, 0) for mhz in clocks] + [(mhz, 1) for mhz in clocks[:3]])):
        for mhz, repeat in points:
            results_store.add_point(SweepPoint(sweep_id, DvfsSetting(gpu_hz=mhz * MHZ, nvpmodel=0).to_json(), repeat,
                                               time_s=5.0, energy_j=50.0 + mhz / 100, samples=800))
    results_store.finish_sweep(old.id, "cancelled")
    twin = results_store.ensure_device(DeviceRecord.from_identity(demo.IDENTITY))  # the widest space and source
    fast = results_store.find_or_create_sweep(device=twin, workload=workload, warmup_steps=1, steps=5, repeats=2,
                                              space={"space": "gpu+emc", "method": "fast", "rails": "all"},
                                              source=Source.TWIN, planned=4)
    for mhz in clocks[:2]:
        results_store.add_point(SweepPoint(fast.id, DvfsSetting(gpu_hz=mhz * MHZ, nvpmodel=0).to_json(), 0,
                                           time_s=5.0, energy_j=50.0, samples=800))
    results_store.finish_sweep(fast.id, "cancelled")
    assert results_store.reap_abandoned_sweeps() == [killed.id]  # its process is gone (its lock is free)
    app = make_app(twin_session, store=results_store, poll=False)
    async with drive(app, size=(80, 24)) as ui:
        await ui.press("5")
        await ui.footer()
        rows = region_text(app, "#sweeps").splitlines()
        assert re.search(r"\s15/60\s+measured abandoned, resumable\s", next(r for r in rows if "15/60" in r))
        assert re.search(rf"│{old.id}\s.*\s3/\?\s+measured cancelled, resumable\s", next(r for r in rows if "3/?" in r))
        assert re.search(r"\s2/4\s+twin\s+cancelled, resumable\s", next(r for r in rows if "2/4" in r))
        await open_from_history(ui, app, killed.id)
        page = app.screen
        assert isinstance(page, SweepScreen)
        await ui.footer()
        summary = plain(page.query_one("#sweep-summary").content)
        assert f"ABANDONED  sweep {killed.id}  15/60 points, resumable" in summary
        assert "s resumes it" not in summary  # a board's sweep: the twin's `s` does not resume it
        bar = page.query_one("#sweep-progress", ProgressBar)
        assert bar.display and (bar.progress, bar.total) == (15, 60)
        await ui.press("5")
        await open_from_history(ui, app, old.id)
        summary = plain(page.query_one("#sweep-summary").content)
        assert f"CANCELLED  sweep {old.id}  3/? points, resumable" in summary and not bar.display
        await ui.press("q")


@SIZES
async def test_the_heat_map_names_the_baseline_and_says_the_saving_in_words(
        twin_session: DeviceSession, results_store: Store, size: tuple[int, int]) -> None:
    ids = demo.fill_store(results_store)
    app = make_app(twin_session, store=results_store, poll=False)
    async with drive(app, size=size) as ui:
        await laid_out(ui, app.open_sweep, ids["sweep"])
        heat = assert_whole(app, "#sweep-heat", "#sweep-summary")
        maxn_row = next(line for line in heat.splitlines() if "MAXN  " in line)
        assert re.search(r"\d\.\d\d\s", maxn_row) and not re.search(r"\d[M★]", maxn_row)  # was "6.90M": mega?
        assert "row MAXN or MAXN_SUPER: the baseline" in re.sub(r"\s*│\s*│?\s*", " ", heat)
        summary = plain(app.screen.query_one("#sweep-summary").content, width=200)
        assert "vs MAXN: 13.0% less energy, 21.4% slower per sample [twin]" in summary
        await ui.press("q")


# --------------------------------------------------------------------------- every figure whole
@SIZES
async def test_the_compare_page_keeps_every_figure_whole_and_in_words(
        twin_session: DeviceSession, results_store: Store, size: tuple[int, int]) -> None:
    ids = demo.fill_store(results_store)
    app = make_app(twin_session, store=results_store, poll=False)
    async with drive(app, size=size) as ui:
        await laid_out(ui, app.open_run, ids["static"])
        text = assert_whole(app, "#compare-title", "#compare-figures", "#compare-rails", "#compare-charts")
        assert "vs MAXN: 14.7% less energy, 22.3% slower [twin]" in text
        assert "14.7% less" in text and "22.3% slower" in text and "30.3% lower" in text
        cpu = next(line for line in text.splitlines() if "CPU_CV" in line)
        assert "16.5% more" in cpu and "-16.5%" not in cpu  # a rail that cost more: no negative "saving"
        await ui.press("q")


@SIZES
async def test_the_run_page_keeps_every_figure_whole_with_its_source(
        twin_session: DeviceSession, results_store: Store, size: tuple[int, int]) -> None:
    from tui.runstate import MIN_SPREAD_STEPS
    from tui.widgets.charts import HistoryGraph

    app = make_app(twin_session, store=results_store)
    async with drive(app, size=size) as ui:
        app.start_experiment(simulated_spec(5_000_000, compare="maxn"), callbacks=[pace])
        await ui.press("3")

        def rails_drawn() -> bool:  # the pane mounts a graph per rail with its first energy window: laid out
            graphs = app.screen.query("#run-rails HistoryGraph").results(HistoryGraph)
            graphs = list(graphs)
            return bool(graphs) and all(g.content_size.width for g in graphs)

        await ui.wait_for(RunProgress, until=lambda: app.run_view.step > MIN_SPREAD_STEPS + 2 and rails_drawn())
        await ui.settle()
        text = assert_whole(app, "#run-rails", "#run-progress", "#run-chart", "#run-temps-box")
        lines = text.splitlines()
        eta = next(line for line in lines if "ETA " in line)
        # a duration in words with its range, never `16:36` (a time of day?)
        assert re.search(r"ETA (\d+ h )?\d+ (min|s)( \d+ s)? ±\d+ (s|min|h) \[predicted\]", eta), eta
        energy = next(line for line in lines if "energy " in line)
        assert re.search(r"energy [\d.]+ m?J \[twin\] → [\d.]+±[\d.]+ k?J \[predicted\]", energy), energy
        assert "[measured]" in text and "total" in text and "°C [twin] now avg pk !60 !!75" in text
        await ui.press("q")


@SIZES
async def test_a_projection_from_too_few_steps_says_it_has_no_range_yet(
        twin_session: DeviceSession, results_store: Store, size: tuple[int, int]) -> None:
    app = make_app(twin_session, store=results_store, poll=False)
    async with drive(app, size=size) as ui:
        app.run_view = demo.run_view(steps_done=2)  # two steps: no spread to give a range by
        await ui.press("3")
        await ui.footer()
        text = assert_whole(app, "#run-progress")
        energy = next(line for line in text.splitlines() if "energy " in line)
        assert "±0" not in energy and "[predicted]" in energy
        assert "±?" in energy or "no range before" in energy, energy
        app.run_view = demo.run_view(steps_done=120)  # the page is bound to it: redrawn
        await ui.settle()
        energy = next(line for line in assert_whole(app, "#run-progress").splitlines() if "energy " in line)
        assert re.search(r"→ [\d.]+±[\d.]+ J \[predicted\]", energy), energy
        await ui.press("q")


async def test_setup_gives_the_memory_estimates_parts_with_their_units(
        twin_session: DeviceSession, results_store: Store) -> None:
    app = make_app(twin_session, store=results_store, poll=False)
    async with drive(app, size=(80, 24)) as ui:
        await ui.press("2")
        memory = plain(app.screen.query_one("#memory").content, width=200)
        # bert-tiny's weights are 17 MB: one decimal of GiB said "weights 0.0"
        assert re.search(r"weights \d+(\.\d+)? MiB, gradients \d+(\.\d+)? MiB", memory), memory
        assert " 0.0," not in memory and "workspace 1.51 GiB" in memory
        await ui.press("q")


async def test_history_keeps_every_runs_figures_and_source_in_view_at_80x24(
        twin_session: DeviceSession, results_store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    from engine.results.store import DeviceRecord, WorkloadRecord
    from tui.screens import history

    monkeypatch.setattr(history, "this_year_text", lambda: "2025")
    demo.fill_store(results_store)
    device = results_store.ensure_device(DeviceRecord.from_identity(demo.IDENTITY))
    long = results_store.ensure_workload(WorkloadRecord("distilbert-base-uncased", "mnli", 32, 128, "fp32", "full"))
    spec = "policy static:gpu=816,cpu=2201.6,emc=3199"
    rid = results_store.start_run(policy="static", source=Source.TWIN, device=device, workload=long, seed=0,
                                  steps=300, rails="all", notes=spec, started_at=demo.STAMP)
    results_store.finish_run(rid, RunTotals(time_s=1234.5, rail_energy_j={"VDD_GPU_SOC": 12345.0}, rails_preset="all", samples=10, steps=300), setting=DvfsSetting(gpu_hz=816 * MHZ, nvpmodel=0), notes=spec)
    results_store.find_or_create_sweep(device=device, workload=long, space={"space": "gpu+emc", "method": "run",
                                                                            "rails": "all"},
                                       warmup_steps=1, steps=5, repeats=1, source=Source.TWIN, label="long")
    app = make_app(twin_session, store=results_store, poll=False)
    async with drive(app, size=(80, 24)) as ui:
        await ui.press("5")
        await ui.footer()
        runs, sweeps = region_text(app, "#runs"), region_text(app, "#sweeps")
        row = next(line for line in runs.splitlines() if "distilbert" in line)
        # the long names give way (said with …), never the figures, their source or the status
        assert "12.3 kJ" in row and "1,234 " in row and "twin finished│" in row  # was 1.23e+03, status cut
        assert "distilbert-base-u…" in row
        assert re.search(r"\s0/\?\s+twin running\s", next(line for line in sweeps.splitlines() if "distilbert" in line))
        await ui.press("q")


# --------------------------------------------------------------------------- help without the code's names
INTERNAL = re.compile(r"register_\w+|\bengine\.\w+|\btui\.\w+|\b[a-z]+_[a-z_]+\(|\bSpec\b|\bplug point\b")


async def test_the_help_screen_uses_no_internal_names_and_says_where_exports_go(
        twin_session: DeviceSession, results_store: Store) -> None:
    app = make_app(twin_session, store=results_store, poll=False)
    async with drive(app, size=(160, 45)) as ui:
        await ui.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        text = "\n".join(plain(s.content, width=200) for s in app.screen.query(".help-part"))
        assert not INTERNAL.findall(text), INTERNAL.findall(text)
        exports = next(line for line in text.splitlines() if "exports (e on History)" in line)
        assert str(Path(app._default_store_path() or "").parent / "exports" / "run-N.csv") in exports \
            or "exports/run-N.csv" in exports
        assert "Ask the selector what it would choose" in text and "time left" in text
        await ui.press("escape", "q")


async def test_historys_export_says_where_it_wrote(twin_session: DeviceSession, results_store: Store) -> None:
    from engine.core import paths

    ids = demo.fill_store(results_store)
    app = make_app(twin_session, store=results_store, poll=False)
    async with drive(app) as ui:
        await ui.press("5")
        for _ in range(3):
            if app.screen.selected_run().id == ids["static"]:
                break
            await ui.press("down")
        await ui.press("e")
        out = paths.data_dir() / "exports" / f"run-{ids['static']}.csv"
        assert out.is_file()
        (note,) = [n for n in app._notifications if n.title == "Exported"]
        assert f"written to {out}" in str(note.message) and str(out.parent) in str(note.message)
        await ui.press("q")


def test_no_cli_help_uses_internal_names() -> None:
    import argparse

    from engine.cli import build_parser

    def helps(parser: argparse.ArgumentParser) -> list[str]:
        out = [parser.format_help()]
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub in action.choices.values():
                    out += helps(sub)
        return out

    texts = helps(build_parser())
    assert len(texts) > 20
    found = {m for text in texts for m in INTERNAL.findall(text)}
    assert not found, found
