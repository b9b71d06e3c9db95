"""Panes that show one DeviceSnapshot: identity, rails, clocks, temperatures (as jtop does)."""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping

from rich.table import Table
from rich.text import Text
from textual.widgets import Static

from engine.device.base import ClockDomain
from engine.device.snapshot import DeviceSnapshot

# Colour thresholds for temperatures (°C): the sweep's thermal guard waits at 75 and aborts at 85.
TEMP_WARN_C = 60.0
TEMP_HOT_C = 75.0
BAR_WIDTH = 22


class Pane(Static):
    """A Static redrawn only when what it shows changed, and re-laid out only when its
    height did: redraws cost the CPU the measured run is using."""

    _key: object = None
    _lines = -1

    def show_if_changed(self, key: object, build) -> bool:  # type: ignore[no-untyped-def]
        """Draw `build()` unless `key` equals the last one drawn; returns whether it drew."""
        if key is not None and key == self._key:
            return False
        self._key = key
        renderable, lines = build()
        self.update(renderable, layout=lines != self._lines)
        self._lines = lines
        return True


def _mhz(hz: int) -> str:
    return f"{hz / 1e6:g}"


class IdentityBar(Pane):
    """Board, module, L4T/JetPack, real or twin, power mode, and whether we pinned clocks."""

    def show(self, snap: DeviceSnapshot, pinned_by_us: bool = False, page: str = "") -> None:
        self.show_if_changed((snap.identity, snap.mode, pinned_by_us, page),
                             lambda: (self._text(snap, pinned_by_us, page), 2 if pinned_by_us else 1))

    def _text(self, snap: DeviceSnapshot, pinned_by_us: bool, page: str) -> Text:
        ident = snap.identity
        kind = Text(f" TWIN {ident.profile} ", style="bold black on yellow") if ident.is_twin else Text(
            " BOARD ", style="bold black on green"
        )
        mode = f"nvpmodel {snap.mode.id} {snap.mode.name}" if snap.mode else "nvpmodel ?"
        text = Text(no_wrap=True, overflow="ellipsis")
        if page:
            text.append(f" {page} ", style="bold reverse")
            text.append(" ")
        text.append_text(kind)
        # The power mode first: at 80 columns the ellipsis cuts the static identity, not the mode.
        text.append(f" {mode}", style="bold")
        text.append(f" · {ident.module} · L4T {ident.l4t or '?'} · JetPack {ident.jetpack or '?'}")
        text.append(f" · {ident.board}", style="dim")
        if pinned_by_us:
            text.append("\n")
            text.append(" clocks set by slm-dvfs: restored when the run ends or on quit ", style="bold black on magenta")
        return text


class RailsPane(Pane):
    """Power per rail, instant and average over the last minute, total in bold."""

    def on_mount(self) -> None:
        self._history: deque[tuple[float, dict[str, float]]] = deque()
        self.border_title = "Power"

    def show(self, snap: DeviceSnapshot) -> None:
        now = snap.t
        self._history.append((now, {r.name: r.power_mw for r in snap.rails}))
        while self._history and now - self._history[0][0] > 60.0:
            self._history.popleft()
        n = len(self._history)
        table = Table(box=None, expand=True, padding=(0, 1))
        table.add_column(Text(f"rail [{snap.identity.source.value}]"))
        table.add_column("now W", justify="right")
        table.add_column("avg W", justify="right")
        for r in snap.rails:
            avg = sum(h.get(r.name, 0.0) for _, h in self._history) / n
            table.add_row(r.name, f"{r.power_mw / 1000:.2f}", f"{avg / 1000:.2f}")
        total_avg = sum(sum(h.values()) for _, h in self._history) / n
        table.add_row(
            Text("total", style="bold"),
            Text(f"{snap.total_power_mw / 1000:.2f}", style="bold"),
            Text(f"{total_avg / 1000:.2f}", style="bold"),
        )
        if "rails" in snap.errors:
            table.add_row(Text(snap.errors["rails"], style="red"), "", "")
        self.show_if_changed(None, lambda: (table, len(snap.rails) + 2 + ("rails" in snap.errors)))


