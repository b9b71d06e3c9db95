"""The selector on a board that is not an AGX Orin: `select --sysfs-root`, the TUI preview and the mode-id
convention (the uncapped mode as the selector's mode 0) agree on the board's uncapped mode."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.cli import main
from engine.device.baseline import profile_baseline
from engine.device.setting import DvfsSetting
from engine.device.treegen import render_tree
from engine.device.twin.profile import load_profile
from engine.device.twin.tree import tree_spec
from engine.selector.features import SettingEncoder

WORKLOAD = ["--model", "bert-tiny", "--task", "sst2", "--batch-size", "8", "--max-seq-len", "64"]


def test_select_under_sysfs_root_states_the_choice_in_the_boards_uncapped_mode(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """On an Orin Nano 8GB tree, mode 0 is the capped 15W mode: the choice must be pinned in MAXN_SUPER (mode 2),
    as `select --twin orin-nano-8gb` states it."""
    monkeypatch.setenv("SLM_DVFS_DATA_DIR", str(tmp_path / "data"))
    root = tmp_path / "nano8"
    render_tree(root, tree_spec(load_profile("orin-nano-8gb")))
    assert main(["select", *WORKLOAD, "--sysfs-root", str(root), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["baseline"]["label"] == "MAXN_SUPER (mode 2)"
    assert out["setting"]["nvpmodel"] == 2


def test_baseline_in_its_mode_agrees_with_the_encoders_mode_convention() -> None:
    """A selector setting in the Orin Nano 8GB's 15W mode (board mode 0; selector mode 2 after to_selector) must
    go back to mode 0 on the board, not to MAXN_SUPER (mode 2)."""
    nano = load_profile("orin-nano-8gb")
    enc, base = SettingEncoder.from_profile(nano), profile_baseline(nano)
    for board in (DvfsSetting(nvpmodel=0), DvfsSetting(nvpmodel=1), DvfsSetting(nvpmodel=2, gpu_hz=612000000)):
        sel = enc.to_selector(board)
        assert enc.to_board(sel) == board
        assert base.in_its_mode(sel) == board, f"{sel} -> {base.in_its_mode(sel)}, meant {board}"


def test_tui_selector_preview_chooses_for_the_boards_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Setup page's preview on an Orin Nano 8GB twin: a GPU step of the Nano's table (as `run --policy ml`
    chooses, MLPolicy._for_board), never one of the AGX Orin's above the Nano's top."""
    from engine.run.experiment import ExperimentSpec
    from engine.workload.spec import WorkloadSpec
    from tui.selection import preview_choice

    monkeypatch.setenv("SLM_DVFS_DATA_DIR", str(tmp_path / "data"))
    nano = load_profile("orin-nano-8gb")
    spec = ExperimentSpec(WorkloadSpec("bert-tiny", "sst2", batch_size=32, seq_len=128), policy="ml",
                          twin="orin-nano-8gb")
    preview = preview_choice(spec)
    assert preview.available
    # chosen for the Orin Nano's module, its interval from the Orin Nano's twin ensemble (as `select --twin` does)
    assert preview.saving_interval is not None and nano.name in preview.saving_interval.basis, preview
