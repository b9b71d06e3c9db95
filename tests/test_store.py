"""The results store: schema and migrations, refusal of bad files, runs, sweeps, power traces."""

from __future__ import annotations

import hashlib
import random
import sqlite3
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from conftest import IsolatedEnv

from engine.results import migrations as store_schema
from engine.core.errors import ConfigError
from engine.device.monitor import WindowResult
from engine.device.power import PowerSample
from engine.core.stats import cumulative_trapezoid_j, trapezoid_j
from engine.core.provenance import Source
from engine.results.store import (
    SCHEMA_VERSION,
    ComparisonRecord,
    CorruptStoreError,
    DeviceRecord,
    Store,
    StoreError,
    StoreVersionError,
    SweepPoint,
    UnknownRecordError,
    WorkloadRecord,
    default_db_path,
    downsample,
    setting_key,
)
from engine.results.totals import RunTotals

TWIN = DeviceRecord("NVIDIA Jetson AGX Orin Developer Kit", "P3701-0005 (AGX Orin 64GB)", "36.3.0", "6.0",
                    "agx-orin-64gb", is_twin=True)
BOARD = DeviceRecord("NVIDIA Jetson AGX Orin Developer Kit", "P3701-0005 (AGX Orin 64GB)", None, None, None)
TINY = WorkloadRecord("bert-tiny", "sst2", 32, 128, "fp32", family="bert", params=4_386_178,
                      features={"flops": 1.5e11, "bytes": 2e9})
MINI = WorkloadRecord("bert-mini", "qnli", 16, 256, "fp16")
ALL_TABLES = {"devices", "workloads", "runs", "power_samples", "sweeps", "sweep_points", "comparisons"}


