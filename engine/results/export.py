"""A stored run or sweep as a file: a run's power samples, or a sweep's points, one row each, with
the run's or sweep's summary (CSV comment lines, or Parquet metadata). The CLI's `export` and the
TUI's export key both call this."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Mapping, Sequence

from engine.core.errors import ConfigError
from engine.core.jsontypes import JsonObject, JsonScalar, JsonValue
from engine.core.optional import import_optional
from engine.device.power import PowerSample
from engine.results.records import RunRecord, SweepPoint, dvfs_setting

if TYPE_CHECKING:  # annotations only: engine.results.store imports the results modules
    from engine.results.store import Store

FORMATS = ("csv", "parquet")


def summary(run: RunRecord) -> JsonObject:
    """Flat key -> scalar summary of a run (nested values as JSON text)."""
    out: JsonObject = {}
    for key, value in run.to_json().items():
        out[key] = json.dumps(value, sort_keys=True) if isinstance(value, (dict, list)) else value
    return out


def rail_columns(samples: Sequence[PowerSample]) -> list[str]:
    """Every rail of the samples, in the order the board reported them."""
    rails: list[str] = []
    for s in samples:
        rails.extend(r for r in s.rails_mw if r not in rails)
    return rails


def csv_text(run: RunRecord, samples: Sequence[PowerSample]) -> str:
    """The summary as leading `# key: value` comment lines, then one row per sample
    (t_s is seconds since the first sample)."""
    rails, t0 = rail_columns(samples), samples[0].t if samples else 0.0
    buf = io.StringIO()
    buf.write(f"# slm-dvfs run {run.id}; figures are {run.source.value}; t_s is seconds since the first sample\n")
    for key, value in summary(run).items():
        buf.write(f"# {key}: {'' if value is None else value}\n")
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["t_s", *(f"{r}_mw" for r in rails), "total_mw", "source"])
    for s in samples:
        writer.writerow([f"{s.t - t0:.6g}", *(f"{s.rails_mw.get(r, ''):.6g}" if r in s.rails_mw else "" for r in rails),
                         f"{s.total_mw:.6g}", run.source.value])
    return buf.getvalue()


def write_parquet(path: Path, run: RunRecord, samples: Sequence[PowerSample]) -> None:
    """One row per sample; the summary travels in the file's metadata (`slm_dvfs.run`)."""
    pa, pq = _pyarrow()
    rails, t0 = rail_columns(samples), samples[0].t if samples else 0.0
    columns: dict[str, object] = {"t_s": pa.array([s.t - t0 for s in samples], pa.float64())}
    for r in rails:
        columns[f"{r}_mw"] = pa.array([s.rails_mw.get(r) for s in samples], pa.float64())
    columns["total_mw"] = pa.array([s.total_mw for s in samples], pa.float64())
    columns["source"] = pa.array([run.source.value] * len(samples), pa.string())
    table = pa.table(columns)
    # The summary travels in the file's metadata, where pandas and pyarrow readers find it.
    meta = {b"slm_dvfs.run": json.dumps(run.to_json(), sort_keys=True).encode()}
    pq.write_table(table.replace_schema_metadata(meta), str(path))


def _pyarrow() -> tuple[ModuleType, ModuleType]:  # pyarrow and pyarrow.parquet, imported when asked
    install = "`pip install pyarrow`, or export with --format csv"
    return (import_optional("pyarrow", "parquet export", install),
            import_optional("pyarrow.parquet", "parquet export", install))


def write_export(path: Path, run: RunRecord, samples: Sequence[PowerSample], fmt: str = "csv") -> Path:
    """Write the run to `path` as `fmt` (csv | parquet). OSError is the caller's to word."""
    if fmt not in FORMATS:
        raise ConfigError(f"unknown export format {fmt!r}", f"use one of {', '.join(FORMATS)}")
    if fmt == "parquet":
        write_parquet(path, run, samples)
    else:
        path.write_text(csv_text(run, samples), encoding="utf-8")
    return path


def default_name(what: str, item_id: int, fmt: str) -> str:
    """The file `export` writes when not told where: `run-12.csv`, `sweep-s3.parquet` (in the current folder)."""
    return f"{'sweep-s' if what == 'sweep' else 'run-'}{item_id}.{fmt}"


