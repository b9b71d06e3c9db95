"""The sweep half of the results store: sweeps (resumable point by point) and their points."""

from __future__ import annotations

import json
import logging
import os
import re
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from engine.core.errors import ConfigError
from engine.core.provenance import Source, parse_source
from engine.core.text import clean_text, shown
from engine.results.store.db import Database, SqlValue, inserted_id
from engine.results.errors import StoreError, SweepInUseError, UnknownRecordError, stored_choice
from engine.results.records import (
    RUN_STATUSES,
    DeviceRecord,
    RunStatus,
    SweepPoint,
    SweepRecord,
    WorkloadRecord,
    as_source,
    json_default,
    json_text,
    normalize_setting,
    parse_status,
    setting_key,
    utc_now,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FinishedSweep:
    """A whole sweep to store at once (Store.add_finished_sweeps): its points' sweep_id and device_id
    are ignored (they were measured on the device the sweeps are stored under)."""

    workload: WorkloadRecord | int
    space: Mapping[str, object]
    points: Sequence[SweepPoint]
    repeats: int
    source: Source = Source.MEASURED
    label: str | None = None
    warmup_steps: int = 0  # not known for measurements taken elsewhere
    steps: int = 0


class SweepTables(Database):
    """Sweeps and their points, over the database's devices and workloads."""

    def find_or_create_sweep(
        self,
        *,
        device: DeviceRecord | int,
        workload: WorkloadRecord | int,
        space: Mapping[str, object],
        warmup_steps: int,
        steps: int,
        repeats: int,
        source: Source | str,
        label: str | None = None,
        scope: str = "board",
        planned: int | None = None,
        owner_lock: str | None = None,
    ) -> SweepRecord:
        """The newest unfinished sweep with these parameters (marked running again), or a new one.

        `scope` "board" resumes this board's sweeps only; "module" any board's of the same module
        (a fleet spreads a sweep over its boards: each point names the board that measured it).
        `planned`: the points it plans (settings x repeats). `owner_lock`: the session lock of the process
        that measures it (engine.device.guard.lock.session_lock), so that the next store open marks the
        sweep abandoned once that process is gone; without one (a library caller) it is left running.
        A running sweep whose owner lock is held (a live process measures it, this one included) is not
        taken over: SweepInUseError. One with no owner recorded cannot be told alive and is resumed."""
        src = as_source(source)
        space_text = json.dumps(space, sort_keys=True, separators=(",", ":"), default=json_default)
        with self._tx("starting a sweep") as conn:
            device_id = self._ref(conn, device, "device")
            workload_id = self._ref(conn, workload, "workload")
            # This board's, or one stored before its serial was (schema v9): it may be this board's.
            ids = self._device_ids(lambda q, p: conn.execute(q, p).fetchall(), device_id, scope)
            row = conn.execute(
                f"SELECT id, status, owner_lock FROM sweeps WHERE device_id IN ({', '.join('?' * len(ids))}) "
                "AND workload_id = ? AND space = ? AND warmup_steps = ? AND steps = ? AND repeats = ? AND source = ? "
                "AND status != 'finished' ORDER BY id DESC LIMIT 1",
                (*ids, workload_id, space_text, warmup_steps, steps, repeats, src.value),
            ).fetchone()
            if row is not None:
                sweep_id = int(row[0])
                if row[1] == "running" and _owner_alive(row[2]):
                    # Resuming it would overwrite its owner: were we to die, its live sweep would be reaped.
                    raise _in_use(sweep_id, str(row[2]), mine=row[2] == owner_lock)
                conn.execute("UPDATE sweeps SET status = 'running', finished_at = NULL, owner_lock = ?, "
                             "planned = IFNULL(?, planned) WHERE id = ?", (owner_lock, planned, sweep_id))
                log.info("resuming sweep %d", sweep_id)
            else:
                sweep_id = inserted_id(conn.execute(
                    "INSERT INTO sweeps (device_id, workload_id, space, warmup_steps, steps, repeats, status, "
                    "source, label, created_at, owner_lock, planned) VALUES (?, ?, ?, ?, ?, ?, 'running', ?, ?, ?, ?, ?)",
                    (device_id, workload_id, space_text, warmup_steps, steps, repeats, src.value, label, utc_now(),
                     owner_lock, planned),
                ))
        return self.get_sweep(sweep_id)

    def _unknown_sweep(self, sweep_id: int) -> UnknownRecordError:
        return UnknownRecordError(f"no sweep with id {sweep_id} in {self.path}",
                                  "`slm-dvfs sweeps` lists the stored sweeps and their ids (sN)")

    def sweeps_with(self, key: str, value: object) -> list[SweepRecord]:
        """The sweeps whose space holds `key` = `value` (e.g. an imported file's sha256), oldest first."""
        return [s for s in reversed(self.list_sweeps()) if s.space.get(key) == value]

    def get_sweep(self, sweep_id: int) -> SweepRecord:
        rows = self._query("SELECT * FROM sweeps WHERE id = ?", (sweep_id,))
        if not rows:
            raise self._unknown_sweep(sweep_id)
        return _sweep_from_row(rows[0])

    def list_sweeps(self, status: RunStatus | None = None, *, limit: int | None = None,
                    before: int | None = None) -> list[SweepRecord]:
        """Sweeps, newest first: of `status` if given, at most `limit`, with ids below `before` (the
        next page after a listing's last id), in one query."""
        where: list[str] = []
        params: list[SqlValue] = []
        if status is not None:
            where.append("status = ?")
            params.append(status)
        if before is not None:
            where.append("id < ?")
            params.append(int(before))
        sql = "SELECT * FROM sweeps" + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY id DESC"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(int(limit))
        return [_sweep_from_row(r) for r in self._query(sql, params)]

    def stored_point_counts(self, sweep_ids: Sequence[int] | None = None) -> dict[int, int]:
        """The points stored of each sweep that has any (of `sweep_ids` only, if given: a page's), in one
        query (a listing's `done`)."""
        if sweep_ids is None:
            rows = self._query("SELECT sweep_id, count(*) FROM sweep_points GROUP BY sweep_id")
        else:
            ids = [int(i) for i in sweep_ids]
            if not ids:
                return {}
            rows = self._query(f"SELECT sweep_id, count(*) FROM sweep_points WHERE sweep_id IN "
                               f"({', '.join('?' * len(ids))}) GROUP BY sweep_id", ids)
        return {int(r[0]): int(r[1]) for r in rows}

    def finish_sweep(self, sweep_id: int, status: RunStatus = "finished") -> None:
        if status not in RUN_STATUSES[1:]:
            raise ConfigError(f"a sweep cannot end as {status!r}", "use finished, failed or cancelled")
        with self._tx("finishing a sweep") as conn:
            if conn.execute("UPDATE sweeps SET status = ?, finished_at = ? WHERE id = ?",
                            (status, utc_now(), sweep_id)).rowcount == 0:
                raise self._unknown_sweep(sweep_id)

    def add_point(self, point: SweepPoint) -> int:
        """Record one measured sweep point, committed on its own; returns its id."""
        return self.add_points([point])[0]

    def add_points(self, points: Sequence[SweepPoint]) -> list[int]:
        """Record sweep points in one transaction (all of them or none: a fast sweep's, computed in a
        blink, are one commit, not one fsync each); returns their ids, in order."""
        sources: dict[int, Source] = {}
        for point in points:  # checked before anything is written
            if point.sweep_id not in sources:
                sources[point.sweep_id] = self.get_sweep(point.sweep_id).source
            src = sources[point.sweep_id] if point.source is None else as_source(point.source)
            if src != sources[point.sweep_id]:
                raise ConfigError(f"sweep {point.sweep_id} is a {sources[point.sweep_id].value} sweep; this point is "
                                  f"{src.value}", "record points with the sweep's source")
        if not points:
            return []
        with self._tx("recording sweep points") as conn:
            return [self._insert_point(conn, p, p.sweep_id, sources[p.sweep_id], p.device_id) for p in points]

    def _insert_point(self, conn: sqlite3.Connection, point: SweepPoint, sweep_id: int, src: Source,
                      device_id: int | None = None) -> int:
        setting = normalize_setting(point.setting)
        avg = point.avg_power_w
        if avg is None and point.time_s is not None and point.time_s > 0:
            avg = point.energy_j / point.time_s
        key = setting_key(setting)
        try:
            cur = conn.execute(
                "INSERT INTO sweep_points (sweep_id, setting, gpu_hz, cpu_hz, emc_hz, nvpmodel, repeat, time_s, "
                "energy_j, rail_energy_j, avg_power_w, samples, source, created_at, device_id) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (sweep_id, key, setting["gpu_hz"], setting["cpu_hz"], setting["emc_hz"],
                 setting["nvpmodel"], point.repeat, point.time_s, point.energy_j,
                 json_text(dict(point.rail_energy_j)), avg, point.samples, src.value, utc_now(), device_id),
            )
        except sqlite3.IntegrityError:
            raise StoreError(f"sweep {sweep_id} already holds repeat {point.repeat} of {key}",
                             "skip the points completed_points() lists when resuming") from None
        return inserted_id(cur)

    def add_finished_sweeps(self, device: DeviceRecord | int, sweeps: Sequence[FinishedSweep], *,
                            replace: Sequence[int] = ()) -> list[int]:
        """Store whole sweeps measured elsewhere (an imported file), each finished, in one transaction:
        all of them with all their points, or nothing; the sweeps `replace` names (an earlier import
        of the same file) are deleted in the same transaction. Returns the new sweep ids, in order."""
        ids: list[int] = []
        with self._tx("storing imported sweeps") as conn:
            for old in replace:  # their points go with them (ON DELETE CASCADE)
                if conn.execute("DELETE FROM sweeps WHERE id = ?", (int(old),)).rowcount == 0:
                    raise self._unknown_sweep(int(old))
            device_id = self._ref(conn, device, "device")
            for sw in sweeps:
                src = as_source(sw.source)
                workload_id = self._ref(conn, sw.workload, "workload")
                space_text = json.dumps(sw.space, sort_keys=True, separators=(",", ":"), default=json_default)
                now = utc_now()
                sweep_id = inserted_id(conn.execute(
                    "INSERT INTO sweeps (device_id, workload_id, space, warmup_steps, steps, repeats, status, "
                    "source, label, created_at, finished_at, planned) VALUES (?, ?, ?, ?, ?, ?, 'finished', ?, ?, ?, "
                    "?, ?)",
                    (device_id, workload_id, space_text, sw.warmup_steps, sw.steps, sw.repeats, src.value, sw.label,
                     now, now, len(sw.points)),
                ))
                for point in sw.points:
                    self._insert_point(conn, point, sweep_id, src)
                ids.append(sweep_id)
        return ids

    def sweep_points(self, sweep_id: int) -> list[SweepPoint]:
        rows = self._query("SELECT * FROM sweep_points WHERE sweep_id = ? ORDER BY id", (sweep_id,))
        return [
            SweepPoint(
                sweep_id=r["sweep_id"], setting=json.loads(r["setting"]), repeat=r["repeat"], time_s=r["time_s"],
                energy_j=r["energy_j"], samples=r["samples"], rail_energy_j=json.loads(r["rail_energy_j"]),
                avg_power_w=r["avg_power_w"], id=r["id"], created_at=r["created_at"], device_id=r["device_id"],
                source=stored_choice(parse_source, r["source"], f"sweep s{r['sweep_id']}'s point {r['id']}", "source"),
            )
            for r in rows
        ]

    def sweep_boards(self, sweep_id: int) -> tuple[DeviceRecord, ...]:
        """The boards that measured the sweep's points, the sweep's own device first (one for a local sweep)."""
        sweep = self.get_sweep(sweep_id)
        rows = self._query("SELECT DISTINCT IFNULL(device_id, ?) FROM sweep_points WHERE sweep_id = ?",
                           (sweep.device_id, sweep_id))
        ids = [sweep.device_id] + sorted(int(r[0]) for r in rows if int(r[0]) != sweep.device_id)
        return tuple(self.get_device(i) for i in ids)

    def completed_points(self, sweep_id: int) -> frozenset[tuple[str, int]]:
        """(setting_key(setting), repeat) of every recorded point: what a resumed sweep skips."""
        self.get_sweep(sweep_id)
        rows = self._query("SELECT setting, repeat FROM sweep_points WHERE sweep_id = ?", (sweep_id,))
        return frozenset((r[0], int(r[1])) for r in rows)



