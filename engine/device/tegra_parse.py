"""tegrastats output, parsed: its lines (L4T r28 to r39, JetPack 4 to 7) and saved logs, with energy per rail.

Pure parsing, no process: the live runner is `engine/device/tegrastats.py` (as jetson-stats
splits tegra_parse.py from tegrastats.py).

A line looks like (Orin, r35; r36 is alike with lower-case temperature names):
    11-21-2023 10:15:01 RAM 2371/62841MB (lfb 14629x4MB) SWAP 0/31421MB (cached 0MB)
    CPU [1%@729,off,...] EMC_FREQ 0%@2133 GR3D_FREQ 0%@[305,305] VIC_FREQ 729 APE 174
    CPU@44.812C tj@44.812C ... VDD_GPU_SOC 2399mW/2399mW VDD_CPU_CV 400mW/400mW ...
Rails are `NAME instant/average` in mW (older boards print no unit, `POM_5V_IN 3000/3000`); they come
last. JetPack 7 (r38/r39) prints `NAME instant/average/peak` and temperatures as pairs,
`cpu@52.968C/52.968C`: the first value is the current one (as jetson-stats reads it), the second is
not used. A JetPack 7.2 line (AGX Orin, r39.2), from jetson-stats' tests
(https://github.com/rbonghi/jetson_stats/blob/master/jtop/tests/test_06_tegra_parse.py):
    ... cpu@52.968C/52.968C soc2@48.406C/48.406C ... VDD_GPU_SOC 5139mW/5139mW/5139mW VDD_CPU_CV ...
The total of a line's rails is its rail set's (engine/device/rails.py): VDD_IN on an Orin Nano/NX.

A log is read as measured, so what no board writes is left out, saying why: a line with a value
the board cannot show (engine.core.plausible: a rail above twice the module's power limit, more
RAM than it has) is skipped like a torn one; dates that go backwards, or jump by more than a
log's gap, refuse the log (two recordings in one file), naming the lines.

A saved log is read line by line, in two passes (`scan_log`, then `LogScan.read`), never whole: an hour
at 10 ms is 360k lines, and the memory an import takes does not grow with them.
"""

from __future__ import annotations

import io
import logging
import math
import os
import re
from array import array
from collections import Counter
from dataclasses import dataclass, field, fields
from datetime import datetime
from pathlib import Path
from typing import Callable, Iterable, Iterator, Mapping, Sequence, TypeVar

from engine.core.errors import ConfigError, SlmDvfsError
from engine.core.plausible import BoardLimits, log_gap_s
from engine.core.provenance import Source
from engine.core.userinput import open_user_file
from engine.core.stats import RunningTrapezoid
from engine.device.power import PowerSample
from engine.device.rails import total_of

log = logging.getLogger(__name__)

# Rail labels that mean "not connected" (r35 prints `NC 0mW/0mW` for the unused INA channels).
_NOT_CONNECTED = frozenset({"NC"})
# Thermal zones that are powered down read -256 C (CV0/CV1/GPU on an idle Orin).
_TEMP_OFFLINE_C = -256.0
# Warn about the first few bad lines one by one; the rest only in the summary.
WARN_LINES = 5
# tegrastats prints numbers of a few digits; a longer run of digits is no field of it (and int()
# of thousands of digits fails with its own message).
_LONG_NUMBER = re.compile(r"[0-9]{13,}")
# A day of tegrastats at a 100 ms interval is about 350 MB; anything larger is not one recording.
MAX_LOG_BYTES = 1 << 30

