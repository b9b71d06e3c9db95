"""The TUI driven by keyboard through Textual's pilot, on the digital twin: setup → run →
compare, quitting mid-run (q and SIGHUP) with the clocks restored, pause/resume/cancel,
a board's confirmation, engine errors in the app, history, sweeps and the palette."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from textual.messages import ExitApp

from engine.workload import resolve as simulate
from engine.device.session import DeviceSession
from traces import workload_of
from engine.results.store import Store
from engine.core.trace import OpCost, StepTrace
from engine.results.format import board_estimate_text, saving_short, saving_text, slowdown_text
from engine.workload.spec import WorkloadSpec
from tui_helpers import TWIN, Ui, drive, make_app, plain
from tui import demo
from tui.messages import EngineFailed, ExperimentDone, RunProgress, SnapshotTaken, SweepDone
from tui.screens.compare import CompareScreen
from tui.screens.modals import ConfirmScreen
from tui.screens.run import RunScreen
from tui.screens.setup import SetupScreen
from tui.screens.sweep import SweepScreen
from tui.widgets.run_panes import ProgressPane

GPU = "sys/class/devfreq/17000000.gpu"
CLOCK_FILES = (f"{GPU}/min_freq", f"{GPU}/max_freq", f"{GPU}/governor",
               "sys/devices/system/cpu/cpufreq/policy0/scaling_min_freq",
               "sys/devices/system/cpu/cpufreq/policy0/scaling_max_freq",
               "sys/devices/system/cpu/cpufreq/policy0/scaling_governor")
REAL_RESOLVE = simulate.resolve_workload
RESOLVED: dict[Any, Any] = {}  # bert-tiny/sst2 as resolved for the other paddings and modes
# bert-tiny/sst2 at its zoo defaults, as engine.workload.resolve.resolve_workload traces it (frozen here so
# the fast tests need not import torch; the slow test resolves and trains it for real).
BERT_TINY = workload_of(
    StepTrace("bert-tiny", 32, 128, "fp32", (
        OpCost("matmul", 9666871296.0, 231568648.0, 42), OpCost("attention", 1879048192.0, 50462784.0, 4),
        OpCost("elementwise", 26243073.0, 275075080.0, 46), OpCost("reduction", 5304133.0, 92716313.0, 30),
        OpCost("embedding", 5037568.0, 28803072.0, 6), OpCost("optimizer", 65792759.0, 280716256.0, 17),
        OpCost("other", 524288.0, 2113536.0, 1)), host_cycles=10195000.0, params=4386178),
    total_params=4386178,
)


@pytest.fixture(autouse=True)
def env(isolated_env: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The shared isolation (conftest), no shipped selector, and bert-tiny/sst2 from the frozen trace."""
    from engine.selector import persistence

    monkeypatch.setattr(persistence, "shipped_selector_dir", lambda: tmp_path / "no-shipped-selector")

    # Modules that bind resolve_workload when first imported must not bind this stand-in: import them now.
    import engine.run.experiment  # noqa: F401
    import engine.run.sweep  # noqa: F401

    def resolve(spec: Any, **budget: Any) -> Any:  # budget: the board's memory (mem_total_bytes)
        if (spec.model, spec.task) == ("bert-tiny", "sst2") and not any((spec.batch_size, spec.seq_len, spec.precision)):
            if spec.padding == "max_length" and spec.mode == "full" and not spec.grad_checkpointing \
                    and spec.loop == BERT_TINY.spec.loop:  # the frozen trace is the lean loop's (no serial work)
                return BERT_TINY
            # Setup's runs pad dynamically: the workload's buckets are traced once per test session
            if spec not in RESOLVED:
                RESOLVED[spec] = REAL_RESOLVE(spec, **budget)
            return RESOLVED[spec]
        return REAL_RESOLVE(spec, **budget)

    monkeypatch.setattr(simulate, "resolve_workload", resolve)


def clock_files(root: Path) -> dict[str, str]:
    return {rel: (root / rel).read_text() for rel in CLOCK_FILES}


