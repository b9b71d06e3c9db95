"""Runs recorded in one store, carried into another: a fleet board records an experiment in a
store of its own and the driver, the real store's single writer, imports it in one transaction.

    bundle = export_runs(board_store, [run_id, baseline_id])    # frozen values: picklable, sendable
    imported = store.import_runs(bundle)                         # board ids -> this store's ids

Every field of a run is kept as the board recorded it (status, figures, source, notes, metric
provenance, its power trace as stored there); only the ids change, and the runs' devices and
workloads are found or created here by their identity and key.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Mapping, Sequence

from engine.device.power import PowerSample
from engine.results.store.db import Database, inserted_id
from engine.results.errors import StoreError
from engine.results.records import ComparisonRecord, RunRecord, as_source, json_text, normalize_setting, utc_now

if TYPE_CHECKING:  # annotations only: engine.results.store imports the results modules
    from engine.results.store.runs import RunTables


@dataclass(frozen=True)
class RunBundle:
    """Runs with their power traces and the comparisons between them, as one store holds them."""

    runs: tuple[RunRecord, ...]
    samples: Mapping[int, tuple[PowerSample, ...]] = field(default_factory=dict)  # run id -> its trace
    comparisons: tuple[ComparisonRecord, ...] = ()


@dataclass(frozen=True)
class ImportedRuns:
    """What `import_runs` stored: the bundle's ids mapped to this store's."""

    run_ids: Mapping[int, int]
    comparison_ids: Mapping[int, int]


def export_runs(store: RunTables, run_ids: Sequence[int]) -> RunBundle:
    """The runs `run_ids` of `store` with their power samples and every comparison among them."""
    runs = tuple(store.get_run(int(i)) for i in run_ids)
    wanted = {r.id for r in runs}
    comparisons: dict[int, ComparisonRecord] = {}
    for run in runs:
        for c in store.comparisons_for(run.id):
            if c.run_id in wanted and c.baseline_run_id in wanted and c.id is not None:
                comparisons[c.id] = c
    return RunBundle(runs, {r.id: tuple(store.power_samples(r.id)) for r in runs},
                     tuple(comparisons[k] for k in sorted(comparisons)))


class RunImport(Database):
    """The store's import of runs recorded elsewhere (Store inherits it)."""

    def import_runs(self, bundle: RunBundle) -> ImportedRuns:
        """Store the bundle's runs, their samples and comparisons in one transaction (all or nothing)."""
        run_ids: dict[int, int] = {}
        comparison_ids: dict[int, int] = {}
        with self._tx("importing runs") as conn:
            for r in bundle.runs:
                device_id = None if r.device is None else self._device_id(conn, r.device)
                workload_id = None if r.workload is None else self._workload_id(conn, r.workload)
                cur = conn.execute(
                    "INSERT INTO runs (device_id, workload_id, policy, objective, setting, seed, steps, samples, "
                    "status, started_at, finished_at, wall_s, time_s, energy_j, rail_energy_j, rails, avg_power_w, "
                    "samples_per_s, joules_per_sample, metrics, weights, synthetic, data_source, simulated, source, "
                    "label, notes, error, last_sample_t) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (device_id, workload_id, r.policy, r.objective,
                     None if r.setting is None else json_text(normalize_setting(r.setting)), r.seed, r.steps,
                     r.samples, r.status, r.started_at, r.finished_at, r.wall_s, r.time_s, r.energy_j,
                     json_text(dict(r.rail_energy_j)), r.rails, r.avg_power_w, r.samples_per_s,
                     r.joules_per_sample, json_text(dict(r.metrics)), r.weights,
                     None if r.synthetic is None else int(r.synthetic), r.data_source, int(r.simulated),
                     as_source(r.source).value, r.label, r.notes, r.error, r.last_sample_t),
                )
                new = inserted_id(cur)
                run_ids[r.id] = new
                conn.executemany(
                    "INSERT INTO power_samples (run_id, t, total_mw, rails_mw, source) VALUES (?, ?, ?, ?, ?)",
                    [(new, float(s.t), s.total_mw, json.dumps(dict(s.rails_mw)), as_source(r.source).value)
                     for s in bundle.samples.get(r.id, ())],
                )
            for c in bundle.comparisons:
                if c.run_id not in run_ids or c.baseline_run_id not in run_ids:
                    raise StoreError(f"comparison {c.id} names a run the imported runs do not include",
                                     "export the comparison with both of its runs (export_runs)")
                cur = conn.execute(
                    "INSERT INTO comparisons (run_id, baseline_run_id, saving_pct, slowdown_pct, rails, source, "
                    "created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (run_ids[c.run_id], run_ids[c.baseline_run_id], c.saving_pct, c.slowdown_pct, c.rails,
                     as_source(c.source).value, c.created_at or utc_now()),
                )
                if c.id is not None:
                    comparison_ids[c.id] = inserted_id(cur)
        return ImportedRuns(run_ids, comparison_ids)
