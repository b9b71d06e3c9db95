"""The compact (plain numpy) form of a fitted selector predicts the same floats as scikit-learn,
is loaded without importing scikit-learn, and is refused or skipped as the pickle would be."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from engine.selector.candidates import CandidateSpec
from engine.selector.compact import CompactRegressor, export_pipeline, export_selector
from engine.selector.dataset import from_twin_zoo
from engine.selector.features import describe_workload
from engine.selector.persistence import (
    SelectorFileError,
    load_selector,
    save_selector,
    shipped_selector_dir,
    sidecar_path,
    user_selector_dir,
)
from engine.selector.selector import train_selector

ROOT = Path(__file__).resolve().parent.parent
TREES = ("hist-gb", "extra-trees", "random-forest", "hist-gb-roofline")


# traces of the zoo models, shared by the selector tests of a session (conftest)
pytestmark = pytest.mark.usefixtures("selector_trace_cache")


@pytest.fixture(scope="module")
def dataset():
    return from_twin_zoo(models=["bert-tiny", "pythia-14m"], tasks=["sst2"], batch_sizes=(8, 32), seq_lens=(32,),
                         precisions=("fp32",), modes=("full",))


def _train(dataset, name: str, target: str = "time+energy"):
    sel, _report = train_selector(dataset, candidates=(CandidateSpec(name, target, small=True),), n_splits=2)
    return sel


@pytest.fixture(scope="module")
def workloads():
    # in and out of the training range (pythia-70m and bert-mini were not trained on)
    return [describe_workload("bert-tiny", "sst2", batch_size=16, seq_len=32)[0],
            describe_workload("pythia-70m", "mnli", batch_size=8, seq_len=64, mode="bitfit")[0],
            describe_workload("bert-mini", "stsb", batch_size=4, seq_len=128, precision="fp16")[0]]


@pytest.mark.parametrize("target", ["time+energy", "time+power"])
@pytest.mark.parametrize("name", TREES)
def test_the_compact_form_predicts_the_same_floats(dataset, workloads, name: str, target: str) -> None:
    sel = _train(dataset, name, target)
    x = dataset.X()
    rng = np.random.default_rng(0)
    noisy = x * rng.uniform(0.5, 2.0, size=x.shape)  # between and beyond the training rows
    for key, pipe in sel.model.models.items():
        tree = export_pipeline(pipe)
        assert tree is not None
        for rows in (x, noisy):
            assert np.array_equal(tree.predict(rows), pipe.predict(rows)), (name, key)
    arrays = export_selector(sel)
    assert arrays is not None
    from engine.selector.compact import read_meta, regressor_from_arrays

    compact = regressor_from_arrays(arrays, read_meta(arrays))
    for rows in (x, noisy):
        for a, b in zip(compact.predict(rows), sel.model.predict(rows)):
            assert np.array_equal(a, b)
    assert compact.spec.label == sel.model.spec.label


@pytest.mark.parametrize("name", ["ridge-poly", "knn"])
def test_other_models_have_no_compact_form_and_load_from_the_pickle(dataset, name, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("SLM_DVFS_DATA_DIR", str(tmp_path / "data"))
    sel = _train(dataset, name)
    assert export_selector(sel) is None
    path = save_selector(sel, user_selector_dir() / "other.joblib")
    assert not path.with_suffix(".npz").exists() and "compact_file" not in json.loads(sidecar_path(path).read_text())
    assert not isinstance(load_selector(path).model, CompactRegressor)


@pytest.fixture(scope="module")
def hist_gb(dataset):
    return _train(dataset, "hist-gb")


@pytest.fixture
def saved(hist_gb, tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("SLM_DVFS_DATA_DIR", str(tmp_path / "data"))
    return save_selector(hist_gb, user_selector_dir() / "mine.joblib")


# A fresh interpreter loads the selector and chooses: its figures, and what it imported.
_LOAD = """
import json, sys
from engine.selector.features import WorkloadFeatures
from engine.selector.persistence import load_selector
sel = load_selector(sys.argv[1])
w = WorkloadFeatures.from_json(json.loads(sys.argv[2]))
choice = sel.choose(w)
heavy = sorted({m.split(".")[0] for m in sys.modules} & {"sklearn", "scipy", "pandas", "pyarrow", "torch"})
print(json.dumps({"model": type(sel.model).__name__, "setting": choice.setting.to_json(),
                  "energy": [p.energy_per_sample for p in sel.predict(w)], "heavy": heavy}))
