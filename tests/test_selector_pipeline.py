"""The selector end to end on small twin data: dataset, leak-free CV, training, choosing,
probes, and training from the results store."""

from __future__ import annotations

import numpy as np
import pytest

from engine.device.twin.profile import load_profile
from engine.dvfs.objectives import Objective, parse_objective
from engine.device.setting import MAXN
from engine.core.errors import ConfigError
from engine.core.provenance import Source
from engine.selector.candidates import CandidateSpec, default_candidates
from engine.selector.dataset import from_store, from_twin_zoo, profile_settings
from engine.selector.features import describe_workload
from engine.selector.selection import choose, cross_validate, cv_folds
from engine.selector.selector import train_selector
from engine.device.twin.fast import fast_sweep

SMALL = dict(models=["bert-tiny", "bert-mini", "pythia-14m"], tasks=["sst2", "mnli"], batch_sizes=(8, 32),
             seq_lens=(32,), precisions=("fp32",), modes=("full",))
FAST = (CandidateSpec("ridge-poly", "time+power", small=True), CandidateSpec("ridge-poly", "time+energy", small=True),
        CandidateSpec("knn", "time+power", small=True), CandidateSpec("rf-classifier", "setting", small=True))


# traces of the zoo models, shared by the selector tests of a session (conftest)
pytestmark = pytest.mark.usefixtures("selector_trace_cache")


@pytest.fixture(scope="module")
def ds():
    return from_twin_zoo(**SMALL)


@pytest.fixture(scope="module")
def trained(ds):
    return train_selector(ds, candidates=FAST, n_splits=3)


def truth(workload, trace):
    settings = profile_settings(load_profile("agx-orin-64gb"), "gpu")
    return dict(fast_sweep(trace, load_profile("agx-orin-64gb"), settings))


def test_twin_zoo_dataset(ds):
    assert len(ds) == 3 * 2 * 2 * 2 * 12  # models x tasks (two heads) x batches x loops x settings
    assert ds.source == "twin" and set(ds.sources) == {Source.TWIN} and not ds.source_column
    # a group holds a shape's tasks and loops
    assert len(ds.by_workload()) == 24 and len(set(ds.groups().tolist())) == 6
    assert np.allclose(ds.energy_per_sample, ds.time_per_sample * ds.power_w)
    # Against fast_sweep itself: the dataset holds exactly the twin's per-sample figures.
    w, trace = describe_workload("bert-mini", "sst2", batch_size=32, seq_len=32, loop="hf")
    rows = ds.by_workload()[w.key]
    direct = truth(w, trace)
    for i in rows:
        m = direct[ds.settings[i]]
        assert ds.time_per_sample[i] == pytest.approx(m.seconds_per_sample)
        assert ds.energy_per_sample[i] == pytest.approx(m.joules_per_sample)
    # the lean loop's workload of the same shape: its own twin figures (no Trainer-style serial host work)
    lean, lean_trace = describe_workload("bert-mini", "sst2", batch_size=32, seq_len=32, loop="lean")
    lean_truth = truth(lean, lean_trace)
    for i in ds.by_workload()[lean.key]:
        assert ds.time_per_sample[i] == pytest.approx(lean_truth[ds.settings[i]].seconds_per_sample)
        assert ds.time_per_sample[i] < direct[ds.settings[i]].seconds_per_sample
    summary = ds.summary()
    assert summary["digest"] == ds.digest() and len(summary["digest"]) == 64
    assert ds.subset(rows).digest() != ds.digest()


def test_cv_never_leaks_a_workload_across_folds(ds):
    folds = cv_folds(ds, n_splits=5)
    assert len(folds) == 5
    tested = np.concatenate([te for _tr, te in folds])
    assert sorted(tested.tolist()) == list(range(len(ds)))  # every row held out exactly once
    for train, test in folds:
        assert not set(train.tolist()) & set(test.tolist())
        for keyf in (lambda w: w.key, lambda w: w.shape_key):
            assert not {keyf(ds.workloads[i]) for i in train} & {keyf(ds.workloads[i]) for i in test}
    # Too few workloads to hold one out is an error, not a silent leak.
    one = ds.subset(ds.by_workload()[next(iter(ds.by_workload()))])
    with pytest.raises(ConfigError, match="at least 2 workloads"):
        cv_folds(one)


