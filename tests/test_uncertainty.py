"""Intervals on predicted figures: the value type, the twin ensemble's paired intervals."""

from __future__ import annotations

import dataclasses

import pytest

from engine.core.errors import ConfigError
from engine.core.interval import Interval, compact_pct, format_with, quantile, quantile_interval
from engine.device.setting import MAXN, DvfsSetting
from engine.device.twin.ensemble import ensemble
from engine.device.twin.params import ParamSpread
from engine.device.twin.profile import load_profile
from traces import BERT_BASE_LIKE


@pytest.fixture(scope="module")
def shipped():
    return load_profile("agx-orin-64gb")


def _settings(profile):
    from engine.selector.dataset import profile_settings

    return profile_settings(profile, "gpu")


# --------------------------------------------------------------------------- the value type
def test_interval_math_and_text() -> None:
    iv = Interval(0.091, 0.150, 0.9, "twin ensemble")
    assert iv.width == pytest.approx(0.059) and iv.contains(0.1) and not iv.contains(0.2)
    assert format_with(0.123, iv, pct=True) == "12.3% (9.1–15.0%, 90%)"
    assert format_with(0.123, None, pct=True) == "12.3%"
    assert compact_pct(0.123, iv) == "12% (9–15%)"
    assert iv.hull(0.2) == Interval(0.091, 0.2, 0.9, "twin ensemble")
    assert iv.shifted(0.01).low == pytest.approx(0.101) and iv.scaled(-1).low == pytest.approx(-0.15)
    assert Interval.from_json(iv.to_json()) == iv
    for bad in ((0.2, 0.1), (float("nan"), 0.1)):
        with pytest.raises(ConfigError):
            Interval(*bad)
    with pytest.raises(ConfigError):
        Interval(0.0, 1.0, level=1.0)


def test_quantiles_match_linear_interpolation() -> None:
    vals = [float(v) for v in range(11)]  # 0..10
    assert quantile(vals, 0.05) == pytest.approx(0.5) and quantile(vals, 0.95) == pytest.approx(9.5)
    iv = quantile_interval(vals, 0.8)
    assert (iv.low, iv.high) == (pytest.approx(1.0), pytest.approx(9.0))
    assert quantile_interval([3.0]).width == 0.0
    with pytest.raises(ConfigError):
        quantile_interval([])


# --------------------------------------------------------------------------- the twin ensemble
def test_ensemble_is_deterministic_and_member_zero_is_the_nominal_twin(shipped) -> None:
    from engine.device.twin.fast import fast_points

    settings = _settings(shipped)
    a = ensemble(BERT_BASE_LIKE, shipped, settings, members=12, seed=5)
    b = ensemble(BERT_BASE_LIKE, shipped, settings, members=12, seed=5)
    fresh = dataclasses.replace(shipped)  # an equal profile, not the cached object: the same figures
    c = ensemble(BERT_BASE_LIKE, fresh, settings, members=12, seed=5)
    assert a.energy_ps == b.energy_ps == c.energy_ps and a.members == 12
    nominal = fast_points(BERT_BASE_LIKE, shipped, a.settings, warmup_steps=0, steps=1)
    assert a.energy_ps[0] == tuple(p.measurement.joules_per_sample for p in nominal)
    other = ensemble(BERT_BASE_LIKE, shipped, settings, members=12, seed=6)
    assert other.energy_ps[1:] != a.energy_ps[1:]


def test_paired_saving_interval_holds_the_nominal_and_is_narrower_than_unpaired(shipped) -> None:
    settings = _settings(shipped)
    ens = ensemble(BERT_BASE_LIKE, shipped, settings, members=32)
    best = ens.optima()[0]
    nominal_saving = ens.savings(best)[0]
    iv = ens.saving(best)
    assert iv.width > 0 and iv.level == 0.9 and "32" in iv.basis and "paired" in iv.basis
    assert iv.low - 0.05 <= nominal_saving <= iv.high + 0.05
    # Unpaired (each end from the other's extreme) would be far wider: errors common to both cancel.
    e_best, e_maxn = ens.energy(best), ens.energy(MAXN)
    unpaired = (1 - e_best.high / e_maxn.low, 1 - e_best.low / e_maxn.high)
    assert unpaired[1] - unpaired[0] > iv.width
    assert ens.optimum_gpu().low <= ens.optimum_gpu().high and ens.optimum_steps() >= 0
    assert ens.time(best).width > 0 and ens.slowdown(best).high >= ens.slowdown(best).low


