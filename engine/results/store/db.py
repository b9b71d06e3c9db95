"""The SQLite file under the results store: opening it (checks, migrations, WAL), transactions
and queries, and the devices and workloads that every run and sweep refers to.

Every recorded item is its own committed transaction, so a crash loses at most the item
in progress (a fast sweep's points are one item: engine.run.sweep). The file is in WAL mode
with synchronous=NORMAL: the TUI may read while a run writes, from another thread or process,
and a power cut may lose the last transactions committed before it, never the file.

A store's cost does not grow with its size at open: the full-file check (quick_check) runs only
when a writer did not close cleanly. Each connection that writes holds a marker file, flocked,
in `<file>.writers/`, removed when it closes: a marker whose lock is free is a writer that died.
`slm-dvfs check` runs SQLite's full integrity check whenever asked.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import time
import sqlite3
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator, Mapping, Sequence, TypeVar, overload

from engine.core import paths
from engine.core.errors import ConfigError, SlmDvfsError
from engine.results import migrations
from engine.results.errors import CorruptStoreError, StoreError, UnknownRecordError
from engine.results.records import (
    DeviceRecord,
    WorkloadRecord,
    device_from_row,
    json_text,
    utc_now,
    workload_from_row,
)

log = logging.getLogger(__name__)

_D = TypeVar("_D", bound="Database")
# What a query binds: SQLite's column types.
SqlValue = int | float | str | bytes | None
# A query run on the store's connection or inside a transaction: rows for sql and its parameters.
_Query = Callable[[str, Sequence[SqlValue]], Sequence[sqlite3.Row]]


def inserted_id(cur: sqlite3.Cursor) -> int:
    """The id of the row an INSERT on `cur` made (sqlite3 sets it after every INSERT into a rowid table)."""
    if cur.lastrowid is None:
        raise StoreError("SQLite returned no id for a row just inserted", "report this: the store's tables have rowids")
    return cur.lastrowid


WRITERS_SUFFIX = ".writers"
# A marker being made: created and flocked under this name, then renamed into place, so that no open sees
# a marker whose lock is free only because its live writer has not taken it yet. Its writer has written
# nothing yet, so stale_writers ignores it.
PENDING_PREFIX = "."


def writers_dir(path: Path) -> Path:
    """The folder of a store's writer markers (one per open connection that writes; module docstring)."""
    return path.with_name(path.name + WRITERS_SUFFIX)