def test_cross_validation_ranks_by_regret_of_choices(ds):
    report = cross_validate(ds, FAST, n_splits=3)
    assert [r.label for r in report.rows] == sorted([r.label for r in report.rows],
                                                    key=lambda lbl: next(r for r in report.rows
                                                                         if r.label == lbl).rank_key())
    for row in report.rows:
        outs = report.outcomes[row.label]
        assert row.workloads == len(outs) == 24
        assert min(o.regret for o in outs) >= -1e-12  # nothing beats the oracle
        assert row.mean_regret == pytest.approx(np.mean([o.regret for o in outs]))
        assert row.worst_regret == pytest.approx(max(o.regret for o in outs))
        if row.kind == "classifier":
            assert row.mape_energy is None
        else:
            assert all(np.isfinite(v) and v > 0 for v in (row.mape_time, row.mape_power, row.mape_energy))
    # An outcome's regret, recomputed from the rows by hand.
    o = report.outcomes[report.winner.label][0]
    rows = ds.by_workload()[o.workload]
    e = {ds.settings[i]: ds.energy_per_sample[i] for i in rows}
    assert o.oracle == min(e, key=e.get)
    assert o.regret == pytest.approx(e[o.chosen] / e[o.oracle] - 1)
    assert o.oracle_saving == pytest.approx(1 - e[o.oracle] / e[MAXN])


def test_choose_respects_objective(ds):
    rows = ds.by_workload()[next(iter(ds.by_workload()))]
    settings = [ds.settings[i] for i in rows]
    t, e = ds.time_per_sample[rows], ds.energy_per_sample[rows]
    best_e = choose(settings, t, e, Objective(), Source.TWIN)
    best_t = choose(settings, t, e, parse_objective("eta:0"), Source.TWIN)
    assert best_e == settings[int(np.argmin(e))] and best_t == settings[int(np.argmin(t))]
    within = choose(settings, t, e, parse_objective("energy@0%"), Source.TWIN)
    assert t[settings.index(within)] <= t[settings.index(MAXN)] * (1 + 1e-9)


def test_train_and_choose_for_an_unseen_workload(ds, trained):
    selector, report = trained
    assert selector.winner == report.winner.label and selector.source == "twin"
    assert selector.candidates[0] == MAXN and len(selector.candidates) == 12
    w, trace = describe_workload("bert-mini", "sst2", batch_size=16, seq_len=32)  # batch 16: not in training
    assert w.key not in ds.by_workload()
    choice = selector.choose(w)
    assert choice.setting in selector.candidates
    assert choice.predicted.source == Source.PREDICTED and choice.maxn.setting == MAXN
    assert choice.saving == pytest.approx(1 - choice.predicted.energy_per_sample / choice.maxn.energy_per_sample)
    assert choice.confidence.level in ("high", "medium") and not choice.confidence.extrapolating
    real = truth(w, trace)
    oracle = min(real.values(), key=lambda m: m.joules_per_sample)
    regret = real[choice.setting].joules_per_sample / oracle.joules_per_sample - 1
    assert regret < 0.05, f"regret {regret:.3%} on an interpolated workload"
    # Predicted energies follow the twin within the CV error band (this grid is tiny: three small models at two
    # batch sizes, each shape under two loops whose per-sample costs differ several times over).
    band = report.winner.mape_energy
    assert band is not None and band > 0
    for p in selector.predict(w):
        assert p.energy_per_sample == pytest.approx(real[p.setting].joules_per_sample, rel=band)
    out = choice.to_json()
    assert out["predicted"]["source"] == "predicted" and out["saving_source"] == "predicted"
    # Far outside the training shapes, the selector says so.
    big, _ = describe_workload("bert-base-uncased", "sst2", batch_size=32, seq_len=32)
    far = selector.choose(big)
    assert far.confidence.level == "low" and "params" in far.confidence.extrapolating


def test_probes_measure_on_the_twin_and_correct(trained):
    selector, _ = trained
    w, trace = describe_workload("pythia-14m", "sst2", batch_size=16, seq_len=32)
    profile = load_profile("agx-orin-64gb")
    calls = []

    def measure(setting):
        calls.append(setting)
        return fast_sweep(trace, profile, [setting], steps=2)[0][1]

    plan = selector.probe_plan(w, probes=3, as_source=Source.TWIN)
    choice = selector.choose(w, probes=3, measure=measure, as_source=Source.TWIN)
    assert calls == plan and len(set(plan)) == 3
    assert [s for s, _ in choice.probes] == plan and all(m.source == Source.TWIN for _, m in choice.probes)
    # Probed settings carry their measured figures, labelled with the probe's source.
    by = {p.setting: p for p in choice.top}
    for s, m in choice.probes:
        if s in by:
            assert by[s].source == Source.TWIN and by[s].energy_per_sample == pytest.approx(m.joules_per_sample)
    assert choice.correction is not None
    real = truth(w, trace)
    oracle = min(real.values(), key=lambda m: m.joules_per_sample)
    assert real[choice.setting].joules_per_sample / oracle.joules_per_sample - 1 < 0.05
    with pytest.raises(ConfigError, match="nothing to measure"):
        selector.choose(w, probes=1)
    with pytest.raises(ConfigError):
        selector.choose(w, probes=4, measure=measure)


