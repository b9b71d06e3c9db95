"""What the Run page draws, folded from an experiment's events (no Textual here).

The engine calls `RunTracker.feed` from its worker thread after every event; the UI
thread takes a consistent copy (`view`) at most about twice a second. Feeding a step
costs a few dictionary updates, so the tracker does not slow the training it watches.

Energy, power and device time come from the engine's `StepEnergy` events (the run
harness's power-monitor window over each step: `measured` on a board, `twin` on the
twin), the same figures the run is recorded with; projections and the ETA are
extrapolations (`predicted`); throughput on the host is `measured`.
"""

from __future__ import annotations

import math
import threading
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from engine.core.interval import Interval, extrapolated
from engine.core.provenance import MetricProvenance, Source
from tui.live_model import Span, group_stats, time_columns

WINDOW_S = 60.0  # the chart and the rails' averages cover the last minute
LOG_LINES = 200
MAX_SPANS = 300  # steps shorter than the shown time / MAX_SPANS share a span: the history stays bounded
ETA_STATUSES = ("starting", "running", "paused")  # a run that stopped has no ETA
# A projection's range rests on the steps' spread: the spread of fewer steps than this is no guide (two
# equal steps give a spread of 0, a range of ±0), so before it the range is said to be not known yet.
MIN_SPREAD_STEPS = 5


@dataclass(frozen=True)
class RunView:
    """One consistent reading of the run in progress."""

    status: str  # idle | starting | running | paused | finished | cancelled | failed
    role: str = ""  # policy | baseline
    policy: str = ""
    index: int = 0  # which run of the experiment (1-based)
    total_runs: int = 0
    model: str = ""
    task: str = ""
    step: int = 0
    total_steps: int = 0
    epoch: int = 0
    loss: float | None = None
    samples: int = 0
    host_elapsed_s: float = 0.0  # host clock (measured)
    host_samples_per_s: float | None = None  # measured on the host
    device_samples_per_s: float | None = None  # on the board (measured) or the twin
    eta_s: float | None = None  # predicted, host clock
    eta_interval: Interval | None = None  # of eta_s, from the steps' spread so far
    source: Source = Source.TWIN  # of the energy, power and device time
    device_time_s: float = 0.0
    energy_j: float = 0.0  # over `rails`
    projected_j: float | None = None  # predicted: this run at its last step
    projected_interval: Interval | None = None  # of projected_j, from the steps' spread so far
    rails: tuple[str, ...] = ()  # what energy_j totals
    rail_now_w: Mapping[str, float] = field(default_factory=dict)
    rail_avg_w: Mapping[str, float] = field(default_factory=dict)  # over the chart's span
    rail_peak_w: Mapping[str, float] = field(default_factory=dict)  # the highest step (span) over it
    spans: tuple[Span, ...] = ()  # the run's power history: (device time at end, s, J per rail)
    chart_w: tuple[float | None, ...] = ()  # total power, oldest first, one value per column
    chart_span_s: float = 0.0
    metrics: Mapping[str, float] = field(default_factory=dict)  # the last evaluation
    metrics_provenance: MetricProvenance | None = None  # whether they mean anything; None: not told
    log: tuple[str, ...] = ()
    log_count: int = 0  # lines ever logged: the last len(log) of them are in `log`

    @property
    def total_now_w(self) -> float:
        return sum(self.rail_now_w.get(r, 0.0) for r in self.rails or tuple(self.rail_now_w))

    @property
    def total_avg_w(self) -> float:
        return sum(self.rail_avg_w.get(r, 0.0) for r in self.rails or tuple(self.rail_avg_w))

    @property
    def total_peak_w(self) -> float | None:
        """The highest step (span) of the total over `rails` in the history; None before a step."""
        return group_stats(self.spans, {"": self.rails or None})[""].peak if self.spans else None

    @property
    def active(self) -> bool:
        return self.status in ("starting", "running", "paused")


