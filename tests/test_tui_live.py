"""The live panes: bounded histories, continuous run charts, a stopped run's ETA, levels that
read without colour, and a twin run in the TUI whose temperatures move."""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from engine.core.provenance import Source
from engine.core.trace import OpCost, StepTrace
from engine.device.session import DeviceSession, open_device
from engine.results.store import Store
from engine.workload import resolve as resolve_mod
from engine.workload.events import RunCancelled, RunStarted, StepEnd, StepEnergy
from traces import workload_of
from engine.workload.spec import WorkloadSpec
from tui import demo
from tui.live_model import Stats, rail_key, temp_key, time_columns
from tui.messages import ExperimentDone, RunProgress, SnapshotTaken
from tui.runstate import MAX_SPANS, RunTracker
from tui.widgets.charts import HistoryGraph
from tui.widgets.device_panes import TemperaturesPane
from tui.widgets.live import GraphStack
from tui_helpers import TWIN, drive, make_app, plain

RAILS = ("GPU", "CPU")
BERT_TINY = workload_of(
    StepTrace("bert-tiny", 32, 128, "fp32", (
        OpCost("matmul", 9666871296.0, 231568648.0, 42), OpCost("attention", 1879048192.0, 50462784.0, 4),
        OpCost("elementwise", 26243073.0, 275075080.0, 46), OpCost("optimizer", 65792759.0, 280716256.0, 17)),
        host_cycles=10195000.0, params=4386178),
    total_params=4386178,
)  # fmt: skip


def energy_event(step: int, dt: float, gpu_w: float, cpu_w: float = 1.0) -> StepEnergy:
    joules = {"GPU": gpu_w * dt, "CPU": cpu_w * dt}
    return StepEnergy(step=step, time_s=dt, energy_j=joules, total_energy_j=sum(joules.values()),
                      avg_power_w=sum(joules.values()) / dt, rails=RAILS, source=Source.TWIN, samples=1)


# --------------------------------------------------------------------------- run charts
def test_time_columns_are_continuous_and_keep_the_energy() -> None:
    """Steps of any length fill every column they cover (was: a comb of spikes with empty columns)."""
    spans, t = [], 0.0
    for i, dt in enumerate([0.3, 0.01, 2.0, 0.05, 0.05, 1.1, 0.002, 0.7] * 5):
        t += dt
        spans.append((t, dt, {"GPU": (5.0 + i % 3) * dt, "CPU": dt}))
    for columns in (7, 60, 150, 400):
        values, span = time_columns(spans, columns)
        assert span == pytest.approx(t)
        assert None not in values
        width = span / columns
        assert sum(v * width for v in values) == pytest.approx(sum(sum(e.values()) for _, _, e in spans))
    gpu_only, _ = time_columns(spans, 10, ["GPU"])
    assert all(5.0 <= v <= 7.0 for v in gpu_only)


def test_tracker_history_is_bounded_and_merges_short_steps() -> None:
    tracker = RunTracker(Source.TWIN, RAILS, window_s=60.0)
    tracker.feed(RunStarted(model="m", task="t", mode="full", precision="fp32", device="cpu", batch_size=1,
                            total_steps=100_000, steps_per_epoch=100_000, seed=0, trainable_params=1, total_params=1))
    for i in range(1, 20_001):
        tracker.feed(energy_event(i, 0.003, 10.0 + (i % 2)))
    view = tracker.view()
    assert len(view.spans) <= 4 * MAX_SPANS
    assert 55.0 <= view.chart_span_s <= 60.0 + 1e-9  # the window (its first fine spans may have made room)
    assert None not in view.chart_w
    assert view.rail_avg_w["GPU"] == pytest.approx(10.5, rel=1e-3)
    assert view.rail_peak_w["GPU"] >= view.rail_avg_w["GPU"]
    assert view.spans[-1][0] == pytest.approx(view.device_time_s)


def test_a_stopped_run_has_no_eta() -> None:
    tracker = RunTracker(Source.TWIN, RAILS)
    tracker.feed(RunStarted(model="m", task="t", mode="full", precision="fp32", device="cpu", batch_size=1,
                            total_steps=100, steps_per_epoch=100, seed=0, trainable_params=1, total_params=1))
    for i in range(1, 11):
        tracker.feed(energy_event(i, 0.1, 10.0))
        tracker.feed(StepEnd(step=i, epoch=0, loss=0.5, samples=1, tokens=1, lr=0.0, wall_s=0.1, elapsed_s=0.1 * i))
    assert tracker.view().eta_s == pytest.approx(9.0)
    tracker.feed(RunCancelled(10, 10, 1.0, "cancelled from the TUI"))
    view = tracker.view()
    assert view.status == "cancelled" and view.eta_s is None
    assert view.host_samples_per_s is not None  # what was measured stays


