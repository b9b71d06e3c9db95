"""Snapshot tests of the live pages (Device, Run) at 80x24 and 160x45, and without colour,
fed fixed data (tui.demo): a minute of readings so the graphs have shape.

The SVGs live in tests/snapshots/test_tui_live_snapshots/. After a deliberate change, look at
them, then rewrite them with `pytest tests/test_tui_live_snapshots.py --snapshot-update`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import pytest_textual_snapshot

from engine.device.session import DeviceSession
from engine.results.store import Store
from tui import demo
from tui.app import SlmDvfsApp
from tui.messages import SnapshotTaken
from tui_helpers import make_app

SNAPSHOT_DIR = Path(__file__).parent / "snapshots"
READINGS = 120  # a minute at the poll's 2 Hz


def _dirname(cls: Any, *, test_location: Any) -> str:
    return str(SNAPSHOT_DIR / test_location.basename)


pytest_textual_snapshot.SVGImageExtension.dirname = classmethod(_dirname)  # type: ignore[method-assign]


@pytest.fixture
def app(twin_session: DeviceSession, results_store: Store) -> SlmDvfsApp:
    demo.fill_store(results_store)
    return make_app(twin_session, store=results_store, poll=False, handle_signals=False)


async def _fill(pilot: Any, *keys: str) -> None:
    """A minute of readings into the app's history, then the page asked for."""
    app = pilot.app
    for i in range(READINGS):
        app.device_history.add(demo.snapshot_at(i))
    app.post_message(SnapshotTaken(demo.snapshot_at(READINGS)))
    await pilot.pause()
    if keys:
        await pilot.press(*keys)
    app.post_message(SnapshotTaken(demo.snapshot_at(READINGS + 1)))
    await pilot.pause()
    await pilot.pause()


SIZES = [pytest.param((80, 24), id="80x24"), pytest.param((160, 45), id="160x45")]


@pytest.mark.parametrize("size", SIZES)
def test_device_page_live(app: SlmDvfsApp, snap_compare: Any, size: tuple[int, int]) -> None:
    async def run_before(pilot: Any) -> None:
        await _fill(pilot)

    assert snap_compare(app, run_before=run_before, terminal_size=size)


@pytest.mark.parametrize("size", SIZES)
def test_run_page_live(app: SlmDvfsApp, snap_compare: Any, size: tuple[int, int]) -> None:
    async def run_before(pilot: Any) -> None:
        pilot.app.run_view = demo.run_view()
        pilot.app.pinned_by_us = True
        await _fill(pilot, "3")

    assert snap_compare(app, run_before=run_before, terminal_size=size)


def test_device_page_without_colour(twin_session: DeviceSession, results_store: Store, snap_compare: Any,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    app = make_app(twin_session, store=results_store, poll=False, handle_signals=False)

    async def run_before(pilot: Any) -> None:
        await _fill(pilot)

    assert snap_compare(app, run_before=run_before)
