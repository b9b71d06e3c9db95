"""The Fleet page's view model (no Textual here): the boards of a Ray fleet as rows, their power
history, and what each runs, from the engine's `Fleet.boards()` and the events of a fleet sweep.

`FleetTracker` lives on the UI thread: the app feeds it every `boards()` poll (a tuple of
engine.run.fleet BoardInfo) and every FleetEvent of a sweep started from the app, and draws
`view()`, a frozen FleetView. A board that left the fleet stays listed as `gone` (its work is
retried elsewhere), so a board lost mid-sweep is seen, not silently dropped.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from engine.core.provenance import Source

HISTORY = 120  # polls of power kept per board (two minutes at the page's 1 s poll)
SPARKS = "▁▂▃▄▅▆▇█"
# Event kinds after which a board runs nothing of the sweep any more
IDLE_KINDS = frozenset({"done", "finished", "cancelled", "board_lost"})

STATUS_UNCONNECTED = "unconnected"
STATUS_CONNECTING = "connecting"
STATUS_CONNECTED = "connected"
STATUS_FAILED = "failed"

HOW_TO_CONNECT = ("start the TUI with `slm-dvfs --fleet ADDRESS` (a Ray head, or RAY_ADDRESS) or "
                  "`slm-dvfs --fleet-twins N` (a local fleet of N twins), or press c here (docs/fleet.md)")


@dataclass(frozen=True)
class BoardRow:
    """One board as the page lists it."""

    name: str
    serial: str
    module: str  # short: `AGX Orin 64GB`
    l4t: str
    source: Source  # of its power and temperatures: twin or measured
    state: str  # "busy" | "free" | "gone"
    running: str  # what it runs now ("" when free)
    power_w: float | None
    hottest: tuple[str, float] | None  # (zone, °C)
    power_trace: tuple[float, ...] = ()  # oldest first, one per poll


@dataclass(frozen=True)
class FleetView:
    status: str  # unconnected | connecting | connected | failed
    where: str  # "10.0.0.5:6379", "local twins (2)"; "" when not connected
    boards: tuple[BoardRow, ...] = ()
    note: str = ""  # how to connect, or why connecting failed
    total_w: float | None = None  # the boards' power summed (None: none reports power)
    total_by_source: tuple[tuple[Source, float], ...] = ()  # a mixed fleet's total, twin and measured apart
    total_trace: tuple[float, ...] = ()
    log: tuple[str, ...] = ()  # the latest fleet events, oldest first

    @property
    def source(self) -> Source | None:
        """The source every board's figures share (None: a mixed fleet, each row says its own)."""
        sources = {b.source for b in self.boards}
        return next(iter(sources)) if len(sources) == 1 else None

    @property
    def busy(self) -> int:
        return sum(1 for b in self.boards if b.state == "busy")

    def summary(self) -> str:
        """The page's first line: where, how many boards, how many busy, the total power."""
        if self.status == STATUS_CONNECTING:
            return f"connecting to {self.where}…"
        if self.status != STATUS_CONNECTED:
            return "not connected"
        gone = sum(1 for b in self.boards if b.state == "gone")
        parts = [f"fleet {self.where}", f"{len(self.boards) - gone} boards", f"{self.busy} busy"]
        if gone:
            parts.append(f"{gone} gone")
        if self.total_w is not None and len(self.total_by_source) > 1:  # figures of two sources are not summed
            parts.append("total " + " + ".join(f"{w:.1f} W [{src.value}]" for src, w in self.total_by_source))
        elif self.total_w is not None:
            parts.append(f"total {self.total_w:.1f} W")
        return " · ".join(parts)


def fleet_where(address: str | None, twins: int | None) -> str:
    """How the page names the fleet: its address, or `local twins (N)`."""
    if twins:
        return f"local twins ({twins})"
    return address or os.environ.get("RAY_ADDRESS") or "auto"


def parse_target(text: str) -> tuple[str | None, int | None, str | None]:
    """The page's connect field: `twins:N[:profile]` or a bare count N of twins, else a Ray address
    (blank: RAY_ADDRESS). Returns (address, twins, profile); a count is read as `slm-dvfs fleet --twins`
    reads it (engine.run.fleet.cluster.parse_twins), and one that is not is a ConfigError."""
    value = text.strip()
    if not value:
        return None, None, None
    head, _, rest = value.partition(":")
    # No host name or address is without a letter, a dot or a colon: such text is meant as a count
    # (`²`, `2_5`, 5000 digits), and is told why it is not one rather than dialled as an address.
    if head == "twins" or not any(c.isalpha() or c in ".:" for c in value):
        from engine.run.fleet.cluster import parse_twins  # on `c` only: the app's start stays light

        twins, profile = parse_twins(rest if head == "twins" else value, flag="twins:")
        return None, twins, profile
    return value, None, None


