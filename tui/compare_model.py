"""The Compare page's figures: a run against its MAXN Mode 0 baseline, from the store.

Pure (no Textual): `build_comparison` turns two stored runs and their power traces into
rows of labelled figures and two power series on shared axes.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.core.errors import ConfigError, SlmDvfsError
from engine.core.provenance import Source
from engine.results.schema import RunRecord
from tui.fmt import nice_ceiling

log = logging.getLogger(__name__)

BASELINE_POLICY = "maxn"


@dataclass(frozen=True)
class Figure:
    """One row of the side-by-side table: the run's value, the baseline's, and the change."""

    name: str
    unit: str
    run: float | None
    base: float | None
    source: Source
    fmt: str = ".2f"
    lower_is_better: bool = True

    @property
    def change_pct(self) -> float | None:
        if self.run is None or self.base is None or not self.base:
            return None
        return 100.0 * (self.run - self.base) / self.base


@dataclass(frozen=True)
class Series:
    """A run's total power over time (seconds since its first sample), in watts."""

    t: tuple[float, ...]
    watts: tuple[float, ...]
    source: Source

    @property
    def duration_s(self) -> float:
        return self.t[-1] if self.t else 0.0

    @property
    def peak_w(self) -> float:
        return max(self.watts, default=0.0)

    def resample(self, columns: int, span_s: float) -> tuple[float | None, ...]:
        """Mean power per column over [0, span_s]; None where the run had ended (or no sample fell)."""
        if not self.t or columns < 1 or span_s <= 0:
            return ()
        sums = [0.0] * columns
        counts = [0] * columns
        for t, w in zip(self.t, self.watts):
            col = min(columns - 1, int(t / span_s * columns))
            sums[col] += w
            counts[col] += 1
        out: list[float | None] = []
        last: float | None = None
        for i in range(columns):
            if counts[i]:
                last = sums[i] / counts[i]
                out.append(last)
            elif last is not None and (i + 0.5) * span_s / columns <= self.duration_s:
                out.append(last)  # sparse samples: hold the last value while the run lasts
            else:
                out.append(None)
        return tuple(out)


@dataclass(frozen=True)
class CompareView:
    run: RunRecord
    base: RunRecord | None
    figures: tuple[Figure, ...]
    saving_pct: float | None  # energy saved against the baseline (negative: it cost more)
    slowdown_pct: float | None  # time added (negative: faster)
    source: Source  # of the saving and slowdown
    rails: tuple[tuple[str, float | None, float | None, float | None], ...]  # rail, run J, base J, saving %
    run_series: Series
    base_series: Series | None
    span_s: float  # shared x axis
    peak_w: float  # shared y axis
    notes: tuple[str, ...] = field(default_factory=tuple)

    def title(self, rec: RunRecord) -> str:
        return f"run {rec.id} · {rec.policy}"


def primary_metric(run: RunRecord) -> tuple[str | None, float | None]:
    """The task's primary metric in a run's stored metrics (any split), if recorded."""
    if not run.metrics or run.task is None:
        return None, None
    from engine.workload.glue import get_task

    try:
        primary = get_task(run.task).primary_metric
    except ConfigError:
        return None, None
    for key, value in run.metrics.items():
        if key == primary or key.endswith("/" + primary):
            try:
                return key, float(value)
            except (TypeError, ValueError):
                return key, None
    return None, None


def series_of(samples: Sequence[Any], rails: Sequence[str] | None, source: Source) -> Series:
    if not samples:
        return Series((), (), source)
    t0 = samples[0].t
    ts, ws = [], []
    for s in samples:
        mw = s.total_mw if not rails else sum(s.rails_mw.get(r, 0.0) for r in rails)
        ts.append(s.t - t0)
        ws.append(mw / 1000.0)
    return Series(tuple(ts), tuple(ws), source)


def rails_of(run: RunRecord) -> tuple[str, ...] | None:
    """The rails a run's energy totals (its preset resolved against the rails it recorded)."""
    from engine.device.monitor import resolve_rails

    if not run.rail_energy_j:
        return None
    try:
        return resolve_rails(run.rails or "all", tuple(run.rail_energy_j))
    except Exception:  # noqa: BLE001 - an odd preset: fall back to every rail
        return tuple(run.rail_energy_j)