def simulated_spec(steps: int, policy: str = "static:gpu=816", compare: str | None = None) -> Any:
    from engine.run.experiment import ExperimentSpec

    return ExperimentSpec(WorkloadSpec("bert-tiny", "sst2"), policy=policy, compare=compare, steps=steps, twin=TWIN,
                          simulate=True, label="test")


# --------------------------------------------------------------------------- setup → run → compare
async def test_setup_run_compare_on_the_twin(twin_session: DeviceSession, results_store: Store) -> None:
    app = make_app(twin_session, store=results_store)
    async with drive(app) as ui:
        await ui.press("2")
        assert isinstance(app.screen, SetupScreen)
        setup = app.screen
        await ui.type_into("amount", "0")
        amount = setup.query_one("#amount")
        assert amount.has_class("-invalid")  # marked where it is typed
        assert "length: the number of steps 0 is out of range" in plain(setup.query_one("#setup-errors").content)
        await ui.press("escape", "s")
        assert isinstance(app.screen, SetupScreen) and app.engine_busy is None  # refused
        await ui.type_into("amount", "40")
        await ui.type_into("policy", "static:gpu=612")
        assert not amount.has_class("-invalid")
        setup.query_one("#simulate").value = True
        started = len(ui.pages)
        await ui.press("escape", "s")
        await ui.wait_for(ExperimentDone)
        await ui.workers_done()
        result = app.last_result
        assert result is not None and not result.cancelled and result.comparison is not None
        assert result.run.policy == "static:gpu=612" and result.run.steps == 40 and result.baseline.steps == 40
        assert result.spec.simulate and result.spec.compare == "maxn"
        assert app.run_view.status == "finished" and app.run_view.step == 40
        assert "none available" in app.selector_line  # said before the run, even without a selector
        # the Run page while it ran, then Compare on its own, with the experiment's figures
        assert ui.pages[started:] == ["run", "compare"]
        assert isinstance(app.screen, CompareScreen)
        view = app.screen.view
        assert view.run.id == result.run.run_id and view.base.id == result.baseline.run_id
        assert view.saving_pct == pytest.approx(result.comparison.saving_pct)
        assert view.slowdown_pct == pytest.approx(result.comparison.slowdown_pct)
        title = plain(app.screen.query_one("#compare-title").content)
        # in the words every client uses (engine.results.format): less or more energy, slower or faster
        c = result.comparison
        assert f"vs MAXN: {saving_text(c.saving_pct, than=None)}, {slowdown_text(c.slowdown_pct, than=None)}" \
            in title and "[twin]" in title
        # the engine's board estimate of the saving, as `run` prints it and --json carries it
        assert c.interval is not None and board_estimate_text(c.saving_pct, c.interval) in title
        assert board_estimate_text(c.saving_pct, c.interval) in "\n".join(app.run_view.log)
        figures = plain(app.screen.query_one("#compare-figures").content)
        assert f"{result.run.energy_j:.2f}" in figures and f"{result.baseline.energy_j:.2f}" in figures
        assert "[twin]" in figures
        energy_row = next(line for line in figures.splitlines() if line.strip().startswith("energy J"))
        assert saving_short(result.comparison.saving_pct) in energy_row
        rails = plain(app.screen.query_one("#compare-rails").content)
        assert "GPU_SOC" in rails  # the short names of the Run and Device pages
        run_chart, base_chart = app.screen.query_one("#chart-run"), app.screen.query_one("#chart-base")
        assert run_chart._y_max == base_chart._y_max == view.peak_w  # identical axes
        await ui.press("q")


# --------------------------------------------------------------------------- quitting mid-run
def pace(event: Any) -> None:
    """Slows a simulated run to a few hundred steps a second, so that a run of millions of steps
    lasts the whole test without its thread crowding out the UI's."""
    if type(event).__name__ == "StepEnd":
        time.sleep(0.002)


