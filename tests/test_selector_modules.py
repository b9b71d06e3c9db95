"""The selector across modules (issue 23): module columns, each row against its own module, `select` for
a board's module (--twin NAME, --sysfs-root PATH) whether or not it learnt from it, and saying so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.cli import main
from engine.device.setting import MAXN, DvfsSetting
from engine.device.treegen import render_tree
from engine.device.twin.profile import load_profile
from engine.device.twin.tree import tree_spec
from engine.selector.features import FEATURE_COLUMNS, MODULE_COLUMN_NAMES, N_WORKLOAD_COLUMNS, SettingEncoder

NANO = "P3767-0005 (Orin Nano 8GB, developer kit module)"
NX16 = "P3767-0000 (Orin NX 16GB)"
SMALL = ["--models", "bert-tiny,bert-mini", "--batch-sizes", "8", "--seq-lens", "64", "--precisions", "fp32",
         "--modes", "full", "--loops", "lean", "--candidates", "hist-gb/time+energy", "--splits", "2"]
WORKLOAD = ["--model", "bert-tiny", "--task", "sst2", "--batch-size", "8", "--max-seq-len", "64"]


def test_settings_mean_the_same_on_every_module() -> None:
    """Mode 0 is MAXN on an AGX Orin and 15W on an Orin Nano 8GB: in the selector's terms the uncapped mode is 0
    on both, and its columns say 'uncapped' with the module's own top clocks and figures."""
    agx, nano = (SettingEncoder.from_profile(load_profile(n)) for n in ("agx-orin-64gb", "orin-nano-8gb"))
    assert nano.uncapped_id == 2 and agx.uncapped_id == 0
    assert nano.to_selector(DvfsSetting(nvpmodel=2)) == MAXN and nano.to_board(MAXN) == DvfsSetting(nvpmodel=2)
    assert nano.to_selector(DvfsSetting(nvpmodel=0)) == DvfsSetting(nvpmodel=2)  # 15W keeps an id of its own
    names = FEATURE_COLUMNS[N_WORKLOAD_COLUMNS:]
    rows = {e.profile: dict(zip(names, e.row(MAXN))) for e in (agx, nano)}
    assert rows["agx-orin-64gb"]["uncapped_mode"] == rows["orin-nano-8gb"]["uncapped_mode"] == 1.0
    assert rows["orin-nano-8gb"]["gpu_ghz"] == pytest.approx(1.02) and rows["orin-nano-8gb"]["gpu_of_top"] == 1.0
    assert rows["orin-nano-8gb"]["module_sms"] == 8 and rows["agx-orin-64gb"]["module_sms"] == 16
    assert rows["orin-nano-8gb"]["module_bandwidth_gbps"] == 102.0
    capped = dict(zip(names, nano.row(nano.to_selector(DvfsSetting(nvpmodel=0)))))  # 15W: capped, its caps nominal
    assert capped["uncapped_mode"] == 0.0 and capped["gpu_ghz"] < rows["orin-nano-8gb"]["gpu_ghz"]
    assert set(MODULE_COLUMN_NAMES) <= set(FEATURE_COLUMNS)