class ClocksPane(Pane):
    """Per clock domain: the allowed range, the current clock as a bar over the table, the governor.

    `compact` (half a screen wide) drops the min–max column, the load row and shortens the bar."""

    def __init__(self, *, compact: bool = False, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.compact = compact

    def on_mount(self) -> None:
        self.border_title = "Clocks (MHz)"

    def show(self, snap: DeviceSnapshot, tables: Mapping[ClockDomain, tuple[int, ...]]) -> None:
        key = (snap.identity.source, snap.clocks, tuple(sorted(snap.errors.items())),
               None if self.compact else snap.gpu_load)
        self.show_if_changed(key, lambda: self._table(snap, tables))

    def _table(self, snap: DeviceSnapshot, tables: Mapping[ClockDomain, tuple[int, ...]]) -> tuple[Table, int]:
        compact = self.compact
        width = 14 if compact else BAR_WIDTH
        self.border_title = Text(f"Clocks (MHz) [{snap.identity.source.value}]")
        table = Table(box=None, expand=True, padding=(0, 1) if not compact else (0, 0, 0, 1), show_header=not compact)
        table.add_column(Text(f"[{snap.identity.source.value}]"), no_wrap=True)
        table.add_column("cur", justify="right", no_wrap=True)
        if not compact:
            table.add_column("min–max", justify="right")
        table.add_column("range" if not compact else "min·cur·max", no_wrap=True)
        table.add_column("governor", no_wrap=True, overflow="ellipsis")
        for domain in ClockDomain:
            state = snap.clock(domain)
            if state is None:
                cells = [domain.value.upper(), ""] + ([""] if not compact else [])
                table.add_row(*cells, Text(snap.errors.get(domain.value, "n/a"), style="red"), "")
                continue
            steps = tables.get(domain) or (state.min_hz, state.max_hz)
            lo, hi = min(steps), max(steps)
            gov = Text("pinned", style="bold magenta") if state.pinned else Text(state.governor or "-")
            bar = _bar(lo, hi, state.min_hz, state.cur_hz, state.max_hz, width)
            cur = Text(_mhz(state.cur_hz), style="bold")
            if compact:
                table.add_row(domain.value.upper(), cur, bar, gov)
            else:
                table.add_row(domain.value.upper(), cur, f"{_mhz(state.min_hz)}–{_mhz(state.max_hz)}", bar, gov)
        if snap.gpu_load is not None and not compact:
            table.add_row("load", f"{snap.gpu_load * 100:.0f}%", "", _bar(0, 1, 0, snap.gpu_load, 1), "GPU busy")
        return table, table.row_count + (0 if compact else 1)


class TemperaturesPane(Pane):
    """Every thermal zone, compactly, coloured by threshold; `columns` zones to a line."""

    def __init__(self, *, columns: int = 2, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.columns = columns

    def on_mount(self) -> None:
        self.border_title = "Temperatures °C"

    def show(self, snap: DeviceSnapshot) -> None:
        key = (snap.identity.source, tuple((t.zone, round(t.celsius, 1)) for t in snap.temperatures))
        self.show_if_changed(key, lambda: self._text(snap))

    def _text(self, snap: DeviceSnapshot) -> tuple[Text, int]:
        self.border_title = Text(f"Temperatures °C [{snap.identity.source.value}]")
        text = Text()
        for i, t in enumerate(snap.temperatures):
            style = "red bold" if t.celsius >= TEMP_HOT_C else "yellow" if t.celsius >= TEMP_WARN_C else "green"
            name = t.zone.removesuffix("-thermal")
            if i and i % self.columns == 0:
                text.append("\n")
            elif i:
                text.append("  ")
            text.append(f"{name:>4} ")
            text.append(f"{t.celsius:5.1f}", style=style)
        return text, -(-len(snap.temperatures) // self.columns)


def _bar(lo: float, hi: float, vmin: float, vcur: float, vmax: float, width: int = BAR_WIDTH) -> Text:
    """A bar where the allowed range [vmin, vmax] is shaded and the current value is solid."""
    span = (hi - lo) or 1.0

    def col(v: float) -> int:
        return max(0, min(width - 1, round((v - lo) / span * (width - 1))))

    a, c, b = col(vmin), col(vcur), col(vmax)
    text = Text()
    for i in range(width):
        if i <= c:
            text.append("█", style="cyan")
        elif a <= i <= b:
            text.append("░", style="cyan")
        else:
            text.append("·", style="grey50")
    return text