async def _start_long_run(ui: Ui, session: DeviceSession) -> None:
    app = ui.app
    control = app.start_experiment(simulated_spec(5_000_000, compare="maxn"), callbacks=[pace])
    assert control is not None
    await ui.wait_for(RunProgress, until=lambda: app.run_view.step > 0)
    assert (session.twin.root / GPU / "max_freq").read_text().strip() == "816000000"  # pinned before step 1
    assert app.pinned_by_us


async def test_quit_mid_run_restores_the_clocks_and_exits_within_a_second(twin_session: DeviceSession,
                                                                            results_store: Store) -> None:
    root = twin_session.twin.root
    before = clock_files(root)
    app = make_app(twin_session, store=results_store)
    async with drive(app) as ui:
        await _start_long_run(ui, twin_session)
        assert clock_files(root) != before
        t0 = time.monotonic()
        await ui.press("q")
        await ui.wait_for(ExitApp)
        assert app.exited_at - t0 < 1.0
    assert app.return_code == 0
    assert clock_files(root) == before
    runs = results_store.list_runs()
    assert [r.status for r in runs] == ["cancelled"]  # the baseline never started
    assert not list((Path(os.environ["SLM_DVFS_STATE_DIR"]) / "journals").glob("*.json"))


async def test_sighup_from_a_closed_ssh_session_cancels_and_restores(twin_session: DeviceSession,
                                                                      results_store: Store) -> None:
    root = twin_session.twin.root
    before = clock_files(root)
    handler = signal.getsignal(signal.SIGHUP)  # SIG_DFL, or SIG_IGN under nohup
    app = make_app(twin_session, store=results_store)
    async with drive(app) as ui:
        await _start_long_run(ui, twin_session)
        assert signal.SIGHUP in app._signals
        os.kill(os.getpid(), signal.SIGHUP)
        await ui.wait_for(ExitApp)  # the hang-up quits the app (the wait fails if it never does)
    assert clock_files(root) == before
    assert signal.getsignal(signal.SIGHUP) == handler  # handed back on exit
    assert "SIGHUP" in results_store.list_runs()[0].notes or results_store.list_runs()[0].status == "cancelled"


# --------------------------------------------------------------------------- pause, resume, cancel
async def test_pause_resume_and_a_confirmed_cancel(twin_session: DeviceSession, results_store: Store) -> None:
    root = twin_session.twin.root
    before = clock_files(root)
    app = make_app(twin_session, store=results_store)
    async with drive(app) as ui:
        await _start_long_run(ui, twin_session)
        await ui.press("3", "space")
        await ui.wait_for(RunProgress, until=lambda: app.run_view.status == "paused")
        step = app.run_view.step
        await asyncio.sleep(0.3)  # not a wait for anything: the window in which nothing may move
        assert app.run_tracker.view().step == step  # nothing moves while paused
        await ui.press("space")
        await ui.wait_for(RunProgress, until=lambda: app.run_view.step > step)
        await ui.press("x")
        assert isinstance(app.screen, ConfirmScreen)
        await ui.press("n")
        assert isinstance(app.screen, RunScreen) and not app.control.cancelled
        await ui.press("x", "y")
        await ui.wait_for(ExperimentDone)
        await ui.workers_done()
        assert app.engine_busy is None
        assert app.run_view.status == "cancelled"
        assert app.last_result.cancelled and app.last_result.baseline is None
        assert clock_files(root) == before
        assert "cancelled from the TUI" in "\n".join(app.run_view.log)
        await ui.press("q")


