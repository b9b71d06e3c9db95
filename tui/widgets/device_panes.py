"""Panes that show one DeviceSnapshot: identity, rails, clocks, temperatures (as jtop does)."""

from __future__ import annotations

from collections import deque
from typing import Mapping

from rich.table import Table
from rich.text import Text
from textual.widgets import Static

from engine.device.base import ClockDomain
from engine.device.snapshot import DeviceSnapshot

# Colour thresholds for temperatures (°C): the sweep's thermal guard waits at 75 and aborts at 85.
TEMP_WARN_C = 60.0
TEMP_HOT_C = 75.0
BAR_WIDTH = 22


def _mhz(hz: int) -> str:
    return f"{hz / 1e6:g}"


class IdentityBar(Static):
    """Board, module, L4T/JetPack, real or twin, power mode, and whether we pinned clocks."""

    def show(self, snap: DeviceSnapshot, pinned_by_us: bool = False) -> None:
        ident = snap.identity
        kind = Text(f" TWIN {ident.profile} ", style="bold black on yellow") if ident.is_twin else Text(
            " BOARD ", style="bold black on green"
        )
        mode = f"nvpmodel {snap.mode.id} {snap.mode.name}" if snap.mode else "nvpmodel ?"
        text = Text.assemble(
            kind,
            f" {ident.board} · {ident.module} · L4T {ident.l4t or '?'} · JetPack {ident.jetpack or '?'} · {mode}",
        )
        if pinned_by_us:
            text.append("  clocks pinned by slm-dvfs (restored on exit)", style="bold magenta")
        self.update(text)


class RailsPane(Static):
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
        self.update(table)


class ClocksPane(Static):
    """Per clock domain: the allowed range, the current clock as a bar over the table, the governor."""

    def on_mount(self) -> None:
        self.border_title = "Clocks (MHz)"

    def show(self, snap: DeviceSnapshot, tables: Mapping[ClockDomain, tuple[int, ...]]) -> None:
        table = Table(box=None, expand=True, padding=(0, 1))
        table.add_column(Text(f"[{snap.identity.source.value}]"))
        table.add_column("cur", justify="right")
        table.add_column("min–max", justify="right")
        table.add_column("range", no_wrap=True)
        table.add_column("governor", no_wrap=True, overflow="ellipsis")
        for domain in ClockDomain:
            state = snap.clock(domain)
            if state is None:
                table.add_row(domain.value.upper(), "", "", Text(snap.errors.get(domain.value, "n/a"), style="red"), "")
                continue
            steps = tables.get(domain) or (state.min_hz, state.max_hz)
            lo, hi = min(steps), max(steps)
            table.add_row(
                domain.value.upper(),
                Text(_mhz(state.cur_hz), style="bold"),
                f"{_mhz(state.min_hz)}–{_mhz(state.max_hz)}",
                _bar(lo, hi, state.min_hz, state.cur_hz, state.max_hz),
                Text("pinned", style="bold magenta") if state.pinned else Text(state.governor or "-"),
            )
        if snap.gpu_load is not None:
            table.add_row("load", f"{snap.gpu_load * 100:.0f}%", "", _bar(0, 1, 0, snap.gpu_load, 1), "GPU busy")
        self.update(table)


class TemperaturesPane(Static):
    """Every thermal zone, compactly, coloured by threshold."""

    def on_mount(self) -> None:
        self.border_title = "Temperatures °C"

    def show(self, snap: DeviceSnapshot) -> None:
        text = Text(f"[{snap.identity.source.value}]\n", style="dim")
        for i, t in enumerate(snap.temperatures):
            style = "red bold" if t.celsius >= TEMP_HOT_C else "yellow" if t.celsius >= TEMP_WARN_C else "green"
            name = t.zone.removesuffix("-thermal")
            text.append(f"{name:>5} ")
            text.append(f"{t.celsius:5.1f}", style=style)
            text.append("\n" if i % 2 else "   ")
        self.update(text)


def _bar(lo: float, hi: float, vmin: float, vcur: float, vmax: float) -> Text:
    """A bar where the allowed range [vmin, vmax] is shaded and the current value is solid."""
    span = (hi - lo) or 1.0

    def col(v: float) -> int:
        return max(0, min(BAR_WIDTH - 1, round((v - lo) / span * (BAR_WIDTH - 1))))

    a, c, b = col(vmin), col(vcur), col(vmax)
    text = Text()
    for i in range(BAR_WIDTH):
        if i <= c:
            text.append("█", style="cyan")
        elif a <= i <= b:
            text.append("░", style="cyan")
        else:
            text.append("·", style="grey50")
    return text
