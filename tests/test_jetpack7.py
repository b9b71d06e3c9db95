"""JetPack 7 (L4T r38/r39) on the AGX Orin, and the AGX Thor's refusal, through the commands a user types.

The r38 tree layout (engine/device/treegen.py) is the JetPack 7 kernel's on an AGX Orin: the GPU keeps
its devfreq node, but enable_3d_scaling is gone and 3D scaling is the devfreq governor (jetson-stats
commit caffd05d). A Thor tree (compatible nvidia,tegra264 / p3834, GPU devfreq gpu-gpc-0 and gpu-nvd-0)
is refused with what is missing, before anything of it is read or written.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import Iterator

import pytest

from engine.cli import main
from engine.core.errors import UnsupportedBoardError
from engine.device.jetson.identity import jetpack_for
from engine.device.session import open_device
from engine.device.treegen import default_orin_spec, gpu_devfreq_path, render_tree
from engine.device.twin.orin import VirtualOrin

pytestmark = pytest.mark.usefixtures("isolated_env")  # conftest: state, data and cache in tmp

GPU_DEVICE = "sys/devices/platform/bus@0/17000000.gpu"


def _report(root: Path, capsys: pytest.CaptureFixture[str]) -> dict:
    assert main(["device", "--sysfs-root", str(root), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_an_r38_orin_tree_is_found_and_named_jetpack_7(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "r38"
    render_tree(root, default_orin_spec("r38"))
    assert not (root / GPU_DEVICE / "enable_3d_scaling").exists()  # gone on JetPack 7
    rep = _report(root, capsys)
    assert (rep["module"], rep["l4t"], rep["jetpack"]) == ("P3701-0000 (AGX Orin 64GB)", "39.2.0", "7.2")
    assert rep["source"] == "measured" and not rep["errors"]
    gpu = rep["clocks"]["gpu"]
    assert gpu["table_hz"][-1] == 1_300_500_000 and gpu["governor"] == "nvhost_podgov"
    assert rep["gpu_3d_scaling"] == {"enabled": True, "via": "governor nvhost_podgov"}
    assert len(rep["rails"]) == 4 and rep["nvpmodel"] == {"id": 0, "name": "MAXN"}
    main(["device", "--sysfs-root", str(root)])
    assert "GPU 3D scaling [measured] on (governor nvhost_podgov)" in capsys.readouterr().out


@pytest.mark.parametrize("governor, enabled", [("performance", False), ("nvhost_podgov", True)])
def test_3d_scaling_is_the_governor_on_jetpack_7_and_its_node_before(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], governor: str, enabled: bool
) -> None:
    r38, r36 = tmp_path / "r38", tmp_path / "r36"
    render_tree(r38, default_orin_spec("r38"))
    render_tree(r36, default_orin_spec("r36"))
    for root in (r38, r36):
        (root / gpu_devfreq_path("r36") / "governor").write_text(f"{governor}\n")
    assert _report(r38, capsys)["gpu_3d_scaling"] == {"enabled": enabled, "via": f"governor {governor}"}
    (r36 / GPU_DEVICE / "enable_3d_scaling").write_text("0\n")  # r36: the node says, whatever the governor
    assert _report(r36, capsys)["gpu_3d_scaling"] == {"enabled": False, "via": "enable_3d_scaling"}


@pytest.mark.parametrize("l4t, jetpack", [("38.2.0", "7.0"), ("38.4.0", "7.1"), ("39.2.0", "7.2"), ("38.9.1", "7.x")])
def test_the_l4t_release_names_its_jetpack_7(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], l4t: str, jetpack: str
) -> None:
    root = tmp_path / l4t
    render_tree(root, dataclasses.replace(default_orin_spec("r38"), l4t_release=l4t))
    assert (_report(root, capsys)["jetpack"], jetpack_for(l4t)) == (jetpack, jetpack)


@pytest.fixture
def r38_board(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An AGX Orin twin laid out as JetPack 7 (r38), running, so its clocks answer writes as a board's
    do; commands reach it by --sysfs-root, writing directly (no clock service in a test)."""
    monkeypatch.setenv("SLM_DVFS_CLOCKD", "off")
    orin = VirtualOrin("agx-orin-64gb", root=tmp_path / "board", layout="r38")
    orin.start(realtime=False)
    try:
        yield orin.root
    finally:
        orin.close()


