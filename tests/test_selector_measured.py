"""The selector from measured truth: measured sweeps weighted over twin ones, energy-only points,
cross-validation graded on the board's workloads, transfer from a handful of measured sweeps,
and the data basis every selector records and `select` prints."""

from __future__ import annotations

import json

import numpy as np
import pytest

from engine.core.errors import ConfigError
from engine.core.measurement import Measurement
from engine.core.provenance import Source
from engine.device.setting import MAXN
from engine.device.twin.fast import fast_sweep
from engine.device.twin.params import get_param, with_params
from engine.device.twin.profile import load_profile
from engine.dvfs.objectives import Objective, parse_objective
from engine.selector.basis import basis_of
from engine.selector.candidates import REGRESSORS, CandidateSpec
from engine.selector.dataset import from_points, from_twin_zoo, profile_settings
from engine.selector.features import SettingEncoder, describe_workload
from engine.selector.mixing import auto_weight, graded_keys, merge, weigh_measured
from engine.selector.persistence import load_selector, save_selector, sidecar_path, user_selector_dir
from engine.selector.selection import cross_validate, outcome
from engine.selector.selector import train_selector
from engine.selector.transfer import transfer_selector

pytestmark = pytest.mark.usefixtures("selector_trace_cache")

PROFILE = load_profile("agx-orin-64gb")
SETTINGS = profile_settings(PROFILE, "gpu")
ENCODER = SettingEncoder.from_profile(PROFILE)
RF = (CandidateSpec("random-forest", "time+energy", small=True),)


def _sweep(wl, profile=PROFILE, source=Source.MEASURED, scale=None):
    """(workload, setting, measurement) rows of a fast sweep, relabelled `source`; `scale` maps a
    setting to a factor on its energy (a board that disagrees with the twin)."""
    w, trace = wl
    out = []
    for s, m in fast_sweep(trace, profile, SETTINGS):
        f = 1.0 if scale is None else scale(s)
        out.append((w, s, Measurement(m.time_s, m.energy_j * f, m.samples, None, source)))
    return out


@pytest.fixture(scope="module")
def zoo():
    return from_twin_zoo(models=["bert-tiny", "bert-mini", "pythia-14m"], tasks=["sst2"], batch_sizes=(8, 32),
                         seq_lens=(32, 64), precisions=("fp32",), modes=("full",))


@pytest.fixture(scope="module")
def target():
    return describe_workload("bert-mini", "sst2", batch_size=16, seq_len=48)


def _contradicting(target):
    """A measured sweep of `target` whose optimum is the second-lowest GPU clock (the twin's is
    elsewhere): its energy there is cut to 60%."""
    pinned = sorted((s for s in SETTINGS if s != MAXN), key=lambda s: s.gpu_hz)
    odd = pinned[1]
    return odd, from_points(_sweep(target, scale=lambda s: 0.6 if s == odd else 1.0), ENCODER)


def test_every_candidate_takes_sample_weights(zoo):
    """Two copies of each row disagree (x2 energy); the heavy copy wins the fit, whichever candidate."""
    x = np.vstack([zoo.X(), zoo.X()])
    t = np.concatenate([zoo.time_per_sample] * 2)
    e = np.concatenate([zoo.energy_per_sample, 2 * zoo.energy_per_sample])
    p = e / t
    n = len(zoo)
    for name in REGRESSORS:
        spec = CandidateSpec(name, "time+energy", small=True)
        light = spec.build().fit(x, t, p, e, np.r_[np.full(n, 30.0), np.ones(n)]).predict(zoo.X())[2]
        heavy = spec.build().fit(x, t, p, e, np.r_[np.ones(n), np.full(n, 30.0)]).predict(zoo.X())[2]
        assert np.median(heavy / light) > 1.3, name  # toward the doubled energies when they weigh more