def stale_writers(path: Path) -> list[Path] | None:
    """The markers of writers of the store at `path` that died without closing it (their flock is
    free); None when the store keeps no markers (made before they were kept, or never written)."""
    folder = writers_dir(path)
    try:
        names = sorted(os.listdir(folder))
    except FileNotFoundError:
        return None
    except OSError:
        return None  # cannot tell: check
    stale = []
    for name in names:
        if name.startswith(PENDING_PREFIX):
            continue  # not yet locked, nothing yet written (PENDING_PREFIX)
        marker = folder / name
        try:
            fd = os.open(marker, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except FileNotFoundError:
            continue  # closed cleanly meanwhile
        except OSError:
            stale.append(marker)  # cannot tell whether its writer lives: check
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            stale.append(marker)  # free: its writer is gone (the kernel drops a dead process's locks)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                stale.append(marker)
        finally:
            os.close(fd)
    return stale


def _sync_folder(folder: Path, path: Path) -> None:
    """fsync a folder, so that a marker just renamed into it survives a power cut (its writer's crash is
    then still seen). A file system that cannot is said, not refused: the file itself is no less safe."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        log.warning("%s: cannot sync %s (%s): a power cut may lose a writer's marker, and with it the check "
                    "at the next open (`slm-dvfs check` still runs it)", path, folder, exc.strerror)


@dataclass(frozen=True)
class StoreCheck:
    """What `Database.check` found in a whole file: its size and rows, and the writers that had died."""

    path: Path
    size_bytes: int
    runs: int
    sweeps: int
    sweep_points: int
    power_samples: int
    writers_died: int


def default_db_path() -> Path:
    """$SLM_DVFS_DB, else data_dir()/results.sqlite."""
    env = os.environ.get(paths.ENV_PREFIX + "DB")
    return Path(env) if env else paths.data_dir() / "results.sqlite"


class Database:
    """One results database file. Thread-safe (one connection behind a lock); use as a context manager."""

    def __init__(self, path: str | os.PathLike[str] | None = None, create: bool = True) -> None:
        self.path = Path(path) if path is not None else default_db_path()
        self._lock = threading.RLock()
        self._marker: tuple[Path, int, int] | None = None  # this connection's writer marker and its pid, once it writes
        self.open_checked = False  # whether the open ran quick_check (a writer had not closed cleanly)
        self.writers_died = 0  # the writers the open found dead (their markers left), checked for
        self._existed = self.path.exists()
        if not self._existed:
            if not create:
                raise StoreError(f"there is no results database at {self.path}",
                                 "run an experiment or `slm-dvfs import-tegrastats` first, or pass --db")
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StoreError(f"cannot create the folder {self.path.parent}: {exc.strerror}",
                                 "pass a writable --db path or set $SLM_DVFS_DB") from None
        migrations.check_file(self.path)
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
            self._drop_marker()
            raise

    def _setup(self) -> None:
        conn = self._conn
        try:
            conn.execute("PRAGMA foreign_keys = ON")
            has_data = self._existed and self.path.stat().st_size > 0
            stale = stale_writers(self.path) if has_data else []
            if stale is None or stale:
                # A writer died mid-way (or the store predates the markers): a damaged page is refused
                # here, never served. After a clean close the file is as SQLite committed it.
                self._quick_check()
                self.open_checked = True
                self.writers_died = len(stale or [])
            # Somebody else's file, or a newer one, is refused before anything is left beside it.
            version = migrations.check_ownership(conn, self.path)
            if self.open_checked:
                self._forget_writers(stale or [])
            if not has_data or version != migrations.SCHEMA_VERSION:
                self._mark_writing()
            # migrations.check_file() caught foreign and truncated files; check() is the full scan.
            migrations.migrate(conn, self.path)
            if str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower() != "wal":
                self._mark_writing()  # switching the mode writes the file's header: once, it persists
                mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
                if str(mode).lower() != "wal":
                    log.warning("%s: WAL mode refused by the file system (%s); readers may wait on writers",
                                self.path, mode)
            # NORMAL in WAL mode: a commit is atomic and durable against a crash of the process; a power
            # cut may lose the last transactions committed (never a damaged file), at no fsync per item.
            conn.execute("PRAGMA synchronous = NORMAL")
        except sqlite3.Error as exc:
            raise self._wrap(exc, "open") from None

    def _mark_writing(self) -> None:
        """Leave this connection's marker (flocked until it closes) before its first write, so that a
        crash before close is seen by the next open. A store whose folder takes no marker takes no write
        either (SQLite's WAL needs the same folder): that is said here, with the folder."""
        if self._marker is not None:
            return
        folder = writers_dir(self.path)
        name = f"{os.getpid()}-{time.time_ns()}-{id(self):x}"
        marker, pending = folder / name, folder / (PENDING_PREFIX + name)
        fd = -1
        try:
            folder.mkdir(exist_ok=True)
            fd = os.open(pending, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            fcntl.flock(fd, fcntl.LOCK_EX)
            os.rename(pending, marker)  # seen under its name only once held (PENDING_PREFIX)
        except OSError as exc:
            if fd >= 0:
                os.close(fd)
                pending.unlink(missing_ok=True)
            raise StoreError(f"cannot write to the results database {self.path}: cannot create {marker} "
                             f"({exc.strerror})", "make its folder writable, or pass another --db; nothing "
                             "of this step was written") from None
        self._marker = (marker, fd, os.getpid())
        _sync_folder(folder, self.path)

    def _drop_marker(self) -> None:
        """Remove this connection's marker (a clean close): unlinked before its lock is let go, so that
        nobody takes a closing writer for a dead one."""
        if self._marker is None:
            return
        marker, fd, pid = self._marker
        self._marker = None
        if pid != os.getpid():  # a forked child closing its copy: the parent still writes
            os.close(fd)
            return
        try:
            marker.unlink(missing_ok=True)
        except OSError as exc:
            log.warning("%s: cannot remove the writer marker %s (%s): the next open checks the file",
                        self.path, marker, exc.strerror)
        os.close(fd)

    def _forget_writers(self, stale: Sequence[Path]) -> None:
        """After a check found the file whole: the dead writers' markers go, and the folder says the
        store keeps markers from now on (a store made before them is checked once)."""
        try:
            writers_dir(self.path).mkdir(exist_ok=True)
            for marker in stale:
                marker.unlink(missing_ok=True)
        except OSError as exc:  # a read-only folder: the next open checks again, which is safe
            log.info("%s: cannot clear writer markers (%s)", self.path, exc.strerror)

    def _quick_check(self) -> None:
        """SQLite's quick_check (pages, records, no index cross-check: a fraction of integrity_check's
        time); raises CorruptStoreError naming what it found."""
        rows = self._conn.execute("PRAGMA quick_check(5)").fetchall()
        problems = [str(r[0]) for r in rows if str(r[0]) != "ok"]
        if problems:
            raise CorruptStoreError(self.path, "damaged pages found on opening: " + "; ".join(problems[:3]))

    def close(self) -> None:
        with self._lock:
            self._conn.close()
            self._drop_marker()

    def __enter__(self: _D) -> _D:
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
                          "check the disk (space, permissions); nothing of this step was written, and what "
                          "the file held before it is intact")

    @contextmanager
    def _tx(self, what: str) -> Iterator[sqlite3.Connection]:
        """One committed transaction: all of it or none of it reaches the file."""
        with self._lock:
            conn = self._conn
            self._mark_writing()
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

    def _query(self, sql: str, params: Sequence[SqlValue] = ()) -> list[sqlite3.Row]:
        with self._lock:
            try:
                return self._conn.execute(sql, tuple(params)).fetchall()
            except sqlite3.Error as exc:
                raise self._wrap(exc, "a query") from None

    def check(self) -> StoreCheck:
        """SQLite's full integrity scan (every page, record and index: seconds on a large file; `slm-dvfs
        check`); raises CorruptStoreError. A whole file clears the markers of writers that died."""
        stale = stale_writers(self.path) or []
        rows = self._query("PRAGMA integrity_check")
        problems = [str(r[0]) for r in rows if str(r[0]) != "ok"]
        if problems:
            raise CorruptStoreError(self.path, "; ".join(problems[:3]))
        self._forget_writers(stale)
        counts = {t: int(self._query(f"SELECT count(*) FROM {t}")[0][0])
                  for t in ("runs", "sweeps", "sweep_points", "power_samples")}
        pages, page_size = (int(self._query(f"PRAGMA {p}")[0][0]) for p in ("page_count", "page_size"))
        return StoreCheck(self.path, pages * page_size, counts["runs"], counts["sweeps"], counts["sweep_points"],
                          counts["power_samples"], self.writers_died + len(stale))

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
            "AND profile IS ? AND is_twin = ? AND serial IS ?",
            (d.board, d.module, d.l4t, d.jetpack, d.profile, int(d.is_twin), d.serial),
        ).fetchone()
        if row:
            return int(row[0])
        cur = conn.execute(
            "INSERT INTO devices (board, module, l4t, jetpack, profile, is_twin, source, created_at, serial) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (d.board, d.module, d.l4t, d.jetpack, d.profile, int(d.is_twin), d.source.value, utc_now(), d.serial),
        )
        return inserted_id(cur)

    def device_ids(self, device_id: int, scope: str = "board") -> tuple[int, ...]:
        """The devices whose results count as this one's, `device_id` first (docs/results.md, "Which board").

        "board": this board, and rows of its identity whose serial is unknown (stored before schema v9,
        or a twin without one): they may be this board. "module": every board of its identity (module,
        board name, L4T, JetPack, profile, board or twin), whatever its serial."""
        return self._device_ids(lambda sql, params: self._query(sql, params), device_id, scope)

    def _device_ids(self, query: _Query, device_id: int, scope: str) -> tuple[int, ...]:
        if scope not in ("board", "module"):
            raise ValueError(f"unknown device scope {scope!r}")
        rows = list(query("SELECT * FROM devices WHERE id = ?", (device_id,)))
        if not rows:
            return (device_id,)
        me = rows[0]
        sql = ("SELECT id FROM devices WHERE board = ? AND module = ? AND l4t IS ? AND jetpack IS ? "
               "AND profile IS ? AND is_twin = ?")
        params: list[SqlValue] = [me["board"], me["module"], me["l4t"], me["jetpack"], me["profile"], me["is_twin"]]
        if scope == "board" and me["serial"] is not None:
            sql += " AND (serial IS NULL OR serial = ?)"
            params.append(me["serial"])
        elif scope == "board":
            sql += " AND serial IS NULL"
        ids = [int(r[0]) for r in query(sql + " ORDER BY id", params)]
        return (device_id, *[i for i in ids if i != device_id])

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
        row = conn.execute("SELECT id, family, params, data_source, features, config FROM workloads WHERE key = ?",
                           (w.key,)).fetchone()
        if row is None:
            cur = conn.execute(
                "INSERT INTO workloads (key, model, family, params, task, batch_size, seq_len, precision, mode, "
                "data_source, features, source, created_at, lora, grad_checkpointing, padding, config) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (w.key, w.model, w.family, w.params, w.task, w.batch_size, w.seq_len, w.precision, w.mode,
                 w.data_source, json_text(dict(w.features)), w.source.value, utc_now(), w.lora_text(),
                 int(w.grad_checkpointing), w.padding, None if w.config is None else json_text(dict(w.config))),
            )
            return inserted_id(cur)
        if w.config is not None:
            stored = json.loads(row["config"]) if row["config"] is not None else _zoo_config(w.model)
            if stored is not None:
                self._check_same_model(w, stored)
        # A row from before schema v11 has no config: the first write that brings one records it, so that
        # later checks, calibrate and select have the model's definition and not only its name.
        conn.execute(
            "UPDATE workloads SET family = IFNULL(family, ?), params = IFNULL(params, ?), "
            "data_source = IFNULL(data_source, ?), features = CASE WHEN features = '{}' THEN ? ELSE features END, "
            "config = IFNULL(config, ?) WHERE id = ?",
            (w.family, w.params, w.data_source, json_text(dict(w.features)),
             None if w.config is None else json_text(dict(w.config)), row["id"]),
        )
        return int(row["id"])

    def _check_same_model(self, w: WorkloadRecord, stored: Mapping[str, object]) -> None:
        """Refuse a workload whose model is not the one stored under its key: a config file's stem names
        the model in the key (`gemma-2b.json` is `gemma-2b`), so another architecture may come by that name."""
        from engine.workload.models import architecture

        if architecture(stored) == architecture(w.config or {}):
            return
        ours, theirs = architecture(w.config or {}), architecture(stored)
        differ = sorted(k for k in set(ours) | set(theirs) if ours.get(k) != theirs.get(k))
        shown = ", ".join(f"{k} {ours.get(k)!r} vs {theirs.get(k)!r}" for k in differ[:3])
        raise ConfigError(
            f"{self.path} already holds results of another model named {w.model!r} for this workload "
            f"({shown}{', ...' if len(differ) > 3 else ''}): its results would be taken for this model's",
            f"give this model a name of its own (the store names a config file's model by its stem, a hub id's by "
            f"its last part: copy it as e.g. my-{w.model}.json, or into a folder my-{w.model}/), or pass another --db")

    def get_workload(self, workload_id: int) -> WorkloadRecord:
        rows = self._query("SELECT * FROM workloads WHERE id = ?", (workload_id,))
        if not rows:
            raise UnknownRecordError(f"no workload with id {workload_id} in {self.path}", "check the id")
        return workload_from_row(rows[0])

    def workload_names(self, workload_ids: Iterable[int]) -> dict[int, str]:
        """`model/task` of each workload id given, in one query (a listing's workload column)."""
        ids = sorted({int(i) for i in workload_ids})
        if not ids:
            return {}
        rows = self._query(f"SELECT id, model, task FROM workloads WHERE id IN ({', '.join('?' * len(ids))})", ids)
        return {int(r["id"]): f"{r['model']}/{r['task']}" for r in rows}

    def find_workload(self, key: str) -> tuple[int, WorkloadRecord] | None:
        rows = self._query("SELECT * FROM workloads WHERE key = ?", (key,))
        return (int(rows[0]["id"]), workload_from_row(rows[0])) if rows else None

    @overload
    def _ref(self, conn: sqlite3.Connection, value: DeviceRecord | WorkloadRecord | int, kind: str) -> int: ...
    @overload
    def _ref(self, conn: sqlite3.Connection, value: DeviceRecord | WorkloadRecord | int | None, kind: str) -> int | None: ...

    def _ref(self, conn: sqlite3.Connection, value: DeviceRecord | WorkloadRecord | int | None, kind: str) -> int | None:
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


def _zoo_config(model: str) -> dict[str, object] | None:
    """The zoo's config of a model of that name, or None (not a zoo name; or a zoo file that cannot be
    read, which must not stop a write): a row stored without its config (before schema v11) is rebuilt
    from its name, so a zoo name stands for the zoo's model, and another model by that name is refused."""
    from engine.workload.zoo import get_entry

    try:
        return dict(get_entry(model).config)
    except SlmDvfsError as exc:
        log.debug("%s: no zoo model to check a stored workload against (%s)", model, exc.what)
        return None
