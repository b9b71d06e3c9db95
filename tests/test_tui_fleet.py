"""The Fleet page (7) without a cluster: its view model over fixed BoardInfo values and FleetEvents,
the page unconnected and connected (fed fixed polls), the Sweep page's fleet key, the launch options.
The same pages over a real local fleet of twins: tests/test_tui_fleet_live.py (slow)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from engine.core.errors import ConfigError
from engine.core.provenance import Source
from engine.run.fleet.model import BoardInfo, FleetEvent
from tui import demo
from tui.actions.fleet import FleetCancel, fleet_result_line, split_models
from tui.fleet_model import (
    HISTORY,
    HOW_TO_CONNECT,
    FleetSweepTracker,
    FleetTracker,
    fleet_where,
    hottest,
    parse_target,
    short_module,
    sparkline,
)
from tui.screens.fleet import FleetScreen, boards_table, temp_text
from tui_helpers import drive, make_app, plain, screen_text


def board(serial: str, **kw: Any) -> BoardInfo:
    base = dict(name=f"board-{serial}", serial=serial, module="P3701-0000 (AGX Orin 64GB)", l4t="36.3.0",
                profile="agx-orin-64gb", is_twin=True, temps_c={"gpu-thermal": 50.0, "tj-thermal": 61.0},
                power_w=20.0, busy=False, running="")
    base.update(kw)
    return BoardInfo(**base)


def event(kind: str, serial: str = "twin-0", text: str = "", **kw: Any) -> FleetEvent:
    return FleetEvent(kind, serial, kw.pop("sweep_id", 1), text, **kw)


# --------------------------------------------------------------------------- the view model
def test_rows_from_polls_keep_power_history_and_the_total() -> None:
    tracker = FleetTracker()
    tracker.connected("local twins (2)")
    for w in (10.0, 20.0, 30.0):
        tracker.poll((board("twin-0", power_w=w), board("twin-1", power_w=w / 2, busy=True, running="x/y 1/4")))
    view = tracker.view()
    assert [b.serial for b in view.boards] == ["twin-0", "twin-1"]
    first, second = view.boards
    assert first.power_trace == (10.0, 20.0, 30.0) and first.power_w == 30.0
    assert first.module == "AGX Orin 64GB" and first.l4t == "36.3.0" and first.source is Source.TWIN
    assert first.hottest == ("tj-thermal", 61.0)
    assert (first.state, first.running) == ("free", "")
    assert (second.state, second.running) == ("busy", "x/y 1/4")
    assert view.total_w == pytest.approx(45.0) and view.total_trace == pytest.approx((15.0, 30.0, 45.0))
    assert view.source is Source.TWIN and view.busy == 1
    assert view.summary() == "fleet local twins (2) · 2 boards · 1 busy · total 45.0 W"


def test_history_is_bounded() -> None:
    tracker = FleetTracker()
    for i in range(HISTORY + 30):
        tracker.poll((board("twin-0", power_w=float(i)),))
    trace = tracker.view().boards[0].power_trace
    assert len(trace) == HISTORY and trace[-1] == HISTORY + 29


def test_a_board_missing_from_a_poll_stays_listed_as_gone() -> None:
    tracker = FleetTracker()
    tracker.connected("head:6379")
    tracker.poll((board("twin-0"), board("twin-1", busy=True, running="bert-tiny/sst2 2/12")))
    tracker.poll((board("twin-0"),))
    gone = tracker.view().boards[1]
    assert (gone.serial, gone.state, gone.running, gone.power_w, gone.hottest) == ("twin-1", "gone", "", None, None)
    assert "1 gone" in tracker.view().summary()
    tracker.poll((board("twin-0"), board("twin-1")))  # it joined again
    assert tracker.view().boards[1].state == "free"


def test_events_say_what_a_board_runs_until_it_finishes() -> None:
    tracker = FleetTracker()
    tracker.poll((board("twin-0"), board("twin-1")))
    assert tracker.feed(event("started", text="bert-tiny/sst2 on twin-0: 12 of 12 points to measure (sweep s1)"))
    row = tracker.view().boards[0]  # urgent: drawn soon
    assert (row.state, row.running) == ("busy", "bert-tiny/sst2")
    assert not tracker.feed(event("point", text="GPU 816 (repeat 1)", done=3, total=12))  # points are coalesced
    assert tracker.view().boards[0].running == "bert-tiny/sst2 3/12"
    tracker.feed(event("finished", text="bert-tiny/sst2 12/12"))
    assert (tracker.view().boards[0].state, tracker.view().boards[0].running) == ("free", "")
    tracker.feed(event("board_lost", serial="twin-1", text="the actor died"))
    assert tracker.view().boards[1].state == "gone"
    log = tracker.view().log
    assert log[0].startswith("twin-0 started: bert-tiny/sst2 on twin-0:") and log[-1].startswith("twin-1 board_lost")


def test_connecting_and_failing_say_how_to_connect() -> None:
    tracker = FleetTracker()
    assert tracker.view().status == "unconnected" and tracker.view().note == HOW_TO_CONNECT
    tracker.connecting("local twins (2)")
    assert tracker.view().summary() == "connecting to local twins (2)…"
    tracker.failed("head:6379", "cannot reach the Ray cluster at head:6379")
    view = tracker.view()
    assert view.status == "failed" and "cannot reach" in view.note and HOW_TO_CONNECT in view.note


def test_fleet_sweep_tracker_counts_points_per_sweep() -> None:
    fleet = FleetTracker()
    fleet.poll((board("twin-0"), board("twin-1", is_twin=False)))
    sweep = FleetSweepTracker(fleet, plans=2)
    sweep.feed(event("started", text="a/b", sweep_id=1, total=3))
    sweep.feed(event("started", serial="twin-1", text="c/d", sweep_id=2, total=2))
    for done in (1, 2):
        sweep.feed(event("point", text=f"GPU 816 (repeat {done})", sweep_id=1, done=done, total=3, energy_j=1.5,
                         time_s=0.25))
    sweep.feed(event("point", serial="twin-1", text="MAXN (repeat 1)", sweep_id=2, done=1, total=2, energy_j=2.0))
    view = sweep.view()
    assert (view.done, view.total, view.fleet, view.heat) == (3, 5, True, None)
    assert view.last == "twin-1 point: MAXN (repeat 1): 2 J [measured]"  # the board's own source
    assert [line.split(":")[0] for line in view.log] == ["twin-0 started", "twin-1 started"]
    assert fleet.view().boards[1].running == "c/d 1/2"  # the Fleet page's column follows
    sweep.finish("finished", "done")
    assert sweep.view().status == "finished" and sweep.view().log[-1] == "done"


def test_small_helpers() -> None:
    assert short_module("P3767-0000 (Orin NX 16GB)") == "Orin NX 16GB" and short_module("custom") == "custom"
    assert hottest({"a": 1.0, "b": 3.0}) == ("b", 3.0) and hottest({}) is None
    assert sparkline([0.0, 4.0, 8.0], 3) == "▁▅█" and sparkline([1.0, 2.0], 1) == "█" and sparkline([], 4) == ""
    assert sparkline([0.0, 0.0], 2) == "▁▁"
    assert fleet_where(None, 3) == "local twins (3)" and fleet_where("head:6379", None) == "head:6379"
    assert parse_target("twins:2") == (None, 2, "agx-orin-64gb")
    assert parse_target("twins:2:agx-orin-32gb") == (None, 2, "agx-orin-32gb")
    assert parse_target("3") == (None, 3, "agx-orin-64gb")
    assert parse_target("10.0.0.5:6379") == ("10.0.0.5:6379", None, None)
    assert parse_target("  ") == (None, None, None)
    with pytest.raises(ConfigError, match="twins:0: need a number of twins of 1 or more"):
        parse_target("twins:0")
    assert split_models(" bert-tiny, pythia-70m ,") == ["bert-tiny", "pythia-70m"]
    control = FleetCancel()
    control.cancel("quit")
    assert control.event.is_set() and control.reason == "quit"
    assert plain(temp_text(("tj-thermal", 77.0))).strip() == "tj 77!!"
    assert plain(temp_text(("gpu-thermal", 61.0))).strip() == "gpu 61!"


def test_result_line() -> None:
    from engine.run.fleet.model import FleetSweepResult, SweepOutcome

    result = FleetSweepResult((SweepOutcome(4, "bert-tiny", "sst2", "finished", 12, 12, ("twin-0",), retries=1),),
                              {"twin-0": 12}, 3.2, "finished")
    assert fleet_result_line(result) == "fleet sweep finished in 3 s: sweep 4 bert-tiny/sst2 finished 12/12 (1 retried)"


def test_table_of_a_mixed_fleet_says_each_source() -> None:
    tracker = FleetTracker()
    tracker.connected("head:6379")
    tracker.poll(demo.fleet_boards())
    narrow = plain(boards_table(tracker.view(), wide=False), width=76)
    assert "src" in narrow and "meas" in narrow and "twin" in narrow and "serial" not in narrow
    boards = demo.fleet_boards()
    twin_w = sum(b.power_w for b in boards if b.is_twin)
    board_w = sum(b.power_w for b in boards if not b.is_twin)
    summary = tracker.view().summary()  # twin and measured watts are not added together
    assert summary.endswith(f"total {twin_w:.1f} W [twin] + {board_w:.1f} W [measured]"), summary
    wide = plain(boards_table(tracker.view(), wide=True), width=156)
    assert "1423021034567" in wide and "power (last polls)" in wide


# --------------------------------------------------------------------------- the pages
async def test_unconnected_fleet_page_says_how_to_connect_and_refuses_a_bad_target(twin_session: Any,
                                                                                     results_store: Any) -> None:
    app = make_app(twin_session, store=results_store, poll=False, handle_signals=False)
    async with drive(app) as ui:
        await ui.press("7")
        assert isinstance(app.screen, FleetScreen)
        text = screen_text(app)
        assert "not connected" in text and "--fleet ADDRESS" in text and "--fleet-twins N" in text
        assert "c Connect" in await ui.footer() and "1234567 pages" in await ui.footer()
        await ui.type_into("fleet-target", "twins:0")
        await ui.press("enter")
        assert app.fleet is None and app.fleet_tracker.status == "unconnected"  # refused, said
        await ui.press("escape", "6")
        assert "f Fleet" not in await ui.footer()  # the fleet key shows only while connected
        await ui.press("f")
        assert app.engine_busy is None
        await ui.press("q")


async def test_a_failed_connect_is_said_on_the_page(twin_session: Any, results_store: Any,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    import engine.run.fleet as fleet_pkg
    from tui.messages import FleetConnectFailed

    def refuse(address: str | None = None, **kw: Any) -> Any:
        raise ConfigError(f"cannot reach the Ray cluster at {address}", "start the head with `ray start --head`")

    monkeypatch.setattr(fleet_pkg, "connect", refuse)
    app = make_app(twin_session, store=results_store, poll=False, handle_signals=False, fleet_address="nohost:1")
    async with drive(app) as ui:
        await ui.wait_for(FleetConnectFailed)
        await ui.press("7")
        text = plain(app.screen.query_one("#fleet-summary").content)
        assert "cannot reach the Ray cluster at nohost:1" in text and "ray start --head" in text
        assert app.fleet is None and app.fleet_tracker.status == "failed"
        await ui.press("q")


class FixedFleet:
    """A connected fleet without Ray: fixed boards, and a sweep that replays events (the live module runs Ray)."""

    def __init__(self, boards: tuple[Any, ...]) -> None:
        self._boards = boards
        self.closed = False

    def boards(self) -> tuple[Any, ...]:
        return self._boards

    def sweep(self, plans: Any, *, store: Any, on_event: Any = None, cancel: Any = None) -> Any:
        from engine.run.fleet.model import FleetSweepResult, SweepOutcome

        self.plans = tuple(plans)
        outcomes = []
        for i, plan in enumerate(self.plans):
            serial = self._boards[i % len(self._boards)].serial
            on_event(event("started", serial, f"{plan.workload.model}/{plan.workload.task}", sweep_id=i + 1, total=2))
            for done in (1, 2):
                on_event(event("point", serial, f"GPU {done}", sweep_id=i + 1, done=done, total=2, energy_j=1.0))
            on_event(event("finished", serial, f"{plan.workload.model}/{plan.workload.task} 2/2", sweep_id=i + 1))
            outcomes.append(SweepOutcome(i + 1, plan.workload.model, plan.workload.task, "finished", 2, 2, (serial,)))
        return FleetSweepResult(tuple(outcomes), {}, 0.5, "finished")

    def close(self) -> None:
        self.closed = True


async def test_connected_page_and_a_fleet_sweep_of_two_models(twin_session: Any, results_store: Any) -> None:
    from tui.messages import FleetPolled, FleetSweepDone
    from tui.screens.modals import ConfirmScreen

    fleet = FixedFleet(tuple(dataclasses.replace(b, busy=False, running="") for b in demo.fleet_boards()))
    app = make_app(twin_session, store=results_store, poll=False, handle_signals=False, fleet=fleet, fleet_twins=3)
    async with drive(app, size=(100, 30)) as ui:
        await ui.press("7")
        await ui.wait_for(FleetPolled)
        text = screen_text(app)
        assert "fleet local twins (3) · 3 boards · 0 busy" in text and "twin-0" in text and "Orin NX 16GB" in text
        assert "Connect" not in await ui.footer()
        await ui.press("6")
        assert "f Fleet" in await ui.footer()
        await ui.type_into("sw-model", "bert-tiny, pythia-70m")
        await ui.press("escape", "s")  # a list of models sweeps on the fleet only
        assert app.engine_busy is None
        await ui.press("f")
        assert isinstance(app.screen, ConfirmScreen)  # one of the boards is not a twin: asked first
        await ui.press("y")
        await ui.wait_for(FleetSweepDone)
        assert [(p.workload.model, p.workload.task, p.fast) for p in fleet.plans] == [("bert-tiny", "sst2", False),
                                                                     ("pythia-70m", "sst2", False)]
        view = app.sweep_view
        assert (view.status, view.done, view.total, view.fleet) == ("finished", 4, 4, True)
        assert "sweep 1 bert-tiny/sst2 finished 2/2; sweep 2 pythia-70m/sst2 finished 2/2" in view.log[-1]
        assert "fleet sweep: one sweep per model" in screen_text(app)
        assert app.engine_busy is None and app.control is None
        await ui.press("7")
        log = app.fleet_tracker.view().log
        assert "twin-0 started: bert-tiny/sst2" in log and "twin-1 finished: pythia-70m/sst2 2/2" in log
        assert all(b.state == "free" for b in app.fleet_tracker.view().boards)
        await ui.press("q")
    assert not fleet.closed  # a fleet handed to the app is its caller's to close


async def test_the_launch_target_is_connected_in_a_worker_and_closed_after(twin_session: Any, results_store: Any,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    import engine.run.fleet as fleet_pkg
    from tui.messages import FleetConnected, FleetPolled

    fleet = FixedFleet(demo.fleet_boards()[:2])
    asked: list[tuple[Any, ...]] = []

    def fake_connect(address: str | None = None, *, twins: int | None = None, profile: str = "", thermal: bool = False) -> Any:
        asked.append((address, twins, profile))
        return fleet

    monkeypatch.setattr(fleet_pkg, "connect", fake_connect)
    app = make_app(twin_session, store=results_store, poll=False, handle_signals=False, fleet_twins=2,
                   fleet_profile="agx-orin-32gb")
    async with drive(app, size=(100, 30)) as ui:
        await ui.wait_for(FleetConnected)
        await ui.press("7")
        await ui.wait_for(FleetPolled)
        assert asked == [(None, 2, "agx-orin-32gb")] and app.fleet is fleet
        assert "fleet local twins (2) · 2 boards" in screen_text(app)
        await ui.press("c")  # connected: nothing more to connect to
        assert len(asked) == 1
        await ui.press("q")
    assert not fleet.closed
    app.close_fleet()  # what the launch does once the app has exited
    assert fleet.closed and app.fleet is None


async def test_d_disconnects_closing_the_fleet_the_app_connected_and_only_letting_go_of_one_handed_to_it(
        twin_session: Any, results_store: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import engine.run.fleet as fleet_pkg
    from tui.messages import FleetClosed, FleetConnected, FleetPolled

    own = FixedFleet(demo.fleet_boards()[:2])
    monkeypatch.setattr(fleet_pkg, "connect", lambda *a, **kw: own)
    app = make_app(twin_session, store=results_store, poll=False, handle_signals=False, fleet_twins=2)
    async with drive(app, size=(100, 30)) as ui:
        await ui.wait_for(FleetConnected)
        await ui.press("7")
        await ui.wait_for(FleetPolled)
        await ui.until(lambda: "d Disconnect" in screen_text(app).splitlines()[-1], "the footer offers d Disconnect")
        await ui.press("d")
        await ui.wait_for(FleetClosed)
        assert own.closed and app.fleet is None and app.fleet_tracker.view().status == "unconnected"
        await ui.until(lambda: "c Connect" in screen_text(app).splitlines()[-1], "the footer offers c Connect again")
        assert "Disconnect" not in await ui.footer()
        await ui.press("q")

    handed = FixedFleet(demo.fleet_boards()[:2])
    app = make_app(twin_session, store=results_store, poll=False, handle_signals=False, fleet=handed)
    async with drive(app, size=(100, 30)) as ui:
        await ui.press("7")
        await ui.wait_for(FleetPolled)
        await ui.press("d")
        assert app.fleet is None and not handed.closed  # its caller closes it
        await ui.press("q")
    app.close_fleet()
    assert not handed.closed


async def test_fleet_sweep_on_real_boards_asks_first(twin_session: Any, results_store: Any) -> None:
    from tui.messages import FleetPolled
    from tui.screens.modals import ConfirmScreen

    fleet = FixedFleet(demo.fleet_boards())
    app = make_app(twin_session, store=results_store, poll=False, handle_signals=False, fleet=fleet)
    async with drive(app, size=(100, 30)) as ui:
        await ui.wait_for(FleetPolled)
        await ui.press("6", "f")
        assert isinstance(app.screen, ConfirmScreen) and app.engine_busy is None
        await ui.press("escape")
        assert app.engine_busy is None
        await ui.press("q")


# --------------------------------------------------------------------------- the launch options
def test_launch_options() -> None:
    from engine.cli import _tui_only, build_parser
    from engine.cli.tui_launch import fleet_twins

    args = build_parser(commands=False).parse_args(["--fleet-twins", "2:agx-orin-32gb"])
    assert fleet_twins(args.fleet_twins) == (2, "agx-orin-32gb") and args.fleet is None
    assert fleet_twins("3") == (3, "agx-orin-64gb") and fleet_twins(None) == (None, None)
    with pytest.raises(ConfigError):
        fleet_twins("x")
    assert build_parser(commands=False).parse_args(["--fleet", "head:6379"]).fleet == "head:6379"
    assert _tui_only(["-v", "--fleet", "head:6379"]) and _tui_only(["--fleet-twins=2"]) and _tui_only([])
    assert not _tui_only(["runs"]) and not _tui_only(["--fleet"])