# --------------------------------------------------------------------------- a real board
async def test_a_board_asks_before_changing_clocks(tmp_path: Path, results_store: Store) -> None:
    from engine.device.jetson import JetsonDevice
    from engine.device.treegen import default_orin_spec, render_tree

    root = tmp_path / "board"
    render_tree(root, default_orin_spec("r36"))
    app = make_app(DeviceSession(JetsonDevice(root)), store=results_store)
    async with drive(app) as ui:
        await ui.wait_for(SnapshotTaken)
        assert not app.is_twin and "BOARD" in plain(app.screen.query_one("IdentityBar").content)
        await ui.press("2")
        assert app.screen.query_one("#simulate").disabled  # simulation is the twin's alone
        await ui.press("s")
        assert isinstance(app.screen, ConfirmScreen)
        assert "Change the board's clocks?" in plain(app.screen.query_one("#confirm-question").content)
        await ui.press("n")
        assert isinstance(app.screen, SetupScreen) and app.engine_busy is None and results_store.list_runs() == []
        await ui.press("6", "s")
        assert isinstance(app.screen, ConfirmScreen)
        await ui.press("escape")
        assert app.engine_busy is None
        await ui.press("q")


# --------------------------------------------------------------------------- errors stay in the app
async def test_engine_errors_are_shown_in_the_app(twin_session: DeviceSession, results_store: Store) -> None:
    from engine.run.experiment import ExperimentSpec

    app = make_app(twin_session, store=results_store)
    async with drive(app) as ui:
        app.start_experiment(ExperimentSpec(WorkloadSpec("bert-tiny", "sst2"), policy="oracle", steps=3, twin=TWIN,
                                            simulate=True))
        failed = await ui.wait_for(EngineFailed)
        await ui.workers_done()
        assert failed.what == "experiment" and app.engine_busy is None
        assert app.run_view.status == "failed"
        assert "the oracle policy has no recorded sweep of this workload" in app.run_view.log[-1]
        notes = [n for n in app._notifications]
        # Told by its type (NoRecordedSweepError), the remedy offered is the app's own page, not a CLI command.
        assert any("sweep this workload on the Sweep page (6)" in n.message for n in notes), notes
        assert any(n.title == "The experiment failed" and n.severity == "error" for n in notes)
        assert not app.pinned_by_us
        await ui.press("q")
    assert app.return_code == 0


# --------------------------------------------------------------------------- history
async def test_history_opens_compares_exports_and_deletes(twin_session: DeviceSession, results_store: Store) -> None:
    store = results_store
    ids = demo.fill_store(store)
    app = make_app(twin_session, store=store)
    async with drive(app, size=(100, 30)) as ui:
        await ui.press("5")
        table = app.screen.query_one("#runs")
        assert table.row_count == 3 and app.screen.query_one("#sweeps").row_count == 1
        await ui.press("down", "enter")  # newest first: lone, static, maxn
        assert isinstance(app.screen, CompareScreen)
        assert app.compare_view.run.id == ids["static"] and app.compare_view.base.id == ids["maxn"]
        await ui.press("5")
        await ui.press("up", "m", "down", "down", "m", "c")  # lone (pythia-70m/rte) against maxn (bert-tiny/sst2)
        view = app.compare_view  # two workloads: refused, both named, no saving
        assert view.run.id == ids["lone"] and view.base is None and view.saving_pct is None
        assert view.baseline_note == f"not compared with run {ids['maxn']}"
        assert any("pythia-70m/rte (" in n and "bert-tiny/sst2 (" in n and "not comparable" in n for n in view.notes)
        await ui.press("5")
        await ui.press("up", "up", "e")  # back on the lone run
        out = Path(os.environ["SLM_DVFS_DATA_DIR"]) / "exports" / f"run-{ids['lone']}.csv"
        text = out.read_text()
        assert text.startswith(f"# slm-dvfs run {ids['lone']}; figures are twin")
        assert "t_s,VDD_GPU_SOC_mw" in text and len(text.splitlines()) > 30
        await ui.press("d")
        assert isinstance(app.screen, ConfirmScreen)
        await ui.press("n")
        assert len(store.list_runs()) == 3
        await ui.press("d", "y")
        assert [r.id for r in store.list_runs()] == [ids["static"], ids["maxn"]]
        assert app.screen.query_one("#runs").row_count == 2
        app.screen.query_one("#sweeps").focus()
        await ui.settle()
        await ui.press("enter")
        assert isinstance(app.screen, SweepScreen)
        heat = plain(app.screen.query_one("#sweep-heat").content)
        assert "GPU 816" in heat and "★" in heat and "[twin]" in heat
        await ui.press("q")


