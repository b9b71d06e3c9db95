"""`slm-dvfs sweeps`, `show sN` and `export sN`: sweeps as first-class records of the store, a killed
sweep `abandoned` (and resumable), end to end as a user types the commands."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import IsolatedEnv
from test_store_cmds import _read_csv
from engine.cli import main
from engine.results.store import DeviceRecord, Store, SweepPoint, WorkloadRecord
from engine.results.store.sweep_tables import FinishedSweep

ROOT = Path(__file__).resolve().parent.parent
TWIN = DeviceRecord("NVIDIA Jetson AGX Orin Developer Kit", "P3701-0005 (AGX Orin 64GB)", "36.3.0", "6.0",
                    "agx-orin-64gb", is_twin=True)
BOARD = DeviceRecord("NVIDIA Jetson AGX Orin Developer Kit", "P3701-0005 (AGX Orin 64GB)", "36.4.0", "6.1", None,
                     serial="1422921012345")
TINY = WorkloadRecord("bert-tiny", "sst2", 32, 128, "fp32", padding="dynamic")
PYTHIA = WorkloadRecord("pythia-70m", "mrpc", 16, 128, "fp16")
MHZ = 1_000_000


@pytest.fixture
def db(isolated_env: IsolatedEnv, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return isolated_env.data_dir / "results.sqlite"


def _point(sweep_id: int, mhz: int | None, repeat: int = 0, time_s: float | None = 1.0) -> SweepPoint:
    setting = {"nvpmodel": 0} if mhz is None else {"gpu_hz": mhz * MHZ, "nvpmodel": 0}
    return SweepPoint(sweep_id, setting, repeat, time_s=time_s, energy_j=10.0 + (mhz or 900) / 100, samples=160,
                      rail_energy_j={"VDD_GPU_SOC": 6.0, "VDD_CPU_CV": 4.0})


def _stored(db: Path, dead_owner: Path) -> tuple[int, int, int]:
    """A finished twin sweep, one whose process died after 2 of its 6 points, and an imported measured one."""
    with Store(db) as s:
        done = s.find_or_create_sweep(device=TWIN, workload=TINY, space={"space": "gpu", "method": "fast"},
                                      warmup_steps=1, steps=5, repeats=1, source="twin", planned=3)
        for mhz in (None, 306, 612):
            s.add_point(_point(done.id, mhz))
        s.finish_sweep(done.id)
        killed = s.find_or_create_sweep(device=TWIN, workload=PYTHIA, space={"space": "gpu+emc", "method": "run"},
                                        warmup_steps=1, steps=5, repeats=2, source="twin", planned=6,
                                        owner_lock=str(dead_owner))
        s.add_point(_point(killed.id, None))
        s.add_point(_point(killed.id, 306))
        [imported] = s.add_finished_sweeps(BOARD, [FinishedSweep(
            TINY, {"method": "import", "file": "bench.csv", "sha256": "ab"},
            [_point(0, None, time_s=None), _point(0, 612, time_s=None)], repeats=1)])
    return done.id, killed.id, imported


def test_sweeps_lists_each_sweep_with_its_workload_space_progress_status_and_source(
        db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    done, killed, imported = _stored(db, tmp_path / "state" / "sessions" / "1-2.lock")  # a lock nobody holds
    assert main(["sweeps"]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line for line in out.splitlines()[1:] if line.startswith("s")}
    assert set(rows) == {f"s{done}", f"s{killed}", f"s{imported}"}
    assert "bert-tiny/sst2 (batch 32, length 128, fp32, full, pad dynamic)" in rows[f"s{done}"]
    assert "gpu (fast)" in rows[f"s{done}"] and " 3/3 " in rows[f"s{done}"] and "finished" in rows[f"s{done}"]
    assert "[twin]" in rows[f"s{done}"]
    # the sweep whose process died is abandoned (on this open of the store), and says it resumes
    assert "pythia-70m/mrpc" in rows[f"s{killed}"] and " 2/6 " in rows[f"s{killed}"]
    assert "abandoned, resumable" in rows[f"s{killed}"]
    assert "imported (bench.csv)" in rows[f"s{imported}"] and "[measured]" in rows[f"s{imported}"]
    assert "running the same `slm-dvfs sweep` command again" in out
    assert main(["sweeps", "--json", "--status", "abandoned"]) == 0
    [listed] = json.loads(capsys.readouterr().out)
    assert (listed["id"], listed["points_done"], listed["points_planned"], listed["resumable"]) == \
        (f"s{killed}", 2, 6, True)
    assert listed["workload"]["key"] == PYTHIA.key and listed["source"] == "twin"
    assert main(["sweeps", "--model", "bert-tiny", "--source", "measured"]) == 0
    assert [line.split()[0] for line in capsys.readouterr().out.splitlines()[1:]] == [f"s{imported}"]


def test_show_of_an_abandoned_sweep_says_it_resumes(db: Path, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    _done, killed, _imported = _stored(db, tmp_path / "state" / "sessions" / "1-2.lock")
    assert main(["show", f"s{killed}"]) == 0
    captured = capsys.readouterr()
    assert f"Sweep s{killed}  [twin]  abandoned" in captured.out and "2 of 6 planned" in captured.out
    assert "its process died while it ran" in captured.err and "resumes it" in captured.err
    assert main(["show", f"s{killed}", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["status"] == "abandoned" and shown["resumable"] and shown["points_planned"] == 6


def test_a_running_sweep_whose_process_lives_is_not_abandoned(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from engine.device.guard.lock import session_lock

    with Store(db) as s:
        sweep = s.find_or_create_sweep(device=TWIN, workload=TINY, space={"space": "gpu"}, warmup_steps=1, steps=5,
                                       repeats=1, source="twin", owner_lock=str(session_lock()))
    assert main(["sweeps", "--json"]) == 0
    [listed] = json.loads(capsys.readouterr().out)
    assert listed["id"] == f"s{sweep.id}" and listed["status"] == "running" and not listed["resumable"]


def test_export_of_a_sweep_writes_its_points_where_the_help_says(db: Path, tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    done, _killed, imported = _stored(db, tmp_path / "state" / "sessions" / "1-2.lock")
    assert main(["export", f"s{done}"]) == 0
    written = tmp_path / f"sweep-s{done}.csv"  # the help: sweep-sN.csv in the current folder
    assert f"wrote sweep s{done} (3 points, twin) to {written}" in capsys.readouterr().out
    summary, rows = _read_csv(written)
    assert summary["sweep"] == f"s{done}" and summary["workload_key"] == TINY.key and summary["source"] == "twin"
    assert [r["setting"] for r in rows] == ["GPU gov · CPU gov · EMC gov · mode 0", "GPU 306 · CPU gov · EMC gov · mode 0",
                                            "GPU 612 · CPU gov · EMC gov · mode 0"]
    assert float(rows[1]["energy_j"]) == pytest.approx(13.06) and float(rows[1]["VDD_GPU_SOC_j"]) == 6.0
    assert float(rows[1]["joules_per_sample"]) == pytest.approx(13.06 / 160) and {r["source"] for r in rows} == {"twin"}
    # an imported energy-only point keeps its time empty (not recorded), and names the board that measured it
    assert main(["export", f"s{imported}", "--out", "-"]) == 0
    lines = capsys.readouterr().out.splitlines()
    body = list(csv.DictReader([line for line in lines if not line.startswith("#")]))
    assert [r["time_s"] for r in body] == ["", ""] and {r["board_serial"] for r in body} == {"1422921012345"}
    pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    assert main(["export", f"s{done}", "--format", "parquet"]) == 0
    table = pq.read_table(tmp_path / f"sweep-s{done}.parquet")
    assert table.column("gpu_hz").to_pylist() == [None, 306 * MHZ, 612 * MHZ]
    assert json.loads(table.schema.metadata[b"slm_dvfs.sweep"])["sweep"] == f"s{done}"


def test_export_of_an_unknown_sweep_is_a_clear_error(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _stored(db, db.parent / "1-2.lock")
    assert main(["export", "s99"]) == 2
    err = capsys.readouterr().err
    assert "no sweep with id 99" in err and "slm-dvfs sweeps" in err and "Traceback" not in err


KILLED_SWEEP = textwrap.dedent("""
    import os, signal, sys
    from engine.results.store.sweep_tables import SweepTables
    from engine.cli import main
    add = SweepTables.add_points
    def add_then_die(self, points):  # a fast sweep stores its points in one commit: five of them, then die
        add(self, points[:5])
        os.kill(os.getpid(), signal.SIGKILL)  # killed mid-sweep, after its fifth point
    SweepTables.add_points = add_then_die
    main(sys.argv[1:])
