"""The store's runs: a run's row from start to finish, its power trace, and comparisons between runs;
abandoned runs (and sweeps) reaped when a store opens."""

from __future__ import annotations

import json
import logging
import sqlite3
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Mapping, Sequence

from engine.core.errors import ConfigError
from engine.core.provenance import Source, parse_source
from engine.device.power import PowerSample
from engine.results.compare import Comparison, compare_records
from engine.results.store.db import Database, SqlValue, inserted_id
from engine.results.errors import UnknownRecordError, stored_choice
from engine.results.records import (
    ABANDONED,
    ComparisonRecord,
    RunStatus,
    DeviceRecord,
    RunRecord,
    WorkloadRecord,
    as_source,
    json_text,
    normalize_setting,
    run_from_row,
    sample_from_row,
    timestamp,
    utc_now,
)
from engine.results.totals import RunTotals
from engine.results.traces import DEFAULT_MAX_SAMPLES, downsample

log = logging.getLogger(__name__)


class RunTables(Database):
    """The runs, power_samples and comparisons tables (Store inherits them)."""

    # ------------------------------------------------------------------ runs
    def reap_abandoned(self, run_ids: Sequence[int] = ()) -> list[int]:
        """Mark `abandoned` every running run whose owner is gone (its session lock is free), and the
        runs `run_ids` names (a recovered journal's) if still running; returns their ids. A run
        with no owner (recorded before schema v4, or by a library caller) is left as it is.
        Running sweeps whose owner is gone are marked abandoned too (reap_abandoned_sweeps)."""
        self.reap_abandoned_sweeps()
        rows = self._query("SELECT id, owner_lock FROM runs WHERE status = 'running'")
        named = {int(i) for i in run_ids}
        dead = [int(r["id"]) for r in rows if int(r["id"]) in named or _owner_gone(r["owner_lock"])]
        if not dead:
            return []
        with self._tx("marking abandoned runs") as conn:
            for run_id in dead:
                last = conn.execute("SELECT max(t) FROM power_samples WHERE run_id = ?", (run_id,)).fetchone()[0]
                conn.execute(
                    "UPDATE runs SET status = ?, finished_at = ?, last_sample_t = ?, error = ? "
                    "WHERE id = ? AND status = 'running'",
                    (ABANDONED, utc_now(), last, "abandoned: its process died while it ran (killed, or the "
                     "board lost power); its figures are incomplete", run_id),
                )
        log.warning("marked run(s) %s abandoned: their process died while they ran", ", ".join(map(str, dead)))
        return dead

    def reap_abandoned_sweeps(self) -> list[int]:
        """Mark `abandoned` every running sweep whose owner is gone (schema v11); returns their ids. Its points
        stay: running the same sweep again resumes it. A sweep with no owner (before v11) is left as it is."""
        rows = self._query("SELECT id, owner_lock FROM sweeps WHERE status = 'running'")
        dead = [int(r["id"]) for r in rows if _owner_gone(r["owner_lock"])]
        if not dead:
            return []
        with self._tx("marking abandoned sweeps") as conn:
            for sweep_id in dead:
                conn.execute("UPDATE sweeps SET status = ?, finished_at = ? WHERE id = ? AND status = 'running'",
                             (ABANDONED, utc_now(), sweep_id))
        log.warning("marked sweep(s) %s abandoned: their process died while they ran; the same sweep resumes them",
                    ", ".join(f"s{i}" for i in dead))
        return dead

    def start_run(
        self,
        *,
        policy: str,
        source: Source | str,
        device: DeviceRecord | int | None = None,
        workload: WorkloadRecord | int | None = None,
        objective: str | None = None,
        setting: object = None,
        seed: int | None = None,
        steps: int | None = None,
        rails: str | None = None,
        weights: str | None = None,
        synthetic: bool | None = None,
        data_source: str | None = None,
        simulated: bool = False,
        label: str | None = None,
        notes: str | None = None,
        started_at: datetime | str | None = None,
        owner_lock: str | None = None,
    ) -> int:
        """Record a run as running (committed at once, so a crash leaves a trace); returns its id.
        `simulated`: the twin ran the workload's step trace and nothing was trained. `owner_lock`:
        the recording process's session lock, so the run is marked abandoned once it is free.
        `weights` ("pretrained" | "random"), `synthetic` (generated data) and `data_source` say
        whether its eval metric means anything; None: not known (yet)."""
        src = as_source(source)
        with self._tx("starting a run") as conn:
            device_id = self._ref(conn, device, "device")
            workload_id = self._ref(conn, workload, "workload")
            cur = conn.execute(
                "INSERT INTO runs (device_id, workload_id, policy, objective, setting, seed, steps, status, "
                "started_at, rails, weights, synthetic, data_source, simulated, source, label, notes, owner_lock) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, 'running', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (device_id, workload_id, policy, objective,
                 None if setting is None else json_text(normalize_setting(setting)), seed, steps,
                 timestamp(started_at), rails, weights, None if synthetic is None else int(synthetic),
                 data_source, int(bool(simulated)), src.value, label, notes, owner_lock),
            )
            return inserted_id(cur)

    def finish_run(
        self,
        run_id: int,
        totals: RunTotals | None = None,
        *,
        status: RunStatus = "finished",
        wall_s: float | None = None,
        metrics: Mapping[str, object] | None = None,
        setting: object = None,
        notes: str | None = None,
        finished_at: datetime | str | None = None,
        weights: str | None = None,
        synthetic: bool | None = None,
        data_source: str | None = None,
    ) -> RunRecord:
        """Close a run with its figures, `totals` (engine.results.totals.RunTotals: None when it measured
        nothing, e.g. cancelled before its first step), stored as they are with its power trace in the
        same transaction (as add_power_samples does), so a run is never finished without the trace it
        was given. `weights`, `synthetic`, `data_source`: what the run learnt from, once known (None keeps
        what start_run stored)."""
        if status not in ("finished", "cancelled"):
            raise ConfigError(f"finish_run cannot set status {status!r}", "use finished or cancelled; fail_run for errors")
        run = self.get_run(run_id)
        if totals is not None and totals.source is not None and totals.source != run.source:
            raise ConfigError(
                f"run {run_id} is a {run.source.value} run, but its energy window is {totals.source.value}",
                "record the window with the source the run was started with",
            )
        rails = None if totals is None else totals.rails_preset
        if rails is None and run.rails is None and totals is not None and totals.rails:
            rails = "+".join(totals.rails)
        if totals is not None and totals.samples is None and run.samples is not None:
            totals = replace(totals, samples=run.samples)  # the count the run was started with
        time_s = None if totals is None else totals.time_s
        energy_j = None if totals is None else totals.energy_j
        rail_energy_j = {} if totals is None else dict(totals.rail_energy_j)
        samples = run.samples if totals is None else totals.samples
        steps = None if totals is None else totals.steps
        avg_power_w = None if totals is None else totals.avg_power_w
        samples_per_s = None if totals is None else totals.samples_per_s
        joules_per_sample = None if totals is None else totals.joules_per_sample
        power_samples = () if totals is None else totals.power_samples
        with self._tx("finishing a run") as conn:
            conn.execute(
                "UPDATE runs SET status = ?, finished_at = ?, time_s = ?, energy_j = ?, rail_energy_j = ?, "
                "rails = IFNULL(?, rails), wall_s = ?, samples = ?, steps = IFNULL(?, steps), avg_power_w = ?, "
                "samples_per_s = ?, joules_per_sample = ?, metrics = ?, setting = IFNULL(?, setting), "
                "notes = IFNULL(?, notes), weights = IFNULL(?, weights), synthetic = IFNULL(?, synthetic), "
                "data_source = IFNULL(?, data_source) WHERE id = ?",
                (status, timestamp(finished_at), time_s, energy_j, json_text(dict(rail_energy_j or {})), rails, wall_s,
                 samples, steps, avg_power_w, samples_per_s, joules_per_sample, json_text(dict(metrics or {})),
                 None if setting is None else json_text(normalize_setting(setting)), notes, weights,
                 None if synthetic is None else int(synthetic), data_source, run_id),
            )
            if power_samples:
                self._put_samples(conn, run, power_samples, DEFAULT_MAX_SAMPLES)
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
        "d.profile AS d_profile, d.is_twin AS d_is_twin, d.serial AS d_serial, w.model AS w_model, w.task AS w_task, "
        "w.batch_size AS w_batch_size, w.seq_len AS w_seq_len, w.precision AS w_precision, w.mode AS w_mode, "
        "w.family AS w_family, w.params AS w_params, w.data_source AS w_data_source, w.features AS w_features, "
        "w.source AS w_source, w.lora AS w_lora, w.grad_checkpointing AS w_grad_checkpointing, "
        "w.padding AS w_padding, w.key AS w_key, w.config AS w_config FROM runs r LEFT JOIN devices d ON d.id = r.device_id "
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
        status: RunStatus | None = None,
        workload_key: str | None = None,
        limit: int | None = 50,
        before: int | None = None,
    ) -> list[RunRecord]:
        """Runs matching every filter given, newest first; `before`: ids below it only (the next page
        after a listing's last id)."""
        where: list[str] = []
        params: list[SqlValue] = []
        if before is not None:
            where.append("r.id < ?")
            params.append(int(before))
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
        scope: str = "board",
    ) -> list[RunRecord]:
        """Finished runs of the same workload on the same board (e.g. a MAXN baseline to reuse), newest first;
        `scope="module"`: on any board of its module (Db.device_ids)."""
        runs = [r for d in self.device_ids(device_id, scope)
                for r in self.list_runs(workload_key=workload_key, device_id=d, policy=policy, status="finished",
                                        source=source, limit=None)]
        runs.sort(key=lambda r: r.id, reverse=True)
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
        if not samples:
            return len(self.power_samples(run_id))
        run = self.get_run(run_id)
        with self._tx("storing power samples") as conn:
            return self._put_samples(conn, run, samples, max_samples)

    def _put_samples(self, conn: sqlite3.Connection, run: RunRecord, samples: Sequence[PowerSample],
                     max_samples: int) -> int:
        """Add samples to a run's trace inside a transaction (add_power_samples' rules)."""
        run_id = run.id
        new = sorted(samples, key=lambda s: s.t)
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
            return inserted_id(cur)

    def compare_runs(self, run_id: int, baseline_run_id: int, record: bool = True) -> Comparison:
        """Energy saving and slowdown of a run against its baseline (e.g. MAXN), from their stored
        figures (engine.results.compare.compare_records): the one comparison every client reads,
        recorded (its row's id in `record_id`) unless `record` is False."""
        run, base = self.get_run(run_id), self.get_run(baseline_run_id)
        c = compare_records(run, base)
        if record:
            cid = self.add_comparison(ComparisonRecord(run_id=run.id, baseline_run_id=base.id, saving_pct=c.saving_pct,
                                                       slowdown_pct=c.slowdown_pct, source=c.source, rails=run.rails))
            c = replace(c, record_id=cid)
        return c

    def comparisons_for(self, run_id: int) -> list[ComparisonRecord]:
        """Comparisons naming the run on either side, oldest first."""
        rows = self._query("SELECT * FROM comparisons WHERE run_id = ? OR baseline_run_id = ? ORDER BY id",
                           (run_id, run_id))
        return [ComparisonRecord(run_id=r["run_id"], baseline_run_id=r["baseline_run_id"],
                                 saving_pct=r["saving_pct"], slowdown_pct=r["slowdown_pct"],
                                 source=stored_choice(parse_source, r["source"], f"comparison {r['id']}", "source"),
                                 rails=r["rails"], id=r["id"],
                                 created_at=r["created_at"]) for r in rows]


def _owner_gone(owner_lock: str | None) -> bool:
    """Whether the session that recorded a running item is gone (its lock free); no owner: cannot tell."""
    from engine.device.guard.lock import session_alive

    return bool(owner_lock) and not session_alive(Path(str(owner_lock)))