def short_module(module: str) -> str:
    """`P3701-0000 (AGX Orin 64GB)` -> `AGX Orin 64GB` (what is in brackets, else all of it)."""
    if "(" in module and module.rstrip().endswith(")"):
        return module[module.index("(") + 1:module.rstrip().rindex(")")].strip() or module
    return module


def display_name(info: Any) -> str:
    """A board's name as the page shows it: the actor's name without `board-` (`twin-0`), else its serial."""
    return (info.name or info.serial).removeprefix("board-") or info.serial


def hottest(temps: Mapping[str, float]) -> tuple[str, float] | None:
    if not temps:
        return None
    zone = max(temps, key=lambda z: temps[z])
    return zone, float(temps[zone])


def sparkline(values: Iterable[float], width: int, top: float | None = None) -> str:
    """The last `width` values as block characters, scaled to `top` (else their peak)."""
    tail = list(values)[-width:] if width > 0 else []
    if not tail:
        return ""
    peak = top if top else max(tail)
    if peak <= 0:
        return SPARKS[0] * len(tail)
    return "".join(SPARKS[min(len(SPARKS) - 1, max(0, int(v / peak * (len(SPARKS) - 1) + 0.5)))] for v in tail)


def event_line(event: Any, names: Mapping[str, str]) -> str:
    """A FleetEvent as one log line: `twin-1 point: GPU 816 (repeat 1)`."""
    board = getattr(event, "board", "") or ""
    who = names.get(board, board)
    text = getattr(event, "text", "") or ""
    return f"{who} {event.kind}: {text}" if who else f"{event.kind}: {text}"


@dataclass
class FleetTracker:
    """What the Fleet page shows, folded from polls and events (UI thread only)."""

    status: str = STATUS_UNCONNECTED
    where: str = ""
    note: str = HOW_TO_CONNECT
    log_lines: int = 200
    _boards: dict[str, Any] = field(default_factory=dict)  # serial -> the latest BoardInfo
    _gone: set[str] = field(default_factory=set)
    _traces: dict[str, deque] = field(default_factory=dict)
    _total: deque = field(default_factory=lambda: deque(maxlen=HISTORY))
    _running: dict[str, str] = field(default_factory=dict)  # serial -> what a sweep's events say it runs
    _labels: dict[Any, str] = field(default_factory=dict)  # sweep id -> its workload, from "started"
    _log: deque = field(default_factory=deque)
    # A sweep's events come from its worker thread (through tui.bridge), polls on the UI thread.
    _lock: Any = field(default_factory=threading.RLock, repr=False)

    def connecting(self, where: str) -> None:
        self.status, self.where, self.note = STATUS_CONNECTING, where, "Ray is starting or joining the cluster"

    def connected(self, where: str) -> None:
        self.status, self.where, self.note = STATUS_CONNECTED, where, ""

    def failed(self, where: str, reason: str) -> None:
        self.status, self.where, self.note = STATUS_FAILED, where, f"{reason}\n{HOW_TO_CONNECT}"

    def disconnected(self) -> None:
        self.status, self.where, self.note = STATUS_UNCONNECTED, "", HOW_TO_CONNECT
        with self._lock:
            self._clear()

    def _clear(self) -> None:
        self._boards.clear()
        self._gone.clear()
        self._traces.clear()
        self._total.clear()
        self._running.clear()

    def poll(self, boards: Iterable[Any]) -> None:
        """One `Fleet.boards()` answer: boards missing from it are gone (kept, marked)."""
        with self._lock:
            self._poll(tuple(boards))

    def _poll(self, boards: tuple[Any, ...]) -> None:
        seen = {}
        for info in boards:
            seen[info.serial] = info
        self._gone = (self._gone | set(self._boards)) - set(seen)
        self._boards.update(seen)
        total, any_power = 0.0, False
        for serial, info in seen.items():
            trace = self._traces.setdefault(serial, deque(maxlen=HISTORY))
            if info.power_w is not None:
                trace.append(float(info.power_w))
                total += float(info.power_w)
                any_power = True
        if any_power:
            self._total.append(total)

    def feed(self, event: Any) -> bool:
        """A FleetEvent (on the sweep worker's thread, through its bridge); True: draw soon."""
        with self._lock:
            return self._feed(event)

    def _feed(self, event: Any) -> bool:
        board = getattr(event, "board", None)
        if board:
            sweep = getattr(event, "sweep_id", None)
            if event.kind in IDLE_KINDS:
                self._running.pop(board, None)
            elif event.kind == "started":  # "bert-tiny/sst2 on twin-0: 12 of 12 points to measure"
                self._labels[sweep] = (getattr(event, "text", "") or "").split(" on ")[0].split(":")[0]
                self._running[board] = self._labels[sweep]
            elif event.kind == "point":
                label = self._labels.get(sweep) or (f"sweep {sweep}" if sweep is not None else "sweep")
                done, total = getattr(event, "done", None), getattr(event, "total", None)
                self._running[board] = f"{label} {done}/{total}" if done is not None and total else label
            if event.kind == "board_lost":
                self._gone.add(board)
        self._log.append(event_line(event, self.names()))
        while len(self._log) > self.log_lines:
            self._log.popleft()
        return event.kind != "point"

    def source_of(self, serial: str) -> Source | None:
        with self._lock:
            info = self._boards.get(serial)
        return None if info is None else (Source.TWIN if info.is_twin else Source.MEASURED)

    def names(self) -> dict[str, str]:
        return {serial: display_name(info) for serial, info in self._boards.items()}

    def row(self, serial: str) -> BoardRow:
        info = self._boards[serial]
        gone = serial in self._gone
        running = "" if gone else (self._running.get(serial) or info.running or "")
        busy = not gone and (bool(info.busy) or serial in self._running)
        return BoardRow(
            name=display_name(info), serial=serial, module=short_module(info.module), l4t=info.l4t or "-",
            source=Source.TWIN if info.is_twin else Source.MEASURED,
            state="gone" if gone else ("busy" if busy else "free"), running=running,
            power_w=None if gone else info.power_w, hottest=None if gone else hottest(info.temps_c),
            power_trace=tuple(self._traces.get(serial, ())))

    def view(self) -> FleetView:
        with self._lock:
            return self._view()

    def _view(self) -> FleetView:
        rows = tuple(self.row(s) for s in sorted(self._boards, key=lambda s: (display_name(self._boards[s]), s)))
        live = [r.power_w for r in rows if r.power_w is not None]
        by_source = tuple((src, sum(r.power_w for r in rows if r.power_w is not None and r.source is src))
                          for src in (Source.TWIN, Source.MEASURED)
                          if any(r.source is src and r.power_w is not None for r in rows))
        return FleetView(self.status, self.where, rows, self.note, sum(live) if live else None, by_source,
                         tuple(self._total), tuple(self._log))