""")


@pytest.mark.slow  # a fresh interpreter traces bert-tiny on meta tensors: ~5 s
def test_a_killed_sweep_command_is_abandoned_and_the_same_command_resumes_it(
        db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    command = ["sweep", "--model", "bert-tiny", "--task", "sst2", "--twin", "--fast"]
    proc = subprocess.run([sys.executable, "-c", KILLED_SWEEP, *command], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)
    assert proc.returncode == -9, proc.stderr[-2000:]
    assert main(["sweeps", "--json"]) == 0
    [killed] = json.loads(capsys.readouterr().out)
    assert (killed["status"], killed["points_done"], killed["resumable"]) == ("abandoned", 5, True)
    assert main(command) == 0
    capsys.readouterr()
    assert main(["sweeps", "--json"]) == 0
    [resumed] = json.loads(capsys.readouterr().out)
    assert resumed["id"] == killed["id"] and resumed["status"] == "finished"
    assert resumed["points_done"] == resumed["points_planned"] == killed["points_planned"]


# --------------------------------------------------------------------------- a sweep a live process runs
SWEEP_ARGS = ["sweep", "--model", "bert-tiny", "--task", "sst2", "--twin", "agx-orin-64gb", "--fast", "--steps", "3",
              "--repeats", "2"]
HELD_SWEEP = textwrap.dedent("""
    import sys
    import engine.results.store.sweep_tables as tables
    from engine.cli import main
    add = tables.SweepTables.add_points
    def add_then_wait(self, points):  # after its first stored point, the sweep waits for the test's word
        out = add(self, points[:1])
        print("held", points[0].sweep_id, flush=True)
        sys.stdin.readline()
        return out + add(self, points[1:])
    tables.SweepTables.add_points = add_then_wait
    sys.exit(main(sys.argv[1:]))
