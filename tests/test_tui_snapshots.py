"""Snapshot tests of every page at 80x24 (the SSH terminal the layout is made for) and at
160x45 (where the charts grow), fed fixed data (tui.demo): no clock-dependent text.

The SVGs live in tests/snapshots/test_tui_snapshots/. After a deliberate change to a page,
look at it, then rewrite them with `pytest tests/test_tui_snapshots.py --snapshot-update`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import pytest_textual_snapshot

from engine.core.interval import Interval
from engine.device.session import DeviceSession
from engine.results.store import Store
from tui import demo, forms
from tui.app import SlmDvfsApp
from tui.messages import SnapshotTaken
from tui.selection import SelectorPreview
from tui_helpers import make_app

SNAPSHOT_DIR = Path(__file__).parent / "snapshots"
SIZES = pytest.mark.parametrize("size", [(80, 24), (160, 45)], ids=["80x24", "160x45"])


def _dirname(cls: Any, *, test_location: Any) -> str:
    return str(SNAPSHOT_DIR / test_location.basename)


# Keep this project's screenshots under tests/snapshots/ (syrupy's default is __snapshots__).
pytest_textual_snapshot.SVGImageExtension.dirname = classmethod(_dirname)  # type: ignore[method-assign]


@pytest.fixture
def app(twin_session: DeviceSession, results_store: Store, monkeypatch: pytest.MonkeyPatch) -> SlmDvfsApp:
    from tui.screens import history

    monkeypatch.setattr(history, "this_year_text", lambda: "2025")  # the demo's runs are of this year
    ids = demo.fill_store(results_store)
    app = make_app(twin_session, store=results_store, poll=False, handle_signals=False)
    app.demo_ids = ids  # type: ignore[attr-defined]
    return app


async def _show(pilot: Any, *keys: str) -> None:
    app = pilot.app
    app.post_message(SnapshotTaken(demo.snapshot()))
    await pilot.pause()
    if keys:
        await pilot.press(*keys)
    app.post_message(SnapshotTaken(demo.snapshot()))  # the page shown gets the same reading
    await pilot.pause()


@SIZES
def test_device_page(app: SlmDvfsApp, snap_compare: Any, size: tuple[int, int]) -> None:
    async def run_before(pilot: Any) -> None:
        await _show(pilot)

    assert snap_compare(app, run_before=run_before, terminal_size=size)


# What the selector preview says of a workload (its saving's interval from the twin ensemble and the CV regret)
PREVIEW = SelectorPreview(True, setting="GPU 816 · CPU gov · EMC gov · mode 0", saving_pct=13.0, slowdown_pct=21.4,
                          confidence="high", note="twin-trained selector",
                          saving_interval=Interval(0.041, 0.168, 0.9, "twin ensemble of 32 profiles"))


@SIZES
def test_setup_page(app: SlmDvfsApp, snap_compare: Any, size: tuple[int, int]) -> None:
    async def run_before(pilot: Any) -> None:
        await _show(pilot, "2")
        setup = pilot.app.screen
        pilot.app.selector_key = forms.workload_key(setup.values())  # a preview of this workload
        pilot.app.selector_line = PREVIEW.line()  # the longest line, with its interval: wrapped, not cut
        setup.query_one("#policy").value = "static:gpu="  # a bad value, marked where typed
        setup.mark_errors()
        await pilot.pause()

    assert snap_compare(app, run_before=run_before, terminal_size=size)


@SIZES
def test_setup_zoo_picker(app: SlmDvfsApp, snap_compare: Any, size: tuple[int, int]) -> None:
    """↓ in the model field lists the zoo: name, family, size and defaults, smallest first."""
    async def run_before(pilot: Any) -> None:
        await _show(pilot, "2")
        pilot.app.screen.query_one("#model").focus()
        await pilot.press("down")
        await pilot.pause()

    assert snap_compare(app, run_before=run_before, terminal_size=size)


@SIZES
def test_setup_lora_and_a_workload_that_does_not_fit(app: SlmDvfsApp, snap_compare: Any,
                                                     size: tuple[int, int]) -> None:
    """Mode lora shows its rank beside it; a workload over the board's memory says what would fit."""
    async def run_before(pilot: Any) -> None:
        await _show(pilot, "2")
        setup = pilot.app.screen
        setup.query_one("#model").value = "gemma-2b"
        setup.query_one("#batch_size").value = "64"
        setup.query_one("#seq_len").value = "512"
        setup.query_one("#mode").value = "lora"
        await pilot.pause()

    assert snap_compare(app, run_before=run_before, terminal_size=size)


