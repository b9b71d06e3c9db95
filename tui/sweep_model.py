"""The Sweep page's energy heat map over the settings swept (no Textual here).

Rows are the GPU clock (or the mode / the rest of the setting), columns the EMC clock
("gov" where its governor decides); a cell is the mean energy per training sample.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from engine.core.provenance import Source
from engine.device.baseline import AGX_MAXN, Baseline
from engine.device.setting import DvfsSetting
from engine.results.baseline import device_baseline
from engine.results.compare import per_sample_saving_pct, per_sample_slowdown_pct
from engine.results.format import sweep_progress, sweep_total

if TYPE_CHECKING:
    from engine.results.records import SweepRecord, WorkloadRecord
    from engine.results.store import Store
    from engine.results.sweeps import PointSummary


@dataclass(frozen=True)
class Cell:
    mj_per_sample: float  # mean energy per sample, millijoules
    ms_per_sample: float | None  # None: energy-only (the time was not recorded)
    rel: float  # 0 = the least energy in the map, 1 = the most
    best: bool = False
    maxn: bool = False


@dataclass(frozen=True)
class HeatMap:
    rows: tuple[str, ...]
    cols: tuple[str, ...]
    cells: Mapping[tuple[str, str], Cell]
    source: Source
    best: str | None = None  # label of the least-energy setting
    saving_pct: float | None = None  # of the best against the baseline, if it was swept
    slowdown_pct: float | None = None
    points: int = 0
    baseline: str = "MAXN"  # the baseline's mode by name (MAXN_SUPER on an Orin Nano): its row and the saving's
    notes: tuple[str, ...] = field(default_factory=tuple)


def short_label(setting: DvfsSetting) -> str:
    """The setting's label without the domains left to their governors."""
    return setting.label().replace(" · CPU gov", "").replace(" · EMC gov", "")


def _mhz(hz: int | None) -> str:
    return "gov" if hz is None else f"{hz / 1e6:g}"


def row_col(setting: DvfsSetting, baseline: Baseline = AGX_MAXN) -> tuple[str, str]:
    """A setting's (row, column) in the heat map: the baseline's row is its mode's name (MAXN, MAXN_SUPER), and
    a setting in another mode than the baseline's names its mode."""
    if setting == baseline.setting:
        return baseline.name, "gov"
    parts = []
    if setting.gpu_hz is not None or setting.cpu_hz is None:
        parts.append(f"GPU {_mhz(setting.gpu_hz)}")
    if setting.cpu_hz is not None:
        parts.append(f"CPU {_mhz(setting.cpu_hz)}")
    if setting.jetson_clocks:
        parts.append("jetson_clocks")
    if setting.nvpmodel not in (None, baseline.setting.nvpmodel):
        parts.append(f"mode {setting.nvpmodel}")
    return " ".join(parts), _mhz(setting.emc_hz)


def _sort_key(label: str) -> tuple[int, float, str]:
    if label.startswith("MAXN"):  # the baseline's row first
        return (0, 0.0, label)
    head = label.split()
    try:
        return (1, float(head[1]), label)
    except (IndexError, ValueError):
        return (2, 0.0, label)


def heat_map(points: Iterable[tuple[DvfsSetting, float, float | None]], source: Source,
             baseline: Baseline = AGX_MAXN) -> HeatMap:
    """From (setting, joules per sample, seconds per sample or None when not recorded), repeats averaged;
    `baseline`: the board's (MAXN_SUPER, mode 2, on an Orin Nano), the saving's reference."""
    acc: dict[DvfsSetting, list[tuple[float, float | None]]] = {}
    n = 0
    for setting, jps, sps in points:
        acc.setdefault(setting, []).append((jps, sps))
        n += 1
    if not acc:
        return HeatMap((), (), {}, source)
    means = {s: (sum(j for j, _ in v) / len(v), _mean([t for _, t in v if t is not None])) for s, v in acc.items()}
    lo = min(j for j, _ in means.values())
    hi = max(j for j, _ in means.values())
    best = min(means, key=lambda s: means[s][0])
    cells: dict[tuple[str, str], Cell] = {}
    for s, (j, t) in means.items():
        rel = 0.0 if hi == lo else (j - lo) / (hi - lo)
        cells[row_col(s, baseline)] = Cell(j * 1000.0, None if t is None else t * 1000.0, rel, best=s == best,
                                           maxn=s == baseline.setting)
    rows = tuple(sorted({r for r, _ in cells}, key=_sort_key))
    cols = tuple(sorted({c for _, c in cells}, key=lambda c: (c != "gov", float(c) if c != "gov" else 0.0)))
    saving = slowdown = None
    if baseline.setting in means:
        mj, mt = means[baseline.setting]
        saving = per_sample_saving_pct(means[best][0], mj) if mj else None
        bt = means[best][1]
        slowdown = per_sample_slowdown_pct(bt, mt) if mt and bt is not None else None
    return HeatMap(rows, cols, cells, source, best=short_label(best), saving_pct=saving, slowdown_pct=slowdown,
                   points=n, baseline=baseline.name)


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def from_summaries(summaries: Sequence[PointSummary], source: Source, baseline: Baseline = AGX_MAXN) -> HeatMap:
    """From a finished or stored sweep's points; energy-only points have no time."""
    return heat_map(((p.setting, p.joules_per_sample.mean,
                      None if p.seconds_per_sample is None else p.seconds_per_sample.mean) for p in summaries), source,
                    baseline)


def from_store(store: Store, sweep_id: int) -> HeatMap:
    from engine.results.sweeps import summarize_points

    sweep = store.get_sweep(sweep_id)
    base = device_baseline(store.get_device(sweep.device_id), sweep.space)  # its module's uncapped mode
    return from_summaries(summarize_points(store.sweep_points(sweep_id)), sweep.source, base)


