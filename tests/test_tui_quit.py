"""Quitting mid-run, in the app (the pilot): by `q` or ctrl+c, and when the terminal goes away
(the driver's TerminalLost), the run is cancelled at the next step, its clocks restored, and the
page says so before the app exits, as the terminal is told after (SlmDvfsApp.farewell; the real
terminal is tests/test_tui_hangup.py). And the driver's output to a terminal that hung up drops
what it cannot write instead of leaving the app blocked on it."""

from __future__ import annotations

import os
import time
import tty
from pathlib import Path

import pytest
from textual.messages import ExitApp

from engine.device.session import DeviceSession
from engine.results.store import Store
from test_tui_flow import _start_long_run, clock_files, env, pace, simulated_spec  # noqa: F401 - env: that module's autouse isolation
from tui.messages import EngineFailed, ExperimentDone, RunProgress
from tui.terminal import TerminalLost, TerminalOutput
from tui_helpers import drive, make_app


def notified(app, title: str) -> list[str]:  # type: ignore[no-untyped-def]
    return [n.message for n in app._notifications if n.title == title]


@pytest.mark.parametrize("key", ["q", "ctrl+c"])
async def test_quitting_mid_run_says_how_the_run_ended_and_that_the_clocks_are_restored(
        twin_session: DeviceSession, results_store: Store, key: str) -> None:
    root = twin_session.twin.root
    before = clock_files(root)
    app = make_app(twin_session, store=results_store)
    async with drive(app) as ui:
        await _start_long_run(ui, twin_session)
        await ui.press(key)
        waiting = notified(app, "Quitting")  # said at once, while the run goes on to its step boundary
        assert waiting and "cancelling the experiment at the next step boundary" in waiting[0]
        assert "the clocks are restored before slm-dvfs exits" in waiting[0]
        await ui.wait_for(ExperimentDone)
        await ui.wait_for(ExitApp)
        run = results_store.list_runs()[0]
        ended = (f"experiment cancelled at step {run.steps} of 5000000: run {run.id} is stored as cancelled; "
                 "the clocks are restored")
        assert notified(app, "Quitting")[-1] == ended  # on the page before it exits
        assert app.run_view.status == "cancelled" and app.run_view.log[-1] == ended  # the Run page's log
    assert clock_files(root) == before
    assert run.status == "cancelled"
    assert app.farewell() == [f"slm-dvfs: {ended}"]  # what the terminal is told after the app


async def test_quitting_in_the_maxn_run_says_that_run_was_cancelled_and_the_policys_had_finished(
        twin_session: DeviceSession, results_store: Store) -> None:
    root = twin_session.twin.root
    before = clock_files(root)
    app = make_app(twin_session, store=results_store)
    async with drive(app) as ui:
        phase: list[str] = []

        def slow_baseline(event: object) -> None:  # the policy's run quick, the MAXN run long enough to quit in
            if type(event).__name__ == "ExperimentPhase":
                phase.append(event.role)  # type: ignore[attr-defined]
            pace(event)
            if phase[-1:] == ["baseline"] and type(event).__name__ == "StepEnd":
                time.sleep(0.02)

        assert app.start_experiment(simulated_spec(40, compare="maxn"), callbacks=[slow_baseline]) is not None
        await ui.wait_for(RunProgress, until=lambda: app.run_view.role == "baseline" and app.run_view.step > 0)
        await ui.press("q")
        await ui.wait_for(ExitApp)
    assert clock_files(root) == before
    base, policy = results_store.list_runs()  # newest first
    assert (policy.status, base.status) == ("finished", "cancelled")
    assert app.farewell() == [f"slm-dvfs: experiment cancelled in its MAXN (mode 0) run, at step {base.steps} of 40: "
                              f"run {base.id} is stored as cancelled (the policy's run {policy.id} had finished); "
                              "the clocks are restored"]


async def test_quitting_when_the_run_ends_in_an_error_does_not_claim_the_clocks_restored(
        twin_session: DeviceSession, results_store: Store) -> None:
    app = make_app(twin_session, store=results_store)
    async with drive(app) as ui:
        def fails_when_cancelled(event: object) -> None:
            pace(event)
            if type(event).__name__ == "RunCancelled":
                raise RuntimeError("a callback broke")

        assert app.start_experiment(simulated_spec(5_000_000), callbacks=[fails_when_cancelled]) is not None
        await ui.wait_for(RunProgress, until=lambda: app.run_view.step > 0)
        await ui.press("q")
        await ui.wait_for(EngineFailed)
        await ui.wait_for(ExitApp)
    assert app.farewell() == ["slm-dvfs: experiment failed: RuntimeError: a callback broke; if its clocks were not "
                              "restored, `slm-dvfs restore` puts them back from its journal"]


async def test_quitting_idle_exits_at_once_and_says_nothing_after(twin_session: DeviceSession,
                                                                  results_store: Store) -> None:
    app = make_app(twin_session, store=results_store)
    async with drive(app) as ui:
        await ui.press("q")
        assert ui.log.exiting.is_set()  # no run to wait for
    assert app.farewell() == []


async def test_a_terminal_gone_mid_run_cancels_the_run_restores_the_clocks_and_exits(
        twin_session: DeviceSession, results_store: Store) -> None:
    root = twin_session.twin.root
    before = clock_files(root)
    app = make_app(twin_session, store=results_store)
    async with drive(app) as ui:
        await _start_long_run(ui, twin_session)
        app.post_message(TerminalLost("the terminal's input ended (hung up)"))  # as the driver reports it
        await ui.wait_for(ExitApp)
    assert clock_files(root) == before
    [run] = results_store.list_runs()
    assert run.status == "cancelled"
    assert app.terminal_lost == "the terminal's input ended (hung up)"
    assert not list((Path(os.environ["SLM_DVFS_STATE_DIR"]) / "journals").glob("*.json"))


def test_output_to_a_terminal_that_hung_up_is_dropped_not_blocked_on() -> None:
    master, slave = os.openpty()
    tty.setraw(slave)
    lost: list[str] = []
    out = TerminalOutput(os.fdopen(slave, "w", encoding="utf-8"), lost.append)
    out.write("drawn\n")
    out.flush()
    assert os.read(master, 100) == b"drawn\n"
    os.close(master)  # the terminal hangs up
    for _ in range(3):
        out.write("x" * 4096)  # the writer thread's writes: none raises
        out.flush()
    assert out.gone and len(lost) == 1 and "refused output" in lost[0]
    assert not out.isatty()