@SIZES
def test_run_page(app: SlmDvfsApp, snap_compare: Any, size: tuple[int, int]) -> None:
    async def run_before(pilot: Any) -> None:
        pilot.app.run_view = demo.run_view()
        pilot.app.selector_short = PREVIEW.short()  # the saving with its interval, compact
        pilot.app.pinned_by_us = True
        await _show(pilot, "3")

    assert snap_compare(app, run_before=run_before, terminal_size=size)


@SIZES
def test_compare_page(app: SlmDvfsApp, snap_compare: Any, size: tuple[int, int]) -> None:
    async def run_before(pilot: Any) -> None:
        await _show(pilot)
        pilot.app.open_run(pilot.app.demo_ids["static"])
        await pilot.pause()
        await _show(pilot)

    assert snap_compare(app, run_before=run_before, terminal_size=size)


@SIZES
def test_history_page(app: SlmDvfsApp, snap_compare: Any, size: tuple[int, int]) -> None:
    async def run_before(pilot: Any) -> None:
        await _show(pilot, "5", "down", "m")

    assert snap_compare(app, run_before=run_before, terminal_size=size)


@SIZES
def test_sweep_page(app: SlmDvfsApp, snap_compare: Any, size: tuple[int, int]) -> None:
    async def run_before(pilot: Any) -> None:
        await _show(pilot)
        pilot.app.open_sweep(pilot.app.demo_ids["sweep"])
        await pilot.pause()
        await _show(pilot)

    assert snap_compare(app, run_before=run_before, terminal_size=size)


@SIZES
def test_cancel_dialog(app: SlmDvfsApp, snap_compare: Any, size: tuple[int, int]) -> None:
    from tui.screens.modals import ConfirmScreen

    async def run_before(pilot: Any) -> None:
        await _show(pilot, "3")
        pilot.app.push_screen(ConfirmScreen("Cancel the experiment?",
                                            "It stops at the next step boundary and the clocks are restored.",
                                            yes="Cancel it", no="Keep running"))
        await pilot.pause()

    assert snap_compare(app, run_before=run_before, terminal_size=size)


@SIZES
def test_help_screen(app: SlmDvfsApp, snap_compare: Any, size: tuple[int, int]) -> None:
    async def run_before(pilot: Any) -> None:
        await _show(pilot, "2", "question_mark")

    assert snap_compare(app, run_before=run_before, terminal_size=size)


@SIZES
def test_fleet_page(app: SlmDvfsApp, snap_compare: Any, size: tuple[int, int]) -> None:
    """Two twins and a board (a mixed fleet: each row says its source), two of them sweeping: fixed polls
    and events (tui.demo), no cluster."""
    async def run_before(pilot: Any) -> None:
        tracker = pilot.app.fleet_tracker
        tracker.connected("10.0.0.5:6379")
        for i in range(40):
            tracker.poll(demo.fleet_boards(i))
        for event in demo.fleet_events():
            tracker.feed(event)
        pilot.app.fleet_changed()  # the page's view of what the tracker folded
        await _show(pilot, "7")

    assert snap_compare(app, run_before=run_before, terminal_size=size)


@SIZES
def test_fleet_page_unconnected(app: SlmDvfsApp, snap_compare: Any, size: tuple[int, int]) -> None:
    """Not connected: how to connect, and the field `c` connects to."""
    async def run_before(pilot: Any) -> None:
        await _show(pilot, "7")

    assert snap_compare(app, run_before=run_before, terminal_size=size)
