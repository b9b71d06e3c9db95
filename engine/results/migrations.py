"""The results database's schema: its DDL, the migrations between versions, and the checks
that a file is ours before anything is written to it.

The schema version lives in `PRAGMA user_version`; `PRAGMA application_id` marks the file
as ours. Migration N takes a database from version N-1 to N; they run in order, all in
one exclusive transaction, so a failed upgrade leaves the file as it was.
A file newer than this code, a file that is not SQLite, a truncated one and somebody
else's SQLite database are all refused: the store never recreates or rewrites such a file.
"""

from __future__ import annotations

import logging
import re
import sqlite3
from pathlib import Path
from typing import Callable, Sequence, Union

from engine.results.errors import CorruptStoreError, StoreError, StoreVersionError

log = logging.getLogger(__name__)

APPLICATION_ID = 0x534C4D44  # "SLMD"
_MAGIC = b"SQLite format 3\x00"
_SOURCES = "('measured', 'twin', 'predicted')"
_STATUSES = "('running', 'finished', 'failed', 'cancelled')"

# --------------------------------------------------------------------------- migrations
# v1: devices, workloads, runs and their power samples.
_V1 = (
    f"PRAGMA application_id = {APPLICATION_ID}",
    f"""CREATE TABLE devices (
        id INTEGER PRIMARY KEY,
        board TEXT NOT NULL,
        module TEXT NOT NULL,
        l4t TEXT,
        jetpack TEXT,
        profile TEXT,
        is_twin INTEGER NOT NULL,
        source TEXT NOT NULL CHECK (source IN {_SOURCES}),
        created_at TEXT NOT NULL
    )""",
    # NULLs are distinct in a plain UNIQUE: compare them as '' so one board is one row.
    """CREATE UNIQUE INDEX devices_identity ON devices
        (board, module, IFNULL(l4t, ''), IFNULL(jetpack, ''), IFNULL(profile, ''), is_twin)""",
    f"""CREATE TABLE workloads (
        id INTEGER PRIMARY KEY,
        key TEXT NOT NULL UNIQUE,
        model TEXT NOT NULL,
        family TEXT,
        params INTEGER,
        task TEXT NOT NULL,
        batch_size INTEGER NOT NULL,
        seq_len INTEGER NOT NULL,
        precision TEXT NOT NULL,
        mode TEXT NOT NULL,
        data_source TEXT,
        features TEXT NOT NULL DEFAULT '{{}}',
        source TEXT NOT NULL CHECK (source IN {_SOURCES}),
        created_at TEXT NOT NULL
    )""",
    f"""CREATE TABLE runs (
        id INTEGER PRIMARY KEY,
        device_id INTEGER REFERENCES devices(id),
        workload_id INTEGER REFERENCES workloads(id),
        policy TEXT NOT NULL,
        objective TEXT,
        setting TEXT,
        seed INTEGER,
        steps INTEGER,
        samples INTEGER,
        status TEXT NOT NULL CHECK (status IN {_STATUSES}),
        started_at TEXT NOT NULL,
        finished_at TEXT,
        wall_s REAL,
        time_s REAL,
        energy_j REAL,
        rail_energy_j TEXT,
        rails TEXT,
        avg_power_w REAL,
        samples_per_s REAL,
        joules_per_sample REAL,
        metrics TEXT,
        weights TEXT,
        synthetic INTEGER,
        source TEXT NOT NULL CHECK (source IN {_SOURCES}),
        label TEXT,
        notes TEXT,
        error TEXT
    )""",
    "CREATE INDEX runs_reuse ON runs (workload_id, device_id, policy, status)",
    f"""CREATE TABLE power_samples (
        id INTEGER PRIMARY KEY,
        run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        t REAL NOT NULL,
        total_mw REAL NOT NULL,
        rails_mw TEXT NOT NULL,
        source TEXT NOT NULL CHECK (source IN {_SOURCES})
    )""",
    "CREATE INDEX power_samples_run ON power_samples (run_id, t)",
)