def test_train_from_the_store(tmp_path, ds):
    from engine.results.store import DeviceRecord, Store, SweepPoint, WorkloadRecord

    profile = load_profile("agx-orin-64gb")
    settings = profile_settings(profile, "gpu")
    twin_dev = DeviceRecord("NVIDIA Jetson AGX Orin Developer Kit", "P3701-0000 (AGX Orin 64GB)",
                            profile="agx-orin-64gb", is_twin=True)
    board = DeviceRecord("NVIDIA Jetson AGX Orin Developer Kit", "P3701-0000 (AGX Orin 64GB)", is_twin=False)
    with Store(tmp_path / "results.sqlite") as store:
        with pytest.raises(ConfigError, match="no twin sweep points"):
            from_store(store, source="twin")
        for model in ("bert-tiny", "pythia-14m"):
            for batch in (8, 32):
                w, trace = describe_workload(model, "sst2", batch_size=batch, seq_len=32)
                rec = WorkloadRecord.from_trace(trace, "sst2", family=w.family)
                for src, dev, rails in ((Source.TWIN, twin_dev, "all"), (Source.TWIN, twin_dev, "gpu+cpu")):
                    sweep = store.find_or_create_sweep(device=dev, workload=rec, space={"space": "gpu", "rails": rails},
                                                       warmup_steps=1, steps=2, repeats=2, source=src)
                    for repeat in range(2):
                        for s, m in fast_sweep(trace, profile, settings, steps=2):
                            scale = 1.0 if rails == "all" else 0.5  # other rails: other energies
                            store.add_point(SweepPoint(sweep.id, s.to_json(), repeat, m.time_s, m.energy_j * scale,
                                                       m.samples))
                    store.finish_sweep(sweep.id)
        # One measured sweep on a "board" (the same figures, labelled measured).
        sweep = store.find_or_create_sweep(device=board, workload=rec, space={"space": "gpu", "rails": "all"},
                                           warmup_steps=1, steps=2, repeats=1, source=Source.MEASURED)
        for s, m in fast_sweep(trace, profile, settings, steps=2):
            store.add_point(SweepPoint(sweep.id, s.to_json(), 0, m.time_s, m.energy_j * 1.1, m.samples))

        twin = from_store(store, source="twin")
        measured = from_store(store, source="measured")
        both = from_store(store, source="both")
    assert twin.source == "twin" and len(twin) == 4 * 12 and twin.space == "gpu"  # repeats pooled, rails "all" only
    reference = {(w.key, s): e for w, s, e in zip(ds.workloads, ds.settings, ds.energy_per_sample)}
    for w, s, e in zip(twin.workloads, twin.settings, twin.energy_per_sample):
        if (w.key, s) in reference:
            assert e == pytest.approx(reference[(w.key, s)])
    assert measured.source == "measured" and len(measured) == 12
    assert both.source_column and both.columns[-1] == "source_measured" and len(both) == 5 * 12
    assert set(both.X()[:, -1]) == {0.0, 1.0}
    selector, _ = train_selector(both, candidates=FAST[:1], n_splits=2)
    assert selector.source == "both" and selector.schema["columns"][-1] == "source_measured"
    w, _trace = describe_workload("pythia-14m", "sst2", batch_size=32, seq_len=32)
    on_board = selector.predict(w, [MAXN], as_source=Source.MEASURED)[0]
    on_twin = selector.predict(w, [MAXN], as_source=Source.TWIN)[0]
    assert on_board.energy_per_sample > on_twin.energy_per_sample  # learnt the board's 10% more energy