class FleetSweepTracker:
    """A fleet sweep on the Sweep page: its points counted per sweep, its events logged (thread-safe),
    and each event handed to the Fleet page's tracker for the boards' `running` column."""

    def __init__(self, fleet: FleetTracker, plans: int) -> None:
        self.fleet = fleet
        self.plans = plans
        self._lock = threading.Lock()
        self._log: deque[str] = deque(maxlen=200)
        self._done: dict[Any, int] = {}  # sweep id -> points stored (of this invocation's sweeps)
        self._total: dict[Any, int] = {}
        self.status = "running"
        self.last = ""

    def feed(self, event: Any) -> bool:
        urgent = self.fleet.feed(event)
        line = event_line(event, self.fleet.names())
        sweep = getattr(event, "sweep_id", None)
        with self._lock:
            if getattr(event, "total", None) is not None:
                self._total[sweep] = int(event.total)
            if event.kind == "point":
                done = getattr(event, "done", None)
                self._done[sweep] = int(done) if done is not None else self._done.get(sweep, 0) + 1
                self.last = line + point_figures(event, self.fleet.source_of(event.board))
            else:
                self._log.append(line)
        return urgent

    def note(self, line: str) -> None:
        with self._lock:
            self._log.append(line)

    def finish(self, status: str, line: str = "") -> None:
        with self._lock:
            self.status = status
            if line:
                self._log.append(line)

    def view(self) -> Any:
        from tui.sweep_model import SweepView

        with self._lock:
            done = sum(self._done.values())
            total = max(sum(self._total.values()), done)
            return SweepView(self.status, done, total, self.last, None, tuple(self._log), fleet=True)


def point_figures(event: Any, source: Source | None) -> str:
    """A point event's figures: `: 1.23 J in 0.40 s [twin]`."""
    energy, time_s = getattr(event, "energy_j", None), getattr(event, "time_s", None)
    if energy is None:
        return ""
    text = f": {energy:.3g} J" + (f" in {time_s:.3g} s" if time_s is not None else "")
    return text + (f" [{source.value}]" if source is not None else "")
