"""How stored settings and times read, the same in the CLI's tables and the TUI's."""

from __future__ import annotations

from typing import Mapping, Sequence

from engine.core.units import format_mhz
from engine.core.errors import ConfigError
from engine.core.interval import Interval
from engine.core.jsontypes import as_float, as_list
from engine.core.stats import Stat
from engine.results.records import SweepRecord, dvfs_setting
from engine.results.sweeps import PointSummary


def format_setting(setting: Mapping[str, object] | None) -> str:
    """`GPU 816 EMC 3199 MHz m0`; `governor` when nothing is pinned; `-` when not known."""
    if setting is None:
        return "-"
    parts = [f"{d.upper()} {format_mhz(as_float(setting[d + '_hz']))}" for d in ("gpu", "cpu", "emc") if setting.get(d + "_hz")]
    text = " ".join(parts) + (" MHz" if parts else "governor")
    if setting.get("nvpmodel") is not None:
        text += f" m{setting['nvpmodel']}"
    return text


def setting_label(setting: Mapping[str, object] | None) -> str:
    """A stored setting as DvfsSetting.label() says it; `unknown` when not recorded."""
    if not setting:
        return "unknown"
    try:
        return dvfs_setting(setting).label()
    except ConfigError:
        return str(dict(setting))


def describe_space(space: Mapping[str, object]) -> str:
    """What a stored sweep covered, in a few words: `gpu`, `gpu+emc (fast)`, `5 settings`, `imported (a.csv)`."""
    if space.get("method") == "import":
        return f"imported ({space.get('file', '?')})"
    what = f"{len(as_list(space['settings']))} settings" if space.get("settings") else str(space.get("space") or "?")
    return what + (" (fast)" if space.get("method") == "fast" else "")


def sweep_total(sweep: SweepRecord, done: int) -> int | None:
    """The points a stored sweep (engine.results.records.SweepRecord) plans: its `planned`; the `done`
    points of a finished one that did not record it (before schema v11); None: not known."""
    if sweep.planned is not None:
        return sweep.planned
    return done if sweep.status == "finished" else None


def sweep_progress(sweep: SweepRecord, done: int) -> str:
    """`15/60`: the points stored of those planned; `15/?` where the plan is not known."""
    total = sweep_total(sweep, done)
    return f"{done}/{'?' if total is None else total}"


def sweep_state(sweep: SweepRecord) -> str:
    """`abandoned, resumable`: a stored sweep's status, and whether the same sweep carries on from its points."""
    return sweep.status + (", resumable" if sweep.resumable else "")


def format_when(stamp: str | None) -> str:
    """`2025-01-01 12:34` from an ISO timestamp; `-` when there is none."""
    return "-" if not stamp else stamp.replace("T", " ")[:16]


def id_list(ids: Sequence[int], limit: int = 8) -> str:
    """Record ids for a line that names them: `3, 7, 9`, `3, 7, 9, ... and 4 more` past `limit`."""
    shown = ", ".join(str(i) for i in ids[:limit])
    return shown + (f" and {len(ids) - limit} more" if len(ids) > limit else "")


UNKNOWN = "—"  # a figure that was not recorded (an energy-only point's time): never shown as 0


def format_stat(stat: Stat | None, fmt: str, scale: float = 1.0) -> str:
    """A Stat (engine.core.stats) as `mean ± ci95` scaled; `—` for None (not recorded)."""
    if stat is None:
        return UNKNOWN
    mean = format(stat.mean * scale, fmt)
    return mean if stat.ci95 is None else f"{mean} ± {format(stat.ci95 * scale, fmt)}"


def sweep_point_lines(points: Sequence[PointSummary], best: PointSummary | None, maxn: PointSummary | None,
                      src: str, baseline_name: str = "MAXN") -> list[str]:
    """A sweep's points (engine.results.sweeps.PointSummary) as a table, the baseline's (`maxn`) marked by its
    mode's name; `—` where a time was not recorded."""
    marked = [(p, p.setting.label() + (" *" if p is best else (f"  ({baseline_name})" if p is maxn else "")))
              for p in points]
    width = max([48, *(len(label) for _p, label in marked)])  # a MAXN_SUPER mark widens it
    lines = [f"{'setting':{width}} {'n':>3} {'J/sample':>18} {'ms/sample':>18} {'W':>14}"]
    for p, label in marked:
        lines.append(f"{label:{width}} {p.n:>3} {format_stat(p.joules_per_sample, '.4g'):>18} "
                     f"{format_stat(p.seconds_per_sample, '.4g', 1e3):>18} {format_stat(p.power_w, '.3g'):>14}  [{src}]")
    return lines


# --------------------------------------------------------------------------- savings in words
# One way to say a saving, a slowdown and a change for every client (the CLI's lines, the reports, the
# TUI's pages), in words rather than signs: "-0.6% saving" is a double negative a reader stumbles on.
# The numbers stay signed where they are data (--json, exports: engine.results.compare.SIGN_CONVENTION).
SAME = 0.05  # below this (in %) a difference rounds to 0.0%: said as the same