# v2: sweeps (resumable point by point) and comparisons of a run against its baseline.
_V2 = (
    f"""CREATE TABLE sweeps (
        id INTEGER PRIMARY KEY,
        device_id INTEGER NOT NULL REFERENCES devices(id),
        workload_id INTEGER NOT NULL REFERENCES workloads(id),
        space TEXT NOT NULL,
        warmup_steps INTEGER NOT NULL,
        steps INTEGER NOT NULL,
        repeats INTEGER NOT NULL,
        status TEXT NOT NULL CHECK (status IN {_STATUSES}),
        source TEXT NOT NULL CHECK (source IN {_SOURCES}),
        label TEXT,
        created_at TEXT NOT NULL,
        finished_at TEXT
    )""",
    "CREATE INDEX sweeps_resume ON sweeps (device_id, workload_id, status)",
    f"""CREATE TABLE sweep_points (
        id INTEGER PRIMARY KEY,
        sweep_id INTEGER NOT NULL REFERENCES sweeps(id) ON DELETE CASCADE,
        setting TEXT NOT NULL,
        gpu_hz INTEGER,
        cpu_hz INTEGER,
        emc_hz INTEGER,
        nvpmodel INTEGER,
        repeat INTEGER NOT NULL,
        time_s REAL NOT NULL,
        energy_j REAL NOT NULL,
        rail_energy_j TEXT NOT NULL,
        avg_power_w REAL,
        samples INTEGER NOT NULL,
        source TEXT NOT NULL CHECK (source IN {_SOURCES}),
        created_at TEXT NOT NULL,
        UNIQUE (sweep_id, setting, repeat)
    )""",
    "CREATE INDEX sweep_points_clocks ON sweep_points (sweep_id, gpu_hz, cpu_hz, emc_hz, nvpmodel)",
    f"""CREATE TABLE comparisons (
        id INTEGER PRIMARY KEY,
        run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        baseline_run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        saving_pct REAL NOT NULL,
        slowdown_pct REAL NOT NULL,
        rails TEXT,
        source TEXT NOT NULL CHECK (source IN {_SOURCES}),
        created_at TEXT NOT NULL
    )""",
    "CREATE INDEX comparisons_run ON comparisons (run_id)",
    "CREATE INDEX comparisons_baseline ON comparisons (baseline_run_id)",
)

# v3: "simulated" (the twin ran the step trace, nothing was trained) becomes a column; before,
# only the notes said so. GLOB, not LIKE: case-sensitive, as the notes-prefix test it replaces.
_V3 = (
    "ALTER TABLE runs ADD COLUMN simulated INTEGER NOT NULL DEFAULT 0",
    "UPDATE runs SET simulated = 1 WHERE notes GLOB 'simulated*'",
)

# v4: the `abandoned` run status (a run whose process died: its owner's session lock is free),
# the session lock that owns a running run, and the t of an abandoned run's last power sample.
# The status CHECK only widens, which changes nothing stored: SQLite's documented way for that
# is to edit the table's SQL text in sqlite_master (no table rebuild, so no foreign-key cascade).
_STATUSES_V4 = "('running', 'finished', 'failed', 'cancelled', 'abandoned')"


def _v4(conn: sqlite3.Connection) -> None:
    conn.execute("ALTER TABLE runs ADD COLUMN owner_lock TEXT")
    conn.execute("ALTER TABLE runs ADD COLUMN last_sample_t REAL")
    _widen_status(conn, "runs")


def _widen_status(conn: sqlite3.Connection, table: str) -> None:
    """Let `table`'s status CHECK take `abandoned` too, by editing its SQL text in sqlite_master."""
    sql = conn.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)).fetchone()[0]
    widened, n = re.subn(r"CHECK\s*\(\s*status\s+IN\s*\([^)]*\)\s*\)", f"CHECK (status IN {_STATUSES_V4})", sql,
                         count=1, flags=re.IGNORECASE)
    if n == 0:
        return  # no status check to widen (the hand-made schemas of the first release)
    schema = int(conn.execute("PRAGMA schema_version").fetchone()[0])
    conn.execute("PRAGMA writable_schema = ON")
    try:
        conn.execute("UPDATE sqlite_master SET sql = ? WHERE type = 'table' AND name = ?", (widened, table))
        conn.execute(f"PRAGMA schema_version = {schema + 1}")
    finally:
        conn.execute("PRAGMA writable_schema = OFF")


# v5: where a run's eval metric came from, so that it is shown as meaningful only for pretrained
# weights on real data (engine.core.provenance.MetricProvenance). `data_source` names the run's
# data ("synthetic", "hub:nyu-mll/glue", "dir:/path"). Before v5 experiments stored no weights,
# and `synthetic` only when the data was generated: the weights are taken back from the notes
# those runs wrote ("; weights random"); everything else stays NULL, which reads as "unknown".
_V5 = (
    "ALTER TABLE runs ADD COLUMN data_source TEXT",
    "UPDATE runs SET weights = 'random' WHERE weights IS NULL AND notes GLOB '*; weights random*'",
    "UPDATE runs SET weights = 'pretrained' WHERE weights IS NULL AND notes GLOB '*; weights pretrained*'",
    "UPDATE runs SET synthetic = 1 WHERE synthetic IS NULL AND notes GLOB '*; synthetic data*'",
)