# --------------------------------------------------------------------------- sweeps and the selector
async def test_fast_sweep_fills_the_heat_map_and_training_errors_are_said(twin_session: DeviceSession,
                                                                          results_store: Store) -> None:
    app = make_app(twin_session, store=results_store)
    async with drive(app, size=(100, 40)) as ui:
        await ui.press("6", "t")  # nothing to learn from yet: said, not raised
        failed = await ui.wait_for(EngineFailed)
        await ui.workers_done()
        assert failed.what == "selector training" and app.engine_busy is None
        assert any(n.title == "The selector training failed" and "holds no twin sweep points" in str(n.message)
                   for n in app._notifications)
        await ui.type_into("sw-steps", "2")
        await ui.press("escape", "s")
        await ui.wait_for(SweepDone)
        await ui.workers_done()
        assert app.engine_busy is None
        view = app.sweep_view
        assert view.status == "finished" and view.done == view.total > 10
        (sweep,) = results_store.list_sweeps()
        assert view.sweep_id == sweep.id and len(results_store.sweep_points(sweep.id)) == view.total
        heat = plain(app.screen.query_one("#sweep-heat").content)
        assert "MAXN" in heat and "★" in heat and "GPU 1300.5" in heat
        assert "vs MAXN: " in plain(app.screen.query_one("#sweep-summary").content)
        # the sweep's optimum against MAXN with its board estimate: the engine's figures, as `sweep` prints them
        assert any("as an estimate of a board's: " in line for line in view.log)
        await ui.press("q")


# --------------------------------------------------------------------------- the command palette
async def test_command_palette_offers_the_actions(twin_session: DeviceSession, results_store: Store) -> None:
    from tui.commands import COMMANDS

    app = make_app(twin_session, store=results_store)
    async with drive(app) as ui:
        for _title, _help, action, _arg in COMMANDS:
            assert callable(getattr(app, f"action_{action}"))
        await ui.press("ctrl+p")
        await ui.press(*"Page: History")
        await ui.workers_done()  # the palette's search has listed its hits
        await ui.press("enter")
        assert app.screen.PAGE == "history"
        await ui.press("q")


# --------------------------------------------------------------------------- real training
@pytest.mark.slow
async def test_real_fine_tuning_of_bert_tiny_against_maxn(twin_session: DeviceSession, results_store: Store,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from engine.run.experiment import ExperimentSpec

    monkeypatch.setattr(simulate, "resolve_workload", REAL_RESOLVE)
    app = make_app(twin_session, store=results_store, refresh_s=0.1)
    async with drive(app) as ui:
        app.start_experiment(ExperimentSpec(WorkloadSpec("bert-tiny", "sst2", batch_size=4, seq_len=16),
                                            policy="static:gpu=816", compare="maxn", steps=6, train_samples=16,
                                            eval_samples=8, twin=TWIN))
        await ui.wait_for(ExperimentDone, timeout=300)
        await ui.workers_done()
        result = app.last_result
        assert result is not None and result.comparison is not None and result.run.metric == "accuracy"
        assert app.run_view.loss is not None and "accuracy" in app.run_view.metrics
        assert isinstance(app.screen, CompareScreen)
        figures = {f.name: f for f in app.screen.view.figures}
        assert figures["accuracy"].run == pytest.approx(result.run.metric_value)
        # random weights on generated data (offline): the metric is marked, on Compare and on the Run page
        assert figures["accuracy"].meaningful is False and figures["accuracy"].source_text == "not meaningful"
        assert app.run_view.metrics_provenance.meaningful is False
        await ui.press("3")
        progress = plain(app.screen.query_one(ProgressPane).content)
        (eval_line,) = [line for line in progress.splitlines() if line.startswith("eval ")]
        # at 80 columns the reasons are dropped from the Run page (the Compare page and the log keep them)
        assert eval_line.endswith("not meaningful") and "[measured" not in eval_line
        await ui.press("q")