def test_a_measured_sweep_contradicting_the_twin_moves_the_choice(zoo, target):
    odd, measured = _contradicting(target)
    w = target[0]
    twin_only, _ = train_selector(zoo, candidates=RF, n_splits=2)
    assert twin_only.choose(w).setting != odd  # the twin's prior says otherwise
    both = merge(zoo, measured)
    weighted = weigh_measured(both)
    assert auto_weight(both) == pytest.approx(len(zoo) / len(measured))
    assert weighted.weights is not None and weighted.weights.max() == pytest.approx(len(zoo) / len(measured))
    feeble = weigh_measured(both, 1e-3)
    sel_w, report = train_selector(weighted, candidates=RF, n_splits=2)
    sel_f, _ = train_selector(feeble, candidates=RF, n_splits=2)
    assert sel_w.choose(w, as_source=Source.MEASURED).setting == odd

    def err(sel):
        pred = {p.setting: p.energy_per_sample for p in sel.predict(w, as_source=Source.MEASURED)}
        rows = measured.by_workload()[w.key]
        return np.mean([abs(np.log(pred[measured.settings[i]] / measured.energy_per_sample[i])) for i in rows])

    assert err(sel_w) < err(sel_f)  # weighting moved the fit toward the measured truth
    # Cross-validation grades the board's workload only (the truth is the board), and says so.
    assert report.graded_on == "measured workloads"
    assert {o.workload for o in report.outcomes[RF[0].label]} == {f"{w.key}|measured"}
    basis = sel_w.basis
    assert (basis.measured_workloads, basis.measured_points) == (1, 12)
    assert basis.twin_points == len(zoo) and basis.measured_weight == pytest.approx(len(zoo) / 12)
    assert "1 measured workload(s) (12 points)" in basis.line() and "[twin]" in basis.line()


def test_energy_only_points_teach_energy_and_are_graded_by_energy(zoo, target):
    w, trace = target
    rows = [(w, s, m.energy_j, m.samples, Source.MEASURED) for s, m in fast_sweep(trace, PROFILE, SETTINGS)]
    measured = from_points([], ENCODER, energy_only=rows)
    assert measured.energy_only().all() and np.isnan(measured.time_per_sample).all()
    assert measured.summary()["energy_only_rows"] == 12
    ds = weigh_measured(merge(zoo, measured))
    report = cross_validate(ds, RF, n_splits=2)
    assert report.graded_on == "measured workloads"
    assert report.rows[0].mape_time is None and report.rows[0].mape_energy is not None
    # An objective that needs time cannot grade them: the twin's workloads are graded instead, said so.
    keys, what = graded_keys(ds, parse_objective("edp"))
    assert all(k.endswith("|twin") for k in keys) and "energy only" in what
    sel, _ = train_selector(ds, candidates=RF, n_splits=2)
    assert sel.basis.energy_only_points == 12 and "12 energy-only" in sel.basis.line()
    with pytest.raises(ConfigError, match="needs times"):
        outcome(ds, f"{w.key}|measured", ds.by_workload()[f"{w.key}|measured"], SETTINGS[1], parse_objective("edp"))


# --------------------------------------------------------------------------- transfer

def _perturbed():
    spreads = {sp.path: sp for sp in PROFILE.uncertainty}
    moved = {"gpu.capacitance_f": 1.3, "gpu.vf.max_v": 1.06, "cpu.launch_cycles": 1.6, "gpu.podgov_load_seen": 0.75}
    values = {p: min(max(get_param(PROFILE, p) * f, spreads[p].lower), spreads[p].upper) for p, f in moved.items()}
    return with_params(PROFILE, values)


@pytest.fixture(scope="module")
def board():
    """Synthetic truth: a perturbed twin's sweeps of BERT workloads, labelled measured."""
    truth = _perturbed()
    wls = [describe_workload(m, "sst2", batch_size=b, seq_len=64, precision=p)
           for m in ("bert-mini", "bert-small", "bert-medium") for b in (8, 32) for p in ("fp32", "fp16")]
    return from_points([pt for wl in wls for pt in _sweep(wl, truth)], ENCODER)


def _regret(selector, ds, keys):
    by = ds.by_workload()
    out = []
    for k in keys:
        rows = by[k]
        choice = selector.choose(ds.workloads[rows[0]], settings=[ds.settings[i] for i in rows])
        out.append(outcome(ds, k, rows, choice.setting, Objective()).regret)
    return float(np.mean(out))