def test_a_profile_without_uncertainty_gives_zero_width_intervals(shipped) -> None:
    sure = dataclasses.replace(shipped, uncertainty=tuple(
        ParamSpread(s.path, s.lower, s.upper, 0.0) for s in shipped.uncertainty))
    ens = ensemble(BERT_BASE_LIKE, sure, _settings(sure), members=8)
    for s in ens.settings:
        assert ens.energy(s).width == 0.0 and ens.time(s).width == 0.0 and ens.saving(s).width == 0.0
    assert ens.optimum_steps() == 0 and ens.optimum_gpu().width == 0.0


def test_ensemble_adds_maxn_and_refuses_unknown_settings(shipped) -> None:
    pinned = [s for s in _settings(shipped) if s != MAXN][:3]
    ens = ensemble(BERT_BASE_LIKE, shipped, pinned, members=4)
    assert ens.settings[0] == MAXN and len(ens.settings) == 4
    with pytest.raises(KeyError):
        ens.energy(DvfsSetting(nvpmodel=3))


# --------------------------------------------------------------------------- the CLI's twin estimates
def test_twin_saving_interval_lies_around_the_twins_figure(shipped) -> None:
    from engine.results.estimates import twin_saving_interval

    setting = DvfsSetting(gpu_hz=612_000_000, nvpmodel=0)
    iv = twin_saving_interval(BERT_BASE_LIKE, shipped, setting, 0.2)
    assert iv is not None and iv.low <= 0.2 <= iv.high and iv.width > 0 and "paired" in iv.basis
    assert twin_saving_interval(None, shipped, setting, 0.2) is None  # no steps: shown bare
    assert twin_saving_interval(BERT_BASE_LIKE, shipped, MAXN, 0.0) is None
    assert twin_saving_interval(BERT_BASE_LIKE, "no-such-profile", setting, 0.2) is None


def test_twin_sweeps_and_runs_give_their_saving_an_interval_and_ml_runs_their_prediction(
        isolated_env, tmp_path, capsys) -> None:
    import json

    from engine.cli import main

    db = str(tmp_path / "db.sqlite")
    shape = ["--model", "bert-tiny", "--task", "sst2", "--batch-size", "8", "--max-seq-len", "32",
             "--twin", "agx-orin-64gb", "--db", db]
    assert main(["sweep", *shape, "--fast"]) == 0
    text = capsys.readouterr().out
    line = next(ln for ln in text.splitlines() if "as an estimate of a board's" in ln)
    assert " MAXN (90%: " in line and "twin ensemble of 32 agx-orin-64gb profiles, paired" in line
    run = ["run", *shape, "--simulate", "--steps", "5", "--compare", "maxn"]
    assert main([*run, "--policy", "static:gpu=612"]) == 0
    assert "as an estimate of a board's: " in capsys.readouterr().out
    assert main([*run, "--policy", "ml:probes=0"]) == 0
    text = capsys.readouterr().out
    predicted = next(ln for ln in text.splitlines() if ln.startswith("policy's prediction:"))
    assert " MAXN (90%: " in predicted and predicted.endswith("[predicted]")
    assert main([*run, "--policy", "ml:probes=0", "--json"]) == 0
    detail = json.loads(capsys.readouterr().out)["run"]["policy_detail"]
    iv, saving = detail["choice"]["expected_saving_interval"], detail["choice"]["expected_saving"]
    assert iv["low"] <= saving <= iv["high"] and detail["probes_given"] is True


# --------------------------------------------------------------------------- projections of a run
def test_extrapolated_interval_grows_with_the_steps_spread_and_what_is_left() -> None:
    from engine.core.interval import extrapolated

    assert extrapolated(10.0, 5, 1, 1.0, 0.0) is None  # one step: no spread to go by
    flat = extrapolated(10.0, 5, 4, 1.0, 0.0)
    assert (flat.low, flat.high) == (15.0, 15.0)
    a, b = extrapolated(10.0, 5, 4, 1.0, 0.01), extrapolated(10.0, 50, 4, 1.0, 0.01)
    assert a.contains(15.0) and b.width > a.width > 0
    assert a.high - 15.0 == pytest.approx(1.6449 * (0.01 * (5 + 25 / 4)) ** 0.5, rel=1e-3)
    assert extrapolated(10.0, 0, 4, 1.0, 0.5).width == 0.0  # nothing left: the figure is what was done
    assert extrapolated(10.0, 5, 4, 1.0, 100.0).low == 10.0  # never below what was already spent