@dataclass(frozen=True)
class SweepView:
    status: str  # idle | running | finished | cancelled | failed | abandoned
    # While a sweep runs: the points this invocation measured of those it measures. A stored sweep
    # (`record`: opened from History, or this one once it has ended): its points stored of those it
    # plans, None where the plan is not known (engine.results.format.sweep_total).
    done: int = 0
    total: int | None = 0
    last: str = ""  # the last point's setting and figures
    heat: HeatMap | None = None
    log: tuple[str, ...] = ()
    sweep_id: int | None = None
    fleet: bool = False  # a fleet sweep: several sweeps at once, no single heat map
    workload: WorkloadRecord | None = None  # the sweep's stored workload, once known
    opened: bool = False  # opened from History: the Sweep form takes its workload (s sweeps it again)
    record: SweepRecord | None = None  # the stored sweep, once known

    @property
    def progress(self) -> str:
        """`15/60` (points), as `slm-dvfs sweeps` and History say a stored sweep's."""
        if self.record is not None:
            return sweep_progress(self.record, self.done)
        return f"{self.done}/{self.total}"


def stored_view(store: Store, sweep_id: int, log: Sequence[str], *, opened: bool = False,
                heat: HeatMap | None = None) -> SweepView:
    """A stored sweep as the Sweep page shows it: its status, points stored of those planned, heat map
    (its stored points', unless given) and workload. Raises the store's SlmDvfsError."""
    sweep = store.get_sweep(sweep_id)
    done = store.stored_point_counts().get(sweep_id, 0)
    return SweepView(sweep.status, done, sweep_total(sweep, done), "",
                     from_store(store, sweep_id) if heat is None else heat, tuple(log), sweep_id,
                     workload=store.get_workload(sweep.workload_id), opened=opened, record=sweep)


def workload_text(w: WorkloadRecord) -> str:
    """A stored workload's shape as the Sweep page says it: `batch 16, seq 128, fp32, full, dynamic padding`
    (and `, hf loop` for a Trainer-style loop's: the lean loop, what a sweep that trains runs, goes unsaid, as
    a stored workload's label and key leave it)."""
    mode = f"lora r{w.lora.rank}" if w.mode == "lora" and w.lora is not None else w.mode
    padding = "dynamic padding" if w.padding == "dynamic" else f"padded to {w.seq_len}"
    return (f"batch {w.batch_size}, seq {w.seq_len}, {w.precision}, {mode}"
            + (", checkpointed" if w.grad_checkpointing else "") + f", {padding}"
            + (", hf loop" if w.loop == "hf" else ""))


class SweepTracker:
    """Thread-safe accumulator of a sweep's events (`SweepPointDone` and the trainer's)."""

    def __init__(self, source: Source, baseline: Baseline = AGX_MAXN) -> None:
        import threading
        from collections import deque

        self.source = source
        self.baseline = baseline  # the board's: its heat map's baseline row and saving
        self._lock = threading.Lock()
        self._points: list[tuple[DvfsSetting, float, float]] = []
        self._log: deque[str] = deque(maxlen=200)
        self.status = "running"
        self.done = 0
        self.total: int | None = 0  # a stored sweep's plan may be unknown (SweepView.total)
        self.last = ""
        self.sweep_id: int | None = None
        self.workload: WorkloadRecord | None = None  # the stored workload, once the sweep has finished
        self.record: SweepRecord | None = None  # the stored sweep, once it has ended: its counts are the store's then
        self._final: HeatMap | None = None

    def feed(self, event: Any) -> bool:
        name = type(event).__name__
        if name in ("StepBegin", "StepEnd"):
            return False
        with self._lock:
            if name == "SweepPointDone":
                m = event.measurement
                self._points.append((event.setting, m.joules_per_sample, m.seconds_per_sample))
                self.done, self.total = event.index, event.total
                self.last = (f"{short_label(event.setting)} (repeat {event.repeat + 1}): "
                             f"{m.joules_per_sample * 1000:.2f} mJ/sample [{m.source.value}]")
                return event.index == event.total
            if name == "ThermalWait":
                self._log.append(f"thermal: {event.zone} {event.start_c:.0f}→{event.end_c:.0f} °C before "
                                 f"{event.label}")
            elif name == "RunStarted":
                self._log.append(f"training {event.model}/{event.task}: {event.total_steps} steps")
            elif name == "RunCancelled":
                self._log.append(f"cancelled after step {event.step}")
            elif name != "RunFinished":
                self._log.append(name)
            return True

    def note(self, line: str) -> None:
        with self._lock:
            self._log.append(line)

    def finish(self, status: str, heat: HeatMap | None = None, sweep_id: int | None = None,
               line: str | None = None, workload: WorkloadRecord | None = None, stored: SweepView | None = None) -> None:
        """The sweep has ended; `stored`: its view from the store (stored_view), whose counts (points
        stored of those planned, a resumed sweep's earlier points too) replace this invocation's."""
        with self._lock:
            self.status = status
            self._final = heat
            self.sweep_id = sweep_id
            self.workload = workload
            if stored is not None:
                self.done, self.total, self.record = stored.done, stored.total, stored.record
                self.workload = workload or stored.workload
            if line:
                self._log.append(line)

    def view(self) -> SweepView:
        with self._lock:
            heat = self._final or heat_map(list(self._points), self.source, self.baseline)
            return SweepView(self.status, self.done, self.total, self.last, heat, tuple(self._log), self.sweep_id,
                             workload=self.workload, record=self.record)