def test_transfer_improves_regret_on_perturbed_twin_truth(board):
    shipped = load_selector()
    keys = list(board.by_workload())
    measured = [keys[1], keys[6]]  # bert-mini b8 fp16, bert-small b32 fp32
    held = [k for k in keys if k not in measured]
    rows = [i for k in measured for i in board.by_workload()[k]]
    adapted, report = transfer_selector(shipped, board.subset(rows), Objective(), base_path=shipped.path)
    before, after = _regret(shipped, board, held), _regret(adapted, board, held)
    assert after < before
    # The leave-one-sweep-out record compares the transfer with its base on the measured workloads.
    labels = [r["label"] for r in report.cv_table]
    assert labels == [f"{shipped.winner}+transfer", f"{shipped.winner} (base, uncorrected)"]
    assert report.cv_table[0]["graded_on"].startswith("measured workloads")


def test_transfer_saves_a_new_selector_that_records_its_base(board, tmp_path, monkeypatch):
    monkeypatch.setenv("SLM_DVFS_DATA_DIR", str(tmp_path / "data"))
    shipped = load_selector()
    one = board.subset(board.by_workload()[next(iter(board.by_workload()))])
    adapted, report = transfer_selector(shipped, one, Objective(), base_path=shipped.path)
    path = save_selector(adapted, user_selector_dir() / "transfer.joblib")
    side = json.loads(sidecar_path(path).read_text())
    basis = side["training"]["basis"]
    assert basis["origin"] == "transfer" and basis["measured_workloads"] == 1 and basis["measured_points"] == 12
    assert basis["base"]["name"] == "default.joblib" and len(basis["base"]["joblib_sha256"]) == 64
    assert "shipped with slm-dvfs: learnt on the twin, from no board's measurements" in basis["base"]["basis"]
    assert side["training"]["transfer"]["measured"]["rows"] == 12
    # One sweep cannot be held out: the CV record is the base's, and says so.
    assert "too few measured workloads" in report.cv_table[0]["graded_on"]
    back = load_selector(path)
    w = one.workloads[0]
    assert [p.energy_per_sample for p in back.predict(w)] == [p.energy_per_sample for p in adapted.predict(w)]
    assert back.basis.line() == adapted.basis.line() and "transfer from default.joblib" in back.basis.line()


def test_transfer_refusals(tmp_path, monkeypatch, capsys, target):
    from engine.cli import main
    from engine.results.store import DeviceRecord, Store, SweepPoint, WorkloadRecord

    monkeypatch.setenv("SLM_DVFS_DATA_DIR", str(tmp_path / "data"))
    db = tmp_path / "results.sqlite"
    twin_dev = DeviceRecord("NVIDIA Jetson AGX Orin Developer Kit", "P3701-0000 (AGX Orin 64GB)",
                            profile="agx-orin-64gb", is_twin=True)
    w, trace = target
    with Store(db) as store:  # twin sweeps only: nothing measured to adapt with
        rec = WorkloadRecord.from_trace(trace, "sst2", family=w.family)
        sweep = store.find_or_create_sweep(device=twin_dev, workload=rec, space={"space": "gpu", "rails": "all"},
                                           warmup_steps=1, steps=2, repeats=1, source=Source.TWIN)
        for s, m in fast_sweep(trace, PROFILE, SETTINGS, steps=2):
            store.add_point(SweepPoint(sweep.id, s.to_json(), 0, m.time_s, m.energy_j, m.samples))
        store.finish_sweep(sweep.id)
    assert main(["train-selector", "--transfer", "--db", str(db)]) != 0
    err = capsys.readouterr().err
    assert "measured sweeps" in err and "slm-dvfs sweep" in err and "slm-dvfs import-sweep FILE" in err
    with pytest.raises(ConfigError, match="no measured sweep"):
        transfer_selector(load_selector(), from_points(_sweep(target, source=Source.TWIN), ENCODER))
    # Never over the shipped selector, nor over the selector it adapts.
    from engine.selector.persistence import shipped_selector_dir

    assert main(["train-selector", "--transfer", "--db", str(db), "--out",
                 str(shipped_selector_dir() / "default.joblib")]) != 0
    assert "would overwrite" in capsys.readouterr().err
    assert main(["train-selector", "--from", "x.joblib", "--db", str(db)]) != 0
    assert "--from names the selector --transfer adapts" in capsys.readouterr().err


