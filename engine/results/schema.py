"""The results store's data model: its records, how they map to rows, the DDL, migrations, file checks.

Records are frozen dataclasses; every one carries its Source (measured, twin, predicted).
The schema version lives in `PRAGMA user_version`; `PRAGMA application_id` marks the file
as ours. Migration N takes a database from version N-1 to N; they run in order, all in
one exclusive transaction, so a failed upgrade leaves the file as it was.
A file newer than this code, a file that is not SQLite, a truncated one and somebody
else's SQLite database are all refused: the store never recreates or rewrites such a file.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from dataclasses import dataclass, field, fields
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence, Union

from engine.core.constants import MODES
from engine.device.base import DeviceIdentity
from engine.core.errors import ConfigError, SlmDvfsError
from engine.device.power import PowerSample
from engine.core.provenance import Source
from engine.workload.resolve import workload_key

log = logging.getLogger(__name__)

APPLICATION_ID = 0x534C4D44  # "SLMD"
RUN_STATUSES = ("running", "finished", "failed", "cancelled")
SETTING_KEYS = ("gpu_hz", "cpu_hz", "emc_hz", "nvpmodel")
_SETTING_ALIASES = {"nvpmodel_id": "nvpmodel", "mode": "nvpmodel"}
_MAGIC = b"SQLite format 3\x00"
_SOURCES = "('measured', 'twin', 'predicted')"
_STATUSES = "('running', 'finished', 'failed', 'cancelled')"


class StoreError(SlmDvfsError):
    """The results database cannot be used as asked."""


class CorruptStoreError(StoreError):
    """The database file is damaged or is not a database at all."""

    def __init__(self, path: Path, detail: str) -> None:
        super().__init__(
            f"the results database {path} is unreadable: {detail}",
            f"move it aside (e.g. `mv {path} {path}.broken`) and slm-dvfs starts a new one there; "
            "nothing was deleted. Or point --db / $SLM_DVFS_DB at another file",
        )
        self.path = path


class StoreVersionError(StoreError):
    """The database was written by a newer slm-dvfs."""


class UnknownRecordError(StoreError):
    """An id that the database does not hold."""


# --------------------------------------------------------------------------- values
def as_source(value: Source | str) -> Source:
    try:
        return Source(value)
    except ValueError:
        raise ConfigError(f"unknown source {value!r}", "use measured, twin or predicted") from None


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def timestamp(value: datetime | str | None) -> str:
    if value is None:
        return utc_now()
    return value.isoformat(timespec="seconds") if isinstance(value, datetime) else str(value)


def json_text(value: Any) -> str | None:
    return None if value is None else json.dumps(value, sort_keys=True, default=json_default)


def json_default(value: Any) -> Any:
    if isinstance(value, Mapping):
        return dict(value)
    if hasattr(value, "to_json"):
        return value.to_json()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def from_json_text(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def normalize_setting(setting: Any) -> dict[str, Any]:
    """A DVFS setting as stored: gpu_hz, cpu_hz, emc_hz (None = governor) and nvpmodel,
    plus any other keys it carries. Accepts a mapping, or anything with to_json()."""
    if setting is None:
        data: Mapping[str, Any] = {}
    elif isinstance(setting, Mapping):
        data = setting
    elif hasattr(setting, "to_json"):
        data = setting.to_json()
    else:
        raise ConfigError(f"a DVFS setting must be a mapping, not {type(setting).__name__}",
                          "pass e.g. {'gpu_hz': 816000000, 'nvpmodel': 0}")
    out: dict[str, Any] = {k: None for k in SETTING_KEYS}
    for key, value in data.items():
        key = _SETTING_ALIASES.get(key, key)
        if key in SETTING_KEYS and value is not None:
            try:
                value = int(value)
            except (TypeError, ValueError):
                raise ConfigError(f"setting {key} must be a whole number, not {value!r}",
                                  "frequencies are in Hz, the power mode is an nvpmodel id") from None
        out[key] = value
    return out


def setting_key(setting: Any) -> str:
    """The canonical text of a setting: equal settings have equal keys (how sweeps resume)."""
    return json.dumps(normalize_setting(setting), sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class DeviceRecord:
    board: str
    module: str
    l4t: str | None = None
    jetpack: str | None = None
    profile: str | None = None
    is_twin: bool = False

    @property
    def source(self) -> Source:
        return Source.TWIN if self.is_twin else Source.MEASURED

    @classmethod
    def from_identity(cls, ident: DeviceIdentity) -> "DeviceRecord":
        return cls(ident.board, ident.module, ident.l4t, ident.jetpack, ident.profile, ident.is_twin)

    def to_json(self) -> dict[str, Any]:
        return {"board": self.board, "module": self.module, "l4t": self.l4t, "jetpack": self.jetpack,
                "profile": self.profile, "is_twin": self.is_twin, "source": self.source.value}


@dataclass(frozen=True)
class WorkloadRecord:
    model: str
    task: str
    batch_size: int
    seq_len: int
    precision: str
    mode: str = "full"  # "full" | "bitfit"
    family: str | None = None
    params: int | None = None
    data_source: str | None = None
    features: Mapping[str, float] = field(default_factory=dict)  # flops, bytes, kernels, intensity
    # Trace features are documented estimates from a meta-tensor trace, not measurements.
    source: Source = Source.PREDICTED

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ConfigError(f"unknown training mode {self.mode!r}", f"use one of {', '.join(MODES)}")
        object.__setattr__(self, "source", as_source(self.source))

    @property
    def key(self) -> str:
        return workload_key(self.model, self.task, self.batch_size, self.seq_len, self.precision, self.mode)

    @classmethod
    def from_trace(cls, trace: Any, task: str, mode: str = "full", family: str | None = None,
                   data_source: str | None = None) -> "WorkloadRecord":
        """From a StepTrace: its shape and its totals as features."""
        return cls(
            model=trace.model, task=task, batch_size=trace.batch_size, seq_len=trace.seq_len,
            precision=trace.precision, mode=mode, family=family, params=trace.params or None,
            data_source=data_source, features=trace_features(trace),
        )

    @classmethod
    def from_workload(cls, workload: Any, data_source: str | None = None) -> "WorkloadRecord":
        """From a resolved engine.workload.resolve.Workload (trace totals as features, labelled predicted)."""
        return cls.from_trace(workload.trace, workload.task, mode=workload.mode, family=workload.family,
                              data_source=data_source)

    def to_json(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out.update(features=dict(self.features), source=self.source.value, key=self.key)
        return out


def trace_features(trace: Any) -> dict[str, float]:
    """The selector's workload features of a StepTrace."""
    return {
        "flops": float(trace.flops),
        "bytes": float(trace.bytes),
        "kernels": float(trace.kernels),
        "arithmetic_intensity": float(trace.arithmetic_intensity),
        "host_cycles": float(trace.host_cycles),
    }


