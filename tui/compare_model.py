"""The Compare page's figures: a run against its baseline (the board's uncapped mode: MAXN, or MAXN_SUPER on an
Orin Nano / NX), from the store.

Pure (no Textual): `build_comparison` turns two stored runs and their power traces into
rows of labelled figures and two power series on shared axes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from engine.core.errors import ConfigError
from engine.core.interval import Interval
from engine.core.jsontypes import as_float
from engine.core.provenance import Source
from engine.results.baseline import BASELINE_POLICY, mode_text
from engine.results.compare import Side, compare_pair, fitting_baselines, mismatch, rail_saving_pct
from engine.results.format import SAME, change_text, id_list, saving_short, slowdown_text
from engine.results.records import RunRecord
from tui.fmt import nice_ceiling

if TYPE_CHECKING:
    from engine.device.power import PowerSample
    from engine.results.store import Store


# What the change column says, one sign convention everywhere (as the CLI and the reports):
# `saving` is positive when the run used less than MAXN (energy, energy per sample), `slowdown`
# positive when it took longer, `change` positive when the figure went up (power, throughput).
DELTA_KINDS = ("saving", "slowdown", "change")
# Mismatches (engine.results.compare.Mismatch.kind) whose baseline is not shown beside the run at all:
# under `MAXN` and `vs MAXN` another policy's run, workload's, module's or the twin's figures mislead.
MISLEADING = ("policy", "workload", "hardware", "module")


@dataclass(frozen=True)
class Figure:
    """One row of the side-by-side table: the run's value, the baseline's, and the difference,
    as a `saving`, a `slowdown` or a `change` (DELTA_KINDS)."""

    name: str
    unit: str
    run: float | None
    base: float | None
    source: Source
    fmt: str = ".2f"
    kind: str = "change"
    lower_is_better: bool = True  # for a `change`
    label: str | None = None  # instead of `[source]`: an eval metric's provenance label
    meaningful: bool | None = True  # False / None: the figure means nothing (or may not): no difference given

    @property
    def change_pct(self) -> float | None:
        """Relative change of the run against the baseline (positive: it went up)."""
        if self.run is None or self.base is None or not self.base:
            return None
        return 100.0 * (self.run - self.base) / self.base

    @property
    def delta_pct(self) -> float | None:
        """The difference in this row's own sense: saving (positive = less), slowdown or change."""
        change = self.change_pct
        if change is None or not self.meaningful:
            return None
        return -change if self.kind == "saving" else change

    @property
    def better(self) -> bool | None:
        """Whether the difference favours the run (None: no difference to speak of)."""
        delta = self.delta_pct
        if delta is None or abs(delta) < 0.05:
            return None
        if self.kind == "saving":
            return delta > 0
        return delta < 0 if self.kind == "slowdown" or self.lower_is_better else delta > 0

    @property
    def delta_text(self) -> str:
        """In words, under the `vs MAXN` heading (engine.results.format): `11.1% less` (energy),
        `49.8% slower` (time), `40.2% lower` (a change); `-` when there is none."""
        delta = self.delta_pct
        if delta is None:
            return "-"
        if abs(delta) < SAME:
            return "same"
        if self.kind == "saving":
            return saving_short(delta)
        return slowdown_text(delta, than=None) if self.kind == "slowdown" else change_text(delta)

    @property
    def source_text(self) -> str:
        return self.label if self.label is not None else f"[{self.source.value}]"


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
    saving_pct: float | None  # energy saved against the baseline (positive: less energy)
    slowdown_pct: float | None  # time added (positive: slower)
    source: Source  # of the saving and slowdown
    rails: tuple[tuple[str, float | None, float | None, float | None], ...]  # rail, run J, base J, saving %
    run_series: Series
    base_series: Series | None
    span_s: float  # shared x axis
    peak_w: float  # shared y axis
    notes: tuple[str, ...] = field(default_factory=tuple)
    baseline_note: str = ""  # what the title says of the baseline, e.g. that the run is the baseline itself
    per_sample: bool = False  # saving and slowdown per training sample (runs of different lengths)
    # The engine's board estimate of the saving (a twin experiment's Comparison.interval), when the page
    # shows the experiment just run; a run opened from History has none (its workload's steps are not kept).
    estimate: Interval | None = None

    def title(self, rec: RunRecord) -> str:
        return f"run {rec.id} · {rec.policy}"

    @property
    def workload_text(self) -> str:
        """Which workload the figures are of: the run's, and its baseline's (one: mismatch() refuses two)."""
        return self.run.workload.label if self.run.workload is not None else "unknown workload"


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
                return key, as_float(value)
            except (TypeError, ValueError):
                return key, None
    return None, None


def series_of(samples: Sequence[PowerSample], rails: Sequence[str] | None, source: Source) -> Series:
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