# v6: what a workload's mode leaves unsaid: a LoRA workload's adapter settings (JSON: rank, alpha,
# dropout, targets as given; empty targets mean the family's default) and gradient checkpointing.
# Both change the step's cost, so they are in the workload's key too (only when used: the keys of
# workloads stored before stay as they were, and so do these columns' defaults for them).
_V6 = (
    "ALTER TABLE workloads ADD COLUMN lora TEXT",
    "ALTER TABLE workloads ADD COLUMN grad_checkpointing INTEGER NOT NULL DEFAULT 0",
)

# v7: a workload's padding ("max_length": every batch at the maximum length; "dynamic": each
# batch padded to its longest example). Every workload stored before v7 was padded to the maximum
# length, and its key (engine.workload.resolve.workload_key) stays as it was.
_V7_PADDING = (
    "ALTER TABLE workloads ADD COLUMN padding TEXT NOT NULL DEFAULT 'max_length'",
)

# v8: energy-only sweep points: sweep_points.time_s becomes nullable (NULL: the time was not recorded,
# as in measurements imported with `slm-dvfs import-sweep`). SQLite cannot drop a NOT NULL in place,
# so the table is rebuilt (its rows, ids and index kept). Nothing references sweep_points, so
# dropping the old table cascades to nothing.
_SWEEP_POINTS_V8 = f"""CREATE TABLE sweep_points (
        id INTEGER PRIMARY KEY,
        sweep_id INTEGER NOT NULL REFERENCES sweeps(id) ON DELETE CASCADE,
        setting TEXT NOT NULL,
        gpu_hz INTEGER,
        cpu_hz INTEGER,
        emc_hz INTEGER,
        nvpmodel INTEGER,
        repeat INTEGER NOT NULL,
        time_s REAL,
        energy_j REAL NOT NULL,
        rail_energy_j TEXT NOT NULL,
        avg_power_w REAL,
        samples INTEGER NOT NULL,
        source TEXT NOT NULL CHECK (source IN {_SOURCES}),
        created_at TEXT NOT NULL,
        UNIQUE (sweep_id, setting, repeat)
    )"""
_POINT_COLUMNS = ("id, sweep_id, setting, gpu_hz, cpu_hz, emc_hz, nvpmodel, repeat, time_s, energy_j, rail_energy_j, "
                  "avg_power_w, samples, source, created_at")


def _v8(conn: sqlite3.Connection) -> None:
    conn.execute("ALTER TABLE sweep_points RENAME TO sweep_points_v7")
    conn.execute("DROP INDEX IF EXISTS sweep_points_clocks")
    conn.execute(_SWEEP_POINTS_V8)
    conn.execute(f"INSERT INTO sweep_points ({_POINT_COLUMNS}) SELECT {_POINT_COLUMNS} FROM sweep_points_v7")
    conn.execute("DROP TABLE sweep_points_v7")
    conn.execute("CREATE INDEX sweep_points_clocks ON sweep_points (sweep_id, gpu_hz, cpu_hz, emc_hz, nvpmodel)")


# v9: the board's serial (the device tree's serial-number), so that two boards of one module are two
# devices. Rows before it keep a NULL serial ("unknown") and their identity: the unique index is rebuilt
# with the serial in it, which every existing row (all NULL, as '') still satisfies.
_V9_SERIAL = (
    "ALTER TABLE devices ADD COLUMN serial TEXT",
    "DROP INDEX IF EXISTS devices_identity",
    """CREATE UNIQUE INDEX devices_identity ON devices
        (board, module, IFNULL(l4t, ''), IFNULL(jetpack, ''), IFNULL(profile, ''), is_twin, IFNULL(serial, ''))""",
)


# v10: the board that measured each sweep point. A fleet spreads one workload's sweep over several
# boards of a module (and a lost board's points are finished on another): the sweep keeps the board
# it was opened on, each point names its own. NULL (every point before v10): the sweep's device.
_V10_POINT_DEVICE = (
    "ALTER TABLE sweep_points ADD COLUMN device_id INTEGER REFERENCES devices(id)",
)


# v11: a killed sweep is `abandoned`, as a killed run is since v4: the session lock of the process
# that measures it (free once that process is gone) and the status CHECK widened the same way. With
# them, the points a sweep plans (settings x repeats; NULL before v11: not recorded), so a listing
# can say how far it got. And a workload's full definition: the model's config as resolved (JSON),
# so that a model named by a config file is rebuilt as itself and not as the zoo model its file's
# stem names. Keys stay as they were; NULL (rows before v11): not recorded, rebuilt from the name.
def _v11(conn: sqlite3.Connection) -> None:
    conn.execute("ALTER TABLE sweeps ADD COLUMN owner_lock TEXT")
    conn.execute("ALTER TABLE sweeps ADD COLUMN planned INTEGER")
    conn.execute("ALTER TABLE workloads ADD COLUMN config TEXT")
    _widen_status(conn, "sweeps")