class RunTracker:
    """Thread-safe accumulator of one experiment's events (both runs of a comparison)."""

    def __init__(self, source: Source, rails: Sequence[str] = (), *, window_s: float = WINDOW_S,
                 chart_columns: int = 60) -> None:
        self.source = source
        self.rails = tuple(rails)
        self.window_s = window_s
        self.chart_columns = chart_columns
        self._lock = threading.Lock()
        self._log: deque[str] = deque(maxlen=LOG_LINES)
        self._logged = 0  # lines ever logged (the deque forgets old ones)
        self.status = "starting"
        self._phase = ("", "", 0, 0)
        self._reset_run()

    def _say(self, line: str) -> None:
        self._log.append(line)
        self._logged += 1

    # ------------------------------------------------------------------ feeding (worker thread)
    def _reset_run(self) -> None:
        self.model = self.task = ""
        self.step = self.total_steps = self.epoch = self.samples = 0
        self.loss: float | None = None
        self.host_elapsed = 0.0
        self.device_time = 0.0
        self.energy: dict[str, float] = {}
        self.now_w: dict[str, float] = {}
        # [t_end, dt, joules per rail] per step (short steps merged), last `window_s` of device time
        self._spans: deque[list] = deque(maxlen=4 * MAX_SPANS)
        self._merged = False  # whether the last span's mapping is our own (it was merged into)
        self.metrics: dict[str, float] = {}
        self.metrics_provenance: MetricProvenance | None = None
        # per-step energy (over the rails) and host time: the spread the projections' intervals rest on
        self._step_j = Welford()
        self._step_host = Welford()

    def feed(self, event: Any) -> bool:
        """Fold one engine event in; True when the UI should hear of it at once (not a step)."""
        name = type(event).__name__
        if name == "StepBegin":
            return False
        with self._lock:
            if name == "StepEnd":
                self._step(event)
                return False
            if name == "StepEnergy":
                self._energy(event)
                return False
            if name == "ExperimentPhase":
                self._reset_run()
                self._phase = (event.role, event.policy, event.index, event.total)
                self.status = "starting"
                what = (f"baseline, {getattr(event, 'mode', None) or 'MAXN'}" if event.role == "baseline"
                        else f"policy {event.policy}")
                self._say(f"run {event.index}/{event.total}: {what}")
            elif name == "RunStarted":
                self.model, self.task, self.total_steps = event.model, event.task, event.total_steps
                self.step = getattr(event, "start_step", 0)
                self.status = "running"
                self._say(f"started {event.model}/{event.task}: {event.total_steps} steps of "
                                 f"{event.batch_size} on {event.device}")
            elif name == "EvalResult":
                self.metrics = {k: float(v) for k, v in event.metrics.items()}
                self.metrics_provenance = MetricProvenance(getattr(event, "weights", None),
                                                           getattr(event, "synthetic", None))
                shown = ", ".join(f"{k} {v:.4g}" for k, v in self.metrics.items())
                self._say(f"eval {event.split} at step {event.step}: {shown} "
                          f"{self.metrics_provenance.tag(self.source)}")
            elif name == "Paused":
                self.status = "paused"
                self._say(f"paused after step {event.step}")
            elif name == "Resumed":
                self.status = "running"
                self._say(f"resumed at step {event.step}")
            elif name == "RunFinished":
                self.status = "finished"
                self._say(f"finished: {event.step} steps, {event.samples} samples")
            elif name == "RunCancelled":
                self.status = "cancelled"
                self._say(f"cancelled after step {event.step}: {event.reason}")
            elif name == "ThermalWait":
                how = "twin idle" if event.simulated else "waited"
                self._say(f"thermal: {event.zone} {event.start_c:.0f}→{event.end_c:.0f} °C, "
                                 f"{how} {event.waited_s:.0f} s before {event.label or 'the next run'}")
            elif name == "Checkpointed":
                self._say(f"checkpoint at step {event.step}")
            else:
                self._say(name)
            return True

    def _step(self, event: Any) -> None:
        self.step, self.epoch = event.step, event.epoch
        if not math.isnan(event.loss):
            self.loss = event.loss
        self.samples += event.samples
        if self.host_elapsed > 0:  # the first step's time holds the start-up: not a step's spread
            self._step_host.add(event.elapsed_s - self.host_elapsed)
        self.host_elapsed = event.elapsed_s

    def _energy(self, event: Any) -> None:
        """One step's energy window: device time, energy per rail, the rails' power now."""
        if event.time_s <= 0:
            return
        self.device_time += event.time_s
        energy = event.energy_j
        self._step_j.add(sum(j for r, j in energy.items() if not self.rails or r in self.rails))
        for rail, joules in energy.items():
            self.energy[rail] = self.energy.get(rail, 0.0) + joules
        self.now_w = {rail: joules / event.time_s for rail, joules in energy.items()}
        self._push(self.device_time, event.time_s, energy)

    def _push(self, t_end: float, dt: float, joules: Mapping[str, float]) -> None:
        """Keep the step (the event's own mapping, not a copy); a step that follows a span shorter
        than window_s / MAX_SPANS joins it, so the history holds at most about MAX_SPANS spans."""
        spans = self._spans
        last = spans[-1] if spans else None
        # the finest span worth keeping: the chart's resolution over what it shows (finer early on)
        if last is not None and last[1] < min(self.window_s, t_end) / MAX_SPANS:
            if not self._merged:
                last[2] = dict(last[2])
                self._merged = True
            mine = last[2]
            for rail, j in joules.items():
                mine[rail] = mine.get(rail, 0.0) + j
            last[0] = t_end
            last[1] += dt
        else:
            spans.append([t_end, dt, joules])
            self._merged = False
        while spans and t_end - spans[0][0] > self.window_s:
            spans.popleft()

    def note(self, line: str) -> None:
        with self._lock:
            self._say(line)

    def end(self, status: str, line: str | None = None) -> None:
        with self._lock:
            self.status = status
            if line:
                self._say(line)

    # ------------------------------------------------------------------ reading (UI thread)
    def view(self) -> RunView:
        with self._lock:
            rails = self.rails or tuple(self.energy) or tuple(self.now_w)
            energy = sum(self.energy.get(r, 0.0) for r in rails)
            projected = eta = host_sps = dev_sps = projected_iv = eta_iv = None
            if self.step > 0 and self.total_steps:
                left = max(0, self.total_steps - self.step)
                projected = energy / self.step * self.total_steps if energy else None
                if projected is not None:
                    projected_iv = self._step_j.extrapolate(energy, left, projected)
                if self.host_elapsed > 0 and self.status in ETA_STATUSES:
                    eta = self.host_elapsed / self.step * left
                    eta_iv = self._step_host.extrapolate(0.0, left, eta)
                if self.host_elapsed > 0:
                    host_sps = self.samples / self.host_elapsed
            if self.device_time > 0 and self.samples:
                dev_sps = self.samples / self.device_time
            last = len(self._spans) - 1
            start = self._spans[-1][0] - self.window_s if self._spans else 0.0
            spans = tuple((t, dt, dict(e) if i == last and self._merged else e)
                          for i, (t, dt, e) in enumerate(self._spans) if t > start)
            role, policy, index, total = self._phase
            view = RunView(
                status=self.status, role=role, policy=policy, index=index, total_runs=total, model=self.model,
                task=self.task, step=self.step, total_steps=self.total_steps, epoch=self.epoch, loss=self.loss,
                samples=self.samples, host_elapsed_s=self.host_elapsed, host_samples_per_s=host_sps,
                device_samples_per_s=dev_sps, eta_s=eta, eta_interval=eta_iv, source=self.source, device_time_s=self.device_time,
                energy_j=energy, projected_j=projected, projected_interval=projected_iv, rails=rails, rail_now_w=dict(self.now_w),
                metrics=dict(self.metrics), metrics_provenance=self.metrics_provenance, log=tuple(self._log),
                log_count=self._logged, spans=spans,
            )
        # the chart and the rails' figures are computed outside the lock: the run goes on meanwhile
        chart, span = time_columns(spans, self.chart_columns, rails)
        per_rail = group_stats(spans, {r: (r,) for r in view.rail_now_w})
        return replace(view, chart_w=tuple(chart), chart_span_s=span,
                       rail_avg_w={r: s.avg for r, s in per_rail.items() if s.avg is not None},
                       rail_peak_w={r: s.peak for r, s in per_rail.items() if s.peak is not None})


class Welford:
    """A running mean and variance (Welford's update): a few float operations a step."""

    __slots__ = ("n", "mean", "m2")

    def __init__(self) -> None:
        self.n, self.mean, self.m2 = 0, 0.0, 0.0

    def add(self, x: float) -> None:
        self.n += 1
        d = x - self.mean
        self.mean += d / self.n
        self.m2 += d * (x - self.mean)

    def extrapolate(self, done: float, remaining: int, centre: float) -> Interval | None:
        """The interval of a projection `centre` (done + remaining steps), laid around it; None
        before MIN_SPREAD_STEPS steps."""
        if self.n < MIN_SPREAD_STEPS:
            return None
        iv = extrapolated(done, remaining, self.n, self.mean, self.m2 / (self.n - 1) if self.n > 1 else 0.0)
        if iv is None:
            return None
        shift = centre - (done + remaining * self.mean)  # the projection's own centre (steps without energy)
        high = iv.high + shift
        # never below what was spent, unless the projection itself is (more steps than planned)
        return Interval(min(max(done, iv.low + shift), high), high, iv.level, iv.basis).hull(centre)
