"""train-selector's search: a first pass shortlists the candidates, the folds run in worker processes,
and what each candidate cost is printed and kept (issue 24)."""

from __future__ import annotations

import json

import pytest

from engine.cli import main

# traces of the zoo models, shared by the selector tests of a session (conftest)
pytestmark = pytest.mark.usefixtures("selector_trace_cache")

# 16 shapes x 2 loops = 32 workloads of generated (twin) data; with 2 folds each fold grades 16, enough
# for a first pass (selection.FIRST_PASS_WORKLOADS)
GRID = ["--from-twin-zoo", "--models", "bert-tiny,pythia-14m", "--batch-sizes", "8,32", "--seq-lens", "32,64",
        "--precisions", "fp32,fp16", "--modes", "full", "--quick", "--splits", "2"]
CANDIDATES = ["--candidates", "knn,svr,ridge-poly,extra-trees,random-forest"]
# 2 shapes (traced by the other selector tests too), 2 cheap candidates: the cost report, without a first pass
SMALL = ["--from-twin-zoo", "--models", "bert-tiny", "--batch-sizes", "8,32", "--seq-lens", "32", "--precisions",
         "fp32", "--modes", "full", "--quick", "--splits", "2", "--candidates", "knn,ridge-poly"]


def _train(tmp_path, capsys, name: str, *extra: str, grid: tuple[str, ...] = (*GRID, *CANDIDATES)) -> dict:
    capsys.readouterr()
    assert main(["train-selector", *grid, "--out", str(tmp_path / f"{name}.joblib"), "--json", *extra]) == 0
    return json.loads(capsys.readouterr().out)


def _figures(table: list[dict]) -> dict[str, tuple]:
    return {r["label"]: (r["mean_regret"], r["worst_regret"], r["mape_time"], r["mape_power"], r["mape_energy"],
                         r["workloads"]) for r in table}


@pytest.mark.slow
def test_the_shortlisted_search_picks_what_the_full_search_picks(tmp_path, capsys) -> None:
    full = _train(tmp_path, capsys, "full", "--shortlist", "0", "--jobs", "1")
    short = _train(tmp_path, capsys, "short", "--shortlist", "2", "--jobs", "1")
    assert short["winner"] == full["winner"]
    kept = short["cv_cost"]["shortlist"]
    assert 2 <= len(kept) < 5 and full["cv_cost"]["shortlist"] == []  # a first pass ran, and left some out
    assert short["cv_table"][0]["label"] in kept
    # the shortlisted candidates' rows are the full search's (the first fold's fits reused)
    full_rows, short_rows = _figures(full["cv_table"]), _figures(short["cv_table"])
    for label in kept:
        assert short_rows[label] == full_rows[label]
    # the others are listed after them, over the one fold the first pass fitted them on
    rest = [r for r in short["cv_table"] if r["label"] not in kept]
    assert rest and all(r["folds"] == 1 for r in rest) and [r["label"] for r in short["cv_table"][-len(rest):]] == \
        [r["label"] for r in rest]
    assert all(r["folds"] == 2 for r in full["cv_table"])
    assert sum(r["cpu_s"] for r in short["cv_table"]) < sum(r["cpu_s"] for r in full["cv_table"]) * 10  # sane


@pytest.mark.slow
def test_folds_in_worker_processes_give_what_one_process_gives(tmp_path, capsys) -> None:
    serial = _train(tmp_path, capsys, "serial", "--jobs", "1", "--shortlist", "0")
    parallel = _train(tmp_path, capsys, "parallel", "--jobs", "2", "--shortlist", "0")
    assert parallel["cv_cost"]["jobs"] == 2 and serial["cv_cost"]["jobs"] == 1
    assert parallel["winner"] == serial["winner"]
    assert _figures(parallel["cv_table"]) == _figures(serial["cv_table"])  # exactly: the same floats
    assert [r["label"] for r in parallel["cv_table"]] == [r["label"] for r in serial["cv_table"]]
    assert parallel["training"]["digest"] == serial["training"]["digest"]


def test_the_cost_of_each_candidate_is_printed_and_kept(tmp_path, capsys) -> None:
    out = _train(tmp_path, capsys, "json", "--jobs", "1", grid=tuple(SMALL))
    labels = {r["label"] for r in out["cv_table"]}
    costs = out["cv_cost"]["candidates"]
    assert set(costs) == labels and all(c["folds"] == 2 for c in costs.values())
    assert all(r["cpu_s"] > 0 for r in out["cv_table"])  # unrounded there
    # the whole search's CPU holds every candidate's (in this process with one job) and the grading
    assert out["cv_cost"]["cpu_s"] >= sum(r["cpu_s"] for r in out["cv_table"]) - 0.01
    # the table as printed, and a progress line per candidate with its CPU seconds
    capsys.readouterr()
    assert main(["train-selector", *SMALL, "--out", str(tmp_path / "text.joblib"), "--jobs", "1"]) == 0
    printed = capsys.readouterr()
    head = next(line for line in printed.out.splitlines() if line.startswith("#"))
    assert "CPU s" in head and "folds" in head
    for label in labels:
        assert any(line.strip().startswith(f"{label}:") and "s CPU" in line for line in printed.err.splitlines())
    assert "cross-validation" in printed.out and "s CPU" in printed.out.splitlines()[-1]