@pytest.fixture(scope="module")
def two_module_selector(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A selector trained on the twin zoos of two modules (a small grid), through the CLI."""
    out = tmp_path_factory.mktemp("sel") / "two.joblib"
    mp = pytest.MonkeyPatch()
    mp.setenv("SLM_DVFS_DATA_DIR", str(out.parent / "data"))
    try:
        assert main(["train-selector", "--from-twin-zoo", "--twin", "agx-orin-64gb,orin-nano-8gb", *SMALL,
                     "--out", str(out), "--json"]) == 0
    finally:
        mp.undo()
    return out


def test_a_selector_trained_on_two_modules_chooses_for_a_third_and_says_so(
        two_module_selector: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    monkeypatch.setenv("SLM_DVFS_DATA_DIR", str(tmp_path / "data"))
    capsys.readouterr()
    side = json.loads(two_module_selector.with_suffix(".json").read_text())
    assert side["training"]["across_modules"] == {"P3701-0000 (AGX Orin 64GB)": "agx-orin-64gb",
                                                  NANO: "orin-nano-8gb"}
    assert main(["select", *WORKLOAD, "--selector", str(two_module_selector), "--trust", "--twin", "orin-nx-16gb",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["module"]["name"] == NX16 and out["module"]["profile"] == "orin-nx-16gb"
    assert out["module"]["trained_on"] is False
    conf = out["confidence"]
    assert conf["module"] == NX16 and conf["module_trained"] is False and conf["level"] in ("medium", "low")
    assert f"not trained on {NX16}" in conf["reason"]
    # its choice is one of the NX's own settings (its GPU table), in the selector's terms
    table = set(load_profile("orin-nx-16gb").gpu.table_hz)
    assert out["setting"]["gpu_hz"] is None or out["setting"]["gpu_hz"] in table
    # a module it learnt: trained on it, and the text names it
    assert main(["select", *WORKLOAD, "--selector", str(two_module_selector), "--trust", "--twin",
                 "orin-nano-8gb"]) == 0
    text = capsys.readouterr().out
    assert f"Module:    {NANO} (trained on it; learnt across 2" in text
    assert "not trained on" not in text


def test_select_for_the_board_under_sysfs_root(two_module_selector: Path, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """An Orin Nano 4GB's tree (no twin marker): its module's figures and settings, and its memory, which
    holds no step of a large model."""
    monkeypatch.setenv("SLM_DVFS_DATA_DIR", str(tmp_path / "data"))
    root = tmp_path / "nano4"
    render_tree(root, tree_spec(load_profile("orin-nano-4gb")))  # a board's tree: no twin marker
    assert main(["select", *WORKLOAD, "--selector", str(two_module_selector), "--trust", "--sysfs-root", str(root),
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["module"]["profile"] == "orin-nano-4gb" and out["module"]["trained_on"] is False
    assert "Orin Nano 4GB" in out["module"]["name"]
    table = set(load_profile("orin-nano-4gb").gpu.table_hz)
    assert out["setting"]["gpu_hz"] is None or out["setting"]["gpu_hz"] in table
    # a step the 4GB board cannot hold is refused for it, with what to do (never a traceback)
    assert main(["select", "--model", "llama-3.2-1b", "--task", "sst2", "--batch-size", "32", "--max-seq-len", "512",
                 "--precision", "fp32", "--selector", str(two_module_selector), "--trust",
                 "--sysfs-root", str(root)]) == 2
    err = capsys.readouterr().err
    assert "What to do" in err and "Traceback" not in err
    assert main(["select", *WORKLOAD, "--sysfs-root", str(tmp_path / "none")]) == 2
    assert "no such folder" in capsys.readouterr().err


def test_train_selector_twin_list_needs_the_twin_zoo(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLM_DVFS_DATA_DIR", str(tmp_path / "data"))
    assert main(["train-selector", "--twin", "agx-orin-64gb,orin-nano-8gb", "--db", str(tmp_path / "r.sqlite")]) == 2
    assert "only --from-twin-zoo learns from several twins" in capsys.readouterr().err
    assert main(["train-selector", "--from-twin-zoo", "--twin", "agx-orin-64gb,no-such-board", *SMALL]) == 2
    assert "no-such-board" in capsys.readouterr().err


def test_leave_one_module_out_chooses_for_each_module_with_its_own_figures() -> None:
    """bench_selector's lomo block: each module left out in turn, chosen for with a selector fitted on the
    others' rows, its settings its own (the Orin Nano's GPU table stops at 1020 MHz)."""
    from engine.selector.candidates import default_candidates
    from engine.selector.dataset import from_twin_zoos
    from engine.selector.lofo import leave_one_module_out, summarise

    ds = from_twin_zoos(("agx-orin-64gb", "orin-nano-8gb", "orin-nx-16gb"), models=["bert-tiny", "bert-mini"],
                        batch_sizes=(8,), seq_lens=(64,), precisions=("fp32",), modes=("full",), loops=("lean",))
    assert ds.across_modules and len(ds.modules) == 3
    spec = default_candidates(names=["hist-gb/time+energy"], small=True)[0]
    results = leave_one_module_out(ds, spec, probes=(0,))
    assert {r.family for r in results} == set(ds.modules) and len(results) == 6  # 2 workloads x 3 modules
    nano = [r for r in results if r.family == NANO]
    assert all("GPU 1300" not in r.chosen for r in nano)
    block = summarise(results)["probes_0"]
    assert set(block["families"]) == set(ds.modules) and block["overall"]["worst_regret"] >= 0.0


def test_run_policy_ml_on_an_orin_nano_sets_its_uncapped_mode(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The ml policy chooses for the board's module and sets the board in its own terms: the Orin Nano 8GB's
    uncapped mode is MAXN_SUPER, mode 2 (mode 0 there is 15W, which caps the GPU at 612 MHz)."""
    monkeypatch.setenv("SLM_DVFS_DATA_DIR", str(tmp_path / "data"))
    assert main(["run", "--model", "bert-tiny", "--task", "sst2", "--twin", "orin-nano-8gb", "--policy",
                 "ml:probes=1", "--steps", "4", "--simulate", "--db", str(tmp_path / "r.sqlite")]) == 0
    applied = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("setting (last applied)"))
    assert applied.endswith("mode 2")
