"""A stored run as a file: its power samples, one row each, with the run's summary (CSV
comment lines, or Parquet metadata). The CLI's `export` and the TUI's export key both call this."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any, Sequence

from engine.core.errors import ConfigError
from engine.device.power import PowerSample
from engine.results.records import RunRecord

FORMATS = ("csv", "parquet")


def summary(run: RunRecord) -> dict[str, Any]:
    """Flat key -> scalar summary of a run (nested values as JSON text)."""
    out: dict[str, Any] = {}
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
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise ConfigError("parquet export needs pyarrow, which is not installed",
                          "`pip install pyarrow`, or export with --format csv") from None
    rails, t0 = rail_columns(samples), samples[0].t if samples else 0.0
    columns: dict[str, Any] = {"t_s": pa.array([s.t - t0 for s in samples], pa.float64())}
    for r in rails:
        columns[f"{r}_mw"] = pa.array([s.rails_mw.get(r) for s in samples], pa.float64())
    columns["total_mw"] = pa.array([s.total_mw for s in samples], pa.float64())
    columns["source"] = pa.array([run.source.value] * len(samples), pa.string())
    table = pa.table(columns)
    # The summary travels in the file's metadata, where pandas and pyarrow readers find it.
    meta = {b"slm_dvfs.run": json.dumps(run.to_json(), sort_keys=True).encode()}
    pq.write_table(table.replace_schema_metadata(meta), str(path))


def write_export(path: Path, run: RunRecord, samples: Sequence[PowerSample], fmt: str = "csv") -> Path:
    """Write the run to `path` as `fmt` (csv | parquet). OSError is the caller's to word."""
    if fmt not in FORMATS:
        raise ConfigError(f"unknown export format {fmt!r}", f"use one of {', '.join(FORMATS)}")
    if fmt == "parquet":
        write_parquet(path, run, samples)
    else:
        path.write_text(csv_text(run, samples), encoding="utf-8")
    return path


def export_run(store: Any, run_id: int, path: Path, fmt: str = "csv") -> tuple[RunRecord, int]:
    """Write a stored run and its power samples to `path`; returns the run and how many samples went."""
    run = store.get_run(run_id)
    samples = store.power_samples(run.id)
    write_export(path, run, samples, fmt)
    return run, len(samples)
