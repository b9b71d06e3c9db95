"""Panes that show one DeviceSnapshot: identity, rails, clocks, temperatures (as jtop does)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from rich.console import RenderableType
from rich.table import Table
from rich.text import Text
from textual.widgets import Static

from engine.core.units import format_bytes, format_mhz
from engine.device.activity import CoreLoad, DeviceActivity
from engine.device.base import ClockDomain
from engine.device.snapshot import DeviceSnapshot
from tui.fmt import mode_label

# Colour thresholds for temperatures (°C): the sweep's thermal guard waits at 75 and aborts at 85.
TEMP_WARN_C = 60.0
TEMP_HOT_C = 75.0


def temps_titles(src: str) -> tuple[Text, ...]:
    """A temperatures pane's title, longest first (tui.fmt.fit picks what the width holds): its
    source, the three figures' names and the thresholds of `!` and `!!` always whole (Text: a
    title string would read `[twin]` as markup and drop it)."""
    marks = f"!{TEMP_WARN_C:g} !!{TEMP_HOT_C:g}"
    return Text(f"Temps °C [{src}] now avg pk {marks}"), Text(f"°C [{src}] now avg pk {marks}")
BAR_WIDTH = 22


class Pane(Static):
    """A Static redrawn only when what it shows changed, and re-laid out only when its
    height did: redraws cost the CPU the measured run is using."""

    _key: object = None
    _lines = -1

    def draw_if_changed(self, key: object, build: Callable[[], tuple[RenderableType, int]]) -> bool:
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


def memory_text(snap: DeviceSnapshot) -> str:
    """The memory Linux sees on the board (`61.4 GiB`, `5.2/61.4 GiB` where it says what is used),
    or `memory n/a`."""
    memory = snap.activity.memory if snap.activity else None
    if memory is None:
        return "memory n/a"
    used = memory.used_bytes
    total = format_bytes(memory.total_bytes)
    return f"RAM {total}" if used is None else f"RAM {format_bytes(used).split()[0]}/{total}"


class IdentityBar(Pane):
    """Real or twin, power mode by name and id, module, memory, L4T/JetPack, board, and whether
    we pinned clocks."""

    def show(self, snap: DeviceSnapshot, pinned_by_us: bool = False, page: str = "") -> None:
        self.draw_if_changed((snap.identity, snap.mode, memory_text(snap), pinned_by_us, page),
                             lambda: (self._text(snap, pinned_by_us, page), 2 if pinned_by_us else 1))

    def _text(self, snap: DeviceSnapshot, pinned_by_us: bool, page: str) -> Text:
        ident = snap.identity
        kind = Text(f" TWIN {ident.profile} ", style="bold black on yellow") if ident.is_twin else Text(
            " BOARD ", style="bold black on green"
        )
        mode = mode_label(snap.mode)
        text = Text(no_wrap=True, overflow="ellipsis")
        if page:
            text.append(f" {page} ", style="bold reverse")
            text.append(" ")
        text.append_text(kind)
        # The power mode first: at 80 columns the ellipsis cuts the static identity, not the mode.
        text.append(f" {mode}", style="bold")
        text.append(f" · {ident.module} · {memory_text(snap)} · L4T {ident.l4t or '?'} · JetPack {ident.jetpack or '?'}")
        text.append(f" · {ident.board}", style="dim")
        if pinned_by_us:
            text.append("\n")
            text.append(" clocks set by slm-dvfs: restored when the run ends or on quit ", style="bold black on magenta")
        return text


def _pct(share: float | None) -> str:
    return "-" if share is None else f"{share * 100:.0f}%"


def core_groups(cores: tuple[CoreLoad, ...]) -> list[str]:
    """Per-core load, grouped by clock (a cpufreq cluster shares one): `0-3 @729 12 3 0 1%`,
    `8-11 off`; a core's load is `-` until a second reading gives it a share."""
    groups: list[list[CoreLoad]] = []
    for core in cores:
        last = groups[-1][-1] if groups else None
        if last is not None and last.online == core.online and last.cur_hz == core.cur_hz and last.cpu + 1 == core.cpu:
            groups[-1].append(core)
        else:
            groups.append([core])
    out = []
    for group in groups:
        span = f"{group[0].cpu}-{group[-1].cpu}" if len(group) > 1 else f"{group[0].cpu}"
        if not group[0].online:
            out.append(f"{span} off")
            continue
        clock = f" @{format_mhz(group[0].cur_hz)}" if group[0].cur_hz else ""
        loads = " ".join("-" if c.load is None else f"{c.load * 100:.0f}" for c in group)
        out.append(f"{span}{clock} {loads}%")
    return out


