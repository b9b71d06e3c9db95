"""Small formatting helpers shared by the panes: numbers, energy, source labels."""

from __future__ import annotations

import math
from typing import Any

from rich.text import Text

from engine.core.provenance import Source

SOURCE_STYLE = {Source.MEASURED: "green", Source.TWIN: "yellow", Source.PREDICTED: "magenta"}


def tag(source: Source | str) -> Text:
    """`[twin]`, coloured by source, so every figure says where it came from."""
    src = Source(source)
    return Text(f"[{src.value}]", style=SOURCE_STYLE.get(src, ""))


def num(value: float | None, fmt: str = ".2f", none: str = "-") -> str:
    return none if value is None else format(value, fmt)


def sig3(value: float | None, none: str = "-") -> str:
    """Three significant figures, never in exponent form: `3.51`, `119`, `1,234` (`.3g` wrote
    `1.23e+03` for a run of twenty minutes)."""
    if value is None:
        return none
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"


def half_width(centre: float, interval: Any) -> float:
    """The wider side of an interval around `centre` (so `centre ± half` holds the interval)."""
    return max(centre - interval.low, interval.high - centre, 0.0)


def energy_pm(joules: float | None, interval: Any = None) -> str:
    """Joules with their interval, compact for a narrow pane: `30.4±0.2 J`, `812±12 mJ`."""
    if joules is None or interval is None:
        return energy(joules)
    half, a = half_width(joules, interval), abs(joules)
    scale, unit = (1000.0, "mJ") if a < 1.0 else (1.0, "J") if a < 1000.0 else (1e-3, "kJ")
    v = a * scale
    digits = 0 if v >= 100 else max(0, 2 - math.floor(math.log10(v))) if v > 0 else 0
    return f"{joules * scale:.{digits}f}±{half * scale:.{digits}f} {unit}"


def duration_pm(seconds: float | None, interval: Any) -> str:
    """A duration with its interval's wider side, coarse: `16 min 36 s ±2 min`, `7 s ±1 s`."""
    text = format_duration(seconds)
    if seconds is None or interval is None:
        return text
    return f"{text} ±{format_duration(half_width(seconds, interval), coarse=True)}"


def format_duration(seconds: float | None, *, coarse: bool = False) -> str:
    """A duration in words, never read as a time of day: `1 h 2 min`, `16 min 36 s`, `7 s`; `coarse`:
    its largest unit alone, rounded up (`±2 min`: an interval's half is no more precise than that);
    `-` when unknown."""
    if seconds is None or math.isnan(seconds) or seconds < 0:
        return "-"
    s = math.ceil(seconds) if coarse else round(seconds)
    if s < 60:
        return f"{s} s"
    if coarse:
        return f"{math.ceil(s / 60)} min" if s < 3600 else f"{math.ceil(s / 3600)} h"
    h, rest = divmod(s, 3600)
    m, sec = divmod(rest, 60)
    return f"{h} h {m} min" if h else f"{m} min {sec} s"


def energy(joules: float | None) -> str:
    """Joules with a readable unit: `812 mJ`, `12.3 J`, `4.56 kJ`."""
    if joules is None:
        return "-"
    a = abs(joules)
    if a < 1.0:
        return f"{joules * 1000:.0f} mJ"
    if a < 1000.0:
        return f"{joules:.3g} J" if a < 100 else f"{joules:.0f} J"
    return f"{joules / 1000:.3g} kJ"


def nice_ceiling(x: float) -> float:
    """A round axis maximum at or above x (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8 × 10^k); 1 for nothing."""
    if x <= 0:
        return 1.0
    exp = math.floor(math.log10(x))
    for m in (1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0):
        if m * 10**exp >= x * (1 - 1e-9):
            return m * 10**exp
    return 10.0 ** (exp + 1)


WIDE = 1000  # a width every long form fits (a widget not laid out yet)


def mode_label(mode: Any) -> str:
    """A power mode by name and id, `MAXN_SUPER (mode 2)`: ids differ between modules, names say
    what the mode is; `mode ?` where it could not be read."""
    return f"{mode.name} (mode {mode.id})" if mode is not None else "mode ?"


def fit(width: int, *variants: Any) -> Any:
    """The first of `variants` (str or Text, longest first) that fits `width` cells, else the last
    (the shortest): a narrow terminal gets a shorter line with every figure whole, never a cut one."""
    return next((v for v in variants if cell_len(v) <= width), variants[-1])


def cell_len(text: Any) -> int:
    return text.cell_len if isinstance(text, Text) else Text(str(text)).cell_len


def title_room(widget: Any) -> int:
    """The cells a widget's border title has (`╭─ title ─╮`)."""
    return widget.size.width - 6 if widget.size.width else WIDE
