"""Selector files: joblib + sidecar, verified before unpickling; where the selector comes from."""

from __future__ import annotations

import json
import os
import subprocess

import joblib
import pytest

from engine.device.setting import MAXN
from engine.selector.candidates import CandidateSpec
from engine.selector.dataset import from_twin_zoo
from engine.selector.features import FEATURE_SCHEMA_VERSION, describe_workload
from engine.selector.persistence import (
    DEFAULT_NAME,
    SelectorFileError,
    load_selector,
    resolve_selector_path,
    save_selector,
    sha256_file,
    shipped_selector_dir,
    sidecar_path,
    trust_explicit_paths,
    user_selector_dir,
    verify_selector_file,
)
from engine.selector.selector import Selector, train_selector


# traces of the zoo models, shared by the selector tests of a session (conftest)
pytestmark = pytest.mark.usefixtures("selector_trace_cache")


@pytest.fixture(scope="module")
def selector():
    ds = from_twin_zoo(models=["bert-tiny", "pythia-14m"], tasks=["sst2"], batch_sizes=(8, 32), seq_lens=(32,),
                       precisions=("fp32",), modes=("full",))
    sel, _report = train_selector(ds, candidates=(CandidateSpec("ridge-poly", "time+power", small=True),),
                                  n_splits=2)
    return sel


@pytest.fixture
def saved(selector, tmp_path, monkeypatch):
    monkeypatch.setenv("SLM_DVFS_DATA_DIR", str(tmp_path / "data"))  # a trusted folder: the user's data dir
    return save_selector(selector, user_selector_dir() / "mine.joblib")