def test_the_run_pages_projections_carry_intervals_from_uneven_steps() -> None:
    from engine.run.experiment import ExperimentPhase
    from engine.workload.events import RunStarted, StepEnd, StepEnergy
    from engine.core.provenance import Source
    from tui.fmt import duration_pm, energy_pm
    from tui.runstate import RunTracker

    t = RunTracker(Source.TWIN, ("GPU",))
    t.feed(ExperimentPhase("policy", "online", 1, 1))
    t.feed(RunStarted(model="m", task="sst2", mode="full", precision="fp32", device="cpu", batch_size=4,
                      total_steps=100, steps_per_epoch=100, seed=0, trainable_params=1, total_params=1))
    elapsed = 0.0
    for i in range(1, 21):
        j, dt = (1.0 if i % 2 else 2.0), (0.1 if i % 3 else 0.2)
        elapsed += dt
        t.feed(StepEnergy(step=i, time_s=0.5, energy_j={"GPU": j}, total_energy_j=j, avg_power_w=j / 0.5,
                          rails=("GPU",), source=Source.TWIN, samples=4))
        t.feed(StepEnd(step=i, epoch=0, loss=1.0, samples=4, tokens=64, lr=0.1, wall_s=dt, elapsed_s=elapsed))
    v = t.view()
    assert v.projected_interval.width > 0 and v.projected_interval.contains(v.projected_j)
    assert v.projected_interval.low >= v.energy_j and v.eta_interval.width > 0
    assert "±" in energy_pm(v.projected_j, v.projected_interval)
    assert "±" in duration_pm(v.eta_s, v.eta_interval)


# --------------------------------------------------------------------------- the online policy's prior
def test_online_prior_profiles_only_the_clocks_the_ensemble_finds_plausible(shipped) -> None:
    from engine.device.twin.orin import VirtualOrin
    from engine.dvfs.objectives import parse_objective
    from engine.dvfs.policies import PolicyContext, make_policy
    from traces import bert_base_workload

    workload = bert_base_workload()
    sure = dataclasses.replace(shipped, uncertainty=tuple(
        ParamSpread(s.path, s.lower, s.upper, 0.0) for s in shipped.uncertainty))
    with VirtualOrin() as twin:
        device = twin.device()
        ctx = PolicyContext(device, parse_objective("energy"), workload=workload)
        plain = make_policy("online")
        plain.initial(ctx)
        wide = make_policy("online:prior=twin")
        wide.initial(ctx)
        narrow = make_policy("online", prior="twin", profile=sure)  # no spread: the twin's optimum, +-1 step
        narrow.initial(ctx)
    table = plain.candidates_hz
    best = ensemble(workload.steps, sure, [DvfsSetting(gpu_hz=f, nvpmodel=0) for f in table]).optima()[0].gpu_hz
    i = table.index(best)
    assert narrow.candidates_hz == table[i - 1:i + 2] and narrow.prior_summary["optimum_steps"] == 0
    assert set(narrow.candidates_hz) <= set(wide.candidates_hz) <= set(table)
    assert len(wide.candidates_hz) < len(table) and wide.max_profiling_steps < plain.max_profiling_steps
    assert wide.describe()["prior"]["candidates"] == len(wide.candidates_hz) and plain.describe()["prior"] is None
    assert "prior=twin" in wide.spec and "prior" not in plain.spec


def test_online_prior_refuses_what_it_cannot_use() -> None:
    from engine.device.twin.orin import VirtualOrin
    from engine.dvfs.objectives import parse_objective
    from engine.dvfs.policies import PolicyContext, make_policy

    with pytest.raises(ConfigError):
        make_policy("online:prior=guess")
    with pytest.raises(ConfigError, match="candidates"):
        make_policy("online:prior=twin,candidates=612/816")
    with VirtualOrin() as twin:
        with pytest.raises(ConfigError, match="step trace"):
            make_policy("online:prior=twin").initial(PolicyContext(twin.device(), parse_objective("energy")))


