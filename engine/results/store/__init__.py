"""The results store: runs, sweeps, power traces and comparisons in one SQLite file.

    with Store() as store:                        # data_dir()/results.sqlite, or $SLM_DVFS_DB
        run = store.start_run(device=DeviceRecord.from_identity(ident), workload=wl,
                              policy="maxn", source=Source.TWIN, seed=0, steps=100)
        ...
        store.finish_run(run, RunTotals.from_window(window, samples=3200, steps=100),
                         metrics={"accuracy": 0.91})          # the recorder's totals()

Every recorded item is its own committed transaction, so a crash loses at most the item
in progress. The file is in WAL mode: the TUI may read while a run writes, from another
thread or process. Every row carries its Source (measured, twin, predicted).

One `Store`, its tables by module:
- `db`: the file (checks, migrations, WAL), transactions, and the devices and workloads tables
  every other row refers to;
- `runs`: runs from start to finish, their power traces, comparisons; abandoned runs and sweeps;
- `sweep_tables`: sweeps and their points, measured elsewhere ones included (`FinishedSweep`);
- `run_import`: runs recorded in another store, carried into this one (`export_runs`, `import_runs`).
"""

from __future__ import annotations

import logging
import os

from engine.results.errors import CorruptStoreError, StoreError, StoreVersionError, UnknownRecordError
from engine.results.migrations import SCHEMA_VERSION
from engine.results.records import (
    ComparisonRecord,
    DeviceRecord,
    RunRecord,
    SweepPoint,
    SweepRecord,
    WorkloadRecord,
    normalize_setting,
    setting_key,
    trace_features,
)
from engine.results.store.db import default_db_path
from engine.results.store.run_import import RunImport
from engine.results.store.runs import RunTables
from engine.results.store.sweep_tables import SweepTables
from engine.results.traces import downsample

# The records and errors are re-exported: `from engine.results.store import RunRecord, Store` is the
# usual way in, and callers need not know which module of the results package holds what.
__all__ = [
    "SCHEMA_VERSION", "ComparisonRecord", "CorruptStoreError", "DeviceRecord", "RunRecord", "Store",
    "StoreError", "StoreVersionError", "SweepPoint", "SweepRecord", "UnknownRecordError",
    "WorkloadRecord", "default_db_path", "downsample", "normalize_setting", "setting_key",
    "trace_features",
]

log = logging.getLogger(__name__)


class Store(RunTables, SweepTables, RunImport):
    """One results database, its tables from the modules above. Use as a context manager."""

    def __init__(self, path: str | os.PathLike[str] | None = None, create: bool = True) -> None:
        super().__init__(path, create)
        try:
            self.reap_abandoned()
        except StoreError as exc:  # e.g. a read-only file: the runs stay `running` for now
            log.info("cannot mark abandoned runs in %s: %s", self.path, exc.what)
