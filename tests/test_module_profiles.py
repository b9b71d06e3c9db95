"""Every Orin module a user may own (issue 23, part 1): a tree built from each shipped profile's
facts reads as that module (its part, profile, JetPack and memory), its clocks pin and restore
through the CLI, and `sweep --fast` runs on its twin; an unknown module works generically and says
which profile it falls back to. Every check goes through `slm-dvfs` as a user would."""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from engine.cli import main
from engine.device.jetson.identity import MODULES, jetpack_for
from engine.device.treegen import render_tree
from engine.device.twin.profile import devices_dir, load_profile
from engine.device.twin.tree import tree_spec
from conftest import IsolatedEnv

SHIPPED = tuple(sorted(p.stem for p in devices_dir().glob("*.toml")))
MODULE_PROFILES = ("orin-nano-4gb", "orin-nano-8gb", "orin-nx-8gb", "orin-nx-16gb", "agx-orin-32gb", "agx-orin-64gb",
                   "agx-orin-industrial-64gb")


def board_tree(tmp_path: Path, name: str, **changes: Any) -> Path:
    """A board's tree (no twin marker) rendered from the profile's facts, with `changes` to its spec."""
    root = tmp_path / f"board-{name}"
    render_tree(root, replace(tree_spec(load_profile(name)), **changes))
    return root