def test_the_cli_and_the_tui_train_on_the_same_rows(tmp_path, monkeypatch, capsys):
    """One training path: the same store gives `train-selector` and the TUI's train key the same
    dataset (points outside the setting space dropped by both) and the same selector."""
    import json

    from engine.cli import main
    from engine.results.store import DeviceRecord, Store, SweepPoint, WorkloadRecord
    from engine.selector.training import store_dataset
    from tui.actions.sweeps import train_for_app

    monkeypatch.setenv("SLM_DVFS_DATA_DIR", str(tmp_path / "data"))
    profile = load_profile("agx-orin-64gb")
    twin_dev = DeviceRecord("NVIDIA Jetson AGX Orin Developer Kit", "P3701-0000 (AGX Orin 64GB)",
                            profile="agx-orin-64gb", is_twin=True)
    db = tmp_path / "results.sqlite"
    with Store(db) as store:
        for model, batch, space in (("bert-tiny", 8, "gpu"), ("bert-tiny", 32, "gpu"), ("pythia-14m", 8, "gpu"),
                                    ("pythia-14m", 32, "gpu+emc")):
            w, trace = describe_workload(model, "sst2", batch_size=batch, seq_len=32)
            rec = WorkloadRecord.from_trace(trace, "sst2", family=w.family)
            sweep = store.find_or_create_sweep(device=twin_dev, workload=rec, space={"space": space, "rails": "all"},
                                               warmup_steps=1, steps=2, repeats=1, source=Source.TWIN)
            for s, m in fast_sweep(trace, profile, profile_settings(profile, space)[:14], steps=2):
                store.add_point(SweepPoint(sweep.id, s.to_json(), 0, m.time_s, m.energy_j, m.samples))
            store.finish_sweep(sweep.id)
        everything = from_store(store, source="twin")
        rows = store_dataset(store, source="twin")
    assert len(rows) < len(everything)  # the gpu+emc points outside the gpu space are left out
    assert set(rows.settings) <= set(profile_settings(profile, "gpu"))

    quick = default_candidates(small=True, names=["ridge-poly"])
    assert main(["train-selector", "--db", str(db), "--source", "twin", "--quick", "--candidates", "ridge-poly",
                 "--out", str(tmp_path / "cli.joblib"), "--json"]) == 0
    cli = json.loads(capsys.readouterr().out)
    with Store(db) as store:
        path, tui = train_for_app(store, "twin", "agx-orin-64gb", candidates=quick)
    assert path.exists()
    assert tui.dataset.digest() == rows.digest() == cli["training"]["digest"]
    assert tui.selector.training["rows"] == cli["training"]["rows"] == len(rows)
    regrets = [(r["label"], r["mean_regret"]) for r in tui.report.table()]
    assert tui.selector.winner == cli["winner"] and regrets == [(r["label"], r["mean_regret"]) for r in cli["cv_table"]]


def test_gpu_and_emc_space(ds):
    profile = load_profile("agx-orin-64gb")
    space = profile_settings(profile, "gpu+emc")
    assert len(space) == 1 + 11 * 4 and space[0] == MAXN  # MAXN, then GPU steps x EMC rates
    small = from_twin_zoo(models=["bert-tiny", "bert-mini"], tasks=["sst2"], batch_sizes=(8, 32), seq_lens=(32,),
                          precisions=("fp32",), modes=("full",), space="gpu+emc")
    assert len(small) == 4 * 2 * 45 and small.space == "gpu+emc"  # models x batches x loops x settings
    selector, _ = train_selector(small, candidates=(CandidateSpec("extra-trees", "time+energy", small=True),),
                                 n_splits=2)
    w, trace = describe_workload("bert-tiny", "sst2", batch_size=16, seq_len=32)
    choice = selector.choose(w)
    assert choice.setting.emc_hz in profile.emc.table_hz and choice.setting.gpu_hz in profile.gpu.table_hz
    real = dict(fast_sweep(trace, profile, space))
    oracle = min(real.values(), key=lambda m: m.joules_per_sample)
    assert real[choice.setting].joules_per_sample / oracle.joules_per_sample - 1 < 0.10


def test_default_candidates_cover_the_issue():
    labels = {c.label for c in default_candidates()}
    for name in ("ridge-poly", "knn", "svr", "random-forest", "extra-trees", "hist-gb", "hist-gb-roofline", "mlp"):
        assert {f"{name}/time+power", f"{name}/time+energy"} <= labels
    assert "rf-classifier" in labels
    with pytest.raises(ConfigError):
        default_candidates(names=["xgboost"])


@pytest.mark.slow
def test_every_candidate_fits_and_predicts(ds):
    report = cross_validate(ds, default_candidates(small=True), n_splits=3)
    assert len(report.rows) == 19
    assert all(np.isfinite(r.mean_regret) for r in report.rows)


def test_a_grid_whose_every_shape_is_skipped_says_why() -> None:
    # bert-tiny takes 512 positions: a grid of longer sequences only has points to skip, and the
    # error names one and what to change, instead of "the training data is empty".
    with pytest.raises(ConfigError) as err:
        from_twin_zoo(models=["bert-tiny"], tasks=["sst2"], batch_sizes=(8,), seq_lens=(1024,), precisions=("fp32",),
                      modes=("full",))
    assert "every one of the 2 grid point(s) was skipped" in err.value.what  # one shape, two loops and "bert-tiny" in err.value.what
    assert "--seq-lens" in err.value.remedy