class ActivityPane(Pane):
    """jtop's details beside the graphs: module, memory and mode; each core's load and clock; GPU
    and EMC load; the fan; whether anything throttles the board and why. All read by the device
    layer (engine.device.activity); a part the board lacks reads `none` or `n/a`."""

    def show(self, snap: DeviceSnapshot) -> None:
        act = snap.activity
        width = self.content_size.width or 76
        key = (width, snap.identity, snap.mode, act, snap.gpu_load, snap.throttle)
        self.draw_if_changed(key, lambda: self._text(snap, act, width))

    def _text(self, snap: DeviceSnapshot, act: DeviceActivity | None, width: int) -> tuple[Text, int]:
        self.border_title = Text(f"Board [{snap.identity.source.value}]")
        text = Text(no_wrap=True, overflow="ellipsis")
        text.append(f"{snap.identity.module}", style="bold")
        text.append(f" · {memory_text(snap)} · ")
        text.append(mode_label(snap.mode), style="bold")
        # per-core CPU: as many clusters to a line as the width holds
        parts = core_groups(act.cores) if act and act.cores else ["n/a"]
        rows, row = [], "CPU " + parts[0]
        for part in parts[1:]:
            if len(row) + 2 + len(part) > width:
                rows.append(row)
                row = "    " + part
            else:
                row += "  " + part
        rows.append(row)
        for row in rows:
            text.append("\n" + row)
        lines = 1 + len(rows)
        emc = act.emc_load if act else None
        text.append(f"\nGPU {_pct(snap.gpu_load)} · EMC {_pct(emc) if emc is not None else 'n/a'} · fan ")
        fan = act.fan if act else None
        if act is None:
            text.append("n/a")
        elif fan is None:
            text.append("none")
        else:
            speed = "n/a" if fan.pwm_percent is None else f"{fan.pwm_percent:.0f}%"
            text.append(speed + (f" {fan.rpm} rpm" if fan.rpm is not None else ""))
        reasons = snap.throttle.reasons()
        if not reasons:
            text.append(" · throttling ")
            text.append("none", style="green")
            return text, lines + 1
        for reason in reasons:  # a line each: one reason never cuts the next
            text.append("\nthrottling ", style="bold red")
            text.append(reason, style="bold red")
        return text, lines + 1 + len(reasons)


class ClocksPane(Pane):
    """Per clock domain: the allowed range, the current clock as a bar over the table, the governor.

    `compact` (half a screen wide) drops the min–max column, the load row and shortens the bar."""

    def __init__(self, *, compact: bool = False, auto_compact: bool = False, id: str | None = None,
                 classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.compact = compact or auto_compact
        self.auto_compact = auto_compact

    def on_mount(self) -> None:
        self.border_title = "Clocks (MHz)"

    def show(self, snap: DeviceSnapshot, tables: Mapping[ClockDomain, tuple[int, ...]]) -> None:
        if self.auto_compact and self.size.width:  # the full table (min–max, load) where the width allows
            self.compact = self.size.width < 64
        key = (self.compact, snap.identity.source, snap.clocks, tuple(sorted(snap.errors.items())),
               None if self.compact else snap.gpu_load)
        self.draw_if_changed(key, lambda: self._table(snap, tables))

    def _table(self, snap: DeviceSnapshot, tables: Mapping[ClockDomain, tuple[int, ...]]) -> tuple[Table, int]:
        compact = self.compact
        width = 14 if compact else BAR_WIDTH
        self.border_title = Text(f"Clocks (MHz) [{snap.identity.source.value}]")
        table = Table(box=None, expand=True, padding=(0, 1) if not compact else (0, 0, 0, 1), show_header=not compact)
        # the names and figures keep their width; the governor gives way first (was `G…  306` at 80x24)
        table.add_column(Text(f"[{snap.identity.source.value}]"), no_wrap=True, min_width=3)
        table.add_column("cur", justify="right", no_wrap=True, min_width=6)
        if not compact:
            table.add_column("min–max", justify="right")
        table.add_column("range" if not compact else "min·cur·max", no_wrap=True, min_width=width)
        table.add_column("governor", no_wrap=True, overflow="ellipsis", ratio=1, min_width=4)
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

    ZONE_CELLS = 13  # "soc0  55.0!! " : the width one zone takes

    def __init__(self, *, columns: int = 2, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.min_columns = columns
        self.columns = columns

    def on_mount(self) -> None:
        self.border_title = "Temperatures °C"

    def show(self, snap: DeviceSnapshot) -> None:
        # as many zones to a line as the width takes (more on a wide terminal)
        self.columns = max(self.min_columns, (self.size.width + 1) // self.ZONE_CELLS)
        key = (snap.identity.source, self.columns, tuple((t.zone, round(t.celsius, 1)) for t in snap.temperatures))
        self.draw_if_changed(key, lambda: self._text(snap))

    def _text(self, snap: DeviceSnapshot) -> tuple[Text, int]:
        self.border_title = Text(f"Temperatures °C [{snap.identity.source.value}]")
        text = Text()
        for i, t in enumerate(snap.temperatures):
            lv = 2 if t.celsius >= TEMP_HOT_C else 1 if t.celsius >= TEMP_WARN_C else 0
            name = t.zone.removesuffix("-thermal")
            if i and i % self.columns == 0:
                text.append("\n")
            elif i:
                text.append(" ")
            text.append(f"{name:>4} ")
            # the level is marked as well as coloured, so it reads without colour (NO_COLOR)
            text.append(f"{t.celsius:5.1f}", style=("green", "yellow bold", "red bold")[lv])
            text.append(("  ", "! ", "!!")[lv], style=("", "yellow bold", "red bold")[lv])
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