def test_pin_and_restore_on_an_r38_orin(r38_board: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = str(r38_board)
    before = _report(r38_board, capsys)
    assert before["jetpack"] == "7.2" and before["gpu_3d_scaling"]["enabled"]
    assert main(["pin", "--sysfs-root", root, "--gpu", "816", "--cpu", "1497.6", "--emc", "2133"]) == 0
    assert "GPU pinned at 816 MHz" in capsys.readouterr().out
    pinned = _report(r38_board, capsys)
    for domain, hz in (("gpu", 816_000_000), ("cpu", 1_497_600_000)):
        clock = pinned["clocks"][domain]
        assert clock["min_hz"] == clock["max_hz"] == clock["cur_hz"] == hz and clock["pinned"]
    assert pinned["clocks"]["emc"]["cur_hz"] == 2_133_000_000 and pinned["clocks"]["emc"]["pinned"]
    assert pinned["gpu_3d_scaling"] == {"enabled": False, "via": "governor userspace"}  # a pinned clock does not scale
    assert main(["restore", "--sysfs-root", root]) == 0
    assert "restored: pinned journal" in capsys.readouterr().out
    after = _report(r38_board, capsys)
    for domain in ("gpu", "cpu", "emc"):
        keys = ("min_hz", "max_hz", "governor", "pinned")
        assert {k: after["clocks"][domain][k] for k in keys} == {k: before["clocks"][domain][k] for k in keys}
    assert after["gpu_3d_scaling"] == {"enabled": True, "via": "governor nvhost_podgov"}


# ---------------------------------------------------------------- the AGX Thor


def _thor_tree(root: Path, *, compatible: bool = True, gpu_nodes: bool = True) -> Path:
    """A tree with a Thor's marks: its compatible string (module p3834-0008, SoC tegra264) and/or its
    GPU's devfreq domains in place of the Orin's 17000000.gpu."""
    spec = default_orin_spec("r38")
    if compatible:
        spec = dataclasses.replace(spec, board_model="NVIDIA Jetson AGX Thor Developer Kit",
                                   compatible="nvidia,p3834-0008\0nvidia,tegra264\0")
    render_tree(root, spec)
    if gpu_nodes:
        (root / "sys/class/devfreq/17000000.gpu").unlink()
        shutil.rmtree(root / GPU_DEVICE)
        for node in ("gpu-gpc-0", "gpu-nvd-0"):
            folder = root / "sys/class/devfreq" / node
            folder.mkdir(parents=True)
            (folder / "governor").write_text("nvhost_podgov\n")
            (folder / "available_governors").write_text("nvhost_podgov performance\n")
    return root


@pytest.mark.parametrize("compatible, gpu_nodes", [(True, True), (True, False), (False, True)],
                         ids=["thor", "compatible-only", "gpu-nodes-only"])
def test_a_thor_is_refused_saying_what_is_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], compatible: bool, gpu_nodes: bool
) -> None:
    root = _thor_tree(tmp_path / "thor", compatible=compatible, gpu_nodes=gpu_nodes)
    before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file() and not p.is_symlink()}
    for argv in (["device"], ["pin", "--gpu", "816"]):
        assert main([*argv, "--sysfs-root", str(root)]) == 2
        err = capsys.readouterr().err
        assert "Jetson AGX Thor" in err and "does not support yet" in err and "Traceback" not in err
        assert "gpu-gpc-0" in err and "What to do:" in err and "--twin agx-orin-64gb" in err
    assert main(["restore", "--sysfs-root", str(root)]) == 0  # the refused pin changed nothing, left no journal
    assert "nothing to restore" in capsys.readouterr().out
    assert {p: p.read_bytes() for p in root.rglob("*") if p.is_file() and not p.is_symlink()} == before
    with pytest.raises(UnsupportedBoardError) as info:
        open_device(sysfs_root=root)
    assert info.value.board == "AGX Thor" and any("rails" in m for m in info.value.missing)
