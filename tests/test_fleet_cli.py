"""`slm-dvfs fleet`: the commands end to end on a local fleet of twins, and their errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.results.format import versus_text
from engine.cli import main
from engine.results.store import Store

pytest.importorskip("ray")


@pytest.fixture
def fleet_cli_env(isolated_env, monkeypatch: pytest.MonkeyPatch) -> object:
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")  # a local instance only: nothing under ~/.ray
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    return isolated_env


def test_no_address_and_no_twins_says_how_to_name_a_fleet(fleet_cli_env, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fleet", "status"]) == 2
    err = capsys.readouterr().err
    assert "no fleet to connect to" in err and "--address" in err and "--twins 3" in err


def test_bad_twins_count_is_refused_before_ray_starts(fleet_cli_env, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fleet", "sweep", "--twins", "0", "--model", "bert-tiny", "--task", "sst2", "--fast"]) == 2
    assert "--twins 3" in capsys.readouterr().err


def test_thermal_is_refused_for_boards(fleet_cli_env, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fleet", "status", "--address", "127.0.0.1:1", "--thermal"]) == 2
    assert "--thermal is for a fleet of twins" in capsys.readouterr().err


def test_an_unreachable_head_is_a_clear_error(fleet_cli_env, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fleet", "status", "--address", "127.0.0.1:1"]) == 2
    err = capsys.readouterr().err
    assert "cannot reach the Ray cluster at 127.0.0.1:1" in err and "ray start --head" in err


@pytest.mark.slow  # a local Ray instance and three workers: ~30-60 s on two cores
def test_fleet_sweep_twins_3_over_two_models_and_two_tasks(fleet_cli_env, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "fleet.sqlite"
    code = main(["fleet", "sweep", "--twins", "3", "--model", "bert-tiny", "bert-mini", "--task", "sst2", "mrpc",
                 "--fast", "--steps", "2", "--db", str(db)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert out.count("[twin]") >= 4 * 12  # every point's line names its board and source
    assert "fleet sweep finished" in out and "points per board: twin-0" in out
    with Store(db) as store:
        sweeps = store.list_sweeps()
        assert len(sweeps) == 4 and all(s.status == "finished" for s in sweeps)
        for s in sweeps:
            keys = [(repr(p.setting), p.repeat) for p in store.sweep_points(s.id)]
            assert len(keys) == len(set(keys)) == 12


@pytest.mark.slow  # a local Ray instance and three workers: ~20-40 s on two cores
def test_three_fresh_twins_share_one_fast_sweep_and_its_optimum_says_saving_and_slowdown(
        fleet_cli_env, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Fast twins' points take milliseconds, so a board's first share is mostly its setup: the twin
    that planned the sweep used to measure most of it before the others had started (9, 2, 1)."""
    import json
    import re

    from engine.results.compare import optimum_vs_maxn
    from engine.results.sweeps import maxn_of, optimum, summarize_points

    db = tmp_path / "fleet.sqlite"
    argv = ["fleet", "sweep", "--twins", "3", "--model", "bert-tiny", "--task", "sst2", "--fast", "--steps", "2",
            "--db", str(db)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    per_board = dict(re.findall(r"(twin-\d) (\d+)", out.splitlines()[-1]))
    counts = sorted(int(n) for n in per_board.values())
    assert len(counts) == 3 and sum(counts) == 12 and counts[-1] - counts[0] <= 2, out.splitlines()[-1]
    with Store(db) as store:
        points = summarize_points(store.sweep_points(store.list_sweeps()[0].id))
    vs = optimum_vs_maxn(optimum(points), maxn_of(points))
    summary = next(line for line in out.splitlines() if line.startswith("  s1 "))
    assert f"{versus_text(vs.saving_pct, vs.slowdown_pct)} per sample [twin]" in summary, summary  # the store's own figures, as `slm-dvfs show s1` gives them

    assert main([*argv[:-2], "--db", str(tmp_path / "again.sqlite"), "--json"]) == 0
    row = json.loads(capsys.readouterr().out)["sweeps"][0]
    assert row["source"] == "twin" and row["optimum"] and isinstance(row["saving_vs_maxn_pct"], float)
    assert isinstance(row["slowdown_vs_maxn_pct"], float)


def test_fleet_sweep_takes_lists_of_batch_sizes_and_spaces() -> None:
    from engine.cli import build_parser
    from engine.cli.fleet_cmd import sweep_plans
    from engine.run.fleet.model import plan_label

    args = build_parser().parse_args(["fleet", "sweep", "--twins", "2", "--model", "bert-tiny", "--task", "sst2",
                                      "mrpc", "--batch-size", "8", "16", "--space", "gpu", "modes", "gpu"])
    plans = sweep_plans(args)
    assert [plan_label(p) for p in plans] == [
        "bert-tiny/sst2 batch 8", "bert-tiny/sst2 batch 8 modes", "bert-tiny/sst2 batch 16",
        "bert-tiny/sst2 batch 16 modes", "bert-tiny/mrpc batch 8", "bert-tiny/mrpc batch 8 modes",
        "bert-tiny/mrpc batch 16", "bert-tiny/mrpc batch 16 modes"]
    assert {p.space for p in plans} == {"gpu", "modes"}


def test_fleet_status_lists_each_board_with_its_figures_labelled_by_source() -> None:
    from engine.cli.fleet_cmd import format_status
    from engine.run.fleet.model import BoardInfo

    board = BoardInfo(name="board-a", serial="1422921012345", module="P3701-0005 (AGX Orin 64GB)", l4t="36.4.0",
                      profile=None, is_twin=False, temps_c={"gpu": 51.5, "cpu": 48.0}, power_w=23.4, busy=True,
                      running="bert-tiny/sst2 3/8")
    twin = BoardInfo(name="board-twin-0", serial="twin-0", module="P3701-0005 (AGX Orin 64GB)", l4t="36.4.0",
                     profile="agx-orin-64gb", is_twin=True, temps_c={}, power_w=None)
    lines = format_status([twin, board]).splitlines()
    assert lines[0] == "2 boards"
    assert lines[2].startswith("1422921012345") and "36.4.0" in lines[2] and "23.4 W" in lines[2]
    assert "51.5 C" in lines[2] and lines[2].endswith("busy: bert-tiny/sst2 3/8 [measured]")
    assert lines[3].startswith("twin-0") and lines[3].endswith("free [twin agx-orin-64gb]") and " - " in lines[3]
    assert format_status([]) == "no boards answer\n"
