"""Issue 23's done-when, per shipped module profile (profiles/devices/*.toml): a board tree built from the
profile's facts (engine.device.twin.tree.tree_spec rendered by treegen: a static tree, not a running twin)
reads, through `slm-dvfs` as a user runs it, as that module (identity and JetPack), totals its power over
the module's total rail (engine.device.rails), names its baseline mode, sets a run against its memory
budget (MemTotal less the OS's), and runs `run --compare maxn` against its uncapped mode.

A static tree cannot confirm a pinned clock (nothing moves cur_freq to the pin), so on the tree a pin is
refused and the tree left as it was found; the pin and restore themselves run on a running twin of the
same profile (`--twin NAME`), as does a simulated `run --compare maxn` (`--twin NAME --simulate`).

The expected facts are the sources', not the profile's: the uncapped mode is MAXN_SUPER on an Orin Nano or
NX with JetPack 6.2 (NVIDIA's nvpmodel_p3767_*_super.conf) and MAXN on an AGX Orin (nvpmodel_p3701_*.conf);
the total is VDD_IN on an Orin Nano / NX (the module's input) and the sum of the rails on an AGX Orin
(Jetson Linux Developer Guide, "Platform Power and Performance", Software-Based Power Consumption Modeling)."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from engine.cli import main
from engine.device.twin.profile import devices_dir, load_profile
from engine.device.twin.tree import tree_spec
from engine.device.treegen import render_tree
from engine.results.store import Store
from engine.workload.sizing.fit import board_budget
from engine.workload.sizing.memory import GIB, MIB
from conftest import IsolatedEnv

SHIPPED = tuple(sorted(p.stem for p in devices_dir().glob("*.toml")))
# (family, its uncapped mode's name, the rails its total is: None = the sum of every rail)
FAMILY = {"orin-nano": ("MAXN_SUPER", "VDD_IN"), "orin-nx": ("MAXN_SUPER", "VDD_IN"), "agx-orin": ("MAXN", None)}
TINY = ["--model", "bert-tiny", "--task", "sst2", "--batch-size", "4", "--max-seq-len", "16", "--steps", "2",
        "--train-samples", "16", "--eval-samples", "8"]


def family_of(name: str) -> tuple[str, str | None]:
    facts = load_profile(name).module
    assert facts is not None, f"{name} has no [module] table"
    return FAMILY[facts.family]


def board_tree(tmp_path: Path, name: str, **changes: Any) -> Path:
    """A board's tree (no twin marker) rendered from the profile's facts."""
    root = tmp_path / f"board-{name}"
    render_tree(root, replace(tree_spec(load_profile(name)), **changes))
    return root


def test_every_shipped_profile_is_a_module_this_file_checks() -> None:
    assert len(SHIPPED) >= 7 and all(load_profile(n).module is not None for n in SHIPPED)


@pytest.mark.parametrize("name", SHIPPED)
def test_a_tree_of_each_module_reads_as_that_module_with_its_total_and_baseline(
    name: str, tmp_path: Path, isolated_env: IsolatedEnv, capsys: pytest.CaptureFixture[str]
) -> None:
    profile = load_profile(name)
    root = board_tree(tmp_path, name)
    assert main(["device", "--sysfs-root", str(root), "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    # identity: the module (never the carrier board), its profile, the JetPack from the L4T release
    assert rep["twin"] is False and rep["module"] == profile.identity.module and rep["module_profile"] == name
    assert rep["jetpack"] == profile.identity.jetpack and rep["jetpack"]
    # the total: VDD_IN alone on an Orin Nano / NX (its parts are in it), the sum on an AGX Orin
    expected_mode, total_rail = family_of(name)
    power = {r["name"]: r["power_mw"] for r in rep["rails"]}
    want = power[total_rail] if total_rail else sum(power.values())
    assert rep["total_power_mw"] == pytest.approx(want)
    # the baseline: the uncapped mode by name, whatever its id
    base = rep["baseline"]
    assert base is not None and base["name"] == expected_mode
    capped = [m for m in rep["power_modes"] if m["id"] == base["id"]]
    assert capped and capped[0]["gpu_max_hz"] is None and capped[0]["cpu_max_hz"] is None
    assert main(["device", "--sysfs-root", str(root)]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if "(the baseline" in ln)
    assert line.split()[:2] == [str(base["id"]), expected_mode]


@pytest.mark.parametrize("name", SHIPPED)
def test_a_run_on_each_module_is_set_against_its_memory_budget(
    name: str, tmp_path: Path, isolated_env: IsolatedEnv, capsys: pytest.CaptureFixture[str]
) -> None:
    """A workload no Orin holds is refused before anything is built, against the budget of this board's
    MemTotal (/proc/meminfo of the tree, from the profile) less what the OS holds."""
    root = board_tree(tmp_path, name)
    assert main(["run", "--sysfs-root", str(root), "--model", "gemma-2b", "--task", "sst2", "--batch-size", "64",
                 "--max-seq-len", "512", "--steps", "2"]) == 2
    err = capsys.readouterr().err
    mem_total = int(load_profile(name).memory_total_mb * MIB)
    shown = re.search(r"more than the ([\d.]+) GiB the board leaves for training", err)
    assert shown is not None, err
    assert float(shown.group(1)) == pytest.approx(board_budget(mem_total) / GIB, abs=0.05)
    assert f"MemTotal {round(mem_total / MIB):,} MiB" in err
    with Store() as store:
        assert store.list_runs() == []  # nothing stored


@pytest.mark.parametrize("name", SHIPPED)
def test_a_pin_is_refused_on_a_static_tree_and_restored_on_a_running_twin(
    name: str, tmp_path: Path, isolated_env: IsolatedEnv, capsys: pytest.CaptureFixture[str]
) -> None:
    table = load_profile(name).gpu.table_hz
    root = board_tree(tmp_path, name)
    gpu = root / "sys/class/devfreq/17000000.gpu"
    before = [(gpu / f).read_text() for f in ("min_freq", "max_freq")]
    # the tree's cur_freq never follows: the pin is refused and what it wrote is put back
    assert main(["pin", "--sysfs-root", str(root), "--gpu", str(table[1] // 1_000_000)]) == 2
    assert [(gpu / f).read_text() for f in ("min_freq", "max_freq")] == before
    # on the running twin of the same profile the pin holds, and restore puts the governor's range back
    twin = isolated_env.state_dir / "twin" / name / "sys/class/devfreq/17000000.gpu"
    assert main(["device", "--twin", name, "--json"]) == 0
    capsys.readouterr()
    governed = [(twin / f).read_text().strip() for f in ("min_freq", "max_freq")]
    assert main(["pin", "--twin", name, "--gpu", str(table[1] // 1_000_000)]) == 0
    assert [(twin / f).read_text().strip() for f in ("min_freq", "max_freq")] == [str(table[1])] * 2
    assert main(["restore", "--twin", name]) == 0
    assert [(twin / f).read_text().strip() for f in ("min_freq", "max_freq")] == governed


@pytest.mark.slow  # trains bert-tiny twice on each tree (a few seconds each)
@pytest.mark.parametrize("name", SHIPPED)
def test_run_compare_maxn_on_a_tree_of_each_module_runs_its_uncapped_mode(
    name: str, tmp_path: Path, isolated_env: IsolatedEnv, fake_tools: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """The policy is a mode (mode:N, clocks left to their governors): a static tree cannot confirm a pin."""
    profile = load_profile(name)
    expected_mode, _total = family_of(name)
    base = next(m for m in profile.modes if m.name == expected_mode)
    other = next(m for m in profile.modes if m.id != base.id)
    root = board_tree(tmp_path, name)
    calls, _jc = fake_tools(root)
    assert main(["run", "--sysfs-root", str(root), *TINY, "--policy", f"mode:{other.id}", "--compare", "maxn"]) == 0
    out = capsys.readouterr().out
    assert f"vs {expected_mode} (mode {base.id}): " in out and "Mode 0" not in out
    assert f"-m {base.id}" in calls.read_text()
    with Store() as store:
        runs = {r.policy: r for r in store.list_runs()}
    assert runs["maxn"].setting is not None
    assert runs["maxn"].setting["nvpmodel"] == base.id and runs["maxn"].setting["nvpmodel_name"] == expected_mode


@pytest.mark.slow  # two simulated runs on each twin
@pytest.mark.parametrize("name", SHIPPED)
def test_run_compare_maxn_pinned_on_a_running_twin_of_each_module(
    name: str, isolated_env: IsolatedEnv, capsys: pytest.CaptureFixture[str]
) -> None:
    """A pinned policy against the baseline, where the pin can be confirmed: the running twin."""
    profile = load_profile(name)
    expected_mode, _total = family_of(name)
    base = next(m for m in profile.modes if m.name == expected_mode)
    mhz = profile.gpu.table_hz[len(profile.gpu.table_hz) // 2] // 1_000_000
    assert main(["run", "--twin", name, "--simulate", "--model", "bert-tiny", "--task", "sst2", "--policy",
                 f"static:gpu={mhz}", "--compare", "maxn", "--steps", "5", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["run"]["setting"]["gpu_hz"] == mhz * 1_000_000 and out["run"]["setting"]["nvpmodel"] == base.id
    assert out["baseline"]["setting"]["nvpmodel"] == base.id
    assert out["comparison"]["saving_pct"] is not None