def build_comparison(run: RunRecord, base: RunRecord | None, run_samples: Sequence[PowerSample] = (),
                     base_samples: Sequence[PowerSample] = (), store: Store | None = None) -> CompareView:
    """Side-by-side figures of `run` and its baseline (None: the run alone). The saving and
    slowdown are engine.results.compare's, given only when the two runs compare; for runs of
    different lengths (a MAXN run of the workload with other steps) they are per sample. With the
    `store`, a refusal also names the MAXN runs that fit `run` (as `slm-dvfs compare` does)."""
    notes: list[str] = []
    src = run.source
    saving = slowdown = None
    per_sample = False
    rail_saving: dict[str, float] = {}
    refused: RunRecord | None = None
    if base is not None:
        problem = mismatch(Side.of(run), Side.of(base))
        if problem is not None:
            notes.append(f"{problem.what}: not comparable")
            if store is not None and run.policy != BASELINE_POLICY:
                notes.append(fitting_note(store, run))
            if problem.kind in MISLEADING:  # another workload's, module's or the twin's figures beside a board's mislead
                refused, base = base, None
        elif run.energy_j is not None and run.time_s is not None:
            pair = compare_pair(run, base)
            c, per_sample = pair.comparison, pair.per_sample
            saving, slowdown, src, rail_saving = c.saving_pct, c.slowdown_pct, c.source, dict(c.rail_saving_pct)
            notes += pair.notes
    b = base
    m_name, m_run = primary_metric(run)
    b_name, m_base = primary_metric(b) if b is not None else (None, None)
    metric_label = m_name or b_name or "eval metric"
    meaning = run.metric_provenance
    if m_run is None and run.simulated:
        notes.append(f"run {run.id} is simulated: no training, so no eval metric")
    elif m_run is not None and not meaning.meaningful:
        notes.append(f"{metric_label} {meaning.label(run.source)}")
    figures: tuple[Figure, ...] = (
        Figure("energy", "J", run.energy_j, b.energy_j if b else None, src, kind="saving"),
        Figure("time", "s", run.time_s, b.time_s if b else None, src, kind="slowdown"),
        Figure("power", "W", run.avg_power_w, b.avg_power_w if b else None, src),
        Figure("mJ/sample", "", _milli(run.joules_per_sample), _milli(b.joules_per_sample) if b else None,
               src, fmt=".3f", kind="saving"),
        Figure("samples/s", "", run.samples_per_s, b.samples_per_s if b else None, src, fmt=".1f",
               lower_is_better=False),
        Figure(metric_label, "", m_run, m_base, Source.MEASURED, fmt=".4f", lower_is_better=False,
               label=f"[{meaning.label(run.source)}]" if meaning.meaningful else meaning.label(run.source, short=True),
               meaningful=meaning.meaningful),
    )
    if per_sample:  # the totals' differences would mix in the runs' lengths
        figures = tuple(replace(f, meaningful=False) if f.name in ("energy", "time") else f for f in figures)
    rails: list[tuple[str, float | None, float | None, float | None]] = []
    names = list(run.rail_energy_j) + [r for r in (b.rail_energy_j if b else {}) if r not in run.rail_energy_j]
    if b is not None and saving is None:  # not comparable: the rails' savings are shown all the same
        rail_saving = rail_saving_pct(run.rail_energy_j, b.rail_energy_j)
    for rail in names:
        rails.append((rail, run.rail_energy_j.get(rail), b.rail_energy_j.get(rail) if b else None,
                      rail_saving.get(rail)))
    wanted = rails_of(run)
    rs = series_of(run_samples, wanted, run.source)
    bs = series_of(base_samples, rails_of(b) or wanted, b.source) if b is not None else None
    span = max(rs.duration_s, bs.duration_s if bs else 0.0, run.time_s or 0.0, (b.time_s or 0.0) if b else 0.0)
    peak = max(rs.peak_w, bs.peak_w if bs else 0.0)
    return CompareView(run=run, base=b, figures=figures, saving_pct=saving, slowdown_pct=slowdown, source=src,
                       rails=tuple(rails), run_series=rs, base_series=bs, span_s=span,
                       peak_w=nice_ceiling(peak), notes=tuple(notes), baseline_note=baseline_note(run, b, refused),
                       per_sample=per_sample)


def fitting_note(store: Store, run: RunRecord) -> str:
    """Which stored MAXN runs `run` compares with (engine.results.compare.fitting_baselines), as History marks them."""
    fits = fitting_baselines(store, run)
    if not fits:
        return (f"no MAXN run in the store fits run {run.id}: run its workload with policy maxn "
                "(Setup, page 2, with the same settings)")
    which = "MAXN runs that fit" if len(fits) > 1 else "the MAXN run that fits"
    return f"{which} run {run.id}: {id_list([r.id for r in fits])} (History: m on both, then c)"


def baseline_note(run: RunRecord, base: RunRecord | None, refused: RunRecord | None = None) -> str:
    """What the Compare page's title says of the baseline (`refused`: a run it does not compare with)."""
    if base is not None:  # by its mode's name and id, as stored: MAXN_SUPER (mode 2) on an Orin Nano
        return mode_text(base.setting)
    if refused is not None:  # the notes say why, naming both
        return f"not compared with run {refused.id}"
    if run.policy == BASELINE_POLICY:
        return f"this run is the baseline, {mode_text(run.setting)}"
    return ("no baseline run (the board's uncapped mode, MAXN or MAXN_SUPER) of this workload on this device, "
            "of this kind, in the store")


def _milli(value: float | None) -> float | None:
    return None if value is None else value * 1000.0


def describe_run(run: RunRecord) -> str:
    """`bert-tiny/sst2 · static:gpu=816 · twin` style one-liner."""
    what = f"{run.model}/{run.task}" if run.model else "unknown workload"
    return f"{what} · {run.policy} · {run.status} · {run.source.value}"
