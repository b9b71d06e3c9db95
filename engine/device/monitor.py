"""The power monitor: samples a PowerSource, integrates energy per rail, measures named windows.

    with PowerMonitor(DeviceRailSource(device), rails="gpu+cpu") as mon:
        mon.begin_window("step")
        ...
        result = mon.end_window("step")   # WindowResult: joules per rail, total, average W

Sources that know energy exactly (the twin) give exact windows from their counter, and
their windows sample at their edges, so a run's trace has a sample per step (the twin's
time moves with its steps; reading it is a memory read). Such a source's sample is its
counter's mean power since the previous sample (the first one: the source's own reading),
so the samples account for every joule between them, whatever the power did inside a step.
The others (the INA3221 rails) are integrated with the trapezoid rule from the sampler
thread's samples: a window's edges read no sensor in the calling thread (the training loop)
while the sampler runs; a start edge is interpolated between the samples around it once the
next one arrives, an end edge holds the latest sample's power (a sensor read there would not
be newer than the sensor's own update interval anyway). Without the sampler thread (a monitor
driven by `sample_once`), edges sample when the sensor can have a newer value. Each window
keeps the count and the peak of the samples inside it as they arrive, so closing one costs
the same however long the run (no walk over the ring buffer).
A window opened with `trace=True` also keeps its power trace (engine/device/window_trace.py).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

from engine.core.errors import ConfigError, DeviceError, ImplausibleReadingError
from engine.device.power import RAIL_PRESETS, DeviceRailSource, PowerSample, PowerSource, TwinSource, resolve_rails
from engine.device.window_trace import WindowTrace, power_at
from engine.core.stats import trapezoid_j
from engine.core.provenance import Source
from engine.core.jsontypes import JsonObject

__all__ = [
    "RAIL_PRESETS",
    "DeviceRailSource",
    "PowerMonitor",
    "PowerSample",
    "PowerSource",
    "TwinSource",
    "WindowResult",
    "resolve_rails",
    "trapezoid_j",
]

log = logging.getLogger(__name__)

# A rail that reads what the board cannot show (ImplausibleReadingError) for a moment (a sensor
# glitch) is bridged: the sample is skipped and the trapezoid joins the samples around it. Past
# this long the energy between them would be a guess, not a measurement: the monitor stops.
IMPLAUSIBLE_GRACE_S = 2.0

@dataclass(frozen=True)
class WindowResult:
    name: str
    start: float  # in the source's timebase (monotonic s, or the twin's virtual s)
    end: float
    duration_s: float
    energy_j: Mapping[str, float]  # every rail the source reported
    total_energy_j: float  # over `rails` only
    avg_power_w: float  # total_energy_j / duration_s
    rails: tuple[str, ...]  # the preset's rails
    source: Source
    exact: bool  # from the source's energy counter, not integrated samples
    samples: int = 0  # samples taken inside the window (0 for exact windows)
    peak_power_w: float | None = None  # highest sample over `rails` inside it (None: exact, or no sample)
    trace: tuple[PowerSample, ...] = ()  # with begin_window(trace=True): samples whose trapezoid is energy_j

    def to_json(self) -> JsonObject:
        return {
            "name": self.name,
            "start": self.start,
            "end": self.end,
            "duration_s": self.duration_s,
            "energy_j": dict(self.energy_j),
            "total_energy_j": self.total_energy_j,
            "avg_power_w": self.avg_power_w,
            "rails": list(self.rails),
            "source": self.source.value,
            "exact": self.exact,
            "samples": self.samples,
            "peak_power_w": self.peak_power_w,
        }


@dataclass
class _Window:
    start: float
    start_energy: dict[str, float] | None  # None until a sample at or after `start` arrives
    exact: bool
    samples: int = 0  # samples after `start`, counted as they arrive
    peak_mw: float | None = None  # the highest of them, over the preset's rails
    trace: WindowTrace | None = None  # the window's power trace, when asked for


class PowerMonitor:
    """Samples a PowerSource in a thread; energy per rail; named windows that may nest and overlap."""

    def __init__(
        self,
        source: PowerSource,
        rate_hz: float = 20.0,
        rails: str | Sequence[str] = "all",
        buffer_seconds: float = 120.0,
        clock: Callable[[], float] | None = None,
    ) -> None:
        if not rate_hz > 0:
            raise ConfigError(f"sampling rate must be positive, got {rate_hz} Hz", "use e.g. 20")
        if not buffer_seconds > 0:
            raise ConfigError(f"buffer must be positive, got {buffer_seconds} s", "use e.g. 120")
        self.source = source
        self.rail_preset = rails
        self.requested_rate_hz = float(rate_hz)
        # The clock must share the samples' timebase: the source's own clock where it has one.
        self._clock: Callable[[], float] = clock or getattr(source, "now", None) or time.monotonic
        sensor_s = float(getattr(source, "min_interval_s", 0.0) or 0.0)
        self.interval_s = max(1.0 / rate_hz, sensor_s)
        # Why the sampler runs slower than asked (None: it runs at the asked rate); said in
        # the log here and by the clients that print a rate (`slm-dvfs monitor`).
        self.rate_note: str | None = None
        if self.interval_s > 1.0 / rate_hz:
            why = getattr(source, "interval_reason", None) or f"the sensor updates only every {sensor_s * 1000.0:.0f} ms"
            self.rate_note = f"sampling at {1.0 / self.interval_s:.3g} Hz, not the {rate_hz:.3g} Hz asked: {why}"
            log.info("%s", self.rate_note)
        self._buffer: deque[PowerSample] = deque(maxlen=math.ceil(buffer_seconds / self.interval_s) + 1)
        self._lock = threading.Lock()
        self._rails: tuple[str, ...] | None = None
        self._last: PowerSample | None = None
        self._prev: PowerSample | None = None
        self._cum: dict[str, float] = {}  # joules per rail up to _last.t
        self._cum_prev: dict[str, float] = {}  # ... up to _prev.t
        self._counter: tuple[float, dict[str, float]] | None = None  # an exact source's reading at _last
        self._count = 0
        self._windows: dict[str, _Window] = {}
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._implausible_since: float | None = None  # when the current run of implausible readings began
        self.skipped = 0  # implausible samples skipped (bridged) so far

    # ------------------------------------------------------------------ properties
    @property
    def rate_hz(self) -> float:
        """The effective sampling rate, after the clamp to the sensor's interval."""
        return 1.0 / self.interval_s

    @property
    def rails(self) -> tuple[str, ...] | None:
        """The preset's rails, known after the first sample (None before)."""
        return self._rails

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def sample_count(self) -> int:
        """Samples taken in so far (new values only: stale reads are dropped)."""
        return self._count

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> "PowerMonitor":
        """Take a first sample here (so a bad rail preset fails now), then sample in a thread."""
        if self._thread is not None:
            return self
        self.sample_once()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="power-monitor", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop and join the sampler; raises what it raised, if anything."""
        thread, self._thread = self._thread, None
        if thread is not None:
            self._stop.set()
            thread.join()
        self._raise_pending()

    def __enter__(self) -> "PowerMonitor":
        return self.start()

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self.stop()
            return
        try:  # do not mask the error already on its way out
            self.stop()
        except Exception:
            log.exception("the power sampler failed as well")

    def _run(self) -> None:
        next_t = time.monotonic() + self.interval_s
        while not self._stop.wait(max(0.0, next_t - time.monotonic())):
            try:
                self.sample_once(raise_pending=False)
            except BaseException as exc:  # kept for stop()/end_window(), never lost
                log.error("power sampling stopped: %s", exc)
                self._error = exc
                return
            next_t += self.interval_s
            now = time.monotonic()
            if next_t < now:  # fell behind (slow read, suspended process): do not burst
                next_t = now + self.interval_s

    def _raise_pending(self) -> None:
        err, self._error = self._error, None
        if err is not None:
            raise err

    # ------------------------------------------------------------------ sampling
    def sample_once(self, raise_pending: bool = True) -> PowerSample | None:
        """Read the source once and take the sample in; None when it brought nothing new."""
        if raise_pending:
            self._raise_pending()
        counter = self.source.energy_counter()
        if counter is not None:
            with self._lock:
                return self._ingest_counter(*counter)
        try:
            sample = self.source.read()
        except ImplausibleReadingError as exc:
            self._skip_implausible(exc)
            return None
        self._implausible_since = None
        with self._lock:
            return sample if self._ingest(sample) else None

    def _skip_implausible(self, exc: ImplausibleReadingError) -> None:
        """Bridge a brief implausible reading; raise it when nothing was measured yet (no run
        starts on a faulty sensor) or when it has lasted IMPLAUSIBLE_GRACE_S."""
        if self._last is None:
            raise exc
        now = self._clock()
        if self._implausible_since is None:
            self._implausible_since = now
            log.warning("power sample skipped and bridged: %s", exc.what)
        elif now - self._implausible_since > IMPLAUSIBLE_GRACE_S:
            raise ImplausibleReadingError(
                f"{exc.what}, for {now - self._implausible_since:.1f} s", exc.remedy, rail=exc.rail) from exc
        self.skipped += 1
        return None

    def _ingest_counter(self, t: float, energy: Mapping[str, float]) -> PowerSample | None:
        """(Under the lock.) An exact source's sample at its counter reading (t, joules per rail): the
        mean power since the last sample, so the samples hold every joule (an instant reading at a
        step's end has only that moment's power: a dynamically padded step's last part's, say)."""
        last, before = self._last, self._counter
        if last is not None and t <= last.t:
            return None  # stale: its time has not moved
        if before is not None and last is not None and before[0] == last.t and set(energy) <= set(before[1]):
            dt = t - before[0]
            sample, mean = PowerSample(t, {r: (j - before[1][r]) * 1000.0 / dt for r, j in energy.items()}), True
        else:  # the first sample: nothing to take a mean over, so the source's own reading
            sample, mean = PowerSample(t, dict(self.source.read().rails_mw)), False
        if not self._ingest(sample, mean=mean):
            return None
        self._counter = (t, dict(energy))
        return sample

    def _ingest(self, sample: PowerSample, *, mean: bool = False) -> bool:
        """Take a sample in (under the lock); `mean`: its power is the mean since the last sample
        (an exact source's), not an instant reading."""
        last = self._last
        if last is not None and sample.t <= last.t:
            return False  # stale: the sensor (or tegrastats) has no newer value yet
        if self._rails is None:
            self._rails = resolve_rails(self.rail_preset, sample.rails_mw)
            log.info("power rails: %s (%s)", ", ".join(self._rails), self.source.source)
        else:
            lost = [r for r in self._rails if r not in sample.rails_mw]
            if lost:
                raise DeviceError(
                    f"rail{'s' if len(lost) > 1 else ''} {', '.join(lost)} vanished from the power source",
                    "check the board's INA3221 driver and restart the run",
                )
        self._prev, self._cum_prev = last, dict(self._cum)
        if last is not None:
            dt = sample.t - last.t
            for rail, p in sample.rails_mw.items():
                p0 = p if mean else last.rails_mw.get(rail)
                if p0 is not None:
                    self._cum[rail] = self._cum.get(rail, 0.0) + (p0 + p) * 0.5 * dt / 1000.0
        for rail in sample.rails_mw:
            self._cum.setdefault(rail, 0.0)
        self._last = sample
        self._count += 1
        self._buffer.append(sample)
        if self._windows:
            total = sum(sample.rails_mw.get(r, 0.0) for r in self._rails)
            for w in self._windows.values():
                if w.start_energy is None and w.start <= sample.t:
                    w.start_energy = self._energy_at(w.start)
                    if w.trace is not None:  # the start edge, at the power the integral takes there
                        w.trace.edge(w.start, self._power_at(w.start))
                if sample.t <= w.start:
                    continue
                if w.trace is not None:
                    w.trace.add(sample, w.start if last is None else max(last.t, w.start))
                if not w.exact:
                    w.samples += 1
                    if w.peak_mw is None or total > w.peak_mw:
                        w.peak_mw = total
        return True

    def _energy_at(self, t: float) -> dict[str, float]:
        """Cumulative joules per rail at time t: interpolated between the last two samples,
        the last power held where t lies beyond them."""
        last, prev = self._last, self._prev
        assert last is not None
        if t >= last.t or prev is None or t < prev.t:
            # beyond the samples (or before a lone first one): hold the nearest power
            return {r: e + last.rails_mw.get(r, 0.0) * (t - last.t) / 1000.0 for r, e in self._cum.items()}
        f = (t - prev.t) / (last.t - prev.t)
        out = {}
        for r, e in self._cum.items():
            p0 = prev.rails_mw.get(r)
            p1 = last.rails_mw.get(r, 0.0)
            if p0 is None:
                out[r] = e - p1 * (last.t - t) / 1000.0
                continue
            pt = p0 + f * (p1 - p0)
            out[r] = self._cum_prev.get(r, 0.0) + (p0 + pt) * 0.5 * (t - prev.t) / 1000.0
        return out

    def _power_at(self, t: float) -> dict[str, float]:
        """Power per rail at time t, as `_energy_at` integrates it."""
        assert self._last is not None
        return power_at(self._prev, self._last, t)

    def latest(self) -> PowerSample | None:
        return self._last

    def recent(self, seconds: float) -> list[PowerSample]:
        """Samples of the last `seconds` (as far back as the ring buffer reaches), oldest first."""
        with self._lock:
            if not self._buffer:
                return []
            cutoff = self._buffer[-1].t - seconds
            return [s for s in self._buffer if s.t >= cutoff]

    def since(self, t: float) -> list[PowerSample]:
        """Samples newer than `t` still in the ring buffer, oldest first (cheap when few are)."""
        with self._lock:
            out = []
            for s in reversed(self._buffer):
                if s.t <= t:
                    break
                out.append(s)
        out.reverse()
        return out

    def energy_j(self) -> dict[str, float]:
        """Joules per rail integrated since the first sample."""
        with self._lock:
            return dict(self._cum)

    # ------------------------------------------------------------------ windows
    def open_windows(self) -> tuple[str, ...]:
        return tuple(self._windows)

    def begin_window(self, name: str, *, trace: bool = False) -> None:
        """Open a named window now; windows may nest and overlap, names must be unique while open.
        `trace`: keep the window's power trace (WindowResult.trace; the module's docstring)."""
        self._raise_pending()
        if name in self._windows:
            raise ConfigError(f"window {name!r} is already open", "end it first, or give the new one another name")
        counter = self.source.energy_counter()
        if counter is not None:
            t, energy = counter
            with self._lock:  # the edge's sample is this very reading: the trace starts where the window does
                self._ingest_counter(t, energy)
                if self._rails is None:
                    self._rails = resolve_rails(self.rail_preset, energy)
                self._windows[name] = _Window(t, dict(energy), exact=True, trace=WindowTrace(True) if trace else None)
            return
        edge = self._edge_time()
        with self._lock:
            # None: the sampler runs, so the edge's time is taken under the lock (no older sample counts after it)
            t = self._clock() if edge is None else edge
            last = self._last
            ready = last is not None and last.t >= t
            window = _Window(t, self._energy_at(t) if ready else None, exact=False,
                             trace=WindowTrace(False) if trace else None)
            if ready and window.trace is not None:
                window.trace.edge(t, self._power_at(t))
                if last is not None and last.t > t:
                    window.trace.add(last, t)
            self._windows[name] = window

    def end_window(self, name: str) -> WindowResult:
        """Close a window: its duration and energy (raises what the sampler raised, if anything)."""
        self._raise_pending()
        w = self._windows.get(name)
        if w is None:
            opened = ", ".join(repr(n) for n in self._windows) or "none"
            raise ConfigError(f"no open window named {name!r} (open: {opened})", "call begin_window(name) first")
        if w.exact:
            counter = self.source.energy_counter()
            if counter is None:
                raise DeviceError("the power source stopped offering its energy counter", "restart the run")
            end, end_energy = counter
            with self._lock:  # the edge's sample is this very reading: the trace ends where the window does
                self._ingest_counter(end, end_energy)
                trace = () if w.trace is None else tuple(w.trace.samples)
                del self._windows[name]
        else:
            edge = self._edge_time()
            with self._lock:  # the sampler's latest sample; no sensor read in this thread
                end = self._clock() if edge is None else edge
                end_energy = self._energy_at(end)
                if w.start_energy is None:  # no sample after the start yet: hold the last power
                    w.start_energy = self._energy_at(w.start)
                    if w.trace is not None:
                        w.trace.edge(w.start, self._power_at(w.start))
                trace = ()  # the end edge, at the power the integral held there
                if w.trace is not None and end > w.start:
                    trace = w.trace.close(end, self._power_at(end))
                del self._windows[name]
        assert w.start_energy is not None and self._rails is not None
        energy = {r: end_energy[r] - w.start_energy.get(r, 0.0) for r in end_energy}
        total = sum(energy.get(r, 0.0) for r in self._rails)
        duration = end - w.start
        return WindowResult(
            name=name,
            start=w.start,
            end=end,
            duration_s=duration,
            energy_j=energy,
            total_energy_j=total,
            avg_power_w=total / duration if duration > 0 else 0.0,
            rails=self._rails,
            source=self.source.source,
            exact=w.exact,
            samples=w.samples,
            peak_power_w=None if w.peak_mw is None else w.peak_mw / 1000.0,
            trace=trace,
        )

    def _edge_time(self) -> float | None:
        """A window edge of an integrating source: None while the sampler thread runs (the
        caller reads the clock under the lock and uses the latest sample: no sensor read in
        this thread); else the edge's time, sampled here when the sensor can have a newer value."""
        if self.running:
            return None
        t = self._clock()
        self._fresh_sample(t)
        return t

    def _fresh_sample(self, t: float) -> None:
        """Sample at a window edge unless the sensor cannot have a newer value yet."""
        last = self._last
        sensor_s = float(getattr(self.source, "min_interval_s", 0.0) or 0.0)
        if last is None or t - last.t >= sensor_s:
            self.sample_once(raise_pending=False)
