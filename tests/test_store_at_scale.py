"""Issue 24, the store's part: its cost does not grow with its size. The open checks the file only
when a writer died (a marker) and `slm-dvfs check` whenever asked; a fast sweep's points are one
transaction, and a crash loses at most that batch, never a committed point."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Iterator

import pytest

from conftest import IsolatedEnv
from engine.cli import main
from engine.core.provenance import Source
from engine.results.store import DeviceRecord, Store, WorkloadRecord
from engine.results.store.db import writers_dir
from engine.results.totals import RunTotals

TWIN = DeviceRecord("NVIDIA Jetson AGX Orin Developer Kit", "P3701-0005 (AGX Orin 64GB)", "36.3.0", "6.0",
                    "agx-orin-64gb", is_twin=True)
TINY = WorkloadRecord("bert-tiny", "sst2", 32, 128, "fp32")
SWEEP = ["sweep", "--twin", "--fast", "--model", "bert-tiny", "--task", "sst2", "--space", "gpu"]


@pytest.fixture
def statements(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every SQL statement any store connection runs from here on (sqlite3's trace callback)."""
    seen: list[str] = []
    connect = sqlite3.connect

    def traced(*args: object, **kwargs: object) -> sqlite3.Connection:
        conn = connect(*args, **kwargs)  # type: ignore[arg-type]
        conn.set_trace_callback(seen.append)
        return conn

    monkeypatch.setattr(sqlite3, "connect", traced)
    yield seen


def _checks(seen: list[str]) -> int:
    return sum("quick_check" in s for s in seen)


def _filled(db: Path, runs: int = 3) -> None:
    with Store(db) as s:
        for i in range(runs):
            rid = s.start_run(policy="maxn", source=Source.TWIN, device=TWIN, workload=TINY, seed=i, steps=10)
            s.finish_run(rid, RunTotals(time_s=10.0, rail_energy_j={"VDD_GPU_SOC": 80.0}, samples=320,
                                        source=Source.TWIN))


def _run_python(script: str, env_dir: IsolatedEnv | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True, timeout=300)


def _damage_a_table_page(db: Path) -> None:
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'runs'").fetchone()[0]
    data = bytearray(db.read_bytes())
    data[(root - 1) * page_size] = 0x00  # the page's type byte: no longer a b-tree page
    db.write_bytes(bytes(data))