def _sweep_from_row(r: sqlite3.Row) -> SweepRecord:
    return SweepRecord(
        id=r["id"], device_id=r["device_id"], workload_id=r["workload_id"], space=json.loads(r["space"]),
        warmup_steps=r["warmup_steps"], steps=r["steps"], repeats=r["repeats"],
        status=stored_choice(parse_status, r["status"], f"sweep s{r['id']}", "status"),
        source=stored_choice(parse_source, r["source"], f"sweep s{r['id']}", "source"),
        created_at=r["created_at"], finished_at=r["finished_at"], label=r["label"],
        planned=r["planned"],
    )


def _owner_alive(owner_lock: str | None) -> bool:
    """Whether a running sweep's owner is known and still holds its session lock (a path from the
    database: engine.device.guard.lock.session_alive trusts only its own session files)."""
    from engine.device.guard.lock import session_alive

    return bool(owner_lock) and session_alive(Path(str(owner_lock)))


_SESSION_PID = re.compile(r"([0-9]+)-[0-9]+\.lock")  # engine.device.guard.lock.session_lock's file names


def _in_use(sweep_id: int, owner_lock: str, *, mine: bool) -> SweepInUseError:
    """The refusal to resume a sweep a live process is measuring, naming that process and its lock."""
    from engine.device.guard.lock import lock_owner

    path = Path(owner_lock)
    if mine:
        who = f"this process (pid {os.getpid()})"
    elif (m := _SESSION_PID.fullmatch(path.name)) and path.parent.name == "sessions":
        _pid, command = lock_owner(path)  # the file holds the pid and command line it was taken by
        who = f"process {m.group(1)}" + (f" ({shown(command)})" if command else "")
    else:
        who = "a process slm-dvfs cannot tell is gone"
    return SweepInUseError(
        f"sweep s{sweep_id}, with the same workload, space, steps and repeats, is running in {who}, which holds "
        f"its session lock {clean_text(owner_lock)}",
        "let that sweep finish, or stop it (x in the app, ctrl+c in a terminal); its stored points are kept and "
        f"the same sweep then resumes s{sweep_id}. `slm-dvfs sweeps` lists it as running",
        sweep_id, owner_lock)