def export_run(store: Store, run_id: int, path: Path, fmt: str = "csv") -> tuple[RunRecord, int]:
    """Write a stored run and its power samples to `path`; returns the run and how many samples went."""
    run = store.get_run(run_id)
    samples = store.power_samples(run.id)
    write_export(path, run, samples, fmt)
    return run, len(samples)


# --------------------------------------------------------------------------- sweeps
POINT_COLUMNS = ("setting", "gpu_hz", "cpu_hz", "emc_hz", "nvpmodel", "repeat", "samples", "time_s", "energy_j",
                 "avg_power_w", "joules_per_sample", "seconds_per_sample")


@dataclass(frozen=True)
class SweepTable:
    """A stored sweep's points, one row each (repetitions apart, as measured), and its summary."""

    summary: Mapping[str, JsonValue]
    columns: tuple[str, ...]
    rows: tuple[tuple[JsonScalar, ...], ...]
    source: str


def sweep_table(store: Store, sweep_id: int) -> SweepTable:
    """The sweep's points with their setting, figures (None where not recorded: an energy-only point's time),
    energy per rail, the board that measured each and their source."""
    sweep = store.get_sweep(sweep_id)
    device, workload = store.get_device(sweep.device_id), store.get_workload(sweep.workload_id)
    points: list[SweepPoint] = store.sweep_points(sweep_id)
    rails = sorted({r for p in points for r in p.rail_energy_j})
    serials = {b: store.get_device(b).serial for b in {p.device_id for p in points if p.device_id is not None}}
    rows = []
    for p in points:
        st = dvfs_setting(p.setting)
        rows.append((st.label(), st.gpu_hz, st.cpu_hz, st.emc_hz, st.nvpmodel, p.repeat, p.samples, p.time_s,
                     p.energy_j, p.avg_power_w, p.energy_j / p.samples if p.samples else None,
                     p.time_s / p.samples if p.time_s is not None and p.samples else None,
                     *(p.rail_energy_j.get(r) for r in rails),
                     serials.get(p.device_id) if p.device_id is not None else device.serial,
                     (p.source or sweep.source).value))
    summary = {
        "sweep": f"s{sweep.id}", "status": sweep.status, "source": sweep.source.value, "label": sweep.label,
        "created_at": sweep.created_at, "finished_at": sweep.finished_at, "points": len(points),
        "planned": sweep.planned, "warmup_steps": sweep.warmup_steps, "steps": sweep.steps, "repeats": sweep.repeats,
        "space": json.dumps(dict(sweep.space), sort_keys=True, default=str), "workload": workload.label,
        "workload_key": workload.key, "device": device.label(), "device_serial": device.serial,
    }
    return SweepTable(summary, (*POINT_COLUMNS, *(f"{r}_j" for r in rails), "board_serial", "source"),
                      tuple(rows), sweep.source.value)


def sweep_csv_text(table: SweepTable) -> str:
    """The summary as leading `# key: value` comment lines, then one row per stored point (empty: not recorded)."""
    buf = io.StringIO()
    buf.write(f"# slm-dvfs sweep {table.summary['sweep']}; figures are {table.source}; one row per point "
              f"and repetition; an empty time_s: not recorded (energy-only)\n")
    for key, value in table.summary.items():
        buf.write(f"# {key}: {'' if value is None else value}\n")
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(table.columns)
    for row in table.rows:
        writer.writerow(["" if v is None else (f"{v:.6g}" if isinstance(v, float) else v) for v in row])
    return buf.getvalue()


def write_sweep_export(path: Path, table: SweepTable, fmt: str = "csv") -> Path:
    """Write a sweep's points to `path` as `fmt` (csv | parquet). OSError is the caller's to word."""
    if fmt not in FORMATS:
        raise ConfigError(f"unknown export format {fmt!r}", f"use one of {', '.join(FORMATS)}")
    if fmt == "csv":
        path.write_text(sweep_csv_text(table), encoding="utf-8")
        return path
    pa, pq = _pyarrow()
    columns = {name: [row[i] for row in table.rows] for i, name in enumerate(table.columns)}
    meta = {b"slm_dvfs.sweep": json.dumps(dict(table.summary), sort_keys=True, default=str).encode()}
    pq.write_table(pa.table(columns).replace_schema_metadata(meta), str(path))
    return path