def test_an_imported_gpu_cpu_sweep_transfers_once_its_rails_are_named(isolated_env, capsys):
    """import-sweep -> train-selector --transfer: the published way of measuring sums VDD_GPU_SOC and
    VDD_CPU_CV; a transfer over the default rails (all) finds nothing and says which --rails would."""
    from pathlib import Path

    from engine.cli import main

    example = Path(__file__).resolve().parents[1] / "docs" / "examples" / "measured-sweep.csv"
    assert main(["import-sweep", str(example)]) == 0
    capsys.readouterr()
    assert main(["train-selector", "--transfer"]) != 0
    assert "give --rails gpu+cpu" in capsys.readouterr().err
    assert main(["train-selector", "--transfer", "--rails", "gpu+cpu"]) == 0
    out = capsys.readouterr().out
    assert "1 measured workload(s)" in out and "measure a second, unlike it" in out


# --------------------------------------------------------------------------- the data basis

def test_the_shipped_selector_rests_on_the_twin_zoo_and_select_says_so(capsys):
    from engine.cli import main

    shipped = load_selector()
    basis = basis_of(shipped)
    # 912 shapes x 2 loops; each on the AGX Orin 64GB (12 settings) and, where it fits, the Orin Nano 8GB (9)
    assert basis.recorded and basis.origin == "twin zoo" and basis.twin_workloads == 1824
    assert basis.line() == ("twin zoo (1824 workloads, 34758 points) [twin], across modules P3701-0000 (AGX Orin "
                            "64GB), P3767-0005 (Orin Nano 8GB, developer kit module): their figures as features "
                            "(shipped with slm-dvfs: learnt on the twin, from no board's measurements)")
    assert main(["select", "--model", "bert-tiny", "--task", "sst2"]) == 0
    out = capsys.readouterr().out
    assert f"Rests on:  {basis.line()}" in out
    assert "issue" not in out and "trained before" not in out  # what it means for the user, not our history
    assert main(["select", "--model", "bert-tiny", "--task", "sst2", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["basis"] == basis.line() and data["selector"]["basis"]["origin"] == "twin zoo"


def test_select_says_when_maxn_is_already_about_optimal(capsys):
    """A saving whose interval reaches zero (or within the selector's own error of zero) is said to be none: on the
    twin, bert-small/mnli's predicted 4.5% saving has a 90% interval reaching down to 0.8% more energy than MAXN
    (the reviewer's case was bert-tiny/sst2: predicted 2.9%, measured -0.6%)."""
    from engine.cli import main

    assert main(["select", "--model", "bert-small", "--task", "mnli", "--twin"]) == 0
    out = capsys.readouterr().out.splitlines()
    verdict = out.index("Verdict:   MAXN (mode 0) is already about optimal for this workload: another setting saves "
                        "little or nothing")
    assert out[verdict + 1].strip().startswith("because the saving's 90% interval reaches down to ")
    assert "regret quantiles" not in "\n".join(out)
    assert main(["select", "--model", "bert-small", "--task", "mnli", "--twin", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["maxn_about_optimal"]["value"] is True and "interval reaches down to" in data["maxn_about_optimal"]["why"]
    # a workload the selector expects to save clearly on gets no such verdict
    assert main(["select", "--model", "pythia-160m", "--task", "sst2", "--twin", "--json"]) == 0
    clear = json.loads(capsys.readouterr().out)
    assert clear["expected_saving"] > 0.05 and clear["maxn_about_optimal"] == {"value": False, "why": None, "says": None}


def test_an_older_selector_file_loads_and_gets_a_derived_basis(zoo, tmp_path, monkeypatch):
    monkeypatch.setenv("SLM_DVFS_DATA_DIR", str(tmp_path / "data"))
    sel, _ = train_selector(zoo, candidates=RF, n_splits=2)
    assert sel.basis.recorded and sel.training["basis"]["twin_points"] == len(zoo)
    del sel.training["basis"]  # as written before the basis was recorded
    sel.training["command"] = {"from_twin_zoo": True}
    path = save_selector(sel, user_selector_dir() / "old.joblib")
    back = load_selector(path)
    assert not back.basis.recorded and back.basis.origin == "twin zoo"
    assert back.basis.line().endswith("(counts from the file's metadata: its data was not itemised by source and "
                                      "board)")
    # A measured+twin one of then did not record the split: said, not invented.
    back.source = "both"
    assert "split not recorded" in back.basis.line()


def test_the_tui_preview_names_the_basis(monkeypatch):
    from tui.selection import SelectorPreview

    preview = SelectorPreview(True, setting="GPU 816 MHz", saving_pct=12.0, slowdown_pct=20.0, confidence="high",
                              basis="twin zoo")
    assert "(twin zoo)" in preview.line() and "twin zoo" not in preview.short()


def test_transfer_from_the_cli_then_select_says_what_it_rests_on(board, tmp_path, monkeypatch, capsys):
    from engine.cli import main
    from engine.results.store import DeviceRecord, Store, SweepPoint, WorkloadRecord

    monkeypatch.setenv("SLM_DVFS_DATA_DIR", str(tmp_path / "data"))
    base = load_selector().winner  # the shipped one: no selector of yours yet
    db = tmp_path / "results.sqlite"
    dev = DeviceRecord("NVIDIA Jetson AGX Orin Developer Kit", "P3701-0005 (AGX Orin 64GB)", l4t="36.4.0")
    truth = _perturbed()
    with Store(db) as store:  # two measured sweeps (synthetic: a perturbed twin, labelled measured)
        for model, batch in (("bert-mini", 8), ("bert-small", 32)):
            w, trace = describe_workload(model, "sst2", batch_size=batch, seq_len=64)
            rec = WorkloadRecord.from_trace(trace, "sst2", family=w.family)
            sweep = store.find_or_create_sweep(device=dev, workload=rec, space={"space": "gpu", "rails": "all"},
                                               warmup_steps=1, steps=2, repeats=1, source=Source.MEASURED)
            for s, m in fast_sweep(trace, truth, SETTINGS, steps=2):
                store.add_point(SweepPoint(sweep.id, s.to_json(), 0, m.time_s, m.energy_j, m.samples))
            store.finish_sweep(sweep.id)
    assert main(["train-selector", "--transfer", "--db", str(db), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    path = user_selector_dir() / "default.joblib"  # yours from now on; the shipped one untouched
    assert out["saved"] == str(path) and out["measured"]["workloads"] == 2 and out["measured"]["rows"] == 24
    assert out["basis"]["origin"] == "transfer" and out["basis"]["devices"] == ["P3701-0005 (AGX Orin 64GB) L4T 36.4.0"]
    assert [r["label"] for r in out["cv_table"]][1] == f"{base} (base, uncorrected)"
    assert main(["select", "--model", "bert-medium", "--task", "sst2"]) == 0
    text = capsys.readouterr().out
    assert f"Selector:  {path}" in text
    assert "Rests on:  2 measured workload(s) (24 points) on P3701-0005 (AGX Orin 64GB) L4T 36.4.0 [measured] " \
           "adapting twin zoo (1824 workloads" in text and "transfer from default.joblib" in text


def test_transfer_adapts_any_base_toward_its_measured_sweep(zoo, target):
    """A base of the fitted estimators (not a compact form): the correction pulls its figures for
    the measured workload toward what was measured (least squares with a free intercept)."""
    _odd, measured = _contradicting(target)
    base, _ = train_selector(zoo, candidates=RF, n_splits=2)
    scaled = from_points(_sweep(target, scale=lambda s: 1.25), ENCODER)  # a board 25% costlier everywhere
    for ds in (measured, scaled):
        adapted, _report = transfer_selector(base, ds)
        rows = ds.by_workload()[target[0].key]

        def err(sel):
            pred = {p.setting: p.energy_per_sample for p in sel.predict(target[0])}
            return np.mean([abs(np.log(pred[ds.settings[i]] / ds.energy_per_sample[i])) for i in rows])

        assert err(adapted) < err(base)
    assert err(adapted) < 0.05 < err(base)  # a board-wide 25% is an intercept: learnt from one sweep