""")


def _owner_lock(db: Path, sweep_id: int) -> str:
    import sqlite3

    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT owner_lock FROM sweeps WHERE id = ?", (sweep_id,)).fetchone()[0]


@pytest.mark.slow  # two CLI sweeps, the first in a fresh process that traces its model (~4 s)
def test_a_sweep_another_live_process_runs_is_refused_not_taken_over(
        db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The same `slm-dvfs sweep` in a second terminal while the first measures: refused, naming the sweep
    and the process holding it; the first's sweep keeps its owner (taken over, the second's death would
    have had it reaped as abandoned). Once the first is killed, the same command resumes that sweep."""
    holder = subprocess.Popen([sys.executable, "-c", HELD_SWEEP, *SWEEP_ARGS, "--db", str(db)], cwd=ROOT,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = holder.stdout.readline()  # type: ignore[union-attr]
        assert line.startswith("held "), holder.stderr.read()  # type: ignore[union-attr]
        sweep_id = int(line.split()[1])
        lock = _owner_lock(db, sweep_id)
        assert main([*SWEEP_ARGS, "--db", str(db)]) == 2
        err = capsys.readouterr().err
        assert f"sweep s{sweep_id}, with the same workload, space, steps and repeats, is running in process " \
               f"{holder.pid}" in err and lock in err and "Traceback" not in err
        assert "its stored points are kept" in err
        with Store(db) as s:  # the refusal changed nothing: the first process still owns its running sweep
            assert [(sw.id, sw.status) for sw in s.list_sweeps()] == [(sweep_id, "running")]
            assert _owner_lock(db, sweep_id) == lock and len(s.completed_points(sweep_id)) == 1
    finally:
        holder.kill()
        holder.communicate()
    assert main([*SWEEP_ARGS, "--db", str(db), "--json"]) == 0  # its owner is gone: the same command resumes it
    result = json.loads(capsys.readouterr().out)
    assert result["sweep_id"] == sweep_id and result["status"] == "finished" and result["resumed"] == 1
    with Store(db) as s:
        [sweep] = s.list_sweeps()
        assert sweep.status == "finished" and len(s.completed_points(sweep_id)) == sweep.planned