# v12: what every open asks (Store.reap_abandoned: the runs and sweeps still `running`) read through
# an index of the running ones alone, so that an open costs the same on a store of 10k runs as of 10.
# Partial indexes: a few rows at most, whatever the store holds. Nothing stored changes.
_V12_RUNNING = (
    "CREATE INDEX runs_running ON runs (id) WHERE status = 'running'",
    "CREATE INDEX sweeps_running ON sweeps (id) WHERE status = 'running'",
)


Migration = Union[Sequence[str], Callable[[sqlite3.Connection], None]]
MIGRATIONS: tuple[Migration, ...] = (_V1, _V2, _V3, _v4, _V5, _V6, _V7_PADDING, _v8, _V9_SERIAL, _V10_POINT_DEVICE,
                                        _v11, _V12_RUNNING)
SCHEMA_VERSION = len(MIGRATIONS)


# --------------------------------------------------------------------------- file checks
def check_file(path: Path) -> None:
    """Refuse a file that is not an SQLite database, or one cut short (header vs size).

    An empty file is an empty database to SQLite, so it is accepted (it holds nothing to lose).
    """
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return
    if path.is_dir():
        raise StoreError(f"{path} is a folder, not a results database", "pass a file path with --db")
    if size == 0:
        return
    try:
        with open(path, "rb") as fh:
            header = fh.read(100)
    except OSError as exc:
        raise StoreError(f"cannot read the results database {path}: {exc.strerror}",
                         "check the file's permissions") from None
    if len(header) < 100 or not header.startswith(_MAGIC):
        raise CorruptStoreError(path, "it is not an SQLite database (no SQLite header)")
    wal = path.with_name(path.name + "-wal")
    if wal.exists() and wal.stat().st_size > 0:
        # Another connection is live: a checkpoint writes page 1 (with the new page count) before
        # the pages after it, so the size check could misfire. SQLite's own checks still apply.
        return
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    change_counter = header[24:28]
    page_count = int.from_bytes(header[28:32], "big")
    # The in-header page count is trustworthy only when "version-valid-for" matches the counter.
    if header[92:96] == change_counter and page_count and size < page_count * page_size:
        raise CorruptStoreError(
            path, f"the file is truncated ({size} bytes, its header says {page_count * page_size})"
        )
    if page_size and size % page_size:
        raise CorruptStoreError(path, f"the file is truncated ({size} bytes, not whole {page_size}-byte pages)")


def user_version(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


def check_ownership(conn: sqlite3.Connection, path: Path) -> int:
    """The file's schema version, after checking it is ours and not newer than this code."""
    version = user_version(conn)
    app_id = int(conn.execute("PRAGMA application_id").fetchone()[0])
    if app_id not in (0, APPLICATION_ID):
        raise StoreError(
            f"{path} is an SQLite database of another application (application_id {app_id:#x})",
            "point --db / $SLM_DVFS_DB at an slm-dvfs results file, or a new path",
        )
    if version == 0:
        tables = conn.execute("SELECT count(*) FROM sqlite_master WHERE type = 'table'").fetchone()[0]
        if tables:
            raise StoreError(
                f"{path} is an SQLite database with {tables} tables but no slm-dvfs schema version",
                "it is not a results database; point --db / $SLM_DVFS_DB at another path",
            )
    if version > SCHEMA_VERSION:
        raise StoreVersionError(
            f"the results database {path} has schema version {version}; this slm-dvfs knows up to {SCHEMA_VERSION}",
            "upgrade slm-dvfs (`pip install -U slm-dvfs`) to read it, or point --db / $SLM_DVFS_DB "
            "at another file; the file was left untouched",
        )
    return version


def migrate(conn: sqlite3.Connection, path: Path) -> int:
    """Bring the database up to SCHEMA_VERSION in one exclusive transaction; returns the old version.

    `conn` must be in autocommit mode (isolation_level None) so the transaction is ours.
    """
    version = check_ownership(conn, path)
    if version == SCHEMA_VERSION:
        return version
    conn.execute("BEGIN EXCLUSIVE")
    try:
        version = check_ownership(conn, path)  # another process may have migrated meanwhile
        start = version
        for number in range(version + 1, SCHEMA_VERSION + 1):
            step = MIGRATIONS[number - 1]
            if callable(step):
                step(conn)
            else:
                for statement in step:
                    conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {number}")
        conn.execute("COMMIT")
    except BaseException as exc:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        if isinstance(exc, (StoreError, KeyboardInterrupt, SystemExit)):
            raise
        raise StoreError(
            f"upgrading the results database {path} from schema version {version} to {SCHEMA_VERSION} "
            f"failed: {exc}",
            "the file was left as it was; keep a copy of it and report this as a bug",
        ) from exc
    if start != SCHEMA_VERSION:
        log.info("results database %s: schema %d -> %d", path, start, SCHEMA_VERSION)
    return start