_DATE_RE = re.compile(
    r"^\s*(?P<date>\d{1,2}-\d{1,2}-\d{4}|\d{4}-\d{1,2}-\d{1,2})[ T](?P<time>\d{1,2}:\d{2}:\d{2}(?:\.\d+)?)\s+",
    re.ASCII,
)
_RAM_RE = re.compile(r"\bRAM (\d+)/(\d+)([KMG])B\b", re.ASCII)
_CPU_RE = re.compile(r"\bCPU \[([^\]]*)\](?:@(\d+))?", re.ASCII)
_CPU_ENTRY_RE = re.compile(r"(\d+(?:\.\d+)?)%(?:@(\d+))?", re.ASCII)
# `GR3D_FREQ 0%@[305,305]`, `GR3D_FREQ 0%@305`, `GR3D_FREQ 0%`, `GR3D_FREQ @[1000,1000]` (Thor)
_ENGINE_RE = r"\b{name} (?:(\d+)%)?(?:@(?:\[([0-9,]+)\]|(\d+)))?(?=\s|$)"
_EMC_RE = re.compile(_ENGINE_RE.format(name="EMC_FREQ"), re.ASCII)
_GR3D_RE = re.compile(_ENGINE_RE.format(name="GR3D_FREQ"), re.ASCII)
# `CPU@44.812C`, or JetPack 7's pair `cpu@52.968C/52.968C` (the first is the current reading).
_TEMP_RE = re.compile(r"(?<![\w%])([A-Za-z][\w]*)@(-?\d+(?:\.\d+)?)C(?:/-?\d+(?:\.\d+)?C)?(?=\s|$)", re.ASCII)
# Every value carries the same unit: `2399mW/2399mW`, `1.2W/1.2W`, or none (`2545/2547`, r32); JetPack 7
# adds the peak: `5139mW/5139mW/5139mW` (instant/average/peak).
_NUM = r"(\d+(?:\.\d+)?)"
_RAIL_RE = re.compile(rf"\b([A-Za-z][\w]*) {_NUM}(mW|W|)/{_NUM}\3(?:/{_NUM}\3)?(?=\s|$)", re.ASCII)
_UNIT_MB = {"K": 1 / 1024, "M": 1.0, "G": 1024.0}


class TegrastatsFormatError(SlmDvfsError):
    """A line or a log that is not tegrastats output."""


@dataclass(frozen=True)
class CpuCore:
    index: int  # 0-based, as cpuN in sysfs
    online: bool
    load_pct: float | None = None
    freq_mhz: int | None = None


@dataclass(frozen=True)
class EngineLoad:
    """An `X%@Y` field (EMC_FREQ, GR3D_FREQ); either part may be absent."""

    load_pct: float | None
    freq_mhz: int | None  # the highest of per-GPC frequencies where an array is printed
    freqs_mhz: tuple[int, ...] = ()  # every frequency printed (one per GPC on Orin r35)


@dataclass(frozen=True)
class RailPower:
    instant_mw: float
    average_mw: float  # tegrastats' running average since it started
    peak_mw: float | None = None  # the highest since it started (JetPack 7 prints it; older ones do not)


@dataclass(frozen=True)
class TegrastatsSample:
    timestamp: datetime | None  # present when tegrastats prefixed the line with a date
    ram_used_mb: float
    ram_total_mb: float
    cpus: tuple[CpuCore, ...] = ()
    emc: EngineLoad | None = None
    gr3d: EngineLoad | None = None
    temperatures_c: Mapping[str, float] = field(default_factory=dict)
    rails: Mapping[str, RailPower] = field(default_factory=dict)

    def rails_mw(self) -> dict[str, float]:
        """Instant power per rail, mW."""
        return {name: r.instant_mw for name, r in self.rails.items()}


def parse_line(line: str) -> TegrastatsSample:
    """Parse one tegrastats line; raises TegrastatsFormatError when it is not one (or is cut short)."""
    text = line.strip()
    if not text:
        raise TegrastatsFormatError("empty line", "skip it")
    long_number = _LONG_NUMBER.search(text)
    if long_number:
        digits = long_number.group()
        raise TegrastatsFormatError(f"a number of {len(digits)} digits ({_clip(digits, 20)}): no field tegrastats "
                                    "prints", "the line is corrupt; it is skipped")
    timestamp, text = _dated(text)
    ram = _RAM_RE.search(text)
    if ram is None:
        raise TegrastatsFormatError(
            f"no `RAM used/totalMB` field in {_clip(line)!r}",
            "this is not a tegrastats line; check that the file is tegrastats output",
        )
    rails, last_rail_end, units_seen = _rails(text)
    # Rails close every known format, so anything after the last one is a torn write.
    if last_rail_end is not None and text[last_rail_end:].strip():
        raise TegrastatsFormatError(
            f"line ends in an unreadable field {_clip(text[last_rail_end:].strip())!r}",
            "the line was probably cut short (tegrastats killed mid-write); it is skipped",
        )
    if text.count("mW") != units_seen:  # an `mW` outside any whole rail: a torn one
        raise TegrastatsFormatError(
            f"a power rail in {_clip(line)!r} is incomplete",
            "the line was probably cut short (tegrastats killed mid-write); it is skipped",
        )
    unit = _UNIT_MB[ram.group(3)]
    return TegrastatsSample(
        timestamp=timestamp,
        ram_used_mb=int(ram.group(1)) * unit,
        ram_total_mb=int(ram.group(2)) * unit,
        cpus=_parse_cpus(text),
        emc=_parse_engine(_EMC_RE, text),
        gr3d=_parse_engine(_GR3D_RE, text),
        temperatures_c={
            name: float(val) for name, val in _TEMP_RE.findall(text) if float(val) > _TEMP_OFFLINE_C
        },
        rails=rails,
    )


