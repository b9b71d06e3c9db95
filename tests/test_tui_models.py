"""The TUI's pure parts (no app running): run tracking, event coalescing, the setup form,
comparisons, the sweep heat map, the block chart, the selector preview."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from engine.core.measurement import Measurement
from engine.device.setting import MAXN, DvfsSetting
from engine.core.errors import ConfigError
from engine.run.experiment import ExperimentPhase
from engine.core.provenance import Source
from engine.results.store import Store
from engine.workload.events import (
    Paused,
    RunCancelled,
    RunFinished,
    RunStarted,
    StepBegin,
    StepEnd,
    StepEnergy,
)
from tui import demo, forms
from tui.bridge import EventBridge
from engine.results.baseline import find_baseline
from engine.results.totals import RunTotals
from tui.compare_model import build_comparison
from tui.fmt import nice_ceiling
from tui.fmt import format_duration
from tui.runstate import RunTracker
from tui.selection import SelectorPreview, preview_choice
from tui.sweep_model import SweepTracker, heat_map
from tui.widgets.charts import block_rows, render_chart, resample

RAILS = ("GPU", "CPU")


def started(total: int = 10) -> RunStarted:
    return RunStarted(model="m", task="sst2", mode="full", precision="fp32", device="cpu", batch_size=4,
                      total_steps=total, steps_per_epoch=total, seed=0, trainable_params=1, total_params=1)


def step(i: int) -> StepEnd:
    return StepEnd(step=i, epoch=0, loss=1.0 / i, samples=4, tokens=64, lr=0.1, wall_s=0.1, elapsed_s=0.1 * i)


def window(i: int, energy: dict[str, float], dt: float, source: Source = Source.TWIN,
           rails: tuple[str, ...] = RAILS) -> StepEnergy:
    """The run harness's energy window of step i (it comes just before the step's StepEnd)."""
    total = sum(energy.get(r, 0.0) for r in rails)
    return StepEnergy(step=i, time_s=dt, energy_j=energy, total_energy_j=total, avg_power_w=total / dt,
                      rails=rails, source=source, samples=4)


def metered_step(i: int, gpu_j: float = 1.0, cpu_j: float = 0.5, dt: float = 0.5,
                 other_j: float = 0.0) -> tuple[StepEnergy, StepEnd]:
    energy = {"GPU": gpu_j, "CPU": cpu_j}
    if other_j:
        energy["SYS"] = other_j
    return window(i, energy, dt), step(i)


# --------------------------------------------------------------------------- the run tracker
def test_tracker_sums_twin_energy_over_its_rails_and_projects_to_the_end() -> None:
    t = RunTracker(Source.TWIN, RAILS, window_s=60.0, chart_columns=4)
    assert t.feed(ExperimentPhase("policy", "static:gpu=816", 1, 2)) is True
    assert t.feed(started(10)) is True
    assert t.feed(StepBegin(1, 0)) is False
    for i in range(1, 5):
        for event in metered_step(i, other_j=9.0):
            assert t.feed(event) is False  # steps never ask for an immediate redraw
    v = t.view()
    assert v.step == 4 and v.total_steps == 10 and v.status == "running"
    assert v.energy_j == pytest.approx(4 * 1.5)  # SYS is outside the rails the experiment totals
    assert v.projected_j == pytest.approx(1.5 * 10)
    assert v.device_time_s == pytest.approx(2.0)
    assert v.device_samples_per_s == pytest.approx(16 / 2.0)
    assert v.host_samples_per_s == pytest.approx(16 / 0.4)
    assert v.eta_s == pytest.approx(0.4 / 4 * 6)
    # a few steps are no spread to go by (two equal steps would say ±0): no interval yet
    assert v.projected_interval is None and v.eta_interval is None
    assert v.rail_now_w == {"GPU": 2.0, "CPU": 1.0, "SYS": 18.0}
    assert v.total_now_w == pytest.approx(3.0)
    assert v.chart_w == pytest.approx((3.0, 3.0, 3.0, 3.0))
    assert v.loss == pytest.approx(0.25)
    assert v.log == ("run 1/2: policy static:gpu=816", "started m/sst2: 10 steps of 4 on cpu")
    for i in range(5, 8):
        for event in metered_step(i, other_j=9.0):
            t.feed(event)
    v = t.view()
    # identical steps, enough of them: the projections' intervals (from the steps' spread) have no width
    assert v.projected_interval.width == pytest.approx(0.0, abs=1e-9) and v.projected_interval.level == 0.9
    assert v.projected_interval.contains(v.projected_j) and v.eta_interval.width == pytest.approx(0.0, abs=1e-9)


def test_tracker_chart_is_energy_weighted_and_keeps_one_window() -> None:
    t = RunTracker(Source.TWIN, ("GPU",), window_s=4.0, chart_columns=2)
    t.feed(started(100))
    for i in range(1, 11):  # 10 steps of 1 s: power 1, 2, ... 10 W
        t.feed(window(i, {"GPU": float(i)}, 1.0, rails=("GPU",)))
        t.feed(StepEnd(step=i, epoch=0, loss=1.0, samples=1, tokens=1, lr=0.0, wall_s=0.0, elapsed_s=float(i)))
    v = t.view()
    assert v.chart_span_s == pytest.approx(4.0)  # only the last window's steps are kept
    assert v.chart_w == pytest.approx((7.5, 9.5))  # steps ending at 7,8 | 9,10 (the 6th ends outside)
    assert v.rail_avg_w["GPU"] == pytest.approx((7 + 8 + 9 + 10) / 4)  # over the chart's span
    assert v.energy_j == pytest.approx(sum(range(1, 11)))  # the total is never trimmed


def test_tracker_shows_the_engines_step_windows_on_a_board_as_measured() -> None:
    """The tracker integrates nothing itself: energy, power and device time are the engine's
    StepEnergy windows (here a board's), the figures the run is recorded with."""
    t = RunTracker(Source.MEASURED, ("GPU",))
    assert not hasattr(t, "add_sample")
    t.feed(started(10))
    t.feed(StepEnd(step=1, epoch=0, loss=1.0, samples=4, tokens=1, lr=0.0, wall_s=1.5, elapsed_s=1.5))
    assert t.view().energy_j == 0.0 and t.view().device_time_s == 0.0  # a step alone carries no energy
    t.feed(window(2, {"GPU": 5.0, "CPU": 1.0}, 1.25, source=Source.MEASURED, rails=("GPU",)))
    t.feed(StepEnd(step=2, epoch=0, loss=1.0, samples=4, tokens=1, lr=0.0, wall_s=1.5, elapsed_s=3.0))
    v = t.view()
    assert v.source is Source.MEASURED
    assert v.energy_j == pytest.approx(5.0)
    assert v.rail_now_w == {"GPU": 4.0, "CPU": 0.8}
    assert v.device_time_s == pytest.approx(1.25)
    assert v.device_samples_per_s == pytest.approx(8 / 1.25)


def test_tracker_states_and_log_of_two_runs() -> None:
    t = RunTracker(Source.TWIN, RAILS)
    t.feed(ExperimentPhase("policy", "online", 1, 2))
    t.feed(started(3))
    for event in metered_step(1):
        t.feed(event)
    t.feed(Paused(1))
    assert t.view().status == "paused"
    t.feed(RunFinished(step=3, samples=12, wall_s=1.0, final_loss=0.1))
    assert t.view().status == "finished"
    t.feed(ExperimentPhase("baseline", "maxn", 2, 2))
    v = t.view()
    assert (v.role, v.index, v.step, v.energy_j) == ("baseline", 2, 0, 0.0)  # a fresh run
    t.feed(RunCancelled(step=0, samples=0, wall_s=0.0, reason="quit"))
    v = t.view()
    assert v.status == "cancelled" and v.log[-1] == "cancelled after step 0: quit"
    assert v.log_count == len(v.log) == 6


def test_format_duration() -> None:
    # in words, never read as a time of day ("ETA 16:36" read as a clock)
    assert [format_duration(s) for s in (None, 7.4, 65, 996, 3723)] == ["-", "7 s", "1 min 5 s", "16 min 36 s",
                                                                       "1 h 2 min"]
    assert [format_duration(s, coarse=True) for s in (0.2, 61, 3601)] == ["1 s", "2 min", "2 h"]  # rounded up


# --------------------------------------------------------------------------- coalescing
def test_bridge_posts_steps_at_most_every_interval_and_never_while_one_is_pending() -> None:
    now = [0.0]
    posts: list[float] = []
    t = RunTracker(Source.TWIN, RAILS)
    b = EventBridge(t, lambda: posts.append(now[0]), min_interval_s=0.5, clock=lambda: now[0])
    b(started(1000))
    assert posts == [0.0]  # not a step: at once
    for i in range(1, 200):  # 200 steps in 0.2 s while the UI has not taken the message
        now[0] = i / 1000
        b(step(i))
    assert posts == [0.0]
    b.taken()
    now[0] = 0.3
    b(step(200))
    assert posts == [0.0]  # taken, but a step within the interval waits
    now[0] = 0.6
    b(step(201))
    assert posts == [0.0, 0.6]
    b.taken()
    b(RunFinished(step=201, samples=804, wall_s=1.0, final_loss=None))
    assert posts == [0.0, 0.6, 0.6]  # the end is never held back
    assert t.view().step == 201


# --------------------------------------------------------------------------- the setup form
def test_form_checks_name_the_problem() -> None:
    assert forms.check_model("bert-tiny") is None
    assert forms.check_model("BERT-TINY") is None
    assert forms.check_model("prajjwal1/bert-tiny") is None  # a hub id: resolved when the run starts
    assert "not in the zoo" in forms.check_model("no-such-model")
    assert "no such file" in forms.check_model("./missing/config.json")
    assert forms.check_policy("static:gpu=816") is None
    assert forms.check_policy("ml") is None
    assert forms.check_policy("bogus") == "unknown policy 'bogus'"
    assert "no value" in forms.check_policy("static:gpu=")
    assert forms.check_objective("energy@5%") is None
    assert "unknown objective" in forms.check_objective("speed")
    assert forms.check_slowdown("5") is None and forms.check_slowdown("5%") is None
    assert forms.check_slowdown("-1") and forms.check_slowdown("x")
    assert forms.check_number("", forms.BATCH_SIZE, blank_ok=True) is None
    assert forms.check_number("0", forms.BATCH_SIZE) and forms.check_number("3.5", forms.BATCH_SIZE)
    assert forms.check_amount("2.5", "epochs") is None and forms.check_amount("2.5", "steps")
    assert forms.check_data("synthetic") is None and "no such folder" in forms.check_data("/nope/glue")


def test_form_builds_the_experiment_spec(tmp_path: Path) -> None:
    values = forms.SetupValues(model="bert-tiny", task="rte", policy="static:gpu=816", objective="energy",
                               slowdown="5", amount="40", batch_size="8", seq_len="64", precision="fp32",
                               train_samples="64", compare=True, simulate=True)
    spec = forms.build_spec(values, twin_profile="agx-orin-64gb", is_twin=True)
    assert (spec.workload.model, spec.workload.task, spec.policy, spec.objective) == ("bert-tiny", "rte", "static:gpu=816", "energy@5%")
    assert (spec.steps, spec.workload.batch_size, spec.workload.seq_len, spec.workload.precision) == (40, 8, 64, "fp32")
    assert (spec.compare, spec.simulate, spec.twin, spec.train_samples) == ("maxn", True, "agx-orin-64gb", 64)
    epochs = forms.build_spec(forms.SetupValues(amount="1.5", unit="epochs", batch_size="8", train_samples="100"),
                              twin_profile="agx-orin-64gb", is_twin=True)
    assert epochs.steps == math.ceil(1.5 * 100 / 8)
    with pytest.raises(ConfigError, match="policy"):
        forms.build_spec(forms.SetupValues(policy="bogus"), twin_profile=None, is_twin=True)
    with pytest.raises(ConfigError, match="twin only"):
        forms.build_spec(forms.SetupValues(simulate=True), twin_profile=None, is_twin=False)
    with pytest.raises(ConfigError, match="already names a slowdown"):
        forms.build_spec(forms.SetupValues(objective="energy@5%", slowdown="3"), twin_profile=None, is_twin=True)


def test_form_epochs_use_the_engines_defaults() -> None:
    from engine.core.constants import DEFAULT_BATCH_SIZE, SYNTHETIC_TRAIN_MAX
    from engine.workload.glue import get_task
    from engine.workload.zoo import get_entry

    assert forms.SYNTHETIC_TRAIN_MAX == SYNTHETIC_TRAIN_MAX and forms.DEFAULT_BATCH_SIZE == DEFAULT_BATCH_SIZE
    spec = forms.build_spec(forms.SetupValues(model="bert-tiny", task="rte", amount="1", unit="epochs"),
                            twin_profile=None, is_twin=True)
    assert spec.steps == math.ceil(min(get_task("rte").train_size, SYNTHETIC_TRAIN_MAX) / get_entry("bert-tiny").batch_size)


# --------------------------------------------------------------------------- comparisons
@pytest.fixture
def store(tmp_path: Path):
    with Store(tmp_path / "results.sqlite") as s:
        yield s


def test_comparison_side_by_side_from_the_store(store: Store) -> None:
    ids = demo.fill_store(store)
    run = store.get_run(ids["static"])
    base = find_baseline(store, run)
    assert base is not None and base.id == ids["maxn"]
    view = build_comparison(run, base, store.power_samples(run.id), store.power_samples(base.id))
    assert view.saving_pct == pytest.approx(100 * (80.68 - 68.8) / 80.68)
    assert view.slowdown_pct == pytest.approx(100 * (3.51 - 2.87) / 2.87)
    assert view.source is Source.TWIN
    figures = {f.name: f for f in view.figures}
    assert figures["energy"].run == pytest.approx(68.8) and figures["energy"].base == pytest.approx(80.68)
    assert figures["mJ/sample"].run == pytest.approx(68.8 / 9600 * 1000)
    assert figures["accuracy"].run == pytest.approx(0.81)
    # the demo's runs trained random weights on generated data: the accuracy is not shown as measured
    assert figures["accuracy"].source_text == "not meaningful" and figures["accuracy"].delta_pct is None
    assert any("accuracy not meaningful (random weights / generated data)" in n for n in view.notes)
    rails = {r: (a, b, s) for r, a, b, s in view.rails}
    assert rails["VDD_GPU_SOC"][2] == pytest.approx(100 * (47.0 - 31.9) / 47.0)
    # identical axes: the span covers the longer run, the top the higher peak of both
    assert view.span_s == pytest.approx(3.51)
    assert view.peak_w >= max(view.run_series.peak_w, view.base_series.peak_w)
    lone = store.get_run(ids["lone"])
    assert find_baseline(store, lone) is None
    alone = build_comparison(lone, None)
    assert alone.saving_pct is None and alone.base is None


def test_comparison_refuses_a_board_run_against_a_twin_run(store: Store) -> None:
    from dataclasses import replace

    ids = demo.fill_store(store)
    run = replace(store.get_run(ids["static"]), source=Source.MEASURED)
    view = build_comparison(run, store.get_run(ids["maxn"]))
    assert view.base is None and view.saving_pct is None and "not comparable" in view.notes[0]


def test_the_store_and_the_compare_page_give_the_same_comparison(store: Store) -> None:
    """One computation: the Compare page's saving, slowdown and per-rail savings are exactly the
    store's and engine.results.compare's, and the page refuses what the store refuses."""
    from dataclasses import replace

    from engine.results.compare import compare_records

    ids = demo.fill_store(store)
    run, base = store.get_run(ids["static"]), store.get_run(ids["maxn"])
    view = build_comparison(run, base)
    record = store.compare_runs(run.id, base.id, record=False)
    c = compare_records(run, base)
    assert view.saving_pct == record.saving_pct == c.saving_pct
    assert view.slowdown_pct == record.slowdown_pct == c.slowdown_pct
    assert view.source == record.source == c.source
    assert {r: s for r, _a, _b, s in view.rails if s is not None} == c.rail_saving_pct
    # a simulated run against a trained baseline: the store refuses, the page says why and gives no saving
    sim = replace(run, simulated=True)
    with pytest.raises(ConfigError, match="simulated"):
        compare_records(sim, base)
    view = build_comparison(sim, base)
    assert view.saving_pct is None and "not comparable" in view.notes[0] and "simulated" in view.notes[0]


def test_the_maxn_run_itself_says_it_is_the_baseline(store: Store) -> None:
    """Not "no MAXN baseline of this workload" on the MAXN run."""
    ids = demo.fill_store(store)
    maxn = store.get_run(ids["maxn"])
    assert find_baseline(store, maxn) is None
    view = build_comparison(maxn, find_baseline(store, maxn))
    assert view.base is None and view.baseline_note == "this run is the baseline, MAXN (mode 0)"
    lone = build_comparison(store.get_run(ids["lone"]), None)
    assert lone.baseline_note.startswith("no baseline run (the board's uncapped mode, MAXN or MAXN_SUPER) of this "
                                         "workload")


def test_a_run_finds_the_maxn_run_of_its_workload_of_another_length(store: Store) -> None:
    """A run not compared when it ran, whose workload has a MAXN run of other steps and seed:
    the Compare page finds it and compares per sample."""
    ids = demo.fill_store(store)
    maxn = store.get_run(ids["maxn"])
    rid = store.start_run(policy="static", source=Source.TWIN, device=maxn.device_id, workload=maxn.workload_id,
                          seed=3, steps=150, rails="all", weights="pretrained", synthetic=False)
    run = store.finish_run(rid, RunTotals(time_s=1.8, rail_energy_j={"VDD_GPU_SOC": 16.0, "VDD_CPU_CV": 2.9,
                                                          "VIN_SYS_5V0": 9.7, "VDDQ_VDD2_1V8AO": 5.85}, samples=4800, steps=150), metrics={"accuracy": 0.9})
    base = find_baseline(store, run)
    assert base is not None and base.id == maxn.id
    view = build_comparison(run, base)
    assert view.base is not None and view.baseline_note == "MAXN (mode 0)" and view.per_sample
    assert view.saving_pct == pytest.approx(100 * (1 - (run.energy_j / 4800) / (maxn.energy_j / 9600)))
    assert view.slowdown_pct == pytest.approx(100 * ((1.8 / 4800) / (2.87 / 9600) - 1))
    figures = {f.name: f for f in view.figures}
    assert figures["energy"].delta_pct is None  # totals of runs of other lengths: no difference given
    assert figures["mJ/sample"].delta_pct == pytest.approx(view.saving_pct)
    assert figures["accuracy"].source_text == "[measured (host)]"  # pretrained, real data, on the twin
    assert any("per sample" in n for n in view.notes) and any("seed 0" in n for n in view.notes)


def test_a_simulated_run_finds_only_a_simulated_baseline(store: Store) -> None:
    ids = demo.fill_store(store)
    run, base = store.get_run(ids["static"]), store.get_run(ids["maxn"])
    for rid, simulated in ((run.id, True), (base.id, False)):
        store._conn.execute("UPDATE runs SET simulated = ? WHERE id = ?", (int(simulated), rid))
    store._conn.execute("DELETE FROM comparisons")
    assert find_baseline(store, store.get_run(run.id)) is None  # the only MAXN run was trained
    store._conn.execute("UPDATE runs SET simulated = 1 WHERE id = ?", (base.id,))
    assert find_baseline(store, store.get_run(run.id)).id == base.id


# --------------------------------------------------------------------------- sweeps
def test_heat_map_averages_repeats_and_marks_the_least_energy() -> None:
    mhz = 1_000_000
    points = [
        (MAXN, 0.010, 0.001), (MAXN, 0.012, 0.001),
        (DvfsSetting(gpu_hz=816 * mhz, nvpmodel=0), 0.008, 0.002),
        (DvfsSetting(gpu_hz=816 * mhz, emc_hz=2133 * mhz, nvpmodel=0), 0.009, 0.002),
        (DvfsSetting(gpu_hz=1300500000, nvpmodel=0), 0.016, 0.001),
    ]
    heat = heat_map(points, Source.TWIN)
    assert heat.rows == ("MAXN", "GPU 816", "GPU 1300.5") and heat.cols == ("gov", "2133")
    assert heat.cells[("MAXN", "gov")].mj_per_sample == pytest.approx(11.0)
    assert heat.cells[("GPU 816", "gov")].best and heat.cells[("GPU 816", "gov")].rel == 0.0
    assert heat.cells[("GPU 1300.5", "gov")].rel == 1.0
    assert heat.saving_pct == pytest.approx(100 * (1 - 8 / 11))
    assert heat.slowdown_pct == pytest.approx(100.0)
    assert heat.points == 5


def test_sweep_tracker_collects_points() -> None:
    from engine.run.sweep import SweepPointDone

    t = SweepTracker(Source.TWIN)
    m = Measurement(1.0, 0.8, 100, None, Source.TWIN)
    assert t.feed(SweepPointDone(1, 2, MAXN, 0, m)) is False
    assert t.feed(SweepPointDone(2, 2, DvfsSetting(gpu_hz=612_000_000, nvpmodel=0), 0,
                                 Measurement(1.0, 0.5, 100, None, Source.TWIN))) is True  # the last point
    v = t.view()
    assert (v.done, v.total) == (2, 2) and v.heat.best.startswith("GPU 612")
    assert "5.00 mJ/sample [twin]" in v.last


# --------------------------------------------------------------------------- charts
def test_block_chart_scales_to_its_axis() -> None:
    assert resample([1.0, 3.0, None, None], 2) == [2.0, None]
    assert resample([1.0, 2.0], 4) == [1.0, 1.0, 2.0, 2.0]
    assert block_rows([0.0, 5.0, 10.0, None], 2, 10.0) == ["  █ ", " ██ "]
    assert block_rows([2.5], 1, 10.0) == ["▂"]
    assert nice_ceiling(19.6) == 20.0 and nice_ceiling(28.1) == 30.0 and nice_ceiling(0.0) == 1.0
    text = render_chart([5.0, 10.0], width=8, height=3, y_max=20.0, caption="c").plain.splitlines()
    assert text[0].startswith("  20W│") and text[1].startswith("    0│▄█") and text[2].strip() == "c"


# --------------------------------------------------------------------------- the selector
def test_selector_preview_says_when_there_is_none(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from engine.selector import persistence

    monkeypatch.setenv("SLM_DVFS_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setattr(persistence, "shipped_selector_dir", lambda: tmp_path / "none-shipped")
    spec = forms.build_spec(forms.SetupValues(), twin_profile="agx-orin-64gb", is_twin=True)
    preview = preview_choice(spec)
    assert not preview.available
    assert "slm-dvfs train-selector" in preview.line() and preview.short() == "selector: none available"
    assert preview.missing  # the short line says so by this flag, not by matching the note's text
    assert SelectorPreview(False, note="none of the candidates fits").short() == "selector: no choice"


@pytest.mark.slow
def test_selector_preview_gives_the_selectors_choice(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from engine.dvfs.objectives import parse_objective
    from engine.core.errors import SlmDvfsError
    from engine.selector.features import describe_workload
    from engine.selector.persistence import load_selector

    monkeypatch.setenv("SLM_DVFS_DATA_DIR", str(tmp_path / "data"))  # no user selector: the shipped one
    try:
        selector = load_selector()
    except SlmDvfsError:
        pytest.skip("no selector shipped in this checkout")
    spec = forms.build_spec(forms.SetupValues(model="bert-mini", task="rte", objective="energy"),
                            twin_profile="agx-orin-64gb", is_twin=True)
    preview = preview_choice(spec)
    # the workload Setup's run trains: its batches padded dynamically (the spec's default)
    assert spec.workload.padding == "dynamic"
    choice = selector.choose(describe_workload("bert-mini", "rte", padding=spec.workload.padding)[0], parse_objective("energy"))
    assert preview.available and preview.source is Source.PREDICTED
    assert preview.setting == choice.setting.label()
    assert preview.saving_pct == pytest.approx(100 * choice.saving)
    assert "[predicted]" in preview.line() and "[predicted]" in preview.short()
    assert preview.basis == "twin zoo" and preview.line().startswith("selector (twin zoo) chooses")
    iv = preview.saving_interval  # the twin ensemble's interval, widened by the selector's CV regret quantile
    assert iv is not None and iv.low <= choice.saving <= iv.high and "twin ensemble" in iv.basis
    assert "CV regret, 90th percentile" in iv.basis
    assert f"(90%: {100 * iv.low:.1f}–{100 * iv.high:.1f}% less)" in preview.line()  # both ends savings here
    assert f"({100 * iv.low:.0f}–{100 * iv.high:.0f}%)" in preview.short()


@pytest.mark.slow  # traces bert-tiny and loads the shipped selector: ~5 s
def test_setups_selector_preview_says_when_maxn_is_already_about_optimal(isolated_env) -> None:
    """What `select` says (engine.selector.uncertainty.maxn_about_optimal), Setup's preview says too."""
    from tui.selection import preview_choice

    spec = forms.build_spec(forms.SetupValues(model="bert-tiny", task="sst2", objective="energy"),
                            twin_profile="agx-orin-64gb", is_twin=True)
    preview = preview_choice(spec)
    assert preview.available and preview.maxn_about_optimal is not None
    assert preview.line().endswith("[predicted]; MAXN is already about optimal for this workload")


def test_selector_preview_lines_show_the_savings_interval_compactly() -> None:
    from engine.core.interval import Interval
    from tui.selection import SelectorPreview

    preview = SelectorPreview(True, setting="GPU 816 · CPU gov · EMC gov · mode 0", saving_pct=13.0,
                              slowdown_pct=21.4, saving_interval=Interval(0.041, 0.168))
    assert preview.short() == "selector: GPU 816 saves 13% (4–17%) [predicted]"  # mode 0: the default, unsaid
    assert "vs MAXN: 13.0% less energy (90%: 4.1–16.8% less), 21.4% slower [predicted]" in preview.line()
    bare = SelectorPreview(True, setting="GPU 816 · mode 2", saving_pct=13.0, slowdown_pct=21.4)
    assert bare.short() == "selector: GPU 816 · mode 2 saves 13% [predicted]"
    # a choice that costs more than MAXN says so in words, never as a negative saving
    worse = SelectorPreview(True, setting="GPU 612", saving_pct=-0.6, slowdown_pct=-2.0,
                            saving_interval=Interval(-0.03, 0.02))
    assert worse.short() == "selector: GPU 612 costs 1% more (3% more–2% less) [predicted]"
    assert "vs MAXN: 0.6% more energy (90%: 3.0% more to 2.0% less), 2.0% faster" in worse.line()
    assert "-" not in worse.short() + worse.line()


def test_the_run_tracker_keeps_whether_the_eval_metric_means_anything() -> None:
    from engine.workload.events import EvalResult

    tracker = RunTracker(Source.TWIN, RAILS)
    tracker.feed(started())
    tracker.feed(EvalResult(step=1, split="validation", metrics={"accuracy": 1.0}, samples=8, wall_s=0.1))
    assert tracker.view().metrics_provenance.meaningful is None  # not told: never shown as measured
    tracker.feed(EvalResult(step=2, split="validation", metrics={"accuracy": 1.0}, samples=8, wall_s=0.1,
                            weights="random", synthetic=True))
    view = tracker.view()
    assert view.metrics == {"accuracy": 1.0} and view.metrics_provenance.meaningful is False
    assert view.metrics_provenance.tag(view.source) == "not meaningful (random weights / generated data)"
