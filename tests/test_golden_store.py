"""A results store written by issue 20's code reads the same with this code: every run finds its baseline,
every sweep is found by its workload (the oracle's lookup, and a sweep left unfinished resumes), every
comparison gives the figures it gave, the selector learns from the same workloads, and every workload's key
is the one stored.

tests/data/golden_store/results_v11.sqlite was written by main at 4f4911d (schema v11) through its CLI:
simulated and trained `run --compare maxn` (dynamic and max padding, LoRA, gradient checkpointing, a reused
baseline, the online and oracle policies), `sweep --fast` over two spaces, a swept trained sweep, two
`import-sweep`s (one of a model given by a config.json path), `fleet run` and `fleet sweep` on a local twin,
and a sweep cancelled after 4 points; expected.json is what that code found in it. make.sh beside them says
how (run it with that checkout to write both again). Each test reads a copy: the file is never written.
"""

from __future__ import annotations

import json
import math
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).parent / "data" / "golden_store"
EXPECTED = json.loads((HERE / "expected.json").read_text())


@pytest.fixture
def golden(tmp_path: Path, isolated_env: Any) -> Path:
    """A copy of the golden store (opening it may upgrade its schema: the committed file stays v11)."""
    path = tmp_path / "results.sqlite"
    shutil.copyfile(HERE / "results_v11.sqlite", path)
    return path


def _open(path: Path) -> Any:
    from engine.results.store import Store

    return Store(path, create=False)


def test_every_stored_workload_keeps_its_key(golden: Path) -> None:
    with _open(golden) as store:
        rows = store._query("SELECT id, key FROM workloads ORDER BY id")
        assert {str(r[0]): r[1] for r in rows} == {i: w["key"] for i, w in EXPECTED["workloads"].items()}
        for wid, key in rows:
            assert store.get_workload(wid).key == key
            assert store.find_workload(key)[0] == wid


def test_every_stored_workload_reads_back_lean(golden: Path) -> None:
    """Every row stored before the loop was recorded ran slm-dvfs's own loop (a trained run) or was computed
    by a twin that modelled no Trainer host work: its key names no loop, and it reads back lean."""
    with _open(golden) as store:
        rows = store._query("SELECT id, key FROM workloads ORDER BY id")
        assert rows and all("loop=" not in key for _wid, key in rows)
        assert {store.get_workload(wid).loop for wid, _key in rows} == {"lean"}
        assert {run.workload.loop for run in store.list_runs(limit=None)} == {"lean"}


def test_every_run_finds_the_baseline_it_found(golden: Path) -> None:
    from engine.results.baseline import find_baseline
    from engine.results.compare import fitting_baselines

    with _open(golden) as store:
        runs = store.list_runs(limit=None)
        assert {str(r.id) for r in runs} == set(EXPECTED["runs"])
        for run in runs:
            want = EXPECTED["runs"][str(run.id)]
            found = find_baseline(store, run)
            assert (None if found is None else found.id) == want["baseline"], run.id
            assert [r.id for r in fitting_baselines(store, run)] == want["fitting"], run.id
            assert run.workload.key == want["workload_key"]


def test_every_comparison_reads_as_it_did(golden: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`slm-dvfs compare N` of each compared run finds the baseline it was compared with, with the same figures."""
    from engine.cli import main

    for cid, want in EXPECTED["comparisons"].items():
        capsys.readouterr()
        assert main(["compare", str(want["run"]), "--db", str(golden), "--json"]) == 0, cid
        got = json.loads(capsys.readouterr().out)
        assert got["baseline"]["run_id"] == want["baseline"], cid
        for figure in ("saving_pct", "slowdown_pct"):
            assert math.isclose(got[figure], want[figure], rel_tol=1e-9), (cid, figure)


def test_the_oracle_finds_every_sweep_by_its_workload(golden: Path) -> None:
    from engine.core.provenance import Source
    from engine.results.sweeps import stored_points

    with _open(golden) as store:
        for where, count in EXPECTED["oracle_points"].items():
            device, workload, source, rails = where.split("/", 3)
            got = stored_points(store, int(device), int(workload), source=Source(source), rails=rails)
            assert len(got) == count, where


def test_an_unfinished_sweep_is_found_again_to_resume(golden: Path) -> None:
    from engine.results.records import ABANDONED

    with _open(golden) as store:
        unfinished = [s for s in store.list_sweeps() if s.status != "finished"]
        assert [s.id for s in unfinished] == [10] and unfinished[0].resumable
        s = unfinished[0]
        again = store.find_or_create_sweep(device=s.device_id, workload=s.workload_id, space=s.space,
                                           warmup_steps=s.warmup_steps, steps=s.steps, repeats=s.repeats,
                                           source=s.source)
        assert again.id == s.id and again.status == "running"
        assert len(store.completed_points(s.id)) == EXPECTED["sweeps"]["10"]["points"] == 4
        assert ABANDONED not in {x.status for x in store.list_sweeps()}


@pytest.mark.slow  # traces the stored models
def test_the_selector_learns_from_the_same_workloads(golden: Path) -> None:
    from engine.selector.training import store_dataset

    with _open(golden) as store:
        for which, keys in EXPECTED["datasets"].items():
            source, rails = which.split("/")
            ds = store_dataset(store, source=source, rails=rails)
            assert Counter(w.key for w in ds.workloads) == Counter(keys), which


@pytest.mark.slow  # traces two models
def test_the_same_commands_resume_the_sweep_and_find_the_oracles_points(golden: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """Through the CLI: the sweep command that was cancelled resumes its sweep (s10, 4 points kept), and the
    oracle of a stored workload finds its sweeps and chooses what it chose then (run 3's setting). Both are
    commands the twin alone computes, whose default loop is now hf: the stored workloads, from before the loop
    was recorded, are lean (the twin then modelled no Trainer host work), so the commands name that loop."""
    from engine.cli import main

    db, twin, lean = ["--db", str(golden)], ["--twin", "agx-orin-64gb"], ["--loop", "lean"]
    assert main(["sweep", "--fast", "--model", "bert-small", "--task", "mrpc", "--batch-size", "8", "--pad", "max",
                 "--mode", "lora", "--lora-rank", "16", "--lora-alpha", "32", "--space", "gpu+emc", *twin, *db,
                 *lean, "--json"]) == 0
    swept = json.loads(capsys.readouterr().out)
    assert (swept["sweep_id"], swept["resumed"], swept["status"]) == (10, 4, "finished")
    assert main(["run", "--simulate", "--model", "bert-tiny", "--task", "sst2", "--policy", "oracle", "--steps", "5",
                 *twin, *db, *lean, "--json"]) == 0
    ran = json.loads(capsys.readouterr().out)
    with _open(golden) as store:
        assert ran["run"]["setting"]["gpu_hz"] == store.get_run(3).setting["gpu_hz"]
        assert store.get_run(ran["run"]["run_id"]).workload_id == 1