def _dated(text: str) -> tuple[datetime | None, str]:
    """A stripped line's date (None without one) and the rest of it."""
    m = _DATE_RE.match(text)
    if m is None:
        return None, text
    return _parse_date(m.group("date"), m.group("time")), text[m.end():]


def _rails(text: str) -> tuple[dict[str, RailPower], int | None, int]:
    """The rails of a line's text after its date, in its order (`NC` left out); where the last one ends;
    how many `mW` units they hold."""
    rails: dict[str, RailPower] = {}
    last_rail_end = None
    units_seen = 0
    for rm in _RAIL_RE.finditer(text):
        last_rail_end = rm.end()
        units_seen += rm.group(0).count("mW")
        name = rm.group(1)
        if name in _NOT_CONNECTED:
            continue
        scale = 1000.0 if rm.group(3) == "W" else 1.0
        peak = None if rm.group(5) is None else float(rm.group(5)) * scale
        rails[name] = RailPower(float(rm.group(2)) * scale, float(rm.group(4)) * scale, peak)
    return rails, last_rail_end, units_seen


def _parse_date(date: str, clock: str) -> datetime:
    fmt_date = "%Y-%m-%d" if len(date.split("-")[0]) == 4 else "%m-%d-%Y"
    fmt_time = "%H:%M:%S.%f" if "." in clock else "%H:%M:%S"
    try:
        return datetime.strptime(f"{date} {clock}", f"{fmt_date} {fmt_time}")
    except ValueError:
        raise TegrastatsFormatError(f"bad date {date} {clock}", "the line's date prefix is corrupt") from None


def _parse_cpus(text: str) -> tuple[CpuCore, ...]:
    if "CPU [" in text and _CPU_RE.search(text) is None:
        raise TegrastatsFormatError("unterminated `CPU [` field", "the line was cut short; it is skipped")
    m = _CPU_RE.search(text)
    if m is None:
        return ()
    shared_mhz = int(m.group(2)) if m.group(2) else None  # r28 style: `CPU [17%,13%]@408`
    cores = []
    for idx, entry in enumerate(e.strip() for e in m.group(1).split(",")):
        if entry == "off":
            cores.append(CpuCore(idx, online=False))
            continue
        cm = _CPU_ENTRY_RE.fullmatch(entry)
        if cm is None:
            raise TegrastatsFormatError(f"CPU entry {entry!r} is not `N%@MHz` or `off`", "the line is skipped")
        freq = int(cm.group(2)) if cm.group(2) else shared_mhz
        cores.append(CpuCore(idx, online=True, load_pct=float(cm.group(1)), freq_mhz=freq))
    return tuple(cores)


def _parse_engine(regex: re.Pattern[str], text: str) -> EngineLoad | None:
    m = regex.search(text)
    if m is None:
        return None
    load, array, single = m.groups()
    freqs = tuple(int(f) for f in array.split(",") if f) if array else ((int(single),) if single else ())
    return EngineLoad(
        load_pct=float(load) if load is not None else None,
        freq_mhz=max(freqs) if freqs else None,
        freqs_mhz=freqs,
    )


def _clip(s: str, n: int = 80) -> str:
    return s if len(s) <= n else s[: n - 3] + "..."


# --------------------------------------------------------------------------- log import


@dataclass(frozen=True)
class ParseResult:
    samples: tuple[TegrastatsSample, ...]
    line_numbers: tuple[int, ...]  # 1-based line of each sample
    skipped: int  # malformed lines left out (blank lines are not counted)