def build_comparison(run: RunRecord, base: RunRecord | None, run_samples: Sequence[Any] = (),
                     base_samples: Sequence[Any] = ()) -> CompareView:
    """Side-by-side figures of `run` and its baseline (None: the run alone)."""
    notes: list[str] = []
    src = run.source
    if base is not None and Source.PREDICTED in (run.source, base.source):
        src = Source.PREDICTED
    if base is not None and {run.source, base.source} == {Source.MEASURED, Source.TWIN}:
        notes.append(f"run {run.id} is {run.source.value} and run {base.id} is {base.source.value}: "
                     "not comparable")
        base = None
    if base is not None and run.rails != base.rails:
        notes.append(f"run {run.id} totals rails {run.rails}, run {base.id} {base.rails}: energy not comparable")
    b = base
    m_name, m_run = primary_metric(run)
    b_name, m_base = primary_metric(b) if b is not None else (None, None)
    metric_label = m_name or b_name or "eval metric"
    simulated = (run.notes or "").startswith("simulated")
    if m_run is None and simulated:
        notes.append(f"run {run.id} is simulated: no training, so no eval metric")
    figures = (
        Figure("energy", "J", run.energy_j, b.energy_j if b else None, src),
        Figure("time", "s", run.time_s, b.time_s if b else None, src),
        Figure("power", "W", run.avg_power_w, b.avg_power_w if b else None, src),
        Figure("mJ/sample", "", _milli(run.joules_per_sample), _milli(b.joules_per_sample) if b else None,
               src, fmt=".3f"),
        Figure("samples/s", "", run.samples_per_s, b.samples_per_s if b else None, src, fmt=".1f",
               lower_is_better=False),
        Figure(metric_label, "", m_run, m_base, Source.MEASURED, fmt=".4f", lower_is_better=False),
    )
    saving = slowdown = None
    if b is not None and b.energy_j and run.energy_j is not None:
        saving = 100.0 * (b.energy_j - run.energy_j) / b.energy_j
    if b is not None and b.time_s and run.time_s is not None:
        slowdown = 100.0 * (run.time_s - b.time_s) / b.time_s
    rails: list[tuple[str, float | None, float | None, float | None]] = []
    names = list(run.rail_energy_j) + [r for r in (b.rail_energy_j if b else {}) if r not in run.rail_energy_j]
    for rail in names:
        rj = run.rail_energy_j.get(rail)
        bj = b.rail_energy_j.get(rail) if b else None
        pct = 100.0 * (bj - rj) / bj if rj is not None and bj else None
        rails.append((rail, rj, bj, pct))
    wanted = rails_of(run)
    rs = series_of(run_samples, wanted, run.source)
    bs = series_of(base_samples, rails_of(b) or wanted, b.source) if b is not None else None
    span = max(rs.duration_s, bs.duration_s if bs else 0.0, run.time_s or 0.0, (b.time_s or 0.0) if b else 0.0)
    peak = max(rs.peak_w, bs.peak_w if bs else 0.0)
    return CompareView(run=run, base=b, figures=figures, saving_pct=saving, slowdown_pct=slowdown, source=src,
                       rails=tuple(rails), run_series=rs, base_series=bs, span_s=span,
                       peak_w=nice_ceiling(peak), notes=tuple(notes))


def find_baseline(store: Any, run: RunRecord) -> RunRecord | None:
    """The MAXN run this one was compared with, else a finished MAXN run of the same workload,
    device, steps and seed (newest first); None when there is none or it is MAXN itself."""
    for c in reversed(store.comparisons_for(run.id)):
        if c.run_id == run.id:
            try:
                return store.get_run(c.baseline_run_id)
            except SlmDvfsError:  # deleted since: look further
                log.debug("baseline run %d of comparison %s is gone", c.baseline_run_id, c.id)
    if run.policy == BASELINE_POLICY or run.workload is None or run.device_id is None:
        return None
    from engine.workload.resolve import workload_key

    w = run.workload
    key = workload_key(w.model, w.task, w.batch_size, w.seq_len, w.precision, w.mode)
    simulated = (run.notes or "").startswith("simulated")
    for rec in store.find_runs(key, run.device_id, policy=BASELINE_POLICY, steps=run.steps, seed=run.seed,
                               source=run.source):
        if rec.id != run.id and rec.rails == run.rails and (rec.notes or "").startswith("simulated") == simulated:
            return rec
    return None


def _milli(value: float | None) -> float | None:
    return None if value is None else value * 1000.0


def describe_run(run: RunRecord) -> str:
    """`bert-tiny/sst2 · static:gpu=816 · twin` style one-liner."""
    what = f"{run.model}/{run.task}" if run.model else "unknown workload"
    return f"{what} · {run.policy} · {run.status} · {run.source.value}"


def format_setting(setting: Mapping[str, Any] | None) -> str:
    from engine.cli.store_cmds import format_setting as fmt

    return fmt(setting)