# --------------------------------------------------------------------------- the check at open
def test_a_store_closed_cleanly_opens_without_reading_it_whole(isolated_env: IsolatedEnv, tmp_path: Path,
                                                               statements: list[str],
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "r.sqlite"
    _filled(db)
    statements.clear()
    assert main(["runs", "--db", str(db)]) == 0
    assert "maxn" in capsys.readouterr().out
    assert statements and _checks(statements) == 0
    assert list(writers_dir(db).iterdir()) == []  # every writer closed: no marker left


def test_a_writer_alive_elsewhere_is_not_taken_for_a_dead_one_and_a_dead_one_gets_the_file_checked(
        isolated_env: IsolatedEnv, tmp_path: Path, statements: list[str]) -> None:
    """Two processes on one store (the TUI and a CLI command): the other's marker is held while it runs;
    once it is killed, the next open checks the file, once, and clears its marker."""
    db = tmp_path / "r.sqlite"
    _filled(db)
    writer = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys
        from engine.results.store import Store
        store = Store({str(db)!r})
        store.start_run(policy="maxn", source="twin", seed=7, steps=1)
        print("written", flush=True)
        sys.stdin.read()  # holds the store open until killed
    """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout is not None and writer.stdout.readline().strip() == "written"
        statements.clear()
        with Store(db) as s:
            assert not s.open_checked and len(s.list_runs()) == 4
        assert _checks(statements) == 0
    finally:
        writer.kill()
        writer.wait()
    assert len(list(writers_dir(db).iterdir())) == 1  # killed: its marker stays
    statements.clear()
    with Store(db) as s:
        assert s.open_checked and s.writers_died == 1
    assert _checks(statements) == 1
    assert list(writers_dir(db).iterdir()) == []
    statements.clear()
    Store(db).close()
    assert _checks(statements) == 0


def test_a_store_from_before_the_markers_is_checked_once(isolated_env: IsolatedEnv, tmp_path: Path,
                                                         statements: list[str]) -> None:
    db = tmp_path / "r.sqlite"
    _filled(db)
    writers_dir(db).rmdir()  # as a store written before issue 24 has no markers' folder
    statements.clear()
    Store(db).close()
    assert _checks(statements) == 1
    statements.clear()
    Store(db).close()
    assert _checks(statements) == 0


# --------------------------------------------------------------------------- slm-dvfs check
def test_check_says_a_whole_store_is_whole(isolated_env: IsolatedEnv, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "r.sqlite"
    _filled(db, runs=2)
    assert main(["check", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert f"{db}: whole (every page, record and index checked)" in out and "2 runs" in out


def test_check_refuses_a_damaged_store_that_the_open_did_not_check(isolated_env: IsolatedEnv, tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "r.sqlite"
    _filled(db)
    _damage_a_table_page(db)
    assert main(["check", "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert f"the results database {db} is unreadable" in err and "move it aside" in err
    assert "Traceback" not in err


def test_check_of_a_missing_store_says_so(isolated_env: IsolatedEnv, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--db", str(tmp_path / "none.sqlite")]) == 2
    assert "there is no results database" in capsys.readouterr().err
    assert not (tmp_path / "none.sqlite").exists()


# --------------------------------------------------------------------------- batched sweep points
def _point_transactions(seen: list[str]) -> list[int]:
    """How many sweep points each committed transaction inserted (those that inserted any)."""
    out, n, open_tx = [], 0, False
    for s in seen:
        head = s.lstrip().upper()
        if head.startswith("BEGIN"):
            open_tx, n = True, 0
        elif head.startswith("INSERT INTO SWEEP_POINTS (SWEEP_ID") and open_tx:  # a point, not a migration
            n += 1
        elif head.startswith("COMMIT") and open_tx:
            open_tx = False
            if n:
                out.append(n)
    return out


def test_a_fast_sweep_commits_its_points_once(isolated_env: IsolatedEnv, tmp_path: Path,
                                              statements: list[str]) -> None:
    """A full space's hundreds of points: one transaction; each SweepPointDone comes once it is committed."""
    from engine.run.sweep import SweepPointDone, SweepSpec, run_sweep
    from engine.workload.spec import WorkloadSpec
    from traces import bert_base_workload

    events: list[object] = []
    with Store(tmp_path / "r.sqlite") as store:
        stored_at_event: list[int] = []

        def seen(event: object) -> None:
            if isinstance(event, SweepPointDone):
                events.append(event)
                stored_at_event.append(store.stored_point_counts([result_id[0]]).get(result_id[0], 0))

        result_id = [0]
        statements.clear()
        spec = SweepSpec(WorkloadSpec("bert-base-like", "sst2"), fast=True, twin="agx-orin-64gb", space="full")
        original = store.find_or_create_sweep

        def found(**kw: object):  # the sweep's id, for the listener
            sweep = original(**kw)  # type: ignore[arg-type]
            result_id[0] = sweep.id
            return sweep

        store.find_or_create_sweep = found  # type: ignore[method-assign]
        result = run_sweep(spec, store=store, workload=bert_base_workload(), callbacks=[seen])
        points = len(store.sweep_points(result.sweep_id))
    assert points == result.measured > 100 and len(events) == points
    assert _point_transactions(statements) == [points]
    assert set(stored_at_event) == {points}  # every event after the commit


@pytest.mark.slow
def test_the_fast_sweep_command_commits_its_points_once(isolated_env: IsolatedEnv, tmp_path: Path,
                                                       statements: list[str],
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "r.sqlite"
    assert main([*SWEEP, "--db", str(db)]) == 0
    with Store(db) as s:
        (sweep,) = s.list_sweeps()
        points = len(s.sweep_points(sweep.id))
    assert points > 5 and sweep.status == "finished"
    assert _point_transactions(statements) == [points]


@pytest.mark.slow
def test_a_sweep_killed_loses_at_most_its_uncommitted_batch_and_resumes(isolated_env: IsolatedEnv,
                                                                          tmp_path: Path) -> None:
    """Killed while its batch is being written: none of the batch is stored, the sweep is abandoned and
    the same command resumes it. Killed after the batch committed: every point stays, and the resumed
    sweep measures nothing again."""
    db = tmp_path / "r.sqlite"
    argv = [*SWEEP, "--db", str(db)]
    mid_batch = f"""
        import os, signal
        from engine.results.store import sweep_tables
        insert = sweep_tables.SweepTables._insert_point
        done = []
        def dying(self, *args, **kwargs):
            if len(done) == 3:
                os.kill(os.getpid(), signal.SIGKILL)  # inside the batch's transaction
            done.append(1)
            return insert(self, *args, **kwargs)
        sweep_tables.SweepTables._insert_point = dying
        from engine.cli import main
        main({argv!r})
    """
    assert _run_python(mid_batch).returncode == -9
    with Store(db) as s:
        (sweep,) = s.list_sweeps()
        assert s.open_checked  # the writer died: the file was checked
        assert sweep.status == "abandoned" and s.sweep_points(sweep.id) == []

    after_commit = f"""
        import os, signal
        from engine.results.store import sweep_tables
        sweep_tables.SweepTables.finish_sweep = lambda self, *a, **k: os.kill(os.getpid(), signal.SIGKILL)
        from engine.cli import main
        main({argv!r})
    """
    assert _run_python(after_commit).returncode == -9
    with Store(db) as s:
        (again,) = s.list_sweeps()
        kept = s.sweep_points(again.id)
        assert again.id == sweep.id and again.status == "abandoned" and len(kept) == again.planned

    assert main(argv) == 0
    with Store(db) as s:
        (done,) = s.list_sweeps()
        assert done.id == sweep.id and done.status == "finished"
        assert [p.id for p in s.sweep_points(done.id)] == [p.id for p in kept]  # nothing measured again


def test_power_samples_of_a_run_are_one_batch(isolated_env: IsolatedEnv, tmp_path: Path,
                                              statements: list[str]) -> None:
    """A run's trace is stored with its figures, in one executemany of the transaction that finishes it."""
    from engine.device.power import PowerSample

    db = tmp_path / "r.sqlite"
    with Store(db) as s:
        rid = s.start_run(policy="maxn", source=Source.TWIN, device=TWIN, workload=TINY, seed=0, steps=10)
        statements.clear()
        trace = tuple(PowerSample(k * 0.1, {"VDD_GPU_SOC": 5000.0}) for k in range(500))
        s.finish_run(rid, RunTotals(time_s=50.0, rail_energy_j={"VDD_GPU_SOC": 250.0}, samples=320,
                                    source=Source.TWIN, power_samples=trace))
        assert len(s.power_samples(rid)) == 500
    assert sum(s.lstrip().upper().startswith("COMMIT") for s in statements) == 1


def test_a_file_that_is_not_ours_is_refused_with_nothing_left_beside_it(isolated_env: IsolatedEnv,
                                                                        tmp_path: Path) -> None:
    from engine.results.errors import StoreError

    db = tmp_path / "contacts.sqlite"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE contacts (name TEXT)")
    with pytest.raises(StoreError, match="not a results database"):
        Store(db)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["contacts.sqlite"]


def test_a_forked_child_closing_its_copy_leaves_the_parents_marker(isolated_env: IsolatedEnv,
                                                                    tmp_path: Path) -> None:
    import os

    db = tmp_path / "r.sqlite"
    with Store(db) as s:
        s.start_run(policy="maxn", source=Source.TWIN, seed=0, steps=1)
        pid = os.fork()
        if pid == 0:  # the child lets go of its inherited marker, as a close in a forked worker would
            s._drop_marker()  # (its SQLite connection is the parent's: SQLite forbids using it after a fork)
            os._exit(0)
        os.waitpid(pid, 0)
        assert len(list(writers_dir(db).iterdir())) == 1
        other = Store(db)
        assert not other.open_checked  # the parent's marker is still there and held: not taken for dead
        other.close()
    assert list(writers_dir(db).iterdir()) == []


def test_a_marker_is_seen_only_once_its_lock_is_held(isolated_env: IsolatedEnv, tmp_path: Path,
                                                     statements: list[str], monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """A writer creates its marker under a pending name and renames it into place once flocked: an open
    in between sees no marker with a free lock, so never takes a live writer for a dead one (and unlinks
    its marker, hiding its later crash)."""
    import errno
    import fcntl
    import os

    db = tmp_path / "r.sqlite"
    _filled(db)
    pending = writers_dir(db) / ".123-456-abc"  # a writer between its create and its flock
    pending.touch()
    statements.clear()
    assert main(["runs", "--db", str(db)]) == 0
    assert "maxn" in capsys.readouterr().out
    assert _checks(statements) == 0 and pending.exists()  # not a dead writer: not checked, not unlinked
    synced: list[int] = []
    fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(os.fstat(fd).st_ino), fsync(fd))[1])
    with Store(db) as s:
        s.start_run(policy="maxn", source=Source.TWIN, seed=9, steps=1)
        assert writers_dir(db).stat().st_ino in synced  # the rename survives a power cut
        (marker,) = [p for p in writers_dir(db).iterdir() if p != pending]
        assert not marker.name.startswith(".")
        fd = os.open(marker, os.O_RDONLY)  # another open file: as another process would try it
        try:
            with pytest.raises(OSError) as exc:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            assert exc.value.errno in (errno.EWOULDBLOCK, errno.EAGAIN)  # held from the moment it is seen
        finally:
            os.close(fd)
    assert list(writers_dir(db).iterdir()) == [pending]
