"""Every consumer of a sweep or a choice recognises the board's baseline, its uncapped mode by name whatever
its id (engine.device.baseline.Baseline), not DvfsSetting(nvpmodel=0): on an Orin Nano 8GB (JetPack 6.2)
MAXN_SUPER is mode 2 and mode 0 is the capped 15W mode. A stored AGX Orin sweep's mode-0 MAXN point stays
its baseline. Each check goes through `slm-dvfs` (or the TUI's own start-up) as a user would."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.cli import main
from engine.results.store import Store
from conftest import IsolatedEnv

NANO = "orin-nano-8gb"
SUPER = "MAXN_SUPER (mode 2)"
IMPORT = ["--model", "bert-tiny", "--task", "sst2", "--samples", "10", "--rails", "all"]


def import_sweep(capsys: pytest.CaptureFixture[str], path: Path, profile: str) -> int:
    assert main(["import-sweep", str(path), "--profile", profile, *IMPORT, "--json"]) == 0
    return int(json.loads(capsys.readouterr().out)["sweeps"][0]["sweep_id"])


def test_an_imported_orin_nano_sweep_is_in_its_uncapped_mode_and_stated_against_it(
    tmp_path: Path, isolated_env: IsolatedEnv, capsys: pytest.CaptureFixture[str]
) -> None:
    """import-sweep --profile orin-nano-8gb: a `maxn` row is MAXN_SUPER (mode 2), rows naming no mode pin in
    it; `show sN` and `report sN` find that baseline point and name it."""
    path = tmp_path / "nano.csv"
    path.write_text("setting,gpu_mhz,energy_j,time_s\nmaxn,,300,10\n,612,200,11\n,408,250,13\n")
    sid = import_sweep(capsys, path, NANO)
    assert main(["show", f"s{sid}", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert {p["setting"]["nvpmodel"] for p in shown["points"]} == {2}
    assert shown["maxn"]["setting"]["nvpmodel"] == 2 and not shown["maxn"]["setting"].get("gpu_hz")
    assert shown["baseline"]["label"] == SUPER and shown["optimum_saving_vs_maxn_pct"] == pytest.approx(100 / 3)
    assert main(["show", f"s{sid}"]) == 0
    text = capsys.readouterr().out
    assert f"vs {SUPER}: 33.3% less energy" in text and "(MAXN_SUPER)" in text and "Mode 0" not in text
    assert main(["report", f"s{sid}", "--out", str(tmp_path / "r")]) == 0
    md = (tmp_path / "r" / f"sweep-s{sid}.md").read_text()
    assert f"Against {SUPER} (" in md and "**33.3% less energy**" in md and "Mode 0" not in md


def test_a_stored_agx_sweep_keeps_its_mode_0_maxn_as_the_baseline(
    tmp_path: Path, isolated_env: IsolatedEnv, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "agx.csv"
    path.write_text("setting,gpu_mhz,energy_j,time_s\nmaxn,,300,10\n,612,200,11\n")
    sid = import_sweep(capsys, path, "agx-orin-64gb")
    assert main(["show", f"s{sid}"]) == 0
    text = capsys.readouterr().out
    assert "vs MAXN (mode 0): 33.3% less energy" in text and "(MAXN)" in text


@pytest.mark.slow  # two choices with the twin ensemble's interval (~5 s)
def test_select_on_an_orin_nano_twin_states_its_choice_against_maxn_super(
    isolated_env: IsolatedEnv, capsys: pytest.CaptureFixture[str]
) -> None:
    """The shipped selector speaks the AGX Orin's mode 0; on an Orin Nano its choice is in MAXN_SUPER (mode 2),
    not the capped 15W mode 0, and its saving is stated against MAXN_SUPER."""
    assert main(["select", "--twin", NANO, "--model", "bert-tiny", "--task", "sst2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["baseline"]["label"] == SUPER and out["setting"]["nvpmodel"] == 2
    assert out["maxn"]["setting"]["nvpmodel"] == 2 and all(p["setting"]["nvpmodel"] == 2 for p in out["top"])
    assert out["uncertainty"] is not None  # the twin ensemble's interval, in the mode the choice is in
    assert main(["select", "--twin", NANO, "--model", "bert-tiny", "--task", "sst2"]) == 0
    text = capsys.readouterr().out
    assert f"Expected:  vs {SUPER}: " in text and "mode 0" not in text and "Mode 0" not in text


def test_a_fast_sweep_of_an_orin_nano_twin_reports_its_saving_against_maxn_super(
    isolated_env: IsolatedEnv, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["sweep", "--twin", NANO, "--fast", "--model", "bert-tiny", "--task", "sst2"]) == 0
    text = capsys.readouterr().out
    assert f"  vs {SUPER}: " in text and "less energy than MAXN_SUPER (90%: " in text
    assert "(MAXN_SUPER)" in text and "mode 0" not in text
    with Store() as store:
        sweep = store.list_sweeps()[0]
    assert main(["show", f"s{sweep.id}"]) == 0
    assert f"  vs {SUPER}: " in capsys.readouterr().out


@pytest.mark.slow  # a simulated run with two probes and the twin ensemble's interval (~5 s)
def test_the_ml_policy_on_an_orin_nano_twin_runs_and_probes_in_maxn_super(
    isolated_env: IsolatedEnv, capsys: pytest.CaptureFixture[str]
) -> None:
    """It ran the selector's mode-0 settings in the capped 15W mode 0 (only clocks under its 612 MHz cap)."""
    assert main(["run", "--twin", NANO, "--simulate", "--model", "bert-tiny", "--task", "sst2", "--policy",
                 "ml:probes=2", "--steps", "12", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["run"]["setting"]["nvpmodel"] == 2
    assert {h["setting"]["nvpmodel"] for h in out["run"]["history"]} == {2}  # the probes too
    detail = out["run"]["policy_detail"]
    assert detail["choice"]["baseline"]["label"] == SUPER and "energy than MAXN_SUPER" in detail["predicted"]


async def test_the_tuis_setup_page_offers_the_orin_nanos_baseline_by_name(
    isolated_env: IsolatedEnv, tmp_path: Path, results_store: Store
) -> None:
    """Setup's tick box said "compare with MAXN Mode 0" on every board; on an Orin Nano it is mode 2."""
    from textual.widgets import Checkbox

    from engine.device.session import open_device
    from tui_helpers import drive, make_app

    with open_device(twin=NANO, realtime=False, twin_dir=tmp_path / "twin") as session:
        app = make_app(session, store=results_store, poll=False)
        async with drive(app) as ui:
            await ui.press("2")
            assert str(app.screen.query_one("#compare", Checkbox).label) == f"compare with {SUPER}"