@pytest.fixture(scope="module")
def second_user():
    """A real second uid (root only; skipped where the OS refuses to add one)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to add a second user")
    name = "slmdvfs-h-other"
    made = subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
                          capture_output=True, text=True)
    if made.returncode not in (0, 9):  # 9: already there
        pytest.skip(f"useradd refused: {made.stderr.strip()}")
    import pwd

    try:
        yield pwd.getpwnam(name).pw_uid
    finally:
        subprocess.run(["userdel", name], capture_output=True)


@pytest.fixture
def no_unpickling(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("joblib.load was called on a file that failed verification")

    monkeypatch.setattr(joblib, "load", refuse)


def test_round_trip_with_sidecar(saved, selector):
    side = json.loads(sidecar_path(saved).read_text())
    assert side["format"] == "slm-dvfs-selector" and side["joblib_sha256"] == sha256_file(saved)
    assert side["feature_schema"]["version"] == FEATURE_SCHEMA_VERSION
    assert side["feature_schema"]["columns"] == selector.schema["columns"]
    assert {"scikit-learn", "numpy", "joblib", "python", "slm-dvfs"} <= set(side["versions"])
    assert side["training"]["digest"] and side["training"]["rows"] == 2 * 2 * 2 * 12  # models x batches x loops
    assert side["cv_table"][0]["label"] == "ridge-poly/time+power" and side["label"] == "twin-trained"
    loaded = load_selector(saved)
    assert isinstance(loaded, Selector) and loaded.path == saved
    w, _ = describe_workload("bert-tiny", "sst2", batch_size=16, seq_len=32)
    assert [p.energy_per_sample for p in loaded.predict(w)] == [p.energy_per_sample for p in selector.predict(w)]
    assert loaded.choose(w).setting == selector.choose(w).setting


def test_a_flipped_byte_is_refused_before_unpickling(saved, no_unpickling):
    data = bytearray(saved.read_bytes())
    data[len(data) // 2] ^= 0x01
    saved.write_bytes(bytes(data))
    with pytest.raises(SelectorFileError) as err:
        load_selector(saved)
    assert "SHA-256" in err.value.what and "not loaded" in err.value.what
    assert "train-selector" in err.value.remedy


def test_a_changed_schema_is_refused(saved, no_unpickling):
    side_path = sidecar_path(saved)
    side = json.loads(side_path.read_text())
    side["feature_schema"]["columns"] = side["feature_schema"]["columns"][:-1]  # a column dropped
    side_path.write_text(json.dumps(side))
    with pytest.raises(SelectorFileError, match="other features"):
        load_selector(saved)
    side["feature_schema"] = {**json.loads(json.dumps(side["feature_schema"])), "version": FEATURE_SCHEMA_VERSION + 1}
    side_path.write_text(json.dumps(side))
    with pytest.raises(SelectorFileError, match="other features"):
        verify_selector_file(saved)


# The columns of feature schema 1, as a selector trained before architecture-agnostic features recorded them.
SCHEMA_1_WORKLOAD = ["family_pythia", "params", "trainable_params", "layers", "hidden", "heads", "seq_len",
                     "batch_size", "precision_fp16", "precision_bf16", "mode_bitfit", "task_num_labels",
                     "task_regression", "flops", "bytes", "kernels", "arithmetic_intensity", "host_cycles",
                     "flops_per_sample", "bytes_per_sample", "flops_per_kernel", "bytes_per_kernel"]


def _as_schema_1(path, source="measured", from_twin_zoo=False):
    side_path = sidecar_path(path)
    side = json.loads(side_path.read_text())
    settings = side["feature_schema"]["columns"][side["feature_schema"]["workload_columns"]:]
    side["feature_schema"] = {"version": 1, "columns": SCHEMA_1_WORKLOAD + settings,
                              "log_columns": ["params"], "workload_columns": len(SCHEMA_1_WORKLOAD)}
    side["source"] = source
    side["training"]["command"] = {"from_twin_zoo": from_twin_zoo}
    side_path.write_text(json.dumps(side))


def test_a_selector_of_the_old_features_is_refused_with_how_to_retrain_it(selector, tmp_path, monkeypatch,
                                                                          no_unpickling, capsys):
    """A user's own selector trained before schema 2 cannot read the new rows: refused, never unpickled,
    with the retrain command of how it was trained; `select` says the same and exits 2."""
    from engine.cli import main

    monkeypatch.setenv("SLM_DVFS_DATA_DIR", str(tmp_path / "data"))
    mine = save_selector(selector, None)  # the user's default selector, which `select` picks up
    _as_schema_1(mine)
    with pytest.raises(SelectorFileError) as err:
        load_selector()
    assert "schema version 1" in err.value.what and "version 2" in err.value.what
    assert "`slm-dvfs train-selector --source measured`" in err.value.remedy  # its default place: no --out
    assert "move it away to use the shipped selector" in err.value.remedy
    other = save_selector(selector, user_selector_dir() / "twin.joblib")
    _as_schema_1(other, source="twin", from_twin_zoo=True)
    with pytest.raises(SelectorFileError) as err:
        load_selector(other)
    assert f"`slm-dvfs train-selector --from-twin-zoo --out {other}`" in err.value.remedy
    assert main(["select", "--model", "bert-tiny", "--task", "sst2", "--batch-size", "8",
                 "--max-seq-len", "32"]) == 2
    assert "--source measured" in capsys.readouterr().err
    mine.unlink()  # moved away: the shipped selector (of this version's features) is used again
    assert load_selector().schema["version"] == FEATURE_SCHEMA_VERSION == 5


def test_a_missing_or_foreign_sidecar_is_refused(saved, no_unpickling):
    side_path = sidecar_path(saved)
    side_path.write_text(json.dumps({"format": "something-else"}))
    with pytest.raises(SelectorFileError, match="not an slm-dvfs selector sidecar"):
        load_selector(saved)
    side_path.unlink()
    with pytest.raises(SelectorFileError, match="no sidecar"):
        load_selector(saved)


def test_a_verified_file_of_the_wrong_kind_is_refused(saved, selector, tmp_path):
    # A pickle that is not a Selector, with a sidecar whose digest matches: still refused after loading.
    other = saved.parent / "other.joblib"
    joblib.dump({"not": "a selector"}, other)
    side = json.loads(sidecar_path(saved).read_text())
    side["joblib_sha256"] = sha256_file(other)
    sidecar_path(other).write_text(json.dumps(side))
    with pytest.raises(SelectorFileError, match="does not hold a selector"):
        load_selector(other)


def test_where_the_selector_comes_from(selector, tmp_path, monkeypatch):
    monkeypatch.setenv("SLM_DVFS_DATA_DIR", str(tmp_path / "data"))
    shipped = shipped_selector_dir() / DEFAULT_NAME
    if shipped.is_file():
        assert resolve_selector_path() == shipped
    user = save_selector(selector, None)  # train-selector's default: the user's data dir
    assert user == tmp_path / "data" / "selectors" / DEFAULT_NAME
    assert resolve_selector_path() == user  # the user's selector takes precedence over the shipped one
    assert resolve_selector_path(tmp_path / "data" / "selectors") == user  # a folder means its default.joblib
    with pytest.raises(SelectorFileError, match="no selector file"):
        resolve_selector_path(tmp_path / "nope.joblib")
    monkeypatch.setattr("engine.selector.persistence.shipped_selector_dir", lambda: tmp_path / "empty")
    user.unlink()
    with pytest.raises(SelectorFileError) as err:
        resolve_selector_path()
    assert "no selector available" in err.value.what and "slm-dvfs train-selector" in err.value.remedy


def test_the_shipped_selector_is_twin_trained_and_verified():
    path = shipped_selector_dir() / DEFAULT_NAME
    side = verify_selector_file(path)
    assert side["source"] == "twin" and side["label"] == "twin-trained"
    assert path.stat().st_size < 5 * 1024 * 1024
    assert {"bert-base-uncased", "pythia-410m"} <= set(side["training"]["models"])
    sel = load_selector(path)
    w, _ = describe_workload("bert-base-uncased", "sst2")
    choice = sel.choose(w)
    assert choice.setting != MAXN and choice.setting.gpu_hz is not None and choice.saving > 0
    assert not choice.confidence.extrapolating and choice.confidence.level in ("high", "medium")


# -- origin: unpickling runs code, so only files from trusted places and owners are loaded


def test_a_selector_outside_the_trusted_folders_needs_trust(saved, tmp_path, no_unpickling):
    elsewhere = tmp_path / "elsewhere" / "sel.joblib"
    elsewhere.parent.mkdir()
    elsewhere.write_bytes(saved.read_bytes())
    sidecar_path(elsewhere).write_text(sidecar_path(saved).read_text())
    with pytest.raises(SelectorFileError) as err:
        load_selector(elsewhere)  # a valid digest is no proof of origin
    assert "outside the trusted folders" in err.value.what and "--trust" in err.value.remedy
    with pytest.raises(SelectorFileError, match="outside the trusted"):
        resolve_selector_path(tmp_path / "data" / "selectors" / ".." / ".." / "elsewhere" / "sel.joblib")
    link = user_selector_dir() / "link.joblib"  # a link in the trusted folder to a file outside it
    link.symlink_to(elsewhere)
    with pytest.raises(SelectorFileError, match="outside the trusted"):
        resolve_selector_path(link)


def test_trust_admits_an_explicit_path(saved, tmp_path):
    elsewhere = tmp_path / "sel.joblib"
    elsewhere.write_bytes(saved.read_bytes())
    sidecar_path(elsewhere).write_text(sidecar_path(saved).read_text())
    assert isinstance(load_selector(elsewhere, trust=True), Selector)
    trust_explicit_paths(True)  # what the CLI's --trust does for `run --policy ml:PATH`
    try:
        assert resolve_selector_path(elsewhere) == elsewhere
    finally:
        trust_explicit_paths(False)


def test_a_group_writable_selector_is_refused_even_trusted(saved, no_unpickling):
    saved.chmod(0o664)
    with pytest.raises(SelectorFileError) as err:
        load_selector(saved, trust=True)
    assert "writable by group or others" in err.value.what and "chmod go-w" in err.value.remedy
    saved.chmod(0o644)
    sidecar_path(saved).chmod(0o646)
    with pytest.raises(SelectorFileError, match="writable by group or others"):
        load_selector(saved)


def test_a_selector_owned_by_another_user_is_refused(saved, second_user, no_unpickling):
    os.chown(saved, second_user, -1)
    with pytest.raises(SelectorFileError) as err:
        load_selector(saved, trust=True)
    assert f"owned by uid {second_user}" in err.value.what and "train-selector" in err.value.remedy


def test_every_schema_after_the_first_says_what_it_changed():
    from engine.selector.persistence import SCHEMA_CHANGES

    assert sorted(SCHEMA_CHANGES) == list(range(2, FEATURE_SCHEMA_VERSION + 1))


def test_a_selector_of_schema_2_is_refused_with_how_to_retrain_it(selector, tmp_path, monkeypatch, no_unpickling,
                                                                   capsys):
    """A selector trained before the loop's serial host work was a column (schema 2) cannot tell the lean loop
    from the hf one, and cannot read this version's rows: refused before unpickling, naming what changed and the
    retrain command; `select` says the same and exits 2."""
    from engine.cli import main

    monkeypatch.setenv("SLM_DVFS_DATA_DIR", str(tmp_path / "data"))
    mine = save_selector(selector, user_selector_dir() / "twin.joblib")
    side_path = sidecar_path(mine)
    side = json.loads(side_path.read_text())
    new = ("serial_share", "loop_host_cycles_per_sample")
    schema = side["feature_schema"]
    side["feature_schema"] = {"version": 2, "columns": [c for c in schema["columns"] if c not in new],
                              "log_columns": [c for c in schema["log_columns"] if c not in new],
                              "workload_columns": schema["workload_columns"] - len(new)}
    side["source"], side["training"]["command"] = "twin", {"from_twin_zoo": True}
    side_path.write_text(json.dumps(side))
    with pytest.raises(SelectorFileError) as err:
        load_selector(mine)
    assert "schema version 2" in err.value.what and f"version {FEATURE_SCHEMA_VERSION}" in err.value.what
    assert "serial host work" in err.value.what and "version 1 described" not in err.value.what
    assert f"`slm-dvfs train-selector --from-twin-zoo --out {mine}`" in err.value.remedy
    assert main(["select", "--model", "bert-tiny", "--task", "sst2", "--batch-size", "8", "--max-seq-len", "32",
                 "--selector", str(mine)]) == 2
    said = capsys.readouterr().err
    assert "schema version 2" in said and "--from-twin-zoo" in said and "Traceback" not in said


# The setting columns of feature schema 4: the mode by its id, no module columns.
SCHEMA_4_SETTINGS = ["gpu_governor", "gpu_ghz", "cpu_governor", "cpu_ghz", "emc_governor", "emc_ghz", "nvpmodel",
                     "jetson_clocks"]


def test_a_selector_of_schema_4_is_refused_with_how_to_retrain_it(selector, tmp_path, monkeypatch, no_unpickling,
                                                                   capsys):
    """A selector trained before the module columns (schema 4) read a setting's mode by its id (mode 0 is MAXN
    on an AGX Orin, 15W on an Orin Nano): refused before unpickling, naming what changed and the retrain command;
    `select` says the same and exits 2."""
    from engine.cli import main

    monkeypatch.setenv("SLM_DVFS_DATA_DIR", str(tmp_path / "data"))
    mine = save_selector(selector, user_selector_dir() / "twin.joblib")
    side_path = sidecar_path(mine)
    side = json.loads(side_path.read_text())
    schema = side["feature_schema"]
    workload = schema["columns"][:schema["workload_columns"]]
    side["feature_schema"] = {"version": 4, "columns": workload + SCHEMA_4_SETTINGS,
                              "log_columns": [c for c in schema["log_columns"] if c in workload or c.endswith("_ghz")
                                              and not c.startswith("module_")],
                              "workload_columns": schema["workload_columns"]}
    side["source"], side["training"]["command"] = "twin", {"from_twin_zoo": True}
    side_path.write_text(json.dumps(side))
    with pytest.raises(SelectorFileError) as err:
        load_selector(mine)
    assert "schema version 4" in err.value.what and "version 5" in err.value.what
    assert "uncapped" in err.value.what and "serial host work" not in err.value.what
    assert f"`slm-dvfs train-selector --from-twin-zoo --out {mine}`" in err.value.remedy
    assert main(["select", "--model", "bert-tiny", "--task", "sst2", "--batch-size", "8", "--max-seq-len", "32",
                 "--selector", str(mine), "--twin", "orin-nx-16gb"]) == 2
    said = capsys.readouterr().err
    assert "schema version 4" in said and "--from-twin-zoo" in said and "Traceback" not in said
