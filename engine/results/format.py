"""How stored settings and times read, the same in the CLI's tables and the TUI's."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from engine.core.units import format_mhz
from engine.core.errors import ConfigError
from engine.results.records import dvfs_setting


def format_setting(setting: Mapping[str, Any] | None) -> str:
    """`GPU 816 EMC 3199 MHz m0`; `governor` when nothing is pinned; `-` when not known."""
    if setting is None:
        return "-"
    parts = [f"{d.upper()} {format_mhz(setting[d + '_hz'])}" for d in ("gpu", "cpu", "emc") if setting.get(d + "_hz")]
    text = " ".join(parts) + (" MHz" if parts else "governor")
    if setting.get("nvpmodel") is not None:
        text += f" m{setting['nvpmodel']}"
    return text


def setting_label(setting: Mapping[str, Any] | None) -> str:
    """A stored setting as DvfsSetting.label() says it; `unknown` when not recorded."""
    if not setting:
        return "unknown"
    try:
        return dvfs_setting(setting).label()
    except ConfigError:
        return str(dict(setting))


def describe_space(space: Mapping[str, Any]) -> str:
    """What a stored sweep covered, in a few words: `gpu`, `gpu+emc (fast)`, `5 settings`, `imported (a.csv)`."""
    if space.get("method") == "import":
        return f"imported ({space.get('file', '?')})"
    what = f"{len(space['settings'])} settings" if space.get("settings") else str(space.get("space") or "?")
    return what + (" (fast)" if space.get("method") == "fast" else "")


def format_when(stamp: str | None) -> str:
    """`2025-01-01 12:34` from an ISO timestamp; `-` when there is none."""
    return "-" if not stamp else stamp.replace("T", " ")[:16]


UNKNOWN = "—"  # a figure that was not recorded (an energy-only point's time): never shown as 0


def format_stat(stat: Any, fmt: str, scale: float = 1.0) -> str:
    """A Stat (engine.core.stats) as `mean ± ci95` scaled; `—` for None (not recorded)."""
    if stat is None:
        return UNKNOWN
    mean = format(stat.mean * scale, fmt)
    return mean if stat.ci95 is None else f"{mean} ± {format(stat.ci95 * scale, fmt)}"


def format_pct(value: float | None) -> str:
    """`+12.3%`; `—` for None (not known, e.g. a slowdown of energy-only points)."""
    return UNKNOWN if value is None else f"{value:+.1f}%"


def sweep_point_lines(points: Sequence[Any], best: Any, maxn: Any, src: str) -> list[str]:
    """A sweep's points (engine.results.sweeps.PointSummary) as a table; `—` where a time was not recorded."""
    lines = [f"{'setting':48} {'n':>3} {'J/sample':>18} {'ms/sample':>18} {'W':>14}"]
    for p in points:
        mark = " *" if p is best else ("  (MAXN)" if p is maxn else "")
        lines.append(f"{p.setting.label() + mark:48} {p.n:>3} {format_stat(p.joules_per_sample, '.4g'):>18} "
                     f"{format_stat(p.seconds_per_sample, '.4g', 1e3):>18} {format_stat(p.power_w, '.3g'):>14}  [{src}]")
    return lines
