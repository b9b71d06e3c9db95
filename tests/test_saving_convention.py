"""One sign convention for every saving the tool stores (positive = less energy than MAXN Mode 0,
positive slowdown = slower: --json, exports), and one way every client says it in words
(engine.results.format: "14.7% less energy", "0.6% more energy", never "-0.6% saving"), in the
CLI (`run`, `show`, `sweep`), the reports and the Compare page. The demo store's pair
(static:gpu=816 against MAXN) used less energy and more time."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from engine.cli import main
from engine.results.format import saving_text, slowdown_text
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
    assert f"{SAVING:.1f}% less energy, {SLOWDOWN:.1f}% slower" in capsys.readouterr().out
    with Store(db) as store:
        md = write_report(store, str(ids["static"]), tmp_path / "out").markdown.read_text()
    assert f"**{SAVING:.1f}% less energy**, **{SLOWDOWN:.1f}% slower**" in md


def test_the_compare_page_uses_the_same_signs_in_every_column(pair: tuple[Path, dict[str, int]]) -> None:
    db, ids = pair
    with Store(db) as store:
        view = build_comparison(store.get_run(ids["static"]), store.get_run(ids["maxn"]))
    assert view.saving_pct == pytest.approx(SAVING) and view.slowdown_pct == pytest.approx(SLOWDOWN)
    figures = {f.name: f for f in view.figures}
    # the issue: energy Δ read -11.1% beside a per-rail "saving" of +33.7% for the same reduction
    assert figures["energy"].delta_text == f"{SAVING:.1f}% less" and figures["energy"].better is True
    assert figures["time"].delta_text == f"{SLOWDOWN:.1f}% slower" and figures["time"].better is False
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
    assert f"vs MAXN (mode 0): {saving_text(c['saving_pct'], than=None)}, {slowdown_text(c['slowdown_pct'], than=None)}" in text


def test_a_twin_sweep_says_its_points_were_computed_not_measured(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    args = ["sweep", "--model", "bert-tiny", "--task", "sst2", "--batch-size", "8", "--max-seq-len", "32",
            "--twin", "agx-orin-64gb", "--db", str(tmp_path / "db.sqlite"), "--fast", "--steps", "3"]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "12 computed now on the twin, 0 resumed" in text and "measured now" not in text
    assert "vs MAXN (mode 0): " in text and "% less energy, " in text  # the least energy of points that include MAXN


# --------------------------------------------------------------------------- more energy than MAXN, in words
def test_the_saving_formatter_says_more_or_less_never_a_negative_saving() -> None:
    from engine.core.interval import Interval
    from engine.results.format import change_text, saving_compact, saving_short, versus_text

    assert saving_text(14.7) == "14.7% less energy than MAXN"
    assert saving_text(-0.6) == "0.6% more energy than MAXN"  # was "-0.6% saving"
    assert saving_text(0.01) == "as much energy as MAXN" and saving_text(None) == "—"
    assert saving_text(-0.6, than=None, interval=Interval(-0.03, 0.02)) == "0.6% more energy (90%: 3.0% more to 2.0% less)"
    assert saving_text(13.0, interval=Interval(0.041, 0.168)).endswith("(90%: 4.1–16.8% less)")
    assert saving_text(-5.0, interval=Interval(-0.08, -0.02)).endswith("(90%: 2.0–8.0% more)")
    assert slowdown_text(22.3) == "22.3% slower than MAXN" and slowdown_text(-5.0, than=None) == "5.0% faster"
    assert saving_short(-16.5) == "16.5% more" and change_text(-18.2) == "18.2% lower"
    assert versus_text(-0.6, -2.0) == "vs MAXN: 0.6% more energy, 2.0% faster"
    assert versus_text(33.3, None, than="MAXN Mode 0") == "vs MAXN Mode 0: 33.3% less energy, time not recorded"
    assert saving_compact(-3.2, Interval(-0.05, -0.01)) == "costs 3% more (1–5% more)"


def test_a_run_that_cost_more_than_maxn_says_so_in_the_cli_report_and_compare_page(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "db.sqlite"
    # every domain at its maximum (jetson_clocks) costs the twin more energy than MAXN's governors
    common = ["run", "--model", "bert-tiny", "--task", "sst2", "--batch-size", "8", "--max-seq-len", "32",
              "--twin", "agx-orin-64gb", "--db", str(db), "--simulate", "--policy", "maxn-pinned",
              "--compare", "maxn", "--steps", "5"]
    assert main([*common, "--json"]) == 0
    c = json.loads(capsys.readouterr().out)["comparison"]
    assert c["saving_pct"] < 0  # the data keeps its sign
    more = f"{-c['saving_pct']:.1f}% more energy"
    outputs = []
    assert main(common) == 0
    outputs.append(capsys.readouterr().out)
    with Store(db) as store:
        run, base = (r.id for r in sorted(store.list_runs(), key=lambda r: r.id)[-2:])
        md = write_report(store, str(run), tmp_path / "out").markdown.read_text()
        view = build_comparison(store.get_run(run), store.get_run(base))
    assert main(["show", str(run), "--db", str(db)]) == 0
    outputs.append(capsys.readouterr().out)
    for text in (*outputs, md):
        assert more in text
        assert not re.search(r"saving:? \**-|-\d+(\.\d+)?% saving", text), text  # no double negative
    figures = {f.name: f for f in view.figures}
    assert figures["energy"].delta_text == f"{-view.saving_pct:.1f}% more" and figures["energy"].better is False