def sample_problem(sample: TegrastatsSample, limits: BoardLimits) -> str | None:
    """Why a parsed line cannot be this board's (a rail over what it can draw, more RAM than it
    has); None when it can."""
    for name, rail in sample.rails.items():
        for kind, mw in (("", rail.instant_mw), (" average", rail.average_mw), (" peak", rail.peak_mw or 0.0)):
            problem = limits.power_problem(mw / 1000.0, f"rail {name}{kind}")
            if problem:
                return problem
    return limits.memory_problem(sample.ram_total_mb, sample.ram_used_mb)


def parse_lines(lines: Iterable[str], origin: str = "<lines>", limits: BoardLimits | None = None) -> ParseResult:
    """Parse many lines, skipping malformed ones with a warning (one bad line must not sink a log);
    with `limits`, a line with a value the board cannot show is skipped too, saying why."""
    samples: list[TegrastatsSample] = []
    numbers: list[int] = []
    skipped = 0
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            sample = parse_line(line)
            problem = None if limits is None else sample_problem(sample, limits)
            if problem:
                raise TegrastatsFormatError(f"implausible: {problem}", "the line is skipped")
            samples.append(sample)
            numbers.append(number)
        except TegrastatsFormatError as exc:
            skipped += 1
            if skipped <= WARN_LINES:
                log.warning("%s:%d: skipped: %s", origin, number, exc.what)
    if skipped > WARN_LINES:
        log.warning("%s: %d malformed lines skipped in all", origin, skipped)
    return ParseResult(tuple(samples), tuple(numbers), skipped)


@dataclass(frozen=True)
class LogSummary:
    """A tegrastats log's figures, read line by line (`read_log`): what a measured run stores, without its lines."""

    path: Path
    count: int  # samples integrated
    rails: tuple[str, ...]
    energy_j: Mapping[str, float]  # trapezoid over the instant values, per rail
    skipped: int  # malformed or inconsistent lines left out
    started_at: datetime | None  # the first line's date, where lines carry one
    timing: str  # "timestamps", "timestamps+spread" or "interval"
    duration_s: float  # from the first sample to the last
    source: Source = Source.MEASURED

    @property
    def total_energy_j(self) -> float:
        """The module's energy: its input rail's where the log has one (VDD_IN), else the rails' sum."""
        return total_of(self.energy_j)

    @property
    def avg_power_w(self) -> float:
        return self.total_energy_j / self.duration_s if self.duration_s > 0 else 0.0


@dataclass(frozen=True)
class TegrastatsLog(LogSummary):
    """An imported tegrastats log with every sample (`import_log`: for logs small enough to hold whole)."""

    samples: tuple[TegrastatsSample, ...] = ()
    times_s: tuple[float, ...] = ()  # seconds since the first sample

    def power_samples(self) -> list[PowerSample]:
        """The trace as PowerSamples (instant mW), the monitor's currency."""
        return [PowerSample(t, s.rails_mw()) for t, s in zip(self.times_s, self.samples)]


def read_log(path: str | os.PathLike[str], interval_ms: float | None = None, limits: BoardLimits | None = None,
             on_sample: Callable[[PowerSample], None] | None = None) -> LogSummary:
    """Read a tegrastats log (`tegrastats --interval N --logfile F`) into its times and energy per rail, line
    by line: memory does not grow with the log (an hour at 10 ms is 360k lines). `on_sample` is given each
    sample kept, timed, in order (the trace to store). `scan_log(...).read(on_sample)` is the same in two
    steps, for a caller that needs the log's span before its samples (a down-sampler)."""
    return scan_log(path, interval_ms, limits).read(on_sample)


def import_log(path: str | os.PathLike[str], interval_ms: float | None = None,
               limits: BoardLimits | None = None) -> TegrastatsLog:
    """`read_log` with every sample and its time kept (memory grows with the log: for short logs and
    analysis; `slm-dvfs import-tegrastats` streams through read_log)."""
    scan = scan_log(path, interval_ms, limits)
    energy = RunningTrapezoid(len(scan.rails))
    samples, times = [], []
    for t, sample in _timed(scan, parse_line):
        energy.add(t, [sample.rails[r].instant_mw for r in scan.rails])
        samples.append(sample)
        times.append(t)
    summary = scan.summary(energy, times[-1] if times else 0.0)
    return TegrastatsLog(**{f.name: getattr(summary, f.name) for f in fields(LogSummary)},
                         samples=tuple(samples), times_s=tuple(times))


