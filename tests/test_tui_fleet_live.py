"""The Fleet page (7) and a fleet sweep from the Sweep page (6) over a real local Ray fleet of two
twins (engine.run.fleet.connect(twins=2), one per module): the boards appear with their live power,
a fast sweep's points arrive and are stored once, and quitting mid-sweep cancels it and leaves
every board free. Ray's token auth is off for this local instance (nothing is written under ~/.ray)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from engine.core.provenance import Source
from engine.results.store import Store
from engine.run.fleet import connect
from engine.workload.spec import WorkloadSpec
from tui.messages import FleetPolled, FleetSweepDone, SweepProgress
from tui.screens.fleet import FleetScreen
from tui_helpers import drive, make_app, screen_text

from conftest import fleet_isolation

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.slow  # a Ray instance and two twin workers start once for the module (~20 s)

GPU_SETTINGS = 12  # the AGX Orin 64GB's GPU space: its 11 GPU steps and MAXN


@pytest.fixture(scope="module")
def twin_fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    base = tmp_path_factory.mktemp("tui-fleet")
    with fleet_isolation(base):
        from engine.workload.resolve import resolve_workload

        resolve_workload(WorkloadSpec("bert-tiny", "sst2"))  # traced once, here
        with connect(twins=2, folder=base / "twins") as fleet:
            yield fleet


async def test_fleet_page_and_a_fast_fleet_sweep_from_the_sweep_page(twin_fleet: Any, twin_session: Any,
                                                                     results_store: Store) -> None:
    app = make_app(twin_session, store=results_store, poll=False, handle_signals=False, fleet=twin_fleet,
                   fleet_twins=2)
    async with drive(app, size=(120, 30)) as ui:
        await ui.press("7")
        assert isinstance(app.screen, FleetScreen)
        await ui.wait_for(FleetPolled, until=lambda: len(app.fleet_tracker.view().boards) == 2)
        view = app.fleet_tracker.view()
        assert [b.name for b in view.boards] == ["twin-0", "twin-1"]
        assert all(b.state == "free" and b.power_w and b.power_w > 0 and b.hottest for b in view.boards)
        assert view.source is Source.TWIN and view.total_w == pytest.approx(sum(b.power_w for b in view.boards))
        header = "fleet local twins (2) · 2 boards · 0 busy"
        drawn = (header, "AGX Orin 64GB", "[twin]", "total W ")  # "total W ": the fleet's power over the last polls

        def page_drawn() -> bool:  # one read of the screen: a redraw between two (the next poll's) may be mid-layout
            text = screen_text(app)
            return all(part in text for part in drawn)

        await ui.until(page_drawn, "the page drawn with the polled boards")
        await ui.press("6")
        await ui.type_into("sw-model", "bert-tiny")
        await ui.type_into("sw-steps", "2")
        await ui.press("escape", "f")  # twins only: no question asked; fast stays on (twins)
        assert app.engine_busy == "fleet sweep"
        await ui.wait_for(FleetSweepDone)
        sweep_view = app.sweep_view
        assert (sweep_view.status, sweep_view.done, sweep_view.total) == ("finished", GPU_SETTINGS, GPU_SETTINGS)
        assert any("started: bert-tiny/sst2" in line for line in sweep_view.log)
        assert "fleet sweep finished" in sweep_view.log[-1]
        sweeps = results_store.list_sweeps()
        assert len(sweeps) == 1 and sweeps[0].status == "finished" and sweeps[0].source is Source.TWIN
        points = [(repr(p.setting), p.repeat) for p in results_store.sweep_points(sweeps[0].id)]
        assert len(points) == len(set(points)) == GPU_SETTINGS  # every point stored once
        log = app.fleet_tracker.view().log
        assert sum(" point: " in line for line in log) == GPU_SETTINGS
        # the events' "running" cleared, and the boards' own status once polled after the sweep (a poll taken
        # during its last share still says what each board ran then); the boards are polled while page 7 is shown
        await ui.press("7")
        await ui.wait_for(FleetPolled, until=lambda: all(b.running == "" for b in app.fleet_tracker.view().boards))
        await ui.press("q")


async def test_quitting_mid_fleet_sweep_cancels_it_and_frees_the_boards(twin_fleet: Any, twin_session: Any,
                                                                        results_store: Store) -> None:
    app = make_app(twin_session, store=results_store, poll=False, handle_signals=False, fleet=twin_fleet,
                   fleet_twins=2)
    async with drive(app, size=(120, 30)) as ui:
        await ui.press("6")
        await ui.type_into("sw-model", "bert-tiny")
        app.screen.query_one("#sw-fast").value = False  # trains each point: seconds a point, time to quit
        await ui.press("escape", "f")
        await ui.wait_for(SweepProgress, until=lambda: app.sweep_view is not None and app.sweep_view.done >= 1)
        await ui.press("q")
        await ui.log.exiting.wait()
    assert app.exited_at is not None and app.engine_busy is None  # the worker returned before the exit
    assert app.sweep_view.status == "cancelled"
    assert results_store.list_sweeps()[0].status != "finished"  # resumable: the rest is measured next time
    assert all(not b.busy and b.running == "" for b in twin_fleet.boards())  # every board restored and free