def saving_text(pct: float | None, *, than: str | None = "MAXN", interval: Interval | None = None) -> str:
    """`14.7% less energy than MAXN`, `0.6% more energy than MAXN`, `as much energy as MAXN`; without
    `than`: `14.7% less energy`. `interval` (an engine.core.interval.Interval of the saving as a
    fraction) follows in the same words: `(90%: 4.1–16.8% less)`, `(90%: 3.0% more to 2.0% less)`.
    `—` for None (not known)."""
    if pct is None:
        return UNKNOWN
    if abs(pct) < SAME:
        head = f"as much energy as {than}" if than else "the same energy"
    else:
        head = f"{abs(pct):.1f}% {'less' if pct > 0 else 'more'} energy" + (f" than {than}" if than else "")
    return head if interval is None else f"{head} ({interval.level:.0%}: {_range_words(interval)})"


def board_estimate_text(saving_pct: float, interval: Interval, than: str = "MAXN") -> str:
    """A twin's saving read as an estimate of a board's, as every client says it:
    `as an estimate of a board's: 14.7% less energy than MAXN (90%: 4.1–16.8% less)  [basis]`; `than`
    names the baseline's mode (`MAXN_SUPER`)."""
    return f"as an estimate of a board's: {saving_text(saving_pct, than=than, interval=interval)}  [{interval.basis}]"


def saving_short(pct: float | None) -> str:
    """A table cell under a `vs MAXN` heading: `14.7% less`, `0.6% more`, `same`; `—` for None."""
    if pct is None:
        return UNKNOWN
    return "same" if abs(pct) < SAME else f"{abs(pct):.1f}% {'less' if pct > 0 else 'more'}"


def rail_savings_text(rail_saving_pct: Mapping[str, float]) -> str:
    """Each rail's saving in saving_short's words: `VDD_GPU_SOC 0.5% more, VDD_CPU_CV 6.3% less`."""
    return ", ".join(f"{rail} {saving_short(pct)}" for rail, pct in rail_saving_pct.items())


def slowdown_text(pct: float | None, *, than: str | None = "MAXN") -> str:
    """`22.3% slower than MAXN`, `5.0% faster than MAXN`, `as fast as MAXN`; without `than`:
    `22.3% slower`, `the same time`; `—` for None (the time was not recorded)."""
    if pct is None:
        return UNKNOWN
    if abs(pct) < SAME:
        return f"as fast as {than}" if than else "the same time"
    return f"{abs(pct):.1f}% {'slower' if pct > 0 else 'faster'}" + (f" than {than}" if than else "")


def change_text(pct: float | None) -> str:
    """A figure that went up or down (power, throughput): `30.3% higher`, `18.2% lower`, `same`."""
    if pct is None:
        return UNKNOWN
    return "same" if abs(pct) < SAME else f"{abs(pct):.1f}% {'higher' if pct > 0 else 'lower'}"


def versus_text(saving_pct: float | None, slowdown_pct: float | None, *, than: str = "MAXN",
                interval: Interval | None = None) -> str:
    """The two together, as every client says them: `vs MAXN: 14.7% less energy, 22.3% slower`
    (`time not recorded` where the slowdown is not known); `interval` as saving_text takes it."""
    time = "time not recorded" if slowdown_pct is None else slowdown_text(slowdown_pct, than=None)
    return f"vs {than}: {saving_text(saving_pct, than=None, interval=interval)}, {time}"


def saving_compact(pct: float, interval: Interval | None = None) -> str:
    """A narrow pane's saving with its interval (fractions), whole percents: `saves 13% (4–17%)`,
    `costs 3% more (1–5% more)`, `saves 2% (3% more–8% less)`."""
    if round(pct) == 0:
        head = "saves about 0%"
    else:
        head = f"saves {pct:.0f}%" if pct > 0 else f"costs {-pct:.0f}% more"
    if interval is None:
        return head
    lo, hi = 100.0 * interval.low, 100.0 * interval.high
    if lo >= 0.0:
        span = f"{lo:.0f}–{hi:.0f}%" if pct > 0 else f"{lo:.0f}–{hi:.0f}% less"
    elif hi <= 0.0:
        span = f"{-hi:.0f}–{-lo:.0f}% more"
    else:
        span = f"{-lo:.0f}% more–{hi:.0f}% less"
    return f"{head} ({span})"


def _range_words(interval: Interval) -> str:
    """A saving's interval (fractions) in the words of saving_text."""
    lo, hi = 100.0 * interval.low, 100.0 * interval.high
    if lo >= 0.0:
        return f"{lo:.1f}–{hi:.1f}% less"
    if hi <= 0.0:
        return f"{-hi:.1f}–{-lo:.1f}% more"
    return f"{-lo:.1f}% more to {hi:.1f}% less"