@pytest.fixture(autouse=True)
def isolated_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test may touch the user's own results database."""
    monkeypatch.setenv("SLM_DVFS_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("SLM_DVFS_DB", raising=False)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "results.sqlite"


@pytest.fixture
def store(db: Path):
    with Store(db) as s:
        yield s


def _window(source: Source, seconds: float = 10.0, gpu_j: float = 80.0, cpu_j: float = 20.0) -> WindowResult:
    return WindowResult(
        name="run", start=0.0, end=seconds, duration_s=seconds,
        energy_j={"VDD_GPU_SOC": gpu_j, "VDD_CPU_CV": cpu_j, "VIN_SYS_5V0": 50.0},
        total_energy_j=gpu_j + cpu_j, avg_power_w=(gpu_j + cpu_j) / seconds,
        rails=("VDD_GPU_SOC", "VDD_CPU_CV"), source=source, exact=True,
    )


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _fill(store: Store, runs: int = 5) -> None:
    for i in range(runs):
        rid = store.start_run(policy="maxn", source="twin", device=TWIN, workload=TINY, seed=i, steps=10)
        store.add_power_samples(rid, [PowerSample(k * 0.1, {"VDD_GPU_SOC": 5000.0 + k}) for k in range(300)])
        store.finish_run(rid, RunTotals.from_window(_window(Source.TWIN), samples=320))


# --------------------------------------------------------------------------- schema and files
def test_a_new_store_has_every_table_with_a_source_in_wal_mode(store: Store, db: Path) -> None:
    assert store.schema_version() == SCHEMA_VERSION == 12
    assert store.journal_mode() == "wal"
    conn = sqlite3.connect(db)
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert ALL_TABLES <= tables
    for table in ALL_TABLES:
        columns = {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}
        assert "source" in columns, table
    assert conn.execute("PRAGMA application_id").fetchone()[0] == store_schema.APPLICATION_ID
    with pytest.raises(sqlite3.IntegrityError):  # the source is checked by the schema itself
        conn.execute("INSERT INTO devices (board, module, is_twin, source, created_at) VALUES ('b', 'm', 0, 'guess', '')")


def test_the_path_comes_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLM_DVFS_DB", raising=False)
    monkeypatch.setenv("SLM_DVFS_DATA_DIR", str(tmp_path / "data"))
    assert default_db_path() == tmp_path / "data" / "results.sqlite"
    monkeypatch.setenv("SLM_DVFS_DB", str(tmp_path / "elsewhere.sqlite"))
    with Store() as s:
        assert s.path == tmp_path / "elsewhere.sqlite"
    assert (tmp_path / "elsewhere.sqlite").exists()


def test_open_without_create_refuses_a_missing_file(db: Path) -> None:
    with pytest.raises(StoreError, match="no results database"):
        Store(db, create=False)
    assert not db.exists()


# The version-1 schema, written out by hand as slm-dvfs 0.1 left it (no sweeps, no comparisons).
V1_DDL = """
PRAGMA application_id = 1397509444;
CREATE TABLE devices (id INTEGER PRIMARY KEY, board TEXT NOT NULL, module TEXT NOT NULL, l4t TEXT, jetpack TEXT,
    profile TEXT, is_twin INTEGER NOT NULL, source TEXT NOT NULL, created_at TEXT NOT NULL);
CREATE UNIQUE INDEX devices_identity ON devices
    (board, module, IFNULL(l4t, ''), IFNULL(jetpack, ''), IFNULL(profile, ''), is_twin);
CREATE TABLE workloads (id INTEGER PRIMARY KEY, key TEXT NOT NULL UNIQUE, model TEXT NOT NULL, family TEXT,
    params INTEGER, task TEXT NOT NULL, batch_size INTEGER NOT NULL, seq_len INTEGER NOT NULL,
    precision TEXT NOT NULL, mode TEXT NOT NULL, data_source TEXT, features TEXT NOT NULL DEFAULT '{}',
    source TEXT NOT NULL, created_at TEXT NOT NULL);
CREATE TABLE runs (id INTEGER PRIMARY KEY, device_id INTEGER REFERENCES devices(id),
    workload_id INTEGER REFERENCES workloads(id), policy TEXT NOT NULL, objective TEXT, setting TEXT, seed INTEGER,
    steps INTEGER, samples INTEGER, status TEXT NOT NULL, started_at TEXT NOT NULL, finished_at TEXT, wall_s REAL,
    time_s REAL, energy_j REAL, rail_energy_j TEXT, rails TEXT, avg_power_w REAL, samples_per_s REAL,
    joules_per_sample REAL, metrics TEXT, weights TEXT, synthetic INTEGER, source TEXT NOT NULL, label TEXT,
    notes TEXT, error TEXT);
CREATE INDEX runs_reuse ON runs (workload_id, device_id, policy, status);
CREATE TABLE power_samples (id INTEGER PRIMARY KEY, run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    t REAL NOT NULL, total_mw REAL NOT NULL, rails_mw TEXT NOT NULL, source TEXT NOT NULL);
CREATE INDEX power_samples_run ON power_samples (run_id, t);
INSERT INTO devices VALUES (1, 'Orin', 'P3701', '35.4.1', '5.1.2', NULL, 0, 'measured', '2024-01-01T00:00:00+00:00');
INSERT INTO workloads VALUES (1, 'bert-tiny|sst2|32|128|fp32|full', 'bert-tiny', 'bert', 4386178, 'sst2', 32, 128,
    'fp32', 'full', 'synthetic', '{}', 'predicted', '2024-01-01T00:00:00+00:00');
INSERT INTO runs (id, device_id, workload_id, policy, setting, seed, steps, samples, status, started_at, time_s,
    energy_j, rails, source, label) VALUES (7, 1, 1, 'maxn', '{"gpu_hz": null}', 0, 100, 3200, 'finished',
    '2024-01-01T00:00:00+00:00', 60.0, 900.0, 'gpu+cpu', 'measured', 'from v1');
INSERT INTO power_samples (run_id, t, total_mw, rails_mw, source) VALUES (7, 0.0, 15000, '{"VDD_GPU_SOC": 15000}',
    'measured');
PRAGMA user_version = 1;
"""


def test_a_version_1_database_is_migrated_keeping_its_runs(db: Path) -> None:
    conn = sqlite3.connect(db)
    conn.executescript(V1_DDL)
    conn.close()
    with Store(db) as s:
        assert s.schema_version() == SCHEMA_VERSION
        run = s.get_run(7)
        assert (run.label, run.energy_j, run.source, run.workload.key) == (
            "from v1", 900.0, Source.MEASURED, "bert-tiny|sst2|32|128|fp32|full")
        assert run.simulated is False
        assert s.power_samples(7) == [PowerSample(0.0, {"VDD_GPU_SOC": 15000})]
        # the tables version 2 added work on the old rows
        sweep = s.find_or_create_sweep(device=1, workload=1, space={"gpu": [612e6]}, warmup_steps=2, steps=5,
                                       repeats=1, source="measured")
        s.add_point(SweepPoint(sweep.id, {"gpu_hz": 612_000_000}, 0, time_s=3.0, energy_j=30.0, samples=80))
        assert len(s.sweep_points(sweep.id)) == 1
        other = s.start_run(policy="static", source="measured", device=1, workload=1)
        s.finish_run(other, RunTotals(time_s=66.0, energy_j=720.0, rails_preset="gpu+cpu"))
        assert s.compare_runs(other, 7).saving_pct == pytest.approx(20.0)


def test_a_version_2_database_reads_simulated_runs_from_their_notes(db: Path) -> None:
    """Version 3 made "simulated" a column; runs stored before say it only in their notes."""
    conn = sqlite3.connect(db)
    for step in store_schema.MIGRATIONS[:2]:
        for statement in step:
            conn.execute(statement)
    conn.executescript("""
        INSERT INTO devices VALUES (1, 'Orin', 'P3701', NULL, NULL, 'agx-orin-64gb', 1, 'twin', '2025-01-01');
        INSERT INTO workloads (id, key, model, task, batch_size, seq_len, precision, mode, source, created_at)
            VALUES (1, 'bert-tiny|sst2|32|128|fp32|full', 'bert-tiny', 'sst2', 32, 128, 'fp32', 'full', 'predicted',
                    '2025-01-01');
        INSERT INTO runs (id, device_id, workload_id, policy, status, started_at, source, notes) VALUES
            (1, 1, 1, 'maxn', 'finished', '2025-01-01', 'twin',
             'simulated: twin only, no training (no loss, no eval metric)'),
            (2, 1, 1, 'static', 'finished', '2025-01-01', 'twin', 'policy static:gpu=816; weights random'),
            (3, 1, 1, 'maxn', 'finished', '2025-01-01', 'twin', NULL),
            (4, 1, 1, 'maxn', 'finished', '2025-01-01', 'twin', 'Simulated? no: a note that only mentions it');
        PRAGMA user_version = 2;
    """)
    conn.close()
    with Store(db) as s:
        assert s.schema_version() == SCHEMA_VERSION == 12
        assert [s.get_run(i).simulated for i in (1, 2, 3, 4)] == [True, False, False, False]
        assert s.get_run(1).notes.startswith("simulated")  # the notes stay as they were
        assert "simulated" not in s.get_run(1).to_json()  # what `show --json` prints is unchanged
        new = s.start_run(policy="maxn", source="twin", device=1, workload=1, simulated=True)
        assert s.get_run(new).simulated and not s.get_run(s.start_run(policy="maxn", source="twin")).simulated
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT id FROM runs WHERE simulated = 1 ORDER BY id").fetchall() == [(1,), (new,)]


def test_a_version_4_database_reads_what_its_runs_learnt_from_as_their_notes_say(db: Path) -> None:
    """Version 5 stores weights and data for the eval metric's meaning; before, experiments wrote
    the weights only in their notes and `synthetic` only when true: the rest reads as unknown."""
    conn = sqlite3.connect(db)
    for step in store_schema.MIGRATIONS[:3]:
        for statement in step:
            conn.execute(statement)
    store_schema.MIGRATIONS[3](conn)
    conn.executescript("""
        INSERT INTO devices VALUES (1, 'Orin', 'P3701', NULL, NULL, 'agx-orin-64gb', 1, 'twin', '2025-01-01');
        INSERT INTO runs (id, device_id, policy, status, started_at, source, notes, synthetic, metrics) VALUES
            (1, 1, 'maxn', 'finished', '2025-01-01', 'twin',
             'policy maxn; weights random; synthetic data (accuracy not meaningful)', 1, '{"accuracy": 1.0}'),
            (2, 1, 'maxn', 'finished', '2025-01-01', 'twin', 'policy maxn; weights pretrained', NULL,
             '{"accuracy": 0.9}'),
            (3, 1, 'maxn', 'finished', '2025-01-01', 'twin', NULL, NULL, '{"accuracy": 0.5}');
        PRAGMA user_version = 4;
    """)
    conn.close()
    with Store(db) as s:
        runs = [s.get_run(i) for i in (1, 2, 3)]
    assert [(r.weights, r.synthetic, r.data_source) for r in runs] == [
        ("random", True, None), ("pretrained", None, None), (None, None, None)]
    assert [r.metric_provenance.meaningful for r in runs] == [False, None, None]  # never meaningful unless known
    assert runs[0].to_json()["metric_provenance"] == {"weights": "random", "data": "generated", "meaningful": False}


def test_a_failed_migration_leaves_the_file_as_it_was(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    Store(db).close()

    def broken(conn: sqlite3.Connection) -> None:
        conn.execute("CREATE TABLE half_done (x)")
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(store_schema, "MIGRATIONS", store_schema.MIGRATIONS + (broken,))
    monkeypatch.setattr(store_schema, "SCHEMA_VERSION", SCHEMA_VERSION + 1)
    with pytest.raises(StoreError, match=f"from schema version {SCHEMA_VERSION} to {SCHEMA_VERSION + 1} failed: "
                                         "disk on fire"):
        Store(db)
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert conn.execute("SELECT count(*) FROM sqlite_master WHERE name = 'half_done'").fetchone()[0] == 0


def test_a_newer_database_is_refused_and_left_untouched(db: Path) -> None:
    Store(db).close()
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    before = _sha(db)
    with pytest.raises(StoreVersionError) as err:
        Store(db)
    text = str(err.value)
    assert "schema version 99" in text and f"knows up to {SCHEMA_VERSION}" in text and "upgrade slm-dvfs" in text
    assert _sha(db) == before


def test_random_bytes_are_refused_not_recreated(db: Path) -> None:
    db.write_bytes(b"\x00garbage" + random.Random(1).randbytes(8192))
    before = _sha(db)
    with pytest.raises(CorruptStoreError) as err:
        Store(db)
    text = str(err.value)
    assert str(db) in text and "not an SQLite database" in text and "move it aside" in text
    assert "nothing was deleted" in text
    assert _sha(db) == before


@pytest.mark.parametrize("cut", ["half", "mid-page"])
def test_a_truncated_copy_of_a_real_database_is_refused(db: Path, tmp_path: Path, cut: str) -> None:
    with Store(db) as s:
        _fill(s, runs=5)
    data = db.read_bytes()
    assert len(data) > 8 * 4096  # a real, multi-page file
    size = len(data) // 2 if cut == "half" else len(data) - 100
    copy = tmp_path / "copy.sqlite"
    copy.write_bytes(data[:size])
    with pytest.raises(CorruptStoreError, match="truncated"):
        Store(copy)
    assert copy.stat().st_size == size


def test_someone_elses_sqlite_file_is_refused(db: Path) -> None:
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE contacts (name TEXT)")
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match="not a results database"):
        Store(db)


# --------------------------------------------------------------------------- runs
def test_run_lifecycle_from_start_to_finish(store: Store) -> None:
    rid = store.start_run(policy="static", objective="energy", source=Source.TWIN, device=TWIN, workload=TINY,
                          setting={"gpu_hz": 816_000_000, "nvpmodel_id": 0}, seed=3, steps=10, rails="gpu+cpu",
                          weights="random", synthetic=True, label="first")
    run = store.get_run(rid)
    assert (run.status, run.source, run.energy_j, run.finished_at) == ("running", Source.TWIN, None, None)
    assert run.setting == {"gpu_hz": 816_000_000, "cpu_hz": None, "emc_hz": None, "nvpmodel": 0}
    assert run.device == TWIN and run.workload == TINY and run.model == "bert-tiny"
    done = store.finish_run(rid, RunTotals.from_window(_window(Source.TWIN, seconds=10.0), samples=320), wall_s=12.5, metrics={"accuracy": 0.75})
    assert done.status == "finished" and done.finished_at
    assert done.time_s == 10.0 and done.wall_s == 12.5
    assert done.energy_j == pytest.approx(100.0)  # over the window's gpu+cpu rails only
    assert done.rail_energy_j["VIN_SYS_5V0"] == 50.0
    assert done.avg_power_w == pytest.approx(10.0)
    assert done.samples_per_s == pytest.approx(32.0) and done.joules_per_sample == pytest.approx(100.0 / 320)
    assert done.metrics == {"accuracy": 0.75} and done.rails == "gpu+cpu" and done.synthetic is True
    assert store.get_run(rid) == done
    assert done.metric_provenance.meaningful is False  # random weights, generated data


def test_finish_run_records_what_the_run_learnt_from(store: Store) -> None:
    rid = store.start_run(policy="maxn", source=Source.TWIN, device=TWIN, workload=TINY)
    assert store.get_run(rid).metric_provenance.meaningful is None  # not known until the run says
    done = store.finish_run(rid, RunTotals(time_s=1.0, energy_j=2.0), metrics={"accuracy": 0.9}, weights="pretrained", synthetic=False, data_source="dir:/glue/SST-2")
    assert (done.weights, done.synthetic, done.data_source) == ("pretrained", False, "dir:/glue/SST-2")
    assert done.metric_provenance.meaningful is True
    assert done.metric_provenance.label(done.source) == "measured (host)"


def test_a_window_from_another_source_is_refused(store: Store) -> None:
    rid = store.start_run(policy="maxn", source="measured", device=BOARD)
    with pytest.raises(ConfigError, match="measured run, but its energy window is twin"):
        store.finish_run(rid, RunTotals.from_window(_window(Source.TWIN), samples=None))
    assert store.get_run(rid).status == "running"


def test_failed_and_cancelled_runs(store: Store) -> None:
    a = store.start_run(policy="maxn", source="twin", device=TWIN)
    store.fail_run(a, RuntimeError("CUDA out of memory"))
    failed = store.get_run(a)
    assert failed.status == "failed" and failed.error == "RuntimeError: CUDA out of memory" and failed.finished_at
    b = store.start_run(policy="maxn", source="twin", device=TWIN)
    assert store.finish_run(b, RunTotals(time_s=2.0, energy_j=20.0), status="cancelled").status == "cancelled"
    with pytest.raises(ConfigError):
        store.finish_run(b, status="failed")


@pytest.mark.parametrize("call", ["get_run", "fail_run", "finish_run", "delete_run", "power_samples"])
def test_unknown_run_ids_are_clear_errors(store: Store, call: str) -> None:
    args = {"fail_run": (404, "x")}.get(call, (404,))
    with pytest.raises(UnknownRecordError) as err:
        getattr(store, call)(*args)
    assert "no run with id 404" in str(err.value) and "slm-dvfs runs" in str(err.value)


def test_unknown_device_and_sweep_ids(store: Store) -> None:
    with pytest.raises(UnknownRecordError, match="no device with id 5"):
        store.start_run(policy="maxn", source="twin", device=5)
    with pytest.raises(UnknownRecordError, match="no sweep with id 9"):
        store.completed_points(9)
    assert store.list_runs() == []  # the refused run left nothing behind


def test_devices_and_workloads_are_stored_once(store: Store) -> None:
    assert store.ensure_device(BOARD) == store.ensure_device(BOARD)  # NULL fields included
    assert store.ensure_device(TWIN) != store.ensure_device(BOARD)
    bare = WorkloadRecord("bert-tiny", "sst2", 32, 128, "fp32")
    wid = store.ensure_workload(bare)
    assert store.get_workload(wid).features == {}
    assert store.ensure_workload(TINY) == wid  # same key: the same workload, now with its features
    found = store.find_workload(TINY.key)
    assert found is not None and found[0] == wid and found[1].features == TINY.features
    assert found[1].params == 4_386_178
    with pytest.raises(ConfigError, match="unknown training mode"):
        WorkloadRecord("m", "t", 1, 1, "fp32", mode="prefix")


def test_each_commit_is_visible_to_another_process_at_once(store: Store, db: Path) -> None:
    rid = store.start_run(policy="maxn", source="twin", device=TWIN, workload=TINY)
    read = ("import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); "
            "print(c.execute('SELECT status, policy FROM runs WHERE id = ?', (int(sys.argv[2]),)).fetchone())")
    out = subprocess.run([sys.executable, "-c", read, str(db), str(rid)], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "('running', 'maxn')"
    store.finish_run(rid, RunTotals(time_s=1.0, energy_j=5.0))
    out = subprocess.run([sys.executable, "-c", read, str(db), str(rid)], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "('finished', 'maxn')"


CRASHING_SWEEP = textwrap.dedent("""
    import os, sys
    from engine.results.store import Store, DeviceRecord, WorkloadRecord, SweepPoint
    from engine.device.guard.lock import session_lock
    s = Store(sys.argv[1])
    sweep = s.find_or_create_sweep(device=DeviceRecord("Orin", "P3701", is_twin=True),
        workload=WorkloadRecord("bert-tiny", "sst2", 32, 128, "fp32"), space={"gpu": [1, 2, 3, 4]},
        warmup_steps=1, steps=5, repeats=1, source="twin", planned=4, owner_lock=str(session_lock()))
    run = s.start_run(policy="sweep", source="twin")
    for gpu in (306, 408, 510):
        s.add_point(SweepPoint(sweep.id, {"gpu_hz": gpu * 1000000}, 0, time_s=1.0, energy_j=gpu / 10, samples=160))
    s._conn.execute("BEGIN IMMEDIATE")  # the fourth point, in progress when the process dies
    s._conn.execute("INSERT INTO sweep_points (sweep_id, setting, repeat, time_s, energy_j, rail_energy_j, samples, "
                    "source, created_at) VALUES (?, 'x', 0, 1, 1, '{}', 1, 'twin', '')", (sweep.id,))
    os._exit(9)
""")


def test_a_crash_loses_only_the_point_in_progress_and_the_sweep_resumes(db: Path, isolated_env: IsolatedEnv) -> None:
    proc = subprocess.run([sys.executable, "-c", CRASHING_SWEEP, str(db)], capture_output=True, text=True)
    assert proc.returncode == 9, proc.stderr
    with Store(db) as s:
        [sweep] = s.list_sweeps()
        assert sweep.status == "abandoned" and sweep.resumable  # its owner's session lock is free
        assert "running the same sweep command again" in (sweep.status_note(3) or "") and sweep.planned == 4
        done = s.completed_points(sweep.id)
        assert done == {(setting_key({"gpu_hz": mhz * 1_000_000}), 0) for mhz in (306, 408, 510)}
        assert [r.status for r in s.list_runs()] == ["running"]  # left by the dead process, for all to see
        again = s.find_or_create_sweep(device=DeviceRecord("Orin", "P3701", is_twin=True),
                                       workload=WorkloadRecord("bert-tiny", "sst2", 32, 128, "fp32"),
                                       space={"gpu": [1, 2, 3, 4]}, warmup_steps=1, steps=5, repeats=1, source="twin")
        assert again.id == sweep.id
        todo = [g for g in (306, 408, 510, 612) if (setting_key({"gpu_hz": g * 1_000_000}), 0) not in done]
        assert todo == [612]


def test_sweeps_resume_only_with_the_same_parameters(store: Store) -> None:
    common = dict(device=TWIN, workload=TINY, space={"gpu": [306e6, 612e6]}, warmup_steps=2, steps=20, repeats=2,
                  source="twin")
    first = store.find_or_create_sweep(**common)
    assert first.status == "running" and first.space == {"gpu": [306e6, 612e6]}
    assert store.find_or_create_sweep(**common).id == first.id
    assert store.find_or_create_sweep(**{**common, "steps": 30}).id != first.id
    assert store.find_or_create_sweep(**{**common, "source": "measured"}).id != first.id
    store.finish_sweep(first.id, status="cancelled")
    assert store.find_or_create_sweep(**common).id == first.id  # a cancelled sweep is resumed
    assert store.get_sweep(first.id).status == "running"
    store.finish_sweep(first.id)
    assert store.find_or_create_sweep(**common).id != first.id  # a finished one is not


HOLDING_SWEEP = textwrap.dedent("""
    import sys
    from engine.results.store import Store, DeviceRecord, WorkloadRecord
    from engine.device.guard.lock import session_lock
    with Store(sys.argv[1]) as s:
        sweep = s.find_or_create_sweep(device=DeviceRecord("Orin", "P3701", is_twin=True),
            workload=WorkloadRecord("bert-tiny", "sst2", 32, 128, "fp32"), space={"space": "gpu"},
            warmup_steps=1, steps=5, repeats=1, source="twin", planned=4, owner_lock=str(session_lock()))
        print(sweep.id, flush=True)
        sys.stdin.readline()  # measuring, until the test lets it go
""")


def test_a_running_sweep_whose_owner_lives_is_not_taken_over(db: Path, isolated_env: IsolatedEnv) -> None:
    """A second process (or this one) asking for a sweep another live process runs is refused, naming
    that process and its lock, and the owner is kept; once the owner dies, the sweep resumes."""
    from engine.device.guard.lock import session_lock
    from engine.results.errors import SweepInUseError

    common = dict(device=DeviceRecord("Orin", "P3701", is_twin=True),
                  workload=WorkloadRecord("bert-tiny", "sst2", 32, 128, "fp32"), space={"space": "gpu"},
                  warmup_steps=1, steps=5, repeats=1, source="twin")
    holder = subprocess.Popen([sys.executable, "-c", HOLDING_SWEEP, str(db)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        held = int(holder.stdout.readline() or 0)  # type: ignore[union-attr]
        assert held, holder.stderr.read()  # type: ignore[union-attr]
        with Store(db) as s:
            owner = s._query("SELECT owner_lock FROM sweeps WHERE id = ?", (held,))[0][0]
            with pytest.raises(SweepInUseError) as refused:
                s.find_or_create_sweep(**common, planned=4, owner_lock=str(session_lock()))
            assert refused.value.sweep_id == held and refused.value.owner_lock == owner
            assert f"sweep s{held}" in refused.value.what and f"process {holder.pid}" in refused.value.what
            assert owner in refused.value.what and refused.value.remedy
            assert s.get_sweep(held).status == "running"
            assert s._query("SELECT owner_lock FROM sweeps WHERE id = ?", (held,))[0][0] == owner
            # this process's own running sweep is not taken over either (a second thread of ours)
            mine = s.find_or_create_sweep(**{**common, "steps": 7}, owner_lock=str(session_lock()))
            with pytest.raises(SweepInUseError, match="this process"):
                s.find_or_create_sweep(**{**common, "steps": 7}, owner_lock=str(session_lock()))
            s.finish_sweep(mine.id, "failed")
            assert s.find_or_create_sweep(**{**common, "steps": 7}).id == mine.id  # a failed one resumes
            holder.kill()
            holder.communicate()
            # still `running` (this store was opened while its owner lived), but its owner is gone: resumed
            again = s.find_or_create_sweep(**common, owner_lock=str(session_lock()))
            assert again.id == held and again.status == "running"
    finally:
        holder.kill()
        holder.communicate()


def test_sweep_points_are_keyed_by_setting_and_repeat(store: Store, db: Path) -> None:
    sweep = store.find_or_create_sweep(device=TWIN, workload=TINY, space={}, warmup_steps=0, steps=5, repeats=2,
                                       source="twin")
    store.add_point(SweepPoint(sweep.id, {"gpu_hz": 816e6, "emc_hz": 3_199_000_000}, 0, time_s=4.0, energy_j=40.0,
                               samples=160, rail_energy_j={"VDD_GPU_SOC": 30.0, "VDD_CPU_CV": 10.0}))
    # the same setting spelled differently is the same point
    with pytest.raises(StoreError, match="already holds repeat 0"):
        store.add_point(SweepPoint(sweep.id, {"emc_hz": 3_199_000_000, "gpu_hz": 816_000_000, "cpu_hz": None}, 0,
                                   time_s=4.0, energy_j=40.0, samples=160))
    store.add_point(SweepPoint(sweep.id, {"gpu_hz": 816_000_000, "emc_hz": 3_199_000_000}, 1, time_s=4.2,
                               energy_j=41.0, samples=160))
    with pytest.raises(ConfigError, match="twin sweep"):
        store.add_point(SweepPoint(sweep.id, {}, 0, time_s=1, energy_j=1, samples=1, source=Source.MEASURED))
    points = store.sweep_points(sweep.id)
    assert [p.repeat for p in points] == [0, 1]
    assert points[0].avg_power_w == pytest.approx(10.0) and points[0].source == Source.TWIN
    assert points[0].key == (setting_key({"gpu_hz": 816_000_000, "emc_hz": 3_199_000_000}), 0)
    assert store.completed_points(sweep.id) == {p.key for p in points}
    rows = sqlite3.connect(db).execute("SELECT gpu_hz, cpu_hz, emc_hz FROM sweep_points ORDER BY id").fetchall()
    assert rows == [(816_000_000, None, 3_199_000_000)] * 2


# --------------------------------------------------------------------------- power samples
def _trace(n: int, seed: int = 0) -> list[PowerSample]:
    rng = random.Random(seed)
    t, out = 0.0, []
    for i in range(n):
        t += rng.uniform(0.02, 0.09)  # irregular, as a sampler thread delivers
        burst = 12000.0 if (i // 400) % 2 else 3000.0
        out.append(PowerSample(t, {"VDD_GPU_SOC": burst + rng.uniform(-500, 500), "VDD_CPU_CV": 1500.0 + i % 7}))
    return out


def _energy(samples: list[PowerSample]) -> float:
    return trapezoid_j([s.t for s in samples], [s.total_mw for s in samples])


def test_downsampling_keeps_the_energy() -> None:
    raw = _trace(20_000)
    small = downsample(raw, 2000)
    assert len(small) == 2000
    assert small[0].t == raw[0].t and small[-1].t == raw[-1].t  # the span is kept
    assert _energy(small) == pytest.approx(_energy(raw), rel=1e-9)  # and the energy, exactly
    duration = raw[-1].t - raw[0].t
    mean_w = sum(s.total_mw for s in small[1:-1]) / (len(small) - 2) / 1000.0  # equal-time buckets
    assert mean_w * duration == pytest.approx(_energy(raw), rel=0.01)
    assert downsample(raw[:50], 2000) == raw[:50]  # short traces are kept as they are


def test_the_store_keeps_at_most_n_samples_per_run(store: Store) -> None:
    raw = _trace(12_000, seed=1)
    whole = store.start_run(policy="maxn", source="twin")
    assert store.add_power_samples(whole, raw) == 2000
    assert _energy(store.power_samples(whole)) == pytest.approx(_energy(raw), rel=1e-9)
    chunked = store.start_run(policy="maxn", source="twin")
    for i in range(0, len(raw), 700):  # as a runner flushing every few seconds would
        held = store.add_power_samples(chunked, raw[i:i + 700], max_samples=1000)
        assert held <= 1000
    stored = store.power_samples(chunked)
    assert stored[0].t == raw[0].t and stored[-1].t == raw[-1].t
    # down-sampled again and again: only where a chunk meets the stored part (the stored edge holds
    # its bucket's mean, not the instant reading) does the trapezoid move, by a part in 10^5 or so
    assert _energy(stored) == pytest.approx(_energy(raw), rel=1e-3)
    with pytest.raises(ConfigError, match="must come after"):
        store.add_power_samples(chunked, raw[:5])
    rows = sqlite3.connect(store.path).execute("SELECT DISTINCT source FROM power_samples").fetchall()
    assert rows == [("twin",)]


# --------------------------------------------------------------------------- queries
def test_list_filters_and_order(store: Store) -> None:
    ids = {}
    for name, (device, workload, policy, source) in {
        "a": (TWIN, TINY, "maxn", "twin"),
        "b": (TWIN, TINY, "static", "twin"),
        "c": (BOARD, MINI, "maxn", "measured"),
        "d": (BOARD, TINY, "ml", "predicted"),
    }.items():
        ids[name] = store.start_run(policy=policy, source=source, device=device, workload=workload, label=name)
    store.finish_run(ids["a"], RunTotals(time_s=1, energy_j=1))

    def labels(**kw: object) -> list[str]:
        return [r.label for r in store.list_runs(**kw)]

    assert labels() == ["d", "c", "b", "a"]
    assert labels(model="bert-tiny") == ["d", "b", "a"]
    assert labels(task="qnli") == ["c"]
    assert labels(policy="maxn") == ["c", "a"]
    assert labels(source="predicted") == ["d"]
    assert labels(device_id=store.ensure_device(BOARD)) == ["d", "c"]
    assert labels(status="finished") == ["a"]
    assert labels(model="bert-tiny", policy="maxn") == ["a"]
    assert labels(limit=2) == ["d", "c"]
    with pytest.raises(ConfigError, match="unknown source"):
        store.list_runs(source="guessed")


def test_find_runs_for_maxn_reuse(store: Store) -> None:
    twin = store.ensure_device(TWIN)
    for seed, steps, finish in ((0, 100, True), (1, 100, True), (0, 50, True), (0, 100, False)):
        rid = store.start_run(policy="maxn", source="twin", device=twin, workload=TINY, seed=seed, steps=steps)
        if finish:
            store.finish_run(rid, RunTotals(time_s=10, energy_j=100))
    store.start_run(policy="static", source="twin", device=twin, workload=TINY, seed=0, steps=100)
    found = store.find_runs(TINY.key, twin, steps=100, seed=0)
    assert len(found) == 1 and (found[0].seed, found[0].steps, found[0].status) == (0, 100, "finished")
    assert len(store.find_runs(TINY.key, twin)) == 3
    assert store.find_runs(TINY.key, store.ensure_device(BOARD)) == []
    assert store.find_runs(MINI.key, twin) == []


def test_comparisons_and_delete(store: Store) -> None:
    base = store.start_run(policy="maxn", source="twin", device=TWIN, workload=TINY, rails="gpu+cpu")
    store.finish_run(base, RunTotals(time_s=100.0, energy_j=1000.0))
    run = store.start_run(policy="static", source="twin", device=TWIN, workload=TINY, rails="gpu+cpu")
    store.finish_run(run, RunTotals(time_s=110.0, energy_j=870.0))
    store.add_power_samples(run, _trace(100))
    c = store.compare_runs(run, base)
    assert (c.saving_pct, c.slowdown_pct) == (pytest.approx(13.0), pytest.approx(10.0))
    assert c.source == Source.TWIN and c.record_id is not None and c.rails_preset == "gpu+cpu"
    (row,) = store.comparisons_for(base)  # the comparison returned is the one recorded
    assert (row.id, row.saving_pct, row.slowdown_pct, row.rails) == (c.record_id, c.saving_pct, c.slowdown_pct, "gpu+cpu")
    board = store.start_run(policy="maxn", source="measured", device=BOARD, workload=TINY, rails="gpu+cpu")
    store.finish_run(board, RunTotals(time_s=90.0, energy_j=900.0))
    with pytest.raises(ConfigError, match="compare runs of one kind"):
        store.compare_runs(run, board)
    other_rails = store.start_run(policy="maxn", source="twin", device=TWIN, workload=TINY, rails="all")
    store.finish_run(other_rails, RunTotals(time_s=90.0, energy_j=900.0))
    with pytest.raises(ConfigError, match="same rails"):
        store.compare_runs(run, other_rails)
    store.add_comparison(ComparisonRecord(run, base, 12.0, 9.0, Source.PREDICTED, "gpu+cpu"))
    assert [x.source for x in store.comparisons_for(run)] == [Source.TWIN, Source.PREDICTED]

    store.delete_run(run)
    with pytest.raises(UnknownRecordError):
        store.get_run(run)
    assert store.comparisons_for(base) == []
    conn = sqlite3.connect(store.path)
    assert conn.execute("SELECT count(*) FROM power_samples WHERE run_id = ?", (run,)).fetchone()[0] == 0


def test_a_run_may_be_recorded_from_a_worker_thread(store: Store) -> None:
    ids: list[int] = []
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(5):
                rid = store.start_run(policy="maxn", source="twin")
                store.finish_run(rid, RunTotals(time_s=1.0, energy_j=2.0))
                ids.append(rid)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(3)]
    for t in threads:
        t.start()
    for _ in range(20):
        store.list_runs()
    for t in threads:
        t.join()
    assert not errors and len(set(ids)) == 15
    assert {r.status for r in store.list_runs(limit=None)} == {"finished"}


def test_damage_found_after_opening_is_a_corrupt_store_error(db: Path) -> None:
    with Store(db) as s:
        _fill(s, runs=3)
    data = bytearray(db.read_bytes())
    page = int.from_bytes(data[16:18], "big")
    for offset in range(page * 2, len(data), 97):  # scribble over every page but the schema's
        data[offset] = 0xFF
    db.write_bytes(bytes(data))
    with pytest.raises(CorruptStoreError, match="move it aside"):
        with Store(db) as s:
            s.check()
            [s.power_samples(r.id) for r in s.list_runs()]


def test_cumulative_trapezoid_is_the_trapezoid_up_to_each_sample() -> None:
    times, powers = [0.0, 1.0, 3.0, 3.5], [1000.0, 3000.0, 1000.0, 0.0]
    cum = cumulative_trapezoid_j(times, powers)
    assert cum == pytest.approx([0.0, 2.0, 6.0, 6.25])
    assert all(c == pytest.approx(trapezoid_j(times[:i + 1], powers[:i + 1])) for i, c in enumerate(cum))
    assert trapezoid_j(times, powers) == cum[-1] and trapezoid_j([], []) == 0.0 and cumulative_trapezoid_j([], []) == []


def _writer_dies(db: Path) -> None:
    """A process that writes to the store and is killed before it closes it (its marker stays)."""
    script = textwrap.dedent(f"""
        import os, signal
        from engine.results.store import Store
        store = Store({str(db)!r})
        store.start_run(policy="maxn", source="twin", seed=99, steps=1)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == -9, done.stderr


def test_a_damaged_page_is_refused_when_the_store_opens_after_a_writer_died(db: Path) -> None:
    """Issue 10: a file whose table pages are damaged but whose header and schema still read
    is refused at open (quick_check) rather than served; since issue 24 the open checks when a
    writer did not close the store cleanly, and `slm-dvfs check` whenever asked."""
    with Store(db) as s:
        _fill(s, runs=3)
    _writer_dies(db)
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'power_samples'").fetchone()[0]
    data = bytearray(db.read_bytes())
    start = (root - 1) * page_size
    data[start] = 0x00  # the page's type byte: no longer a b-tree page
    db.write_bytes(bytes(data))
    for _ in range(2):  # refused again: a failed check leaves the dead writer's marker
        with pytest.raises(CorruptStoreError) as err:
            Store(db)
        assert "damaged pages found on opening" in err.value.what and "move it aside" in err.value.remedy


def test_a_version_10_store_gains_abandoned_sweeps_their_plan_and_workload_definitions(db: Path) -> None:
    """Schema v11: sweeps take `abandoned` and an owner lock, workloads their model's config; rows kept as they were."""
    conn = sqlite3.connect(db)
    conn.isolation_level = None
    for step in store_schema.MIGRATIONS[:10]:
        if callable(step):
            step(conn)
        else:
            for statement in step:
                conn.execute(statement)
    conn.execute("INSERT INTO devices (board, module, is_twin, source, created_at) VALUES ('b', 'm', 1, 'twin', 'x')")
    conn.execute("INSERT INTO workloads (key, model, task, batch_size, seq_len, precision, mode, source, created_at) "
                 "VALUES ('bert-tiny|sst2|32|128|fp32|full', 'bert-tiny', 'sst2', 32, 128, 'fp32', 'full', "
                 "'predicted', 'x')")
    conn.execute("INSERT INTO sweeps (device_id, workload_id, space, warmup_steps, steps, repeats, status, source, "
                 "created_at) VALUES (1, 1, '{}', 1, 5, 1, 'running', 'twin', 'x')")
    conn.execute("PRAGMA user_version = 10")
    conn.close()
    with Store(db) as s:
        assert s.schema_version() == SCHEMA_VERSION == 12
        [sweep] = s.list_sweeps()
        assert sweep.status == "running" and sweep.planned is None  # no owner recorded before v11: left as it is
        assert s.get_workload(1).config is None and s.get_workload(1).key == "bert-tiny|sst2|32|128|fp32|full"
        with s._tx("test") as c:
            c.execute("UPDATE sweeps SET owner_lock = ? WHERE id = ?", (str(db.parent / "sessions" / "1-2.lock"), sweep.id))
    with Store(db) as s:  # its owner's lock is gone: the CHECK takes `abandoned` now
        assert s.get_sweep(sweep.id).status == "abandoned"
        with pytest.raises(StoreError):
            with s._tx("test") as c:
                c.execute("UPDATE sweeps SET status = 'bogus' WHERE id = ?", (sweep.id,))