def _lines(p: Path) -> Iterator[tuple[int, str]]:
    """The log's non-blank lines with their numbers, read as a stream."""
    with open_user_file(p, "tegrastats log", max_bytes=MAX_LOG_BYTES,
                        remedy="pass a log written by `tegrastats --logfile FILE`") as raw:
        with io.TextIOWrapper(raw, encoding="utf-8", errors="replace") as fh:
            for number, line in enumerate(fh, start=1):
                if line.strip():
                    yield number, line


def _sample_of(line: str, limits: BoardLimits) -> TegrastatsSample:
    """A line's sample, or TegrastatsFormatError where it is not one this board can have written."""
    sample = parse_line(line)
    problem = sample_problem(sample, limits)
    if problem:
        raise TegrastatsFormatError(f"implausible: {problem}", "the line is skipped")
    return sample


class _RailSet:
    """What the first pass learns of the lines of one rail set, in order: their count, dates and steps. The
    log's usual rail set is the one integrated (a line missing a rail cannot be); which that is is known
    only at the end, so each set found keeps its own (a log has one, or a few)."""

    def __init__(self, number: int, sample: TegrastatsSample) -> None:
        self.rails = tuple(sample.rails)  # in the first line's order
        self.rails_seen = sorted(sample.rails)
        self.first_lines: list[int] = []  # the first few, to warn about should another set be the usual one
        self.count = 0
        self.started_at = sample.timestamp
        self.dated = True  # every line of the set carries a date
        self.increasing = True  # every date after the one before
        self.secs = 0.0  # the last line's, since the first's
        self.run = 0  # lines in the last run of one date
        self.number = number  # the last line's number
        self.backwards: tuple[float, int, int] | None = None  # the first step back: (step, line before, line)
        # Steps each longer than all before it: the first step over any gap is one of them (logarithmically few).
        self.rises: list[tuple[float, int, int]] = []
        self.positive: Counter[float] = Counter()  # the steps forward, for their median (dates in whole seconds: few)

    def add(self, number: int, sample: TegrastatsSample) -> None:
        if len(self.first_lines) < WARN_LINES:
            self.first_lines.append(number)
        self.count += 1
        if self.dated and sample.timestamp is None:
            self.dated = False
        if self.dated and self.started_at is not None and sample.timestamp is not None:
            secs = (sample.timestamp - self.started_at).total_seconds()
            if self.count > 1:
                step = secs - self.secs
                if step < 0 and self.backwards is None:
                    self.backwards = (step, self.number, number)
                if step > 0:
                    self.positive[step] += 1
                if not secs > self.secs:
                    self.increasing = False
                if not self.rises or step > self.rises[-1][0]:
                    self.rises.append((step, self.number, number))
            self.run = self.run + 1 if self.count > 1 and secs == self.secs else 1
            self.secs = secs
        self.number = number

    def median_step(self) -> float:
        """statistics.median of the positive steps (1.0 where there are none), from their counts."""
        total = sum(self.positive.values())
        if not total:
            return 1.0
        wanted = (total // 2,) if total % 2 else (total // 2 - 1, total // 2)
        values: list[float] = []
        seen = 0
        for step in sorted(self.positive):
            seen += self.positive[step]
            while len(values) < len(wanted) and wanted[len(values)] < seen:
                values.append(step)
        return values[0] if total % 2 else (values[0] + values[1]) / 2


@dataclass(frozen=True)
class LogScan:
    """A tegrastats log read once (`scan_log`): its rail set, timing and span, everything `read` needs to
    time and integrate each line kept, in a second pass."""

    path: Path
    limits: BoardLimits
    rails: tuple[str, ...]
    usual: frozenset[str]
    count: int
    skipped: int
    started_at: datetime | None
    timing: str
    interval_ms: float | None
    t_last: float
    dropped: array[int]  # the lines not parsed or not plausible, in order (none in a log as tegrastats writes it)

    @property
    def duration_s(self) -> float:
        """From the first sample (at 0) to the last."""
        return self.t_last - 0.0

    def read(self, on_sample: Callable[[PowerSample], None] | None = None) -> LogSummary:
        """The second pass: each line kept timed and integrated; `on_sample` is given each as a PowerSample."""
        energy = RunningTrapezoid(len(self.rails))
        t = 0.0
        for t, sample in _timed(self, _reading):
            energy.add(t, [sample.rails[r].instant_mw for r in self.rails])
            if on_sample is not None:
                on_sample(PowerSample(t, sample.rails_mw()))
        return self.summary(energy, t)

    def summary(self, energy: RunningTrapezoid, last_t: float) -> LogSummary:
        """The figures, once the second pass has integrated `energy` up to its last sample, at `last_t`."""
        if energy.count != self.count or last_t != self.t_last:
            raise _changed(self.path)
        if self.skipped:
            log.info("%s: imported %d samples, skipped %d lines", self.path, self.count, self.skipped)
        return LogSummary(path=self.path, count=self.count, rails=self.rails,
                          energy_j=dict(zip(self.rails, energy.joules())), skipped=self.skipped,
                          started_at=self.started_at, timing=self.timing, duration_s=self.duration_s)


def _changed(p: Path) -> ConfigError:
    return ConfigError(f"{p} changed while it was read (its lines differ between the two passes)",
                       "import it once nothing writes to it any more (stop tegrastats, or copy the log first)")


def scan_log(path: str | os.PathLike[str], interval_ms: float | None = None,
             limits: BoardLimits | None = None) -> LogScan:
    """The first pass over a log, line by line: skip what no board writes, find the usual rail set, check
    the dates, choose the timing.

    Times come from the lines' dates where present. tegrastats prints whole seconds, so when
    several lines share a second: with `interval_ms` they are index x interval from the first
    date; without it they are spread evenly over their second. Lines without dates need
    `interval_ms`. Lines the board (`limits`: its profile's; None: the default profile's) cannot
    have written are skipped; dates out of order or with a gap no log has refuse the log here,
    before any sample is read out."""
    p = Path(path)
    if interval_ms is not None and not (math.isfinite(interval_ms) and interval_ms > 0):
        raise ConfigError(f"interval_ms must be a positive, finite number of milliseconds, got {interval_ms}",
                          "pass the --interval the log was recorded with, in ms (tegrastats' default is 1000)")
    if limits is None:
        from engine.device.twin.profile import limits_for

        limits = limits_for(None)
    origin = str(p)
    sets: dict[frozenset[str], _RailSet] = {}
    skipped = 0
    dropped = array("q")
    for number, line in _lines(p):
        try:
            sample = _sample_of(line, limits)
        except TegrastatsFormatError as exc:
            dropped.append(number)
            skipped += 1
            if skipped <= WARN_LINES:
                log.warning("%s:%d: skipped: %s", origin, number, exc.what)
            continue
        key = frozenset(sample.rails)
        found = sets.get(key)
        if found is None:
            found = sets[key] = _RailSet(number, sample)
        found.add(number, sample)
    if skipped > WARN_LINES:
        log.warning("%s: %d malformed lines skipped in all", origin, skipped)
    if not sets:
        raise TegrastatsFormatError(
            f"{p} holds no tegrastats line ({skipped} malformed lines)",
            "pass a log written by `tegrastats --logfile FILE` (or its captured stdout)",
        )
    # The most common set of rails (the first found of equally common ones); a line missing one cannot be integrated.
    usual_key, usual = max(sets.items(), key=lambda kv: kv[1].count)
    others = sorted((n, s.rails_seen) for k, s in sets.items() if k != usual_key for n in s.first_lines)
    for number, rails in others[:max(0, WARN_LINES - skipped)]:
        log.warning("%s:%d: skipped: rails %s differ from the log's %s", origin, number, rails, usual.rails_seen)
    skipped += sum(s.count for k, s in sets.items() if k != usual_key)
    if not usual.rails:
        raise TegrastatsFormatError(
            f"{p} has no power rails (`NAME XmW/YmW` fields)",
            "record on a board whose tegrastats prints rails (run it with sudo on older L4T)",
        )
    timing, t_last = _timing(usual, interval_ms, p)
    return LogScan(path=p, limits=limits, rails=usual.rails, usual=usual_key, count=usual.count, skipped=skipped,
                 started_at=usual.started_at, timing=timing, interval_ms=interval_ms, t_last=t_last, dropped=dropped)


def _timing(lines: _RailSet, interval_ms: float | None, p: Path) -> tuple[str, float]:
    """How the lines are timed, and the last one's time (the first's is 0)."""
    n = lines.count
    if lines.dated:
        _check_dates(lines, interval_ms, p)
        if lines.increasing:
            return "timestamps", lines.secs
        if interval_ms is not None:
            return "interval", (n - 1) * interval_ms / 1000.0
        return "timestamps+spread", lines.secs + (lines.run - 1) / lines.run
    if interval_ms is None:
        raise ConfigError(
            f"{p} has lines without dates, so its sample times are unknown",
            "pass interval_ms (the --interval the log was recorded with; tegrastats' default is 1000)",
        )
    return "interval", (n - 1) * interval_ms / 1000.0


@dataclass(frozen=True)
class _Reading:
    """What the second pass needs of a line the first found good: its date and rails."""

    timestamp: datetime | None
    rails: Mapping[str, RailPower]

    def rails_mw(self) -> dict[str, float]:
        return {name: r.instant_mw for name, r in self.rails.items()}


def _reading(line: str) -> _Reading:
    """A line's date and rails, as parse_line reads them (the same code), without the fields the second
    pass does not use (the CPU, temperature and engine fields are most of a line's parse)."""
    timestamp, text = _dated(line.strip())
    return _Reading(timestamp, _rails(text)[0])


_Line = TypeVar("_Line", TegrastatsSample, _Reading)


def _timed(scan: LogScan, parse: Callable[[str], _Line]) -> Iterator[tuple[float, _Line]]:
    """The second pass: each line of the usual rail set with its time, in order (`parse`: what of a line is
    wanted). The lines the first pass dropped are passed by their numbers; lines sharing a date (spread
    over their second) are held until the date changes: a second's lines at most."""
    t0 = scan.started_at
    index = 0
    run: list[_Line] = []
    run_secs = 0.0
    dropped = iter(scan.dropped)
    next_dropped = next(dropped, 0)
    for number, line in _lines(scan.path):
        if number == next_dropped:
            next_dropped = next(dropped, 0)
            continue
        try:
            sample = parse(line)
        except TegrastatsFormatError:
            raise _changed(scan.path) from None
        if frozenset(sample.rails) != scan.usual:
            continue
        if scan.timing == "interval":
            yield index * scan.interval_ms / 1000.0, sample  # type: ignore[operator]
            index += 1
            continue
        if sample.timestamp is None or t0 is None:
            raise _changed(scan.path)
        secs = (sample.timestamp - t0).total_seconds()
        if scan.timing == "timestamps":
            yield secs, sample
            continue
        if run and secs != run_secs:
            yield from _spread(run_secs, run)
            run = []
        run_secs = secs
        run.append(sample)
    yield from _spread(run_secs, run)


def _check_dates(lines: _RailSet, interval_ms: float | None, p: Path) -> None:
    """Refuse dates that go backwards, or jump by more than a log's gap (engine.core.plausible):
    two recordings in one file (concatenated, or appended after a stop), or a clock change.
    The energy over them would be guessed, not measured."""
    if lines.backwards is not None:
        step, before, at = lines.backwards
        raise ConfigError(
            f"{p}: the dates go backwards at line {at} ({-step:g} s before line {before})",
            f"the log holds two recordings (or the clock was changed): split the log at line {at} "
            "and import each part")
    interval_s = interval_ms / 1000.0 if interval_ms else lines.median_step()
    gap = log_gap_s(interval_s)
    for step, before, at in lines.rises:
        if step > gap:
            raise ConfigError(
                f"{p}: {step:g} s pass between line {before} and line {at}, longer than any gap "
                f"in one recording ({gap:g} s at its {interval_s:g} s interval)",
                f"tegrastats stopped there (a suspend, or a second recording appended): split the log at line "
                f"{at} and import each part")


def _spread(secs: float, run: Sequence[_Line]) -> Iterator[tuple[float, _Line]]:
    """A run of lines that share a whole-second date, spread evenly over that second."""
    k = len(run)
    for n, sample in enumerate(run):
        yield secs + n / k, sample