def device_json(root: Path, capsys: pytest.CaptureFixture[str]) -> Any:  # `device --json`, as parsed
    assert main(["device", "--sysfs-root", str(root), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_every_module_has_a_profile() -> None:
    assert set(MODULE_PROFILES) <= set(SHIPPED)
    for part, (_name, profile) in MODULES.items():
        facts = load_profile(profile).module
        assert facts is not None and part in facts.parts, f"{part} -> {profile}, whose [module] parts do not list it"
    for name in MODULE_PROFILES:
        facts = load_profile(name).module
        assert facts is not None
        assert all(MODULES[part][1] == name for part in facts.parts), name


@pytest.mark.parametrize("name", MODULE_PROFILES)
def test_a_board_of_each_module_says_what_it_is(
    name: str, tmp_path: Path, isolated_env: IsolatedEnv, capsys: pytest.CaptureFixture[str]
) -> None:
    profile = load_profile(name)
    rep = device_json(board_tree(tmp_path, name), capsys)
    assert rep["twin"] is False and rep["profile"] is None  # a board: no twin profile ...
    assert rep["module_profile"] == name and rep["module_known"] is True  # ... but its module's
    assert rep["module"] == profile.identity.module and not str(rep["module"]).upper().startswith(("P3768", "P3737"))
    assert rep["jetpack"] == profile.identity.jetpack == jetpack_for(profile.identity.l4t)
    assert rep["memory_total_mb"] == pytest.approx(profile.memory_total_mb, abs=0.1)
    assert [r["name"] for r in rep["rails"]] == list(profile.rail_names)
    assert [m["name"] for m in rep["power_modes"]] == [m.name for m in profile.modes]
    gpu = rep["clocks"]["gpu"]
    assert gpu["table_hz"] == list(profile.gpu.table_hz)
    assert len(rep["clocks"]["cpu"]["clusters"]) == -(-profile.cpu.cores // profile.cpu.cluster_size)
    facts = profile.module
    assert facts is not None
    assert facts.total_rail in ("", *profile.rail_names)
    if facts.family in ("orin-nano", "orin-nx"):  # VDD_IN is the module's input there (l4t, jetson-stats)
        assert facts.total_rail == "VDD_IN"


def test_the_orin_nano_is_not_named_after_its_carrier(
    tmp_path: Path, isolated_env: IsolatedEnv, capsys: pytest.CaptureFixture[str]
) -> None:
    """The issue's board: an Orin Nano 8GB devkit on JetPack 6.2 was "P3768-0000" with "assuming 60 W"."""
    rep = device_json(board_tree(tmp_path, "orin-nano-8gb"), capsys)
    assert rep["module"] == "P3767-0005 (Orin Nano 8GB, developer kit module)"
    assert rep["l4t"] == "36.4.3" and rep["jetpack"] == "6.2"
    assert [m["name"] for m in rep["power_modes"] if m["gpu_max_hz"] is None] == ["MAXN_SUPER"]
    from engine.device.jetson import JetsonDevice
    from engine.dvfs.objectives import module_power_limit_w

    assert module_power_limit_w(JetsonDevice(tmp_path / "board-orin-nano-8gb").identity()) == 25.0


@pytest.mark.parametrize(("l4t", "jetpack"), [("35.4.1", "5.1.2"), ("36.4.3", "6.2"), ("36.4.4", "6.2.1"),
                                              ("38.2.0", "7.0"), ("38.4.0", "7.1"), ("39.2.0", "7.2")])
def test_jetpack_from_the_l4t_release(
    l4t: str, jetpack: str, tmp_path: Path, isolated_env: IsolatedEnv, capsys: pytest.CaptureFixture[str]
) -> None:
    rep = device_json(board_tree(tmp_path, "agx-orin-64gb", l4t_release=l4t), capsys)
    assert rep["l4t"] == l4t and rep["jetpack"] == jetpack


@pytest.mark.parametrize(("compatible", "part", "fallback"), [
    ("nvidia,p3768-0000+p3767-0099\0nvidia,p3767-0099\0nvidia,tegra234\0", "P3767-0099", "orin-nano-8gb"),
    ("nvidia,p3737-0000+p3711-0001\0nvidia,tegra234\0", "P3711-0001", "agx-orin-64gb"),
])
def test_an_unknown_module_works_generically_and_names_its_fallback(
    compatible: str, part: str, fallback: str, tmp_path: Path, isolated_env: IsolatedEnv,
    capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture,
) -> None:
    root = board_tree(tmp_path, "orin-nano-8gb", compatible=compatible)
    with caplog.at_level(logging.WARNING, logger="engine.device.jetson.identity"):
        rep = device_json(root, capsys)
    assert rep["module"] == f"unknown module {part} (treated as {fallback})"
    assert rep["module_known"] is False and rep["module_profile"] == fallback
    assert rep["clocks"]["gpu"]["table_hz"] == list(load_profile("orin-nano-8gb").gpu.table_hz)
    assert any(part in r.getMessage() and fallback in r.getMessage() for r in caplog.records)
    assert main(["device", "--sysfs-root", str(root)]) == 0
    assert f"unknown module {part} (treated as {fallback})" in capsys.readouterr().out


def _gpu_files(state_dir: Path, name: str) -> tuple[str, str]:
    dev = state_dir / "twin" / name / "sys/class/devfreq/17000000.gpu"
    return (dev / "min_freq").read_text().strip(), (dev / "max_freq").read_text().strip()


@pytest.mark.parametrize("name", MODULE_PROFILES)
def test_each_twin_pins_and_restores_through_the_cli(
    name: str, isolated_env: IsolatedEnv, capsys: pytest.CaptureFixture[str]
) -> None:
    state = isolated_env.state_dir
    assert main(["device", "--twin", name, "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["twin"] is True and rep["profile"] == name and rep["module_profile"] == name
    before = _gpu_files(state, name)
    table = load_profile(name).gpu.table_hz
    assert main(["pin", "--twin", name, "--gpu", str(table[1] // 1_000_000)]) == 0
    assert _gpu_files(state, name) == (str(table[1]), str(table[1]))
    assert main(["restore", "--twin", name]) == 0
    assert _gpu_files(state, name) == before


@pytest.mark.slow  # a sweep of each twin: ~2 s each, once its step trace is cached
@pytest.mark.parametrize("name", MODULE_PROFILES)
def test_a_fast_sweep_runs_on_each_twin(name: str, isolated_env: IsolatedEnv, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sweep", "--fast", "--model", "bert-tiny", "--task", "sst2", "--twin", name, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["device"]["profile"] == name
    gpu_table = set(load_profile(name).gpu.table_hz)
    pinned = [p["setting"]["gpu_hz"] for p in out["points"] if p["setting"].get("gpu_hz")]
    assert set(pinned) == gpu_table  # every step of the module's own clock table, not the AGX 64GB's
    # its baseline point is the module's uncapped mode, which every pinned point is in and the saving is against
    base = out["baseline"]
    assert base["mode_name"] in ("MAXN", "MAXN_SUPER") and out["maxn"]["setting"] == base["setting"]
    assert {p["setting"]["nvpmodel"] for p in out["points"]} == {base["setting"]["nvpmodel"]}
    assert out["optimum_vs_maxn"] is not None


@pytest.mark.slow  # two simulated runs: ~3 s
def test_a_simulated_run_against_the_baseline_on_the_orin_nx_twin(isolated_env: IsolatedEnv, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--twin", "orin-nx-16gb", "--simulate", "--model", "bert-tiny", "--task", "sst2",
                 "--policy", "static:gpu=612", "--compare", "maxn", "--steps", "5", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["device"]["profile"] == "orin-nx-16gb" and out["device"]["module"] == "P3767-0000 (Orin NX 16GB)"
    assert set(out["run"]["rail_energy_j"]) == set(load_profile("orin-nx-16gb").rail_names)
    assert out["run"]["setting"]["gpu_hz"] == 612_000_000 and out["comparison"]["saving_pct"] is not None
