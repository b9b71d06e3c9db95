"""The `ml` policy and the `train-selector` / `select` commands."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys

import pytest

from engine.cli import main
from engine.device.twin.orin import VirtualOrin
from engine.device.twin.profile import load_profile
from engine.dvfs.objectives import parse_objective
from engine.dvfs.policies import BUILTIN_POLICIES, PolicyContext
from engine.device.setting import MAXN, DvfsSetting
from engine.core.errors import ConfigError
from engine.core.provenance import Source
from engine.selector import policy_factory
from engine.selector.features import describe_workload
from engine.selector.persistence import sidecar_path
from engine.selector.probes import MEASURED_MARGIN
from engine.selector.policy import MLPolicy, workload_features
from engine.device.twin.fast import fast_sweep
from engine.results.records import WorkloadRecord
from engine.workload.spec import WorkloadSpec

make_policy = policy_factory().make  # every ml spec below goes through the clients' factory

TRAIN = ["train-selector", "--from-twin-zoo", "--models", "bert-tiny,pythia-14m", "--tasks", "sst2",
         "--batch-sizes", "8,32", "--seq-lens", "32", "--precisions", "fp32", "--modes", "full", "--quick",
         "--candidates", "ridge-poly,knn", "--splits", "2"]


@pytest.fixture(scope="module", autouse=True)
def _env(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SLM_DVFS_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "selector-cache"))
        mp.setenv("SLM_DVFS_DATA_DIR", str(tmp_path_factory.mktemp("data")))
        yield


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    from engine.selector.persistence import user_selector_dir

    out = user_selector_dir() / "small.joblib"  # a trusted folder (outside it, loading needs --trust)
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        assert main(TRAIN + ["--out", str(out)]) == 0
    return out, text.getvalue()


@pytest.fixture(scope="module")
def trained(trained_run):
    return trained_run[0]


@pytest.fixture(scope="module")
def device():
    with VirtualOrin() as twin:
        yield twin.device()


@pytest.fixture(scope="module")
def workload():
    return describe_workload("bert-tiny", "sst2", batch_size=16, seq_len=32)


def test_train_selector_command_prints_the_cv_table_and_saves(trained_run):
    path, out = trained_run
    side = json.loads(sidecar_path(path).read_text())
    assert side["source"] == "twin" and len(side["cv_table"]) == 4
    assert side["training"]["command"]["from_twin_zoo"] is True
    lines = out.splitlines()
    assert "cross-validation on twin data" in lines[0] and "mean regret" in lines[1]
    assert [ln.split()[1] for ln in lines[2:6]] == [r["label"] for r in side["cv_table"]]
    assert f"Winner: {side['winner']}" in out and str(path) in out and "twin-trained" in out
    assert "Took " in lines[-1] and "8 workloads" in lines[-1]  # 4 shapes x the hf and lean loops  # how long a retrain takes, said at its end


def test_train_selector_json_and_option_errors(tmp_path, capsys):
    assert main(TRAIN + ["--out", str(tmp_path / "s.joblib"), "--json", "--candidates", "knn"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["winner"].startswith("knn/") and [r["label"] for r in report["cv_table"]] \
        and report["saved"].endswith("s.joblib")
    assert main(["train-selector", "--models", "bert-tiny"]) == 2  # zoo options without --from-twin-zoo
    assert main(["train-selector", "--from-twin-zoo", "--source", "measured"]) == 2
    assert main(["train-selector", "--db", str(tmp_path / "none.sqlite")]) == 2  # no store there
    err = capsys.readouterr().err
    assert "--from-twin-zoo" in err and "What to do" in err
    assert main(TRAIN + ["--modes", "full,prefix", "--out", str(tmp_path / "m.joblib")]) == 2
    err = capsys.readouterr().err  # parsed at the edge, the values listed
    assert "unknown training mode 'prefix'" in err and "full, bitfit, head, lora" in err


def test_train_selector_loops_option(tmp_path, capsys):
    """The twin zoo has a workload of each loop per shape (the default); --loops narrows it, as --modes does."""
    assert main(TRAIN + ["--loops", "lean", "--candidates", "knn", "--json", "--out", str(tmp_path / "l.joblib")]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["training"]["workloads"] == 4 and "loops lean" in report["training"]["notes"]
    assert report["training"]["command"]["loops"] == "lean"
    assert main(TRAIN + ["--loops", "hf,trainer", "--out", str(tmp_path / "m.joblib")]) == 2
    err = capsys.readouterr().err
    assert "unknown training loop 'trainer'" in err and "hf, lean" in err
    assert main(["train-selector", "--loops", "lean"]) == 2  # a zoo option without --from-twin-zoo
    assert "--loops only applies with --from-twin-zoo" in capsys.readouterr().err


def test_the_shipped_selector_tells_the_lean_loop_from_the_hf_one(capsys):
    """`select --loop lean` predicted the hf loop's figures: the features had no column for the loop's serial
    host work. On the shipped selector (this module's data folder holds no default.joblib) the two differ, and
    the lean loop, without the Trainer's per-step Python the GPU waits for, is predicted faster."""
    from engine.selector.persistence import resolve_selector_path, shipped_selector_dir

    assert resolve_selector_path().parent == shipped_selector_dir().resolve()
    args = ["select", "--model", "bert-tiny", "--task", "sst2", "--batch-size", "8", "--max-seq-len", "32",
            "--pad", "max", "--json"]
    figures = {}
    for loop in ("hf", "lean"):
        assert main(args + ["--loop", loop]) == 0
        data = json.loads(capsys.readouterr().out)
        assert data["workload"]["loop"] == loop and data["predicted"]["source"] == "predicted"
        assert (data["workload"]["serial_cycles"] > 0) == (loop == "hf")
        figures[loop] = data["maxn"]
    assert figures["lean"]["time_per_sample_s"] < figures["hf"]["time_per_sample_s"]
    assert figures["lean"]["energy_per_sample_j"] != figures["hf"]["energy_per_sample_j"]


def test_select_command(trained, capsys):
    args = ["select", "--model", "bert-tiny", "--task", "sst2", "--batch-size", "16", "--max-seq-len", "32",
            "--selector", str(trained)]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "Chosen:" in text and "Expected:  vs MAXN (mode 0): " in text
    assert "[predicted]" in text and "Confidence:" in text
    assert main(args + ["--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["predicted"]["source"] == "predicted" and data["maxn"]["setting"] == MAXN.to_json()
    assert data["confidence"]["source"] == "predicted" and data["selector"]["source"] == "twin"
    assert data["expected_saving"] == pytest.approx(
        1 - data["predicted"]["energy_per_sample_j"] / data["maxn"]["energy_per_sample_j"])
    assert main(args + ["--json", "--probes", "2", "--twin"]) == 0
    probed = json.loads(capsys.readouterr().out)
    assert len(probed["probes"]) == 2 and all(p["measurement"]["source"] == "twin" for p in probed["probes"])
    # After the probes a setting no probe measured is chosen only when predicted at least MEASURED_MARGIN
    # cheaper than the best measured one (probes.measured_first).
    best_probed = min(p["measurement"]["joules_per_sample"] for p in probed["probes"] if p["setting"] != MAXN.to_json())
    chosen = probed["predicted"]
    assert chosen["source"] == "twin" or chosen["energy_per_sample_j"] * (1 + MEASURED_MARGIN) < best_probed
    assert main(args + ["--probes", "1"]) == 2  # nowhere to measure
    assert "--twin" in capsys.readouterr().err
    assert main(args[:-1] + [str(trained.parent / "missing.joblib")]) == 2


def test_ml_policy_made_by_the_clients_factory(trained, device, workload):
    policy = make_policy(f"ml:{trained}", probes=0)  # a number given: no probes whatever the interval says
    assert isinstance(policy, MLPolicy) and policy.name == "ml" and not policy.profiling
    ctx = PolicyContext(device, parse_objective("energy"), workload=workload[0])
    setting = policy.initial(ctx)
    expected = policy.selector.choose(workload[0], parse_objective("energy"), as_source=Source.TWIN)
    assert setting == expected.setting and policy.on_step_end(1, None) is None
    info = policy.describe()
    assert info["setting"] == setting.to_json() and info["choice"]["predicted"]["source"] == "predicted"
    assert info["selector_trained_on"] == "twin" and "energy than MAXN" in info["reason"]
    assert info["selector_basis"] == policy.selector.basis.line() and "[twin]" in info["selector_basis"]
    json.dumps(info)
    with pytest.raises(ConfigError):
        make_policy(f"ml:{trained}", probes=5)
    with pytest.raises(ConfigError):
        make_policy(f"ml:{trained}", selector=str(trained))
    spec = make_policy(f"ml:probes=2,warmup=0,measure=3,selector={trained}")
    assert (spec.probes, spec.warmup_steps, spec.measure_steps, spec.path) == (2, 0, 3, trained)
    for bad in ("ml:probes=two", "ml:speed=3", f"ml:probes=1,probes=2,selector={trained}"):
        with pytest.raises(ConfigError):
            make_policy(bad)
    with pytest.raises(ConfigError, match="no selector file"):
        make_policy("ml:/nonexistent/sel.joblib")


def test_ml_policy_probes_in_the_first_steps(trained, device, workload):
    w, trace = workload
    profile = load_profile("agx-orin-64gb")
    policy = make_policy(f"ml:{trained}", probes=2, warmup_steps=1, measure_steps=2)
    ctx = PolicyContext(device, parse_objective("energy"), workload=w)
    current = policy.initial(ctx)
    plan = policy.selector.probe_plan(w, parse_objective("energy"), probes=2, as_source=Source.TWIN)
    assert current == plan[0] and policy.profiling
    seen, step, final = [current], 0, None
    while policy.profiling:
        step += 1
        cost = fast_sweep(trace, profile, [current], steps=1)[0][1]
        nxt = policy.on_step_end(step, cost)
        if nxt is not None:
            current = nxt
            seen.append(nxt)
        final = current
    assert step == 2 * 3  # two windows of 1 warm-up + 2 measured steps
    assert seen[:2] == plan
    assert final == policy.setting and len(policy.choice.probes) == 2
    assert all(m.source == Source.TWIN for _s, m in policy.choice.probes)
    assert policy.choice.probes[0][1].samples == 2 * 16  # the two measured steps, not the warm-up
    assert policy.describe()["probe_steps"] == 6


def test_ml_policy_without_a_cost_on_a_probe_step(trained, device, workload):
    policy = make_policy(f"ml:{trained}", probes=1, warmup_steps=0, measure_steps=1)
    policy.initial(PolicyContext(device, parse_objective("energy"), workload=workload[0]))
    with pytest.raises(Exception, match="no time/energy"):
        policy.on_step_end(1, None)


def _named() -> WorkloadSpec:
    """bert-tiny/sst2 at 16x32 fp32, named as resolve_workload names it."""
    from engine.workload.models import resolve_model

    return WorkloadSpec("bert-tiny", "sst2", batch_size=16, seq_len=32, precision="fp32", padding="max_length",
                        name="bert-tiny", config=dict(resolve_model("bert-tiny").config))


def test_workload_features_from_what_the_experiment_passes(workload):
    w, trace = workload
    from engine.workload.resolve import Workload

    sim = Workload(spec=_named(), family="bert", trace=trace, total_params=w.params)
    assert workload_features(sim) == w
    asked = WorkloadSpec("bert-tiny", "sst2", batch_size=16, seq_len=32, precision="fp32", padding="max_length")
    assert workload_features(asked) == w
    stored = WorkloadRecord("bert-tiny", "sst2", 16, 32, "fp32", family="bert")  # the model as the store has it
    assert workload_features(stored) == w
    with pytest.raises(ConfigError, match="cannot tell the workload"):
        workload_features({"model": "bert-tiny", "task": "sst2"})  # a mapping is no workload
    with pytest.raises(ConfigError):
        workload_features(None)


def test_without_the_clients_factory_ml_is_the_plug_point(trained):
    with pytest.raises(ConfigError, match="not among this run's policies"):
        BUILTIN_POLICIES.make("ml")
    assert isinstance(make_policy(f"ml:{trained}"), MLPolicy)
    assert DvfsSetting(gpu_hz=816_000_000, nvpmodel=0) in MLPolicy(trained).selector.candidates


def test_a_client_registers_ml_without_loading_sklearn(tmp_path):
    # A fresh interpreter, as `slm-dvfs run --policy ml` is: the client builds its policy factory
    # (dvfs never imports the selector), and that costs no scikit-learn import.
    code = ("import sys; from engine.selector import policy_factory; policies = policy_factory(); "
            "p = policies.make('ml'); "
            "assert 'sklearn' not in sys.modules; print(type(p).__name__, p.path.name)")
    env = {**os.environ, "SLM_DVFS_DATA_DIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
    assert out.split() == ["MLPolicy", "default.joblib"]


def test_select_and_run_need_trust_outside_the_trusted_folders(trained, tmp_path, capsys):
    import shutil

    from engine.selector.persistence import sidecar_path

    copy = tmp_path / "copy.joblib"
    shutil.copy(trained, copy)
    shutil.copy(sidecar_path(trained), sidecar_path(copy))
    args = ["select", "--model", "bert-tiny", "--task", "sst2", "--batch-size", "16", "--max-seq-len", "32",
            "--selector", str(copy)]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "outside the trusted folders" in err and "--trust" in err and "Traceback" not in err
    assert main(args + ["--trust"]) == 0
    capsys.readouterr()
    run = ["run", "--model", "bert-tiny", "--task", "sst2", "--twin", "agx-orin-64gb", "--simulate", "--steps", "2",
           "--policy", f"ml:{copy}",
           "--db", str(tmp_path / "r.sqlite")]
    assert main(run) == 2 and "--trust" in capsys.readouterr().err


# --------------------------------------------------------------------------- intervals
def test_training_keeps_the_winners_regret_quantiles_and_select_shows_intervals(trained, capsys):
    side = json.loads(sidecar_path(trained).read_text())
    kept = side["training"]["cv_regret"]
    assert kept["label"] == side["winner"] and kept["workloads"] == 8  # 4 shapes x 2 loops
    assert 0 <= kept["q50"] <= kept["q90"] <= kept["q95"]
    args = ["select", "--model", "bert-tiny", "--task", "sst2", "--batch-size", "16", "--max-seq-len", "32",
            "--selector", str(trained)]
    assert main(args) == 0
    text = capsys.readouterr().out
    saving_line = next(ln for ln in text.splitlines() if ln.startswith("Expected:"))
    assert "energy (90%: " in saving_line and "twin ensemble of 32" in text and "selector CV regret" in text
    assert "J (" in next(ln for ln in text.splitlines() if ln.strip().startswith("chosen"))
    assert "probes it calls for:" in text
    assert main(args + ["--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    iv = data["expected_saving_interval"]
    assert iv["low"] <= data["expected_saving"] <= iv["high"] and iv["level"] == 0.9
    assert data["uncertainty"]["cv_regret_q90"] == pytest.approx(kept["q90"])
    assert data["uncertainty"]["ensemble_members"] == 32 and data["uncertainty"]["source"] == "predicted"
    assert 0 <= data["probes_it_calls_for"]["probes"] <= 3 and "CV regret" in data["probes_it_calls_for"]["why"]
    e = data["uncertainty"]["energy_per_sample_j"]
    assert e["low"] <= data["predicted"]["energy_per_sample_j"] <= e["high"]


def test_an_old_selector_file_gets_the_ensemble_interval_only_and_says_so(trained, workload):
    from engine.selector.persistence import load_selector
    from engine.selector.uncertainty import choice_uncertainty

    sel = load_selector(trained)
    w, trace = workload
    choice = sel.choose(w, parse_objective("energy"))
    both = choice_uncertainty(choice, sel, trace)
    sel.training.pop("cv_regret")  # as a file written before the quantiles were kept
    old = choice_uncertainty(choice, sel, trace)
    worst = choice.confidence.cv_worst_regret  # the one figure of its misses such a file keeps: named, not denied
    assert f"records only its worst held-out miss ({worst:.1%} more energy" in old.note and old.regret_q90 is None
    assert "does not record" not in old.note and "CV regret" not in old.basis
    assert both.saving.high == pytest.approx(old.saving.high) and both.saving.low <= old.saving.low
    assert choice_uncertainty(choice, sel, None) is None  # no trace, no record: no interval to give
    assert old.saving.low <= choice.saving <= old.saving.high


def test_probe_rule_on_both_sides(trained, workload):
    import dataclasses

    from engine.core.interval import Interval
    from engine.selector.persistence import load_selector
    from engine.selector.uncertainty import ChoiceUncertainty, probes_for

    choice = load_selector(trained).choose(workload[0], parse_objective("energy"))
    choice = dataclasses.replace(choice, confidence=dataclasses.replace(choice.confidence, extrapolating=()))

    def with_(steps, r90):
        unc = ChoiceUncertainty(Interval(0.1, 0.2), optimum_steps=steps, regret_q90=r90)
        return dataclasses.replace(choice, uncertainty=unc)

    assert probes_for(with_(0, 0.01), 3)[0] == 0  # the ensemble agrees, the record is good: none
    assert probes_for(with_(1, None), 3)[0] == 0  # neighbouring optima: a flat curve
    assert probes_for(with_(2, 0.0), 3)[0] == 1
    assert probes_for(with_(4, 0.0), 3)[0] == 3 and probes_for(with_(9, 0.0), 2)[0] == 2  # at most the maximum
    assert probes_for(with_(0, 0.03), 3)[0] == 1 and probes_for(with_(0, 0.08), 3)[0] == 3
    far = dataclasses.replace(with_(0, 0.0), confidence=dataclasses.replace(choice.confidence,
                                                                            extrapolating=("params",)))
    assert probes_for(far, 3) == (3, "outside the training range (params)")
    bare = dataclasses.replace(choice, uncertainty=None, confidence=dataclasses.replace(choice.confidence,
                                                                                         level="high"))
    assert probes_for(bare, 3)[0] == 0


@pytest.mark.parametrize("steps, expected", [(0, 0), (3, 2)])
def test_ml_policy_takes_the_probes_its_interval_calls_for(trained, device, workload, monkeypatch, steps, expected):
    from engine.core.interval import Interval
    from engine.selector import uncertainty

    seen = []

    def fake(choice, selector, trace=None, profile=None, **kw):
        seen.append(trace)
        return uncertainty.ChoiceUncertainty(Interval(0.05, 0.25), optimum_steps=steps, regret_q90=0.0)

    monkeypatch.setattr(uncertainty, "choice_uncertainty", fake)
    w, trace = workload
    policy = make_policy(f"ml:{trained}")  # no number: the interval decides
    from engine.workload.resolve import Workload

    resolved = Workload(spec=_named(), family="bert", trace=trace, total_params=w.params)
    first = policy.initial(PolicyContext(device, parse_objective("energy"), workload=resolved))
    assert seen and seen[0] is not None  # the ensemble got the workload's steps
    assert policy.probes == expected and policy.describe()["probes_given"] is False
    assert "auto:" in policy.describe()["probes_rule"]
    assert policy.profiling == bool(expected)
    if not expected:
        assert first == policy.setting and "(90%: 5.0–25.0% less)" in policy.describe()["reason"]
    given = make_policy(f"ml:probes=1,selector={trained}")  # a number given overrides the rule
    given.initial(PolicyContext(device, parse_objective("energy"), workload=resolved))
    assert given.probes == 1 and given.describe()["probes_rule"] == "given"
    assert make_policy(f"ml:probes=auto,selector={trained}").given_probes is None
