"""What a run leaves in the store when it is refused, when it fails, and when the disk fills.

A run the board refuses before it starts (an unlisted clock, an undefined mode, an oracle with
no sweep, a data folder that is not there) stores nothing; one that fails once started is stored
as failed; one whose figures and trace the store cannot take (a full disk) is never `finished`:
it is marked failed, and the error says what was and was not kept. Runs stored before stay whole.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
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
    # The lean loop keeps the GPU busy (no Trainer-style host gaps), so the twin heats within the run.
    assert main(["run", "--twin", "--simulate", "--model", "bert-tiny", "--task", "sst2", "--policy", "maxn-pinned",
                 "--loop", "lean", "--steps", "400", "--thermal", "--thermal-cooldown-c", "40", "--thermal-wait-c", "43",
                 "--thermal-abort-c", "44"]) == 2
    assert "over the 44 degC abort limit" in capsys.readouterr().err
    (run,) = stored_runs(isolated_env.data_dir / "results.sqlite")
    assert run.status == "failed" and "ThermalAbortError" in run.error


# --------------------------------------------------------------------------- a full disk
def _cap_pages(monkeypatch: pytest.MonkeyPatch, db: Path, spare_pages: int) -> None:
    """The store's file may grow by `spare_pages` pages more, as on a disk that is nearly full:
    SQLite's own limit (max_page_count), so its writes fail with SQLITE_FULL where a full disk's would."""
    connect = sqlite3.connect

    def capped(path: Any, *args: Any, **kwargs: Any) -> sqlite3.Connection:
        conn = connect(path, *args, **kwargs)
        if Path(str(path)) == db:
            pages = conn.execute("PRAGMA page_count").fetchone()[0]
            conn.execute(f"PRAGMA max_page_count = {pages + spare_pages}")
        return conn

    monkeypatch.setattr(sqlite3, "connect", capped)


def test_a_run_whose_trace_the_full_disk_cannot_take_is_failed_not_finished(
        isolated_env: Any, capsys: pytest.CaptureFixture[str]) -> None:
    db = isolated_env.data_dir / "results.sqlite"
    assert main(["run", *SIM, "--policy", "static:gpu=612", "--compare", "maxn", "--steps", "5"]) == 0
    capsys.readouterr()
    with pytest.MonkeyPatch.context() as mp:
        _cap_pages(mp, db, 3)  # room to start a run, none for a 100-step online run's trace
        assert main(["run", *SIM, "--policy", "online", "--steps", "100"]) == 2
    err = capsys.readouterr().err
    assert "run 3 ran, but its figures and power trace could not be stored" in err and "full" in err
    assert "Stored: the run, marked failed, without its figures and power trace" in err
    assert "J in" in err and "[twin], said here only" in err  # what it measured is not lost to the user
    assert "the runs stored before it are intact" in err and "Traceback" not in err
    runs = {r.id: r for r in stored_runs(db)}
    assert runs[3].status == "failed" and runs[3].energy_j is None and "could not be stored" in runs[3].error
    with Store(db) as store:
        assert store.power_samples(3) == []
    for run_id in (1, 2):  # the comparison's two runs, stored before
        assert_whole(db, run_id)
    assert main(["show", "3"]) == 0
    assert "failed" in capsys.readouterr().out


def _can_mount_tmpfs(where: Path) -> bool:
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    where.mkdir()
    return subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(where)],
                          capture_output=True).returncode == 0


@pytest.mark.slow
def test_a_real_full_disk_mid_run(isolated_env: Any, tmp_path: Path) -> None:
    """The same on a real small file system (a 256 KB tmpfs, mounted as root), in a process of its
    own: a run fills the disk with its trace; the run before it is whole."""
    mnt = tmp_path / "small"
    if not _can_mount_tmpfs(mnt):
        pytest.skip("needs root and mount(8) to mount a small tmpfs")
    try:
        db = mnt / "r.sqlite"
        cli = "import sys; from engine.cli import main; sys.exit(main(sys.argv[1:]))"
        cmd = [sys.executable, "-c", cli, "run", *SIM, "--db", str(db), "--policy", "static:gpu=612"]
        first = subprocess.run([*cmd, "--steps", "5"], capture_output=True, text=True, env=os.environ.copy())
        assert first.returncode == 0, first.stderr
        free = shutil.disk_usage(mnt).free
        (mnt / "filler").write_bytes(b"\0" * max(0, free - 96 * 1024))  # leave ~96 KB
        full = subprocess.run([*cmd, "--steps", "1500", "--policy", "online"], capture_output=True, text=True,
                              env=os.environ.copy())
        assert full.returncode == 2 and "could not be stored" in full.stderr and "Traceback" not in full.stderr
        (mnt / "filler").unlink()
        runs = {r.id: r for r in stored_runs(db)}
        assert runs[2].status == "failed" and runs[2].energy_j is None
        assert_whole(db, 1)
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)
