"""Small formatting helpers shared by the panes: numbers, energy, source labels."""

from __future__ import annotations

import math
from typing import Any, Callable

from rich.text import Text

from engine.core.provenance import Source

SOURCE_STYLE = {Source.MEASURED: "green", Source.TWIN: "yellow", Source.PREDICTED: "magenta"}


def tag(source: Source | str) -> Text:
    """`[twin]`, coloured by source, so every figure says where it came from."""
    src = Source(source)
    return Text(f"[{src.value}]", style=SOURCE_STYLE.get(src, ""))


def num(value: float | None, fmt: str = ".2f", none: str = "-") -> str:
    return none if value is None else format(value, fmt)


def _half(centre: float, interval: Any) -> float:
    """The wider side of an interval around `centre` (so `centre ± half` holds the interval)."""
    return max(centre - interval.low, interval.high - centre, 0.0)


def energy_pm(joules: float | None, interval: Any = None) -> str:
    """Joules with their interval, compact for a narrow pane: `30.4±0.2 J`, `812±12 mJ`."""
    if joules is None or interval is None:
        return energy(joules)
    half, a = _half(joules, interval), abs(joules)
    scale, unit = (1000.0, "mJ") if a < 1.0 else (1.0, "J") if a < 1000.0 else (1e-3, "kJ")
    v = a * scale
    digits = 0 if v >= 100 else max(0, 2 - math.floor(math.log10(v))) if v > 0 else 0
    return f"{joules * scale:.{digits}f}±{half * scale:.{digits}f} {unit}"


def duration_pm(seconds: float | None, interval: Any, fmt: Callable[[float | None], str]) -> str:
    """A duration with its interval: `4:05±15 s`, `7±1 s`; `fmt` writes a duration (`format_duration`)."""
    text = fmt(seconds)
    if seconds is None or interval is None:
        return text
    half = _half(seconds, interval)
    if text.endswith(" s"):
        return f"{text[:-2]}±{half:.0f} s"
    return f"{text}±{fmt(half)}"


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


def pct(value: float | None, signed: bool = True) -> str:
    if value is None:
        return "-"
    return f"{value:+.1f}%" if signed else f"{value:.1f}%"


def nice_ceiling(x: float) -> float:
    """A round axis maximum at or above x (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8 × 10^k); 1 for nothing."""
    if x <= 0:
        return 1.0
    exp = math.floor(math.log10(x))
    for m in (1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0):
        if m * 10**exp >= x * (1 - 1e-9):
            return m * 10**exp
    return 10.0 ** (exp + 1)
