"""The baseline is the board's uncapped mode found by name (MAXN, MAXN_SUPER), whatever its id: on an Orin
Nano 8GB (JetPack 6.2) mode 0 is the capped 15W mode and MAXN_SUPER is mode 2. Test confs in tests/data
carry NVIDIA's modes with their source."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from engine.cli import main
from engine.core.errors import ConfigError
from engine.device.base import PowerMode
from engine.device.baseline import baseline_setting, mode_label, uncapped_mode
from engine.device.nvpmodel import parse_conf
from engine.device.treegen import ORIN_64GB_MODES, default_orin_spec, render_tree
from engine.results.store import Store

DATA = Path(__file__).parent / "data"
NANO_CONF = DATA / "nvpmodel_p3767_0003_super.conf"  # 0 = 15W, 1 = 25W (default), 2 = MAXN_SUPER
NX_CONF = DATA / "nvpmodel_p3767_0000_super.conf"  # 0 = MAXN_SUPER, 1-4 = 10W, 15W, 25W, 40W

pytestmark = pytest.mark.usefixtures("isolated_env")


def modes(path: Path) -> tuple[PowerMode, ...]:
    return parse_conf(path.read_text())[0]


def test_the_uncapped_mode_is_found_by_name_whatever_its_id() -> None:
    assert mode_label(uncapped_mode(modes(NANO_CONF))) == "MAXN_SUPER (mode 2)"
    assert mode_label(uncapped_mode(modes(NX_CONF))) == "MAXN_SUPER (mode 0)"
    assert mode_label(uncapped_mode(ORIN_64GB_MODES)) == "MAXN (mode 0)"  # the AGX Orin's stays mode 0
    assert baseline_setting(modes(NANO_CONF)).nvpmodel == 2
    # no MAXN-named mode: the one that caps nothing
    assert uncapped_mode((PowerMode(3, "CUSTOM"), PowerMode(1, "7W", gpu_max_hz=408_000_000))).id == 3


def test_a_conf_without_an_uncapped_mode_is_refused_with_a_remedy() -> None:
    capped = (PowerMode(0, "15W", gpu_max_hz=612_000_000), PowerMode(1, "7W", cpu_max_hz=1_113_600_000))
    with pytest.raises(ConfigError) as err:
        uncapped_mode(capped)
    assert "no uncapped mode" in err.value.what and "15W (mode 0), 7W (mode 1)" in err.value.what
    assert "MAXN_SUPER" in err.value.remedy and "--policy mode:N" in err.value.remedy


def nano_tree(tmp_path: Path, fake_tools) -> tuple[Path, Path]:
    """An Orin Nano-like tree (AGX clock tables, the Nano's conf and 6 CPUs) in its default 25W mode."""
    spec = replace(default_orin_spec("r36"), nvpmodel_conf=NANO_CONF.read_text(), nvpmodel_conf_name=NANO_CONF.name, cpu_count=6,
                   cpu_policies=(0, 4), nvpmodel_id=1,
                   board_model="NVIDIA Jetson Orin Nano Engineering Reference Developer Kit Super",
                   compatible="nvidia,p3768-0000+p3767-0003\0nvidia,p3767-0003\0nvidia,tegra234\0",
                   l4t_release="36.4.3")
    root = tmp_path / "nano"
    render_tree(root, spec)
    nvpmodel_calls, _ = fake_tools(root)
    return root, nvpmodel_calls


TINY_RUN = ["--model", "bert-tiny", "--task", "sst2", "--batch-size", "4", "--max-seq-len", "16", "--steps", "2",
            "--train-samples", "16", "--eval-samples", "8"]


@pytest.mark.slow  # trains bert-tiny twice on the tree (about 15 s on 2 cores)
def test_run_compare_maxn_on_an_orin_nano_runs_maxn_super_and_names_it(tmp_path: Path, fake_tools,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    root, calls = nano_tree(tmp_path, fake_tools)
    assert main(["run", "--sysfs-root", str(root), *TINY_RUN, "--policy", "mode:1", "--compare", "maxn"]) == 0
    out = capsys.readouterr().out
    assert "MAXN_SUPER (mode 2)" in out and "Mode 0" not in out
    assert "vs MAXN_SUPER (mode 2): " in out
    assert "-m 2" in calls.read_text() and "-m 0" not in calls.read_text()  # never the capped 15W mode
    with Store() as store:
        runs = {r.policy: r for r in store.list_runs()}
    assert runs["maxn"].setting["nvpmodel"] == 2 and runs["maxn"].setting["nvpmodel_name"] == "MAXN_SUPER"
    assert main(["compare", str(runs["mode"].id)]) == 0
    text = capsys.readouterr().out
    assert "MAXN_SUPER (mode 2)" in text and "vs MAXN_SUPER (mode 2): " in text


def test_static_clocks_without_a_mode_run_in_the_uncapped_mode(tmp_path: Path, fake_tools) -> None:
    """`static:gpu=816` ran in mode 0, the 15W mode on an Orin Nano, whose 612 MHz cap refused it."""
    from engine.device.session import open_device
    from engine.dvfs.objectives import parse_objective
    from engine.dvfs.policies import BUILTIN_POLICIES, PolicyContext

    root, _calls = nano_tree(tmp_path, fake_tools)
    with open_device(sysfs_root=root) as session:
        ctx = PolicyContext(session.device, parse_objective("energy"))
        assert BUILTIN_POLICIES.make("static:gpu=816").choose(ctx).nvpmodel == 2
        assert BUILTIN_POLICIES.make("static:gpu=612,mode=0").choose(ctx).nvpmodel == 0  # a mode typed stays
        assert BUILTIN_POLICIES.make("maxn-pinned").choose(ctx).nvpmodel == 2


def test_compare_maxn_without_an_uncapped_mode_is_refused_before_the_policy_runs(
        tmp_path: Path, fake_tools, capsys: pytest.CaptureFixture[str]) -> None:
    """A conf with no MAXN and every mode capped: `--compare maxn` said so only after the policy's whole run."""
    text = NANO_CONF.read_text()
    capped = text[:text.index("< POWER_MODEL ID=2 NAME=MAXN_SUPER >")] + text[text.index("< PM_CONFIG"):]
    assert [m.name for m in parse_conf(capped)[0]] == ["15W", "25W"]  # the Orin Nano's two capped modes
    root = tmp_path / "board"
    render_tree(root, replace(default_orin_spec("r36"), nvpmodel_conf=capped, nvpmodel_conf_name="capped.conf",
                              cpu_count=6, cpu_policies=(0, 4), nvpmodel_id=1))
    assert main(["run", "--sysfs-root", str(root), *TINY_RUN, "--policy", "mode:1", "--compare", "maxn"]) == 2
    err = capsys.readouterr().err
    assert "no uncapped mode" in err and "Traceback" not in err
    with Store() as store:
        assert store.list_runs() == []  # refused before the policy ran: nothing stored