@dataclass(frozen=True)
class RunRecord:
    id: int
    policy: str
    status: str
    source: Source
    started_at: str
    device_id: int | None = None
    workload_id: int | None = None
    objective: str | None = None
    setting: Mapping[str, Any] | None = None  # None: not known (e.g. an imported log)
    seed: int | None = None
    steps: int | None = None
    samples: int | None = None
    finished_at: str | None = None
    wall_s: float | None = None  # host wall-clock time
    time_s: float | None = None  # time on the device (measured, or the twin's)
    energy_j: float | None = None  # over `rails`
    rail_energy_j: Mapping[str, float] = field(default_factory=dict)
    rails: str | None = None  # the preset the total is over, e.g. "gpu+cpu"
    avg_power_w: float | None = None
    samples_per_s: float | None = None
    joules_per_sample: float | None = None
    metrics: Mapping[str, Any] = field(default_factory=dict)
    weights: str | None = None  # "pretrained" | "random"
    synthetic: bool | None = None
    label: str | None = None
    notes: str | None = None
    error: str | None = None
    device: DeviceRecord | None = None
    workload: WorkloadRecord | None = None

    @property
    def model(self) -> str | None:
        return self.workload.model if self.workload else None

    @property
    def task(self) -> str | None:
        return self.workload.task if self.workload else None

    def to_json(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out.update(
            source=self.source.value,
            setting=None if self.setting is None else dict(self.setting),
            rail_energy_j=dict(self.rail_energy_j),
            metrics=dict(self.metrics),
            device=self.device.to_json() if self.device else None,
            workload=self.workload.to_json() if self.workload else None,
        )
        return out


@dataclass(frozen=True)
class SweepRecord:
    id: int
    device_id: int
    workload_id: int
    space: Mapping[str, Any]
    warmup_steps: int
    steps: int
    repeats: int
    status: str
    source: Source
    created_at: str
    finished_at: str | None = None
    label: str | None = None


@dataclass(frozen=True)
class SweepPoint:
    sweep_id: int
    setting: Mapping[str, Any]
    repeat: int
    time_s: float
    energy_j: float  # total over the sweep's rails
    samples: int
    rail_energy_j: Mapping[str, float] = field(default_factory=dict)
    avg_power_w: float | None = None  # None: energy_j / time_s
    source: Source | None = None  # None: the sweep's
    id: int | None = None
    created_at: str | None = None

    @property
    def key(self) -> tuple[str, int]:
        """What `completed_points` holds for this point."""
        return setting_key(self.setting), self.repeat


@dataclass(frozen=True)
class ComparisonRecord:
    run_id: int
    baseline_run_id: int
    saving_pct: float  # energy saved against the baseline (negative: it cost more)
    slowdown_pct: float  # time added against the baseline (negative: faster)
    source: Source
    rails: str | None = None
    id: int | None = None
    created_at: str | None = None

    def to_json(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["source"] = self.source.value
        return out


# --------------------------------------------------------------------------- rows -> records
def sample_from_row(row: Any) -> PowerSample:
    return PowerSample(float(row[0]), json.loads(row[1]))


def device_from_row(r: sqlite3.Row, prefix: str = "") -> DeviceRecord:
    return DeviceRecord(board=r[prefix + "board"], module=r[prefix + "module"], l4t=r[prefix + "l4t"],
                        jetpack=r[prefix + "jetpack"], profile=r[prefix + "profile"],
                        is_twin=bool(r[prefix + "is_twin"]))


def workload_from_row(r: sqlite3.Row, prefix: str = "") -> WorkloadRecord:
    return WorkloadRecord(
        model=r[prefix + "model"], task=r[prefix + "task"], batch_size=r[prefix + "batch_size"],
        seq_len=r[prefix + "seq_len"], precision=r[prefix + "precision"], mode=r[prefix + "mode"],
        family=r[prefix + "family"], params=r[prefix + "params"], data_source=r[prefix + "data_source"],
        features=json.loads(r[prefix + "features"]), source=Source(r[prefix + "source"]),
    )


def run_from_row(r: sqlite3.Row) -> RunRecord:
    synthetic = r["synthetic"]
    return RunRecord(
        id=r["id"], policy=r["policy"], status=r["status"], source=Source(r["source"]), started_at=r["started_at"],
        device_id=r["device_id"], workload_id=r["workload_id"], objective=r["objective"],
        setting=from_json_text(r["setting"]), seed=r["seed"], steps=r["steps"], samples=r["samples"],
        finished_at=r["finished_at"], wall_s=r["wall_s"], time_s=r["time_s"], energy_j=r["energy_j"],
        rail_energy_j=from_json_text(r["rail_energy_j"]) or {}, rails=r["rails"], avg_power_w=r["avg_power_w"],
        samples_per_s=r["samples_per_s"], joules_per_sample=r["joules_per_sample"],
        metrics=from_json_text(r["metrics"]) or {}, weights=r["weights"],
        synthetic=None if synthetic is None else bool(synthetic), label=r["label"], notes=r["notes"],
        error=r["error"],
        device=device_from_row(r, "d_") if r["device_id"] is not None else None,
        workload=workload_from_row(r, "w_") if r["workload_id"] is not None else None,
    )


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

Migration = Union[Sequence[str], Callable[[sqlite3.Connection], None]]
MIGRATIONS: tuple[Migration, ...] = (_V1, _V2)
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