"""


def test_a_saved_tree_selector_is_loaded_without_scikit_learn(saved, hist_gb, workloads) -> None:
    assert saved.with_suffix(".npz").is_file()
    w = workloads[1]
    proc = subprocess.run([sys.executable, "-c", _LOAD, str(saved), json.dumps(w.to_json())], capture_output=True,
                          text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["model"] == "CompactRegressor" and out["heavy"] == []
    assert out["energy"] == [p.energy_per_sample for p in hist_gb.predict(w)]
    assert out["setting"] == hist_gb.choose(w).setting.to_json()


def test_the_loaded_compact_selector_chooses_as_the_pickled_one(saved, workloads) -> None:
    compact, pickled = load_selector(saved), load_selector(saved, compact=False)
    assert isinstance(compact.model, CompactRegressor) and not isinstance(pickled.model, CompactRegressor)
    for w in workloads:
        assert compact.choose(w) == pickled.choose(w)
        assert compact.describe() == pickled.describe()


def test_a_changed_compact_file_is_refused(saved) -> None:
    npz = saved.with_suffix(".npz")
    data = bytearray(npz.read_bytes())
    data[len(data) // 2] ^= 0x01
    npz.write_bytes(bytes(data))
    with pytest.raises(SelectorFileError, match="SHA-256"):
        load_selector(saved)


def test_a_compact_file_of_another_pickle_is_refused(saved, hist_gb, dataset, tmp_path) -> None:
    other = save_selector(_train(dataset, "extra-trees"), saved.with_name("other.joblib"))
    side = json.loads(sidecar_path(saved).read_text())
    # the other selector's npz, with a sidecar that vouches for its bytes: still not this pickle's
    saved.with_suffix(".npz").write_bytes(other.with_suffix(".npz").read_bytes())
    side["compact_sha256"] = json.loads(sidecar_path(other).read_text())["compact_sha256"]
    sidecar_path(saved).write_text(json.dumps(side))
    with pytest.raises(SelectorFileError, match="another"):
        load_selector(saved)


def test_a_missing_compact_file_falls_back_to_the_pickle(saved, workloads, hist_gb) -> None:
    saved.with_suffix(".npz").unlink()
    sel = load_selector(saved)
    assert not isinstance(sel.model, CompactRegressor)
    assert sel.choose(workloads[0]) == hist_gb.choose(workloads[0])


def test_the_shipped_selector_has_a_compact_form_that_predicts_as_its_pickle(workloads, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("SLM_DVFS_DATA_DIR", str(tmp_path / "empty"))  # no user selector: the shipped one
    path = shipped_selector_dir() / "default.joblib"
    compact, pickled = load_selector(path), load_selector(path, compact=False)
    if not export_selector(pickled):
        pytest.skip("the shipped selector's model has no compact form")
    assert isinstance(compact.model, CompactRegressor)
    for w in workloads:
        assert compact.predict(w) == pickled.predict(w)
        assert compact.choose(w) == pickled.choose(w)


def test_the_sidecar_names_the_form_version_the_arrays_carry() -> None:
    from engine.selector.compact import FORM_VERSION, READABLE_FORMS
    from engine.selector.persistence import COMPACT_READABLE, COMPACT_VERSION

    assert COMPACT_VERSION == FORM_VERSION  # persistence records it without importing numpy
    assert COMPACT_READABLE == READABLE_FORMS


def test_a_form_1_compact_file_still_predicts(hist_gb, dataset) -> None:
    """Selectors users trained before the roofline member (form 1: no members, no inputs) keep their compact form."""
    from engine.selector.compact import read_meta, regressor_from_arrays

    arrays = export_selector(hist_gb)
    assert arrays is not None
    meta = json.loads(str(arrays["meta"]))
    meta["form_version"] = 1
    old = {k: v for k, v in arrays.items() if not k.endswith(".inputs")}
    old["meta"] = np.array(json.dumps(meta))
    compact = regressor_from_arrays(old, read_meta(old))
    for a, b in zip(compact.predict(dataset.X()), hist_gb.model.predict(dataset.X())):
        assert np.array_equal(a, b)
