"""What a run leaves in the store when it is refused and when it fails.

A run the board refuses before it starts (an unlisted clock, an undefined mode, an oracle with
no sweep, a data folder that is not there) stores nothing; one that fails once started is stored
as failed. Runs stored before stay whole.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from engine.cli import main
from engine.core.stats import trapezoid_j
from engine.results.store import Store

SIM = ["--twin", "--simulate", "--model", "bert-tiny", "--task", "sst2", "--batch-size", "8", "--max-seq-len", "64"]


def stored_runs(db: Path) -> list[Any]:
    with Store(db) as store:
        return store.list_runs(limit=None)


def assert_whole(db: Path, run_id: int) -> None:
    """A finished run with its figures and a trace that integrates to its energy."""
    with Store(db) as store:
        run, samples = store.get_run(run_id), store.power_samples(run_id)
    assert run.status == "finished" and run.energy_j and run.time_s and len(samples) >= 2
    assert trapezoid_j([s.t for s in samples], [s.total_mw for s in samples]) == pytest.approx(run.energy_j, rel=1e-5)


# --------------------------------------------------------------------------- refused before it starts
@pytest.mark.parametrize("policy, remedy", [
    ("static:gpu=999", "The board's GPU table (MHz): 306, 408, 510, 612, 714, 816, 918, 1020, 1122, 1224, 1300.5"),
    ("static:gpu=612,emc=5", "The board's EMC table (MHz): 204, 665.6, 2133, 3199"),
    ("mode:9", "use one of: 0 (MAXN), 1 (MODE_15W), 2 (MODE_30W), 3 (MODE_50W)"),
    ("oracle", "run `slm-dvfs sweep`"),
])
def test_a_run_the_board_refuses_is_not_stored(policy: str, remedy: str, isolated_env: Any,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", *SIM, "--policy", "maxn", "--steps", "3"]) == 0  # one stored before
    capsys.readouterr()
    assert main(["run", *SIM, "--policy", policy, "--compare", "maxn", "--steps", "3"]) == 2
    err = capsys.readouterr().err
    assert remedy in err and "Traceback" not in err
    assert main(["runs", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [(r["id"], r["status"]) for r in listed] == [(1, "finished")]  # no failed run appeared
    assert_whole(isolated_env.data_dir / "results.sqlite", 1)


def test_a_trained_run_with_no_data_folder_is_refused_before_it_is_stored(isolated_env: Any, tmp_path: Path,
                                                                           capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "no-glue"
    assert main(["run", "--twin", "--model", "bert-tiny", "--task", "sst2", "--data", str(missing),
                 "--steps", "2"]) == 2
    assert f"the GLUE folder {missing} does not exist" in capsys.readouterr().err
    assert stored_runs(isolated_env.data_dir / "results.sqlite") == []


@pytest.mark.parametrize("flags, why", [
    (["--thermal-wait-c", "90", "--thermal-abort-c", "80"], "thermal limits must satisfy"),
    (["--data", "/nonexistent-glue"], "the GLUE folder /nonexistent-glue does not exist"),
])
def test_a_sweep_refused_before_it_starts_is_not_stored(flags: list[str], why: str, isolated_env: Any,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sweep", "--twin", "--model", "bert-tiny", "--task", "sst2", "--steps", "1", "--warmup-steps", "0",
                 *flags]) == 2
    assert why in capsys.readouterr().err
    with Store(isolated_env.data_dir / "results.sqlite") as store:
        assert store.list_sweeps() == []


def test_a_run_that_fails_once_started_is_stored_as_failed(isolated_env: Any,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """The twin heats past the abort limit mid-run: the run was recorded, so it stays, as failed."""
    assert main(["run", "--twin", "--simulate", "--model", "bert-tiny", "--task", "sst2", "--policy", "maxn-pinned",
                 "--steps", "400", "--thermal", "--thermal-cooldown-c", "40", "--thermal-wait-c", "43",
                 "--thermal-abort-c", "44"]) == 2
    assert "over the 44 degC abort limit" in capsys.readouterr().err
    (run,) = stored_runs(isolated_env.data_dir / "results.sqlite")
    assert run.status == "failed" and "ThermalAbortError" in run.error
