"""One sign convention for every saving the tool shows: positive = less energy than MAXN Mode 0,
and positive slowdown = slower, in the CLI (`run`, `show`), the reports and the Compare page.
The demo store's pair (static:gpu=816 against MAXN) used less energy and more time."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.cli import main
from engine.results.report import write_report
from engine.results.store import Store
from tui import demo
from tui.compare_model import build_comparison

pytestmark = pytest.mark.usefixtures("isolated_env")

SAVING = 100 * (80.68 - 68.8) / 80.68  # +14.7%: the run used less energy
SLOWDOWN = 100 * (3.51 - 2.87) / 2.87  # +22.3%: and took longer


@pytest.fixture
def pair(tmp_path: Path) -> tuple[Path, dict[str, int]]:
    db = tmp_path / "results.sqlite"
    with Store(db) as store:
        ids = demo.fill_store(store)
    return db, ids


def test_show_and_report_give_a_smaller_energy_as_a_positive_saving(
        pair: tuple[Path, dict[str, int]], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db, ids = pair
    assert main(["show", str(ids["static"]), "--db", str(db)]) == 0
    assert f"energy saving {SAVING:+.1f}%, slowdown {SLOWDOWN:+.1f}%" in capsys.readouterr().out
    with Store(db) as store:
        md = write_report(store, str(ids["static"]), tmp_path / "out").markdown.read_text()
    assert f"energy saving **{SAVING:+.1f}%**, slowdown **{SLOWDOWN:+.1f}%**" in md
    assert "positive saving = less energy" in md


def test_the_compare_page_uses_the_same_signs_in_every_column(pair: tuple[Path, dict[str, int]]) -> None:
    db, ids = pair
    with Store(db) as store:
        view = build_comparison(store.get_run(ids["static"]), store.get_run(ids["maxn"]))
    assert view.saving_pct == pytest.approx(SAVING) and view.slowdown_pct == pytest.approx(SLOWDOWN)
    figures = {f.name: f for f in view.figures}
    # the issue: energy Δ read -11.1% beside a per-rail "saving" of +33.7% for the same reduction
    assert figures["energy"].delta_text == f"{SAVING:+.1f}% saving" and figures["energy"].better is True
    assert figures["time"].delta_text == f"{SLOWDOWN:+.1f}% slowdown" and figures["time"].better is False
    assert figures["mJ/sample"].delta_pct == pytest.approx(SAVING)  # same samples: the same saving
    rails = {r: saving for r, _run, _base, saving in view.rails}
    assert rails["VDD_GPU_SOC"] == pytest.approx(100 * (47.0 - 31.9) / 47.0)  # less energy: positive
    assert rails["VDD_CPU_CV"] == pytest.approx(100 * (4.98 - 5.8) / 4.98) and rails["VDD_CPU_CV"] < 0


def test_cli_run_prints_the_saving_with_the_sign_of_less_energy(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    common = ["run", "--model", "bert-tiny", "--task", "sst2", "--batch-size", "8", "--max-seq-len", "32",
              "--twin", "agx-orin-64gb", "--db", str(tmp_path / "db.sqlite"), "--simulate",
              "--policy", "static:gpu=612", "--compare", "maxn", "--steps", "5"]
    assert main([*common, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    run, base, c = result["run"], result["baseline"], result["comparison"]
    assert (c["saving_pct"] > 0) == (run["energy_j"] < base["energy_j"])
    assert (c["slowdown_pct"] > 0) == (run["time_s"] > base["time_s"])
    assert main(common) == 0
    text = capsys.readouterr().out
    assert f"energy saving vs MAXN: {c['saving_pct']:+.1f}%   slowdown: {c['slowdown_pct']:+.1f}%" in text
    assert "positive saving = less energy" in text


def test_a_twin_sweep_says_its_points_were_computed_not_measured(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    args = ["sweep", "--model", "bert-tiny", "--task", "sst2", "--batch-size", "8", "--max-seq-len", "32",
            "--twin", "agx-orin-64gb", "--db", str(tmp_path / "db.sqlite"), "--fast", "--steps", "3"]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "12 computed now on the twin, 0 resumed" in text and "measured now" not in text
    assert "vs MAXN Mode 0: energy saving +" in text  # the least energy of points that include MAXN: positive