def test_the_intervals_import_nothing_heavy() -> None:
    # `select` and the ml policy compute them on every choice: no torch, transformers or scikit-learn
    import subprocess
    import sys

    modules = ("engine.core.interval", "engine.device.twin.ensemble", "engine.selector.uncertainty",
               "engine.results.estimates")
    code = ("import importlib, sys\n"
            f"for name in {modules!r}: importlib.import_module(name)\n"
            "print(','.join(sorted({m.split('.')[0] for m in sys.modules}"
            " & {'torch', 'transformers', 'sklearn', 'scipy', 'pandas', 'textual'})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == ""


def test_a_run_past_its_planned_steps_still_projects_without_failing() -> None:
    from tui.runstate import Welford

    w = Welford()
    for x in (1.0, 2.0, 1.5, 1.2, 1.8):  # MIN_SPREAD_STEPS: a spread to go by
        w.add(x)
    iv = w.extrapolate(10.0, 0, 8.0)  # 10 J spent, nothing left, the projection below it (steps > total)
    assert iv.contains(8.0) and iv.low <= iv.high
    assert w.extrapolate(10.0, 5, 17.5).contains(17.5)


def test_a_runs_board_estimate_is_the_engines_and_json_carries_what_the_text_says(
        isolated_env, tmp_path, capsys) -> None:
    """The interval of a twin run's saving is computed once, by the engine, on the result's comparison:
    `run --json` carries the very interval the text prints (the formatter computes nothing)."""
    import json

    from engine.cli import main
    from engine.core.interval import Interval
    from engine.results.format import saving_text

    db = str(tmp_path / "db.sqlite")
    run = ["run", "--model", "bert-tiny", "--task", "sst2", "--batch-size", "8", "--max-seq-len", "32",
           "--twin", "agx-orin-64gb", "--db", db, "--simulate", "--steps", "5", "--compare", "maxn",
           "--policy", "static:gpu=612"]
    assert main(run) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if "as an estimate of a board's" in ln)
    assert main([*run, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    cmp_ = out["comparison"]
    est = cmp_["board_estimate"]
    assert est is not None and est["low"] <= cmp_["saving_pct"] / 100.0 <= est["high"]
    iv = Interval.from_json(est)
    assert line == f"  as an estimate of a board's: {saving_text(cmp_['saving_pct'], interval=iv)}  [{iv.basis}]"
    assert main([*run, "--policy", "maxn", "--json"]) == 0  # MAXN against MAXN: no interval to give
    assert json.loads(capsys.readouterr().out)["comparison"]["board_estimate"] is None
    from engine.results.store import Store

    with Store(db) as store:  # the comparison the result carries is the one the store recorded
        row = next(c for c in store.comparisons_for(out["run"]["run_id"]) if c.id == cmp_["record_id"])
    assert (row.saving_pct, row.slowdown_pct) == (cmp_["saving_pct"], cmp_["slowdown_pct"])


def test_a_sweeps_optimum_vs_maxn_is_the_engines_and_json_carries_what_the_text_says(
        isolated_env, tmp_path, capsys) -> None:
    """A sweep's optimum against MAXN, its board estimate included, is computed once by the sweep:
    `sweep --json` carries the very figures and interval its text prints (was: the CLI's formatter ran
    the twin ensemble itself, and --json had no interval)."""
    import json

    from engine.cli import main
    from engine.core.interval import Interval
    from engine.results.format import board_estimate_text, versus_text

    sweep = ["sweep", "--model", "bert-tiny", "--task", "sst2", "--batch-size", "8", "--max-seq-len", "32",
             "--twin", "agx-orin-64gb", "--db", str(tmp_path / "db.sqlite"), "--fast", "--space", "gpu"]
    assert main(sweep) == 0
    text = capsys.readouterr().out.splitlines()
    assert main([*sweep, "--json"]) == 0
    vs = json.loads(capsys.readouterr().out)["optimum_vs_maxn"]
    iv = Interval.from_json(vs["board_estimate"])
    assert iv.low <= vs["saving_pct"] / 100.0 <= iv.high
    assert f"  {board_estimate_text(vs['saving_pct'], iv)}" in text
    assert any(ln.startswith(f"  {versus_text(vs['saving_pct'], vs['slowdown_pct'], than='MAXN (mode 0)')} per sample")
               for ln in text)