# --------------------------------------------------------------------------- levels without colour
def test_levels_are_marked_as_well_as_coloured() -> None:
    graph = HistoryGraph("hottest", fmt=".1f", name_width=7)
    graph.plot([50.0, 66.0, 80.0], Stats(80.0, 65.3, 80.0), warn=60.0, hot=75.0)
    assert plain(graph.stats_text()).startswith("hottest 80.0!! avg 65.3 pk 80.0!!")
    graph.plot([50.0], Stats(66.0, 66.0, 66.0), warn=60.0, hot=75.0)
    assert "66.0! " in plain(graph.stats_text()) and "!!" not in plain(graph.stats_text())
    graph.plot([50.0], Stats(50.0, 50.0, 50.0), warn=60.0, hot=75.0)
    assert "!" not in plain(graph.stats_text())


async def test_device_page_without_colour_still_marks_hot_zones(twin_session: DeviceSession,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    app = make_app(twin_session, poll=False)
    async with drive(app) as ui:
        assert app.no_color  # Textual's own monochrome filter is on
        for i in range(4):
            app.post_message(SnapshotTaken(demo.snapshot_at(i)))
        app.post_message(SnapshotTaken(demo.snapshot()))  # tj 77 °C (hot), gpu 63 °C (warm)
        await ui.wait_for(SnapshotTaken, until=lambda: app.device_history.readings >= 5)
        await ui.settle()
        temps = plain(app.screen.query_one(TemperaturesPane).content)
        assert "77.0!!" in temps  # tj is over 75 °C
        assert "63.0! " in temps  # gpu over 60 °C
        hottest = app.screen.query_one("#dev-temp-graphs", GraphStack).graphs[temp_key("max")]
        assert "!!" in plain(hottest.render())
        await ui.press("q")


# --------------------------------------------------------------------------- a twin run in the TUI
@pytest.fixture
def thermal_session(isolated_env: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[DeviceSession]:
    """The twin with its thermal model, as the TUI opens it; bert-tiny from a frozen trace."""
    from engine.selector import persistence

    monkeypatch.setattr(persistence, "shipped_selector_dir", lambda: tmp_path / "no-shipped-selector")
    monkeypatch.setattr(resolve_mod, "resolve_workload", lambda spec, **budget: BERT_TINY)
    with open_device(twin=TWIN, realtime=False, twin_dir=tmp_path / "twin", thermal=True) as session:
        yield session


def test_the_tui_opens_the_twin_with_its_thermal_model(isolated_env: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import tui.app
    from engine.cli import tui_launch

    seen: dict[str, Any] = {}
    monkeypatch.setattr(tui_launch, "open_device",
                        lambda **kw: seen.setdefault("session", open_device(twin=TWIN, **{**kw, "fallback_to_twin": False})))
    monkeypatch.setattr(tui.app.SlmDvfsApp, "run", lambda self: seen.setdefault("thermal", self.session.twin.thermal_enabled))
    assert tui_launch.launch_tui(argparse.Namespace()) == 0
    assert seen["thermal"] is True


async def test_temperatures_rise_and_the_graphs_move_during_a_twin_run(thermal_session: DeviceSession,
                                                                       results_store: Store) -> None:
    from engine.run.experiment import ExperimentSpec

    twin = thermal_session.twin
    start_c = max(twin.temperatures_c().values())

    def pace(event: Any) -> None:  # a few hundred steps a second: the poll and the UI keep up
        if type(event).__name__ == "StepEnd":
            time.sleep(0.001)

    app = make_app(thermal_session, store=results_store)
    async with drive(app) as ui:
        await ui.wait_for(SnapshotTaken)
        spec = ExperimentSpec(WorkloadSpec("bert-tiny", "sst2"), policy="maxn", steps=400, twin=TWIN, simulate=True,
                              label="test")
        assert app.start_experiment(spec, callbacks=[pace]) is not None
        await ui.wait_for(RunProgress, until=lambda: app.run_view.step > 0)
        first = app.device_history.readings
        hottest = app.screen.query_one("#run-temp-graphs", GraphStack).graphs[temp_key("max")]
        drawn_first = plain(hottest.render())
        assert app.screen.PAGE == "run"
        # the Run page's graph of the hottest zone, as drawn, moves with the run
        await ui.wait_for(SnapshotTaken, until=lambda: plain(hottest.render()) != drawn_first)
        await ui.wait_for(ExperimentDone)
        await ui.workers_done()
        await ui.wait_for(SnapshotTaken, until=lambda: app.device_history.readings > first + 2)
        temps = [v for v in app.device_history.values(temp_key("max")) if v is not None]
        assert max(temps) > min(temps) + 0.5  # the history graph moved with the run
        assert max(twin.temperatures_c().values()) > start_c + 0.5
        view = app.run_view
        assert view.spans and None not in view.chart_w
        rails = app.screen.query_one("#run-rails", GraphStack) if app.screen.PAGE == "run" else None
        if rails is not None:
            assert rail_key("total") in rails.graphs
        assert not math.isnan(view.energy_j)
        await ui.press("q")


async def test_twin_power_follows_the_steps_and_idles_while_paused(thermal_session: DeviceSession,
                                                                   results_store: Store) -> None:
    """What the Device page reads on the twin: phase power while the run steps, idle power once paused
    (was: one constant per run, still 19.56 W while PAUSED)."""
    from engine.run.experiment import ExperimentSpec

    twin = thermal_session.twin

    def pace(event: Any) -> None:
        if type(event).__name__ == "StepEnd":
            time.sleep(0.002)

    def totals() -> set[float]:
        """The total power of the readings taken since the run stepped (`since`)."""
        new = app.device_history.readings - since
        return {round(v, 2) for v in app.device_history.values(rail_key("total"), new) if v is not None}

    app = make_app(thermal_session, store=results_store)
    async with drive(app) as ui:
        spec = ExperimentSpec(WorkloadSpec("bert-tiny", "sst2"), policy="maxn", steps=5_000_000, twin=TWIN,
                              simulate=True, label="test")
        assert app.start_experiment(spec, callbacks=[pace]) is not None
        await ui.wait_for(RunProgress, until=lambda: app.run_view.step > 10)
        since = app.device_history.readings
        await ui.press("1")
        # the readings differ while it steps: the files play each step's phases back
        await ui.wait_for(SnapshotTaken, until=lambda: len(totals()) >= 2)
        # A host delayed between steps (a loaded machine) shows idle already: idle is the floor, not below it
        lowest_step, highest_step = min(totals()), max(totals())
        await ui.press("3", "space")
        await ui.wait_for(RunProgress, until=lambda: app.run_view.status == "paused")
        await ui.wait_for(SnapshotTaken, until=lambda: twin.shown_phase() == "idle")

        def last() -> float:
            return app.device_history.values(rail_key("total"), 1)[0] or math.inf

        await ui.wait_for(SnapshotTaken, until=lambda: last() <= lowest_step and last() < highest_step)
        title = str(app.screen.query_one("#run-rails").border_title)  # "last step", or "last" at 80 columns
        assert "last" in title and "now" not in title
        await ui.press("q")


def _reference_columns(spans: list, columns: int, rails: set[str] | None) -> list[float | None]:
    """The plain definition: each span's energy spread over the buckets it overlaps."""
    t_end, t_first = spans[-1][0], spans[0][0] - spans[0][1]
    width = (t_end - t_first) / columns
    joules, seconds = [0.0] * columns, [0.0] * columns
    for t, dt, energy in spans:
        p = sum(j for r, j in energy.items() if rails is None or r in rails) / dt
        for col in range(columns):
            c0 = t_first + col * width
            overlap = min(t, c0 + width) - max(t - dt, c0)
            if overlap > 0:
                joules[col] += p * overlap
                seconds[col] += overlap
    return [j / s if s > 0 else None for j, s in zip(joules, seconds)]


@pytest.mark.parametrize("seed", range(5))
def test_columns_and_figures_match_their_definition_with_gaps_between_steps(seed: int) -> None:
    import random

    from tui.live_model import group_stats, power_columns

    rng = random.Random(seed)
    spans, t = [], 0.0
    for _ in range(rng.randint(1, 300)):
        t += rng.choice([0.0, 0.0, 0.0, rng.uniform(0.0, 0.5)])  # a pause or an evaluation between steps
        dt = rng.uniform(0.001, 0.2)
        t += dt
        spans.append((t, dt, {"GPU": rng.uniform(1, 20) * dt, "CPU": rng.uniform(1, 5) * dt}))
    spans = tuple(spans)
    columns = rng.randint(1, 150)
    got, _ = power_columns(spans, columns, {"all": None, "gpu": ("GPU",)})
    for name, rails in (("all", None), ("gpu", {"GPU"})):
        want = _reference_columns(list(spans), columns, rails)
        assert [v is None for v in got[name]] == [v is None for v in want]
        assert [v for v in got[name] if v is not None] == pytest.approx([v for v in want if v is not None], rel=1e-6)
    stats = group_stats(spans, {"gpu": ("GPU",)})["gpu"]
    powers = [e["GPU"] / dt for _t, dt, e in spans]
    assert stats.now == pytest.approx(powers[-1]) and stats.peak == pytest.approx(max(powers))
    assert stats.avg == pytest.approx(sum(e["GPU"] for _t, _dt, e in spans) / sum(dt for _t, dt, _e in spans))
