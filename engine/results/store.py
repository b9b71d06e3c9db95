"""The results store: runs, sweeps, power traces and comparisons in one SQLite file.

    with Store() as store:                        # data_dir()/results.sqlite, or $SLM_DVFS_DB
        run = store.start_run(device=DeviceRecord.from_identity(ident), workload=wl,
                              policy="maxn", source=Source.TWIN, seed=0, steps=100)
        ...
        store.finish_run(run, window=result, samples=3200, metrics={"accuracy": 0.91})

Every recorded item is its own committed transaction, so a crash loses at most the item
in progress. The file is in WAL mode: the TUI may read while a run writes, from another
thread or process. Every row carries its Source (measured, twin, predicted).
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import threading
from bisect import bisect_right
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from engine.core import paths
from engine.core.errors import ConfigError
from engine.device.power import PowerSample
from engine.core.stats import cumulative_trapezoid_j
from engine.core.provenance import Source
from engine.results.schema import (
    RUN_STATUSES,
    SCHEMA_VERSION,
    ComparisonRecord,
    CorruptStoreError,
    DeviceRecord,
    RunRecord,
    StoreError,
    StoreVersionError,
    SweepPoint,
    SweepRecord,
    UnknownRecordError,
    WorkloadRecord,
    device_from_row,
    json_text,
    json_default,
    utc_now,
    run_from_row,
    sample_from_row,
    as_source,
    timestamp,
    workload_from_row,
    check_file,
    migrate,
    normalize_setting,
    setting_key,
    trace_features,
    workload_key,
)

__all__ = [
    "SCHEMA_VERSION", "ComparisonRecord", "CorruptStoreError", "DeviceRecord", "RunRecord", "Store",
    "StoreError", "StoreVersionError", "SweepPoint", "SweepRecord", "UnknownRecordError",
    "WorkloadRecord", "default_db_path", "downsample", "normalize_setting", "setting_key",
    "trace_features", "workload_key",
]

log = logging.getLogger(__name__)

DEFAULT_MAX_SAMPLES = 2000


def default_db_path() -> Path:
    """$SLM_DVFS_DB, else data_dir()/results.sqlite."""
    env = os.environ.get(paths.ENV_PREFIX + "DB")
    return Path(env) if env else paths.data_dir() / "results.sqlite"


# --------------------------------------------------------------------------- down-sampling
def downsample(samples: Sequence[PowerSample], max_samples: int = DEFAULT_MAX_SAMPLES) -> list[PowerSample]:
    """At most `max_samples` samples with the same energy: the first and last sample, and between
    them the time-weighted mean power of equal-time buckets, at each bucket's middle.

    The power is taken as linear between samples (as the monitor's trapezoid rule does), so a
    bucket's mean is exact; the trapezoid over the result matches the original to within the
    end buckets' curvature (well under 0.1% for a few hundred buckets).
    """
    if max_samples < 3:
        raise ConfigError(f"cannot down-sample to {max_samples} samples", "keep at least 3")
    n = len(samples)
    if n <= max_samples:
        return list(samples)
    ts = [float(s.t) for s in samples]
    if any(b <= a for a, b in zip(ts, ts[1:])):
        raise ConfigError("power samples must have strictly increasing times", "sort them and drop duplicates")
    rails = tuple(samples[0].rails_mw)
    try:
        power = {r: [float(s.rails_mw[r]) for s in samples] for r in rails}
    except KeyError as exc:
        raise ConfigError(f"rail {exc.args[0]} is missing from some power samples",
                          "store samples of one rail set per run") from None
    # mW·s (= mJ) up to each sample, as the monitor integrates
    cum = {r: [j * 1000.0 for j in cumulative_trapezoid_j(ts, power[r])] for r in rails}

    def energy_at(t: float) -> dict[str, float]:
        i = min(max(bisect_right(ts, t) - 1, 0), n - 2)
        dt, span = t - ts[i], ts[i + 1] - ts[i]
        out = {}
        for r in rails:
            p0, p1 = power[r][i], power[r][i + 1]
            out[r] = cum[r][i] + p0 * dt + 0.5 * (p1 - p0) / span * dt * dt
        return out

    buckets = max_samples - 2
    t0, width = ts[0], (ts[-1] - ts[0]) / buckets
    result = [PowerSample(ts[0], dict(samples[0].rails_mw))]
    before = energy_at(t0)
    for k in range(buckets):
        edge = ts[-1] if k == buckets - 1 else t0 + (k + 1) * width
        after = energy_at(edge)
        span = edge - (t0 + k * width)
        result.append(PowerSample(t0 + (k + 0.5) * width, {r: (after[r] - before[r]) / span for r in rails}))
        before = after
    result.append(PowerSample(ts[-1], dict(samples[-1].rails_mw)))
    return result


# --------------------------------------------------------------------------- the store
class Store:
    """One results database. Thread-safe (one connection behind a lock); use as a context manager."""

    def __init__(self, path: str | os.PathLike[str] | None = None, create: bool = True) -> None:
        self.path = Path(path) if path is not None else default_db_path()
        self._lock = threading.RLock()
        if not self.path.exists():
            if not create:
                raise StoreError(f"there is no results database at {self.path}",
                                 "run an experiment or `slm-dvfs import-tegrastats` first, or pass --db")
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StoreError(f"cannot create the folder {self.path.parent}: {exc.strerror}",
                                 "pass a writable --db path or set $SLM_DVFS_DB") from None
        check_file(self.path)
        try:
            # Autocommit mode: every transaction is an explicit BEGIN ... COMMIT of ours.
            self._conn = sqlite3.connect(str(self.path), timeout=10.0, isolation_level=None,
                                         check_same_thread=False)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open the results database {self.path}: {exc}",
                             "check that the path is a writable file, or pass another --db") from None
        try:
            self._conn.row_factory = sqlite3.Row
            self._setup()
        except BaseException:
            self._conn.close()
            raise

    def _setup(self) -> None:
        conn = self._conn
        try:
            conn.execute("PRAGMA foreign_keys = ON")
            # No integrity scan here (seconds on a large file): check_file() caught foreign and
            # truncated files, and damage found later is reported as CorruptStoreError; see check().
            migrate(conn, self.path)
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                log.warning("%s: WAL mode refused by the file system (%s); readers may wait on writers",
                            self.path, mode)
            # FULL: a committed point survives a power cut too, at one fsync per item.
            conn.execute("PRAGMA synchronous = FULL")
        except sqlite3.Error as exc:
            raise self._wrap(exc, "open") from None

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ plumbing
    def _wrap(self, exc: sqlite3.Error, what: str) -> StoreError:
        text = str(exc)
        if isinstance(exc, sqlite3.DatabaseError) and any(
            s in text for s in ("malformed", "not a database", "corrupt")
        ):
            return CorruptStoreError(self.path, text)
        if "locked" in text or "busy" in text:
            return StoreError(f"the results database {self.path} is busy ({what}): {text}",
                              "another slm-dvfs process holds it; wait for it to finish, or use another --db")
        return StoreError(f"results database {self.path}: {what} failed: {text}",
                          "check the disk (space, permissions); the file itself was not changed")

    @contextmanager
    def _tx(self, what: str) -> Iterator[sqlite3.Connection]:
        """One committed transaction: all of it or none of it reaches the file."""
        with self._lock:
            conn = self._conn
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise self._wrap(exc, what) from None
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException as exc:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                if isinstance(exc, sqlite3.Error):
                    raise self._wrap(exc, what) from None
                raise

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        with self._lock:
            try:
                return self._conn.execute(sql, tuple(params)).fetchall()
            except sqlite3.Error as exc:
                raise self._wrap(exc, "a query") from None

    def check(self) -> None:
        """SQLite's full integrity scan (takes seconds on a large file); raises CorruptStoreError."""
        rows = self._query("PRAGMA integrity_check")
        problems = [str(r[0]) for r in rows if str(r[0]) != "ok"]
        if problems:
            raise CorruptStoreError(self.path, "; ".join(problems[:3]))

    def schema_version(self) -> int:
        return int(self._query("PRAGMA user_version")[0][0])

    def journal_mode(self) -> str:
        return str(self._query("PRAGMA journal_mode")[0][0])

    # ------------------------------------------------------------------ devices and workloads
    def ensure_device(self, device: DeviceRecord) -> int:
        """The id of this device's row, created (and committed) on first sight."""
        with self._tx("recording a device") as conn:
            return self._device_id(conn, device)

    def _device_id(self, conn: sqlite3.Connection, d: DeviceRecord) -> int:
        row = conn.execute(
            "SELECT id FROM devices WHERE board = ? AND module = ? AND l4t IS ? AND jetpack IS ? "
            "AND profile IS ? AND is_twin = ?",
            (d.board, d.module, d.l4t, d.jetpack, d.profile, int(d.is_twin)),
        ).fetchone()
        if row:
            return int(row[0])
        cur = conn.execute(
            "INSERT INTO devices (board, module, l4t, jetpack, profile, is_twin, source, created_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (d.board, d.module, d.l4t, d.jetpack, d.profile, int(d.is_twin), d.source.value, utc_now()),
        )
        return int(cur.lastrowid)

    def get_device(self, device_id: int) -> DeviceRecord:
        rows = self._query("SELECT * FROM devices WHERE id = ?", (device_id,))
        if not rows:
            raise UnknownRecordError(f"no device with id {device_id} in {self.path}", "check the id")
        return device_from_row(rows[0])

    def ensure_workload(self, workload: WorkloadRecord) -> int:
        """The id of the workload with this key; fills in descriptive fields a first record lacked."""
        with self._tx("recording a workload") as conn:
            return self._workload_id(conn, workload)

    def _workload_id(self, conn: sqlite3.Connection, w: WorkloadRecord) -> int:
        row = conn.execute("SELECT id, family, params, data_source, features FROM workloads WHERE key = ?",
                           (w.key,)).fetchone()
        if row is None:
            cur = conn.execute(
                "INSERT INTO workloads (key, model, family, params, task, batch_size, seq_len, precision, mode, "
                "data_source, features, source, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (w.key, w.model, w.family, w.params, w.task, w.batch_size, w.seq_len, w.precision, w.mode,
                 w.data_source, json_text(dict(w.features)), w.source.value, utc_now()),
            )
            return int(cur.lastrowid)
        conn.execute(
            "UPDATE workloads SET family = IFNULL(family, ?), params = IFNULL(params, ?), "
            "data_source = IFNULL(data_source, ?), features = CASE WHEN features = '{}' THEN ? ELSE features END "
            "WHERE id = ?",
            (w.family, w.params, w.data_source, json_text(dict(w.features)), row["id"]),
        )
        return int(row["id"])

    def get_workload(self, workload_id: int) -> WorkloadRecord:
        rows = self._query("SELECT * FROM workloads WHERE id = ?", (workload_id,))
        if not rows:
            raise UnknownRecordError(f"no workload with id {workload_id} in {self.path}", "check the id")
        return workload_from_row(rows[0])

    def find_workload(self, key: str) -> tuple[int, WorkloadRecord] | None:
        rows = self._query("SELECT * FROM workloads WHERE key = ?", (key,))
        return (int(rows[0]["id"]), workload_from_row(rows[0])) if rows else None

    def _ref(self, conn: sqlite3.Connection, value: Any, kind: str) -> int | None:
        if value is None:
            return None
        if isinstance(value, DeviceRecord):
            return self._device_id(conn, value)
        if isinstance(value, WorkloadRecord):
            return self._workload_id(conn, value)
        table = "devices" if kind == "device" else "workloads"
        if conn.execute(f"SELECT 1 FROM {table} WHERE id = ?", (int(value),)).fetchone() is None:
            raise UnknownRecordError(f"no {kind} with id {value} in {self.path}",
                                     f"pass a {kind} record, or the id ensure_{kind}() returned")
        return int(value)

    # ------------------------------------------------------------------ runs
    def start_run(
        self,
        *,
        policy: str,
        source: Source | str,
        device: DeviceRecord | int | None = None,
        workload: WorkloadRecord | int | None = None,
        objective: str | None = None,
        setting: Any = None,
        seed: int | None = None,
        steps: int | None = None,
        rails: str | None = None,
        weights: str | None = None,
        synthetic: bool | None = None,
        label: str | None = None,
        notes: str | None = None,
        started_at: datetime | str | None = None,
    ) -> int:
        """Record a run as running (committed at once, so a crash leaves a trace); returns its id."""
        src = as_source(source)
        with self._tx("starting a run") as conn:
            device_id = self._ref(conn, device, "device")
            workload_id = self._ref(conn, workload, "workload")
            cur = conn.execute(
                "INSERT INTO runs (device_id, workload_id, policy, objective, setting, seed, steps, status, "
                "started_at, rails, weights, synthetic, source, label, notes) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, 'running', ?, ?, ?, ?, ?, ?, ?)",
                (device_id, workload_id, policy, objective,
                 None if setting is None else json_text(normalize_setting(setting)), seed, steps,
                 timestamp(started_at), rails, weights, None if synthetic is None else int(synthetic),
                 src.value, label, notes),
            )
            return int(cur.lastrowid)

    def finish_run(
        self,
        run_id: int,
        *,
        status: str = "finished",
        window: Any = None,
        time_s: float | None = None,
        energy_j: float | None = None,
        rail_energy_j: Mapping[str, float] | None = None,
        rails: str | None = None,
        wall_s: float | None = None,
        samples: int | None = None,
        steps: int | None = None,
        avg_power_w: float | None = None,
        metrics: Mapping[str, Any] | None = None,
        setting: Any = None,
        notes: str | None = None,
        finished_at: datetime | str | None = None,
    ) -> RunRecord:
        """Close a run with its figures. `window` (a monitor WindowResult) fills time, energy and
        rails; explicit arguments win. Throughput and J/sample are derived where not given."""
        if status not in ("finished", "cancelled"):
            raise ConfigError(f"finish_run cannot set status {status!r}", "use finished or cancelled; fail_run for errors")
        run = self.get_run(run_id)
        if window is not None:
            if Source(window.source) != run.source:
                raise ConfigError(
                    f"run {run_id} is a {run.source.value} run, but its energy window is {Source(window.source).value}",
                    "record the window with the source the run was started with",
                )
            time_s = window.duration_s if time_s is None else time_s
            energy_j = window.total_energy_j if energy_j is None else energy_j
            rail_energy_j = dict(window.energy_j) if rail_energy_j is None else rail_energy_j
            if rails is None and run.rails is None:
                rails = "+".join(window.rails)
        if energy_j is None and rail_energy_j:
            energy_j = float(sum(rail_energy_j.values()))
        samples = run.samples if samples is None else samples
        duration = time_s if time_s is not None else wall_s
        if avg_power_w is None and energy_j is not None and duration:
            avg_power_w = energy_j / duration
        samples_per_s = samples / duration if samples and duration else None
        joules_per_sample = energy_j / samples if samples and energy_j is not None else None
        with self._tx("finishing a run") as conn:
            conn.execute(
                "UPDATE runs SET status = ?, finished_at = ?, time_s = ?, energy_j = ?, rail_energy_j = ?, "
                "rails = IFNULL(?, rails), wall_s = ?, samples = ?, steps = IFNULL(?, steps), avg_power_w = ?, "
                "samples_per_s = ?, joules_per_sample = ?, metrics = ?, setting = IFNULL(?, setting), "
                "notes = IFNULL(?, notes) WHERE id = ?",
                (status, timestamp(finished_at), time_s, energy_j, json_text(dict(rail_energy_j or {})), rails, wall_s,
                 samples, steps, avg_power_w, samples_per_s, joules_per_sample, json_text(dict(metrics or {})),
                 None if setting is None else json_text(normalize_setting(setting)), notes, run_id),
            )
        return self.get_run(run_id)

    def fail_run(self, run_id: int, error: BaseException | str) -> None:
        """Mark a run failed with the error's text (figures, if any, are left as they were)."""
        text = str(error) if isinstance(error, str) else f"{type(error).__name__}: {error}"
        with self._tx("failing a run") as conn:
            cur = conn.execute("UPDATE runs SET status = 'failed', finished_at = ?, error = ? WHERE id = ?",
                               (utc_now(), text, run_id))
            if cur.rowcount == 0:
                raise self._unknown_run(run_id)

    def delete_run(self, run_id: int) -> None:
        """Delete a run with its power samples and the comparisons that name it."""
        with self._tx("deleting a run") as conn:
            if conn.execute("DELETE FROM runs WHERE id = ?", (run_id,)).rowcount == 0:
                raise self._unknown_run(run_id)

    def _unknown_run(self, run_id: int) -> UnknownRecordError:
        return UnknownRecordError(f"no run with id {run_id} in {self.path}",
                                  "`slm-dvfs runs` lists the stored runs and their ids")

    _RUN_SELECT = (
        "SELECT r.*, d.board AS d_board, d.module AS d_module, d.l4t AS d_l4t, d.jetpack AS d_jetpack, "
        "d.profile AS d_profile, d.is_twin AS d_is_twin, w.model AS w_model, w.task AS w_task, "
        "w.batch_size AS w_batch_size, w.seq_len AS w_seq_len, w.precision AS w_precision, w.mode AS w_mode, "
        "w.family AS w_family, w.params AS w_params, w.data_source AS w_data_source, w.features AS w_features, "
        "w.source AS w_source FROM runs r LEFT JOIN devices d ON d.id = r.device_id "
        "LEFT JOIN workloads w ON w.id = r.workload_id"
    )

    def get_run(self, run_id: int) -> RunRecord:
        rows = self._query(f"{self._RUN_SELECT} WHERE r.id = ?", (run_id,))
        if not rows:
            raise self._unknown_run(run_id)
        return run_from_row(rows[0])

    def list_runs(
        self,
        *,
        model: str | None = None,
        task: str | None = None,
        policy: str | None = None,
        source: Source | str | None = None,
        device_id: int | None = None,
        status: str | None = None,
        workload_key: str | None = None,
        limit: int | None = 50,
    ) -> list[RunRecord]:
        """Runs matching every filter given, newest first."""
        where, params = [], []
        for column, value in (("w.model", model), ("w.task", task), ("r.policy", policy),
                              ("r.device_id", device_id), ("r.status", status), ("w.key", workload_key)):
            if value is not None:
                where.append(f"{column} = ?")
                params.append(value)
        if source is not None:
            where.append("r.source = ?")
            params.append(as_source(source).value)
        sql = self._RUN_SELECT + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY r.id DESC"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(int(limit))
        return [run_from_row(row) for row in self._query(sql, params)]

    def find_runs(
        self,
        workload_key: str,
        device_id: int,
        policy: str = "maxn",
        steps: int | None = None,
        seed: int | None = None,
        source: Source | str | None = None,
    ) -> list[RunRecord]:
        """Finished runs of the same workload on the same device (e.g. a MAXN baseline to reuse), newest first."""
        runs = self.list_runs(workload_key=workload_key, device_id=device_id, policy=policy, status="finished",
                              source=source, limit=None)
        return [r for r in runs if (steps is None or r.steps == steps) and (seed is None or r.seed == seed)]

    # ------------------------------------------------------------------ power samples
    def add_power_samples(self, run_id: int, samples: Sequence[PowerSample],
                          max_samples: int = DEFAULT_MAX_SAMPLES) -> int:
        """Store a run's power trace, down-sampled so the run never holds more than `max_samples`.

        May be called once with the whole trace or repeatedly with later chunks: when the
        stored and new samples together overflow, all of them are down-sampled again to
        half the limit (so chunks that follow are kept at full resolution for a while).
        Returns how many samples the run now holds.
        """
        new = sorted(samples, key=lambda s: s.t)
        if not new:
            return len(self.power_samples(run_id))
        run = self.get_run(run_id)
        with self._tx("storing power samples") as conn:
            stored = [sample_from_row(r) for r in conn.execute(
                "SELECT t, rails_mw FROM power_samples WHERE run_id = ? ORDER BY t", (run_id,))]
            if stored and new[0].t <= stored[-1].t:
                raise ConfigError(
                    f"power samples for run {run_id} must come after those stored (t > {stored[-1].t:g})",
                    "add each part of the trace once, in time order",
                )
            if len(stored) + len(new) <= max_samples:
                keep, fresh = new, False
            else:
                target = max(3, max_samples // 2) if stored else max_samples
                keep, fresh = downsample(stored + new, target), True
            if fresh:
                conn.execute("DELETE FROM power_samples WHERE run_id = ?", (run_id,))
            conn.executemany(
                "INSERT INTO power_samples (run_id, t, total_mw, rails_mw, source) VALUES (?, ?, ?, ?, ?)",
                # rails keep the board's order (exports list them so)
                [(run_id, float(s.t), s.total_mw, json.dumps(dict(s.rails_mw)), run.source.value) for s in keep],
            )
            return int(conn.execute("SELECT count(*) FROM power_samples WHERE run_id = ?", (run_id,)).fetchone()[0])

    def power_samples(self, run_id: int) -> list[PowerSample]:
        """The run's stored power samples (mW per rail, in the run's timebase), oldest first."""
        self.get_run(run_id)  # an unknown id is an error, not an empty trace
        rows = self._query("SELECT t, rails_mw FROM power_samples WHERE run_id = ? ORDER BY t", (run_id,))
        return [sample_from_row(r) for r in rows]

    # ------------------------------------------------------------------ sweeps
    def find_or_create_sweep(
        self,
        *,
        device: DeviceRecord | int,
        workload: WorkloadRecord | int,
        space: Mapping[str, Any],
        warmup_steps: int,
        steps: int,
        repeats: int,
        source: Source | str,
        label: str | None = None,
    ) -> SweepRecord:
        """The newest unfinished sweep with these parameters (marked running again), or a new one."""
        src = as_source(source)
        space_text = json.dumps(space, sort_keys=True, separators=(",", ":"), default=json_default)
        with self._tx("starting a sweep") as conn:
            device_id = self._ref(conn, device, "device")
            workload_id = self._ref(conn, workload, "workload")
            row = conn.execute(
                "SELECT id FROM sweeps WHERE device_id = ? AND workload_id = ? AND space = ? AND warmup_steps = ? "
                "AND steps = ? AND repeats = ? AND source = ? AND status != 'finished' ORDER BY id DESC LIMIT 1",
                (device_id, workload_id, space_text, warmup_steps, steps, repeats, src.value),
            ).fetchone()
            if row is not None:
                sweep_id = int(row[0])
                conn.execute("UPDATE sweeps SET status = 'running', finished_at = NULL WHERE id = ?", (sweep_id,))
                log.info("resuming sweep %d", sweep_id)
            else:
                sweep_id = int(conn.execute(
                    "INSERT INTO sweeps (device_id, workload_id, space, warmup_steps, steps, repeats, status, "
                    "source, label, created_at) VALUES (?, ?, ?, ?, ?, ?, 'running', ?, ?, ?)",
                    (device_id, workload_id, space_text, warmup_steps, steps, repeats, src.value, label, utc_now()),
                ).lastrowid)
        return self.get_sweep(sweep_id)

    def get_sweep(self, sweep_id: int) -> SweepRecord:
        rows = self._query("SELECT * FROM sweeps WHERE id = ?", (sweep_id,))
        if not rows:
            raise UnknownRecordError(f"no sweep with id {sweep_id} in {self.path}", "check the id")
        r = rows[0]
        return SweepRecord(
            id=r["id"], device_id=r["device_id"], workload_id=r["workload_id"], space=json.loads(r["space"]),
            warmup_steps=r["warmup_steps"], steps=r["steps"], repeats=r["repeats"], status=r["status"],
            source=Source(r["source"]), created_at=r["created_at"], finished_at=r["finished_at"], label=r["label"],
        )

    def list_sweeps(self, status: str | None = None) -> list[SweepRecord]:
        sql, params = "SELECT id FROM sweeps", []
        if status is not None:
            sql, params = sql + " WHERE status = ?", [status]
        return [self.get_sweep(r[0]) for r in self._query(sql + " ORDER BY id DESC", params)]

    def finish_sweep(self, sweep_id: int, status: str = "finished") -> None:
        if status not in RUN_STATUSES[1:]:
            raise ConfigError(f"a sweep cannot end as {status!r}", "use finished, failed or cancelled")
        with self._tx("finishing a sweep") as conn:
            if conn.execute("UPDATE sweeps SET status = ?, finished_at = ? WHERE id = ?",
                            (status, utc_now(), sweep_id)).rowcount == 0:
                raise UnknownRecordError(f"no sweep with id {sweep_id} in {self.path}", "check the id")

    def add_point(self, point: SweepPoint) -> int:
        """Record one measured sweep point, committed on its own; returns its id."""
        sweep = self.get_sweep(point.sweep_id)
        src = sweep.source if point.source is None else as_source(point.source)
        if src != sweep.source:
            raise ConfigError(f"sweep {sweep.id} is a {sweep.source.value} sweep; this point is {src.value}",
                              "record points with the sweep's source")
        setting = normalize_setting(point.setting)
        avg = point.avg_power_w
        if avg is None and point.time_s > 0:
            avg = point.energy_j / point.time_s
        key = setting_key(setting)
        with self._tx("recording a sweep point") as conn:
            try:
                cur = conn.execute(
                    "INSERT INTO sweep_points (sweep_id, setting, gpu_hz, cpu_hz, emc_hz, nvpmodel, repeat, time_s, "
                    "energy_j, rail_energy_j, avg_power_w, samples, source, created_at) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (point.sweep_id, key, setting["gpu_hz"], setting["cpu_hz"], setting["emc_hz"],
                     setting["nvpmodel"], point.repeat, point.time_s, point.energy_j,
                     json_text(dict(point.rail_energy_j)), avg, point.samples, src.value, utc_now()),
                )
            except sqlite3.IntegrityError:
                raise StoreError(f"sweep {point.sweep_id} already holds repeat {point.repeat} of {key}",
                                 "skip the points completed_points() lists when resuming") from None
            return int(cur.lastrowid)

    def sweep_points(self, sweep_id: int) -> list[SweepPoint]:
        rows = self._query("SELECT * FROM sweep_points WHERE sweep_id = ? ORDER BY id", (sweep_id,))
        return [
            SweepPoint(
                sweep_id=r["sweep_id"], setting=json.loads(r["setting"]), repeat=r["repeat"], time_s=r["time_s"],
                energy_j=r["energy_j"], samples=r["samples"], rail_energy_j=json.loads(r["rail_energy_j"]),
                avg_power_w=r["avg_power_w"], source=Source(r["source"]), id=r["id"], created_at=r["created_at"],
            )
            for r in rows
        ]

    def completed_points(self, sweep_id: int) -> frozenset[tuple[str, int]]:
        """(setting_key(setting), repeat) of every recorded point: what a resumed sweep skips."""
        self.get_sweep(sweep_id)
        rows = self._query("SELECT setting, repeat FROM sweep_points WHERE sweep_id = ?", (sweep_id,))
        return frozenset((r[0], int(r[1])) for r in rows)

    # ------------------------------------------------------------------ comparisons
    def add_comparison(self, comparison: ComparisonRecord) -> int:
        with self._tx("recording a comparison") as conn:
            for rid in (comparison.run_id, comparison.baseline_run_id):
                if conn.execute("SELECT 1 FROM runs WHERE id = ?", (rid,)).fetchone() is None:
                    raise self._unknown_run(rid)
            cur = conn.execute(
                "INSERT INTO comparisons (run_id, baseline_run_id, saving_pct, slowdown_pct, rails, source, "
                "created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (comparison.run_id, comparison.baseline_run_id, comparison.saving_pct, comparison.slowdown_pct,
                 comparison.rails, as_source(comparison.source).value, utc_now()),
            )
            return int(cur.lastrowid)

    def compare_runs(self, run_id: int, baseline_run_id: int, record: bool = True) -> ComparisonRecord:
        """Energy saving and slowdown of a run against its baseline (e.g. MAXN), from their stored figures."""
        run, base = self.get_run(run_id), self.get_run(baseline_run_id)
        for r in (run, base):
            if r.status != "finished" or r.energy_j is None or not r.time_s:
                raise ConfigError(f"run {r.id} has no finished energy and time figures ({r.status})",
                                  "compare two finished runs")
        if {run.source, base.source} == {Source.MEASURED, Source.TWIN}:
            raise ConfigError(f"run {run.id} is {run.source.value} but run {base.id} is {base.source.value}",
                              "compare runs of one kind: both on the board, or both on the twin")
        if run.rails != base.rails:
            raise ConfigError(f"run {run.id} totals rails {run.rails}, run {base.id} totals {base.rails}",
                              "compare runs whose energy is over the same rails preset")
        source = Source.PREDICTED if Source.PREDICTED in (run.source, base.source) else run.source
        if not base.energy_j:
            raise ConfigError(f"baseline run {base.id} used no energy", "pick a baseline with figures")
        comparison = ComparisonRecord(
            run_id=run.id, baseline_run_id=base.id,
            saving_pct=(base.energy_j - run.energy_j) / base.energy_j * 100.0,  # type: ignore[operator]
            slowdown_pct=(run.time_s - base.time_s) / base.time_s * 100.0,  # type: ignore[operator]
            source=source, rails=run.rails,
        )
        if record:
            cid = self.add_comparison(comparison)
            comparison = next(c for c in self.comparisons_for(run.id) if c.id == cid)
        return comparison

    def comparisons_for(self, run_id: int) -> list[ComparisonRecord]:
        """Comparisons naming the run on either side, oldest first."""
        rows = self._query("SELECT * FROM comparisons WHERE run_id = ? OR baseline_run_id = ? ORDER BY id",
                           (run_id, run_id))
        return [ComparisonRecord(run_id=r["run_id"], baseline_run_id=r["baseline_run_id"],
                                 saving_pct=r["saving_pct"], slowdown_pct=r["slowdown_pct"],
                                 source=Source(r["source"]), rails=r["rails"], id=r["id"],
                                 created_at=r["created_at"]) for r in rows]


