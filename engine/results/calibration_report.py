"""The fit report of a twin calibration (engine.device.twin.calibration.Calibration), as plain text
for the terminal or Markdown for the file beside the calibrated profile. Every figure says what it
is: [measured] (the board's sweeps), [predicted] (the calibrated twin's), [twin] (the profile's)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol, Sequence

from engine.results.format import saving_short

if TYPE_CHECKING:  # annotations only: the calibration (scipy's fit) loads when a calibration is made
    from engine.device.twin.calibration import Calibration, SweepError


class SweepRow(Protocol):
    """A measured sweep a calibration saw (engine.run.calibrate.SweepUsed, from the layer above)."""

    @property
    def name(self) -> str: ...
    @property
    def workload(self) -> str: ...
    @property
    def points(self) -> int: ...
    @property
    def energy_only(self) -> int: ...
    @property
    def rails(self) -> tuple[str, ...]: ...


def format_calibration(cal: Calibration, *, sweeps: Sequence[SweepRow] = (), profile_name: str = "",
                       profile_path: Path | None = None, report_paths: Sequence[Path] = (),
                       markdown: bool = False) -> str:
    name = profile_name or cal.profile.name
    out: list[str] = []
    head = (f"Calibration of {cal.base.name} to {cal.n_sweeps} measured sweep{'s' if cal.n_sweeps != 1 else ''} "
            f"({cal.n_points} settings) -> {name}")
    out += [f"# {head}" if markdown else head, ""]
    if sweeps:
        out.append(_title("Sweeps [measured]", markdown))
        rows = [[s.name, s.workload, str(s.points), str(s.energy_only), "+".join(s.rails)] for s in sweeps]
        out += _table(["sweep", "workload", "settings", "energy only", "rails"], rows, markdown) + [""]
    out.append(_title("Per point: energy and time per sample, measured against the calibrated twin", markdown))
    rows = []
    for p in cal.points:
        t_err = p.time_error_pct
        rows.append([p.sweep, p.label, f"{p.measured_energy_j:.4g} J", f"{p.predicted_energy_j:.4g} J",
                     f"{p.energy_error_pct:+.1f}%",
                     "-" if p.measured_time_s is None else f"{1000 * p.measured_time_s:.4g} ms",
                     f"{1000 * p.predicted_time_s:.4g} ms", "-" if t_err is None else f"{t_err:+.1f}%"])
    out += _table(["sweep", "setting", "energy [measured]", "[predicted]", "error", "time [measured]",
                   "[predicted]", "error"], rows, markdown) + [""]
    n_timed = sum(1 for p in cal.points if p.measured_time_s is not None)
    time_text = ("no point has a time (energy only)" if cal.time_mape_pct is None else
                 f"time MAPE {_pct(cal.time_mape_before_pct)} -> {_pct(cal.time_mape_pct)} over {n_timed} "
                 f"point{'s' if n_timed != 1 else ''} with a time")
    out += [f"Fit: energy MAPE {_pct(cal.energy_mape_before_pct)} ({cal.base.name} [twin]) -> "
            f"{_pct(cal.energy_mape_pct)} (calibrated [predicted]) against [measured]; {time_text}", ""]
    out += _loso(cal, markdown)
    out.append(_title("Parameters [predicted]: prior -> fitted ± posterior sd", markdown))
    moved = cal.moved
    rows = [[m.path, _val(m.path, m.before), _val(m.path, m.after), f"± {_val(m.path, m.sd_after)}",
             f"± {_val(m.path, m.sd_before)}", f"{100 * m.relative_change:+.1f}%"] for m in moved]
    if rows:
        out += _table(["parameter", "before", "after", "sd after", "sd before", "change"], rows, markdown)
    else:
        out.append("none moved: the measurements agree with the profile's numbers within their spreads")
    still = [m.path for m in cal.params if not m.moved]
    if still:
        out.append(f"Fitted, not moved (under 0.05 prior sd): {', '.join(still)}")
    out.append("")
    if cal.at_bounds:
        out.append(_title("At a bound: the data asked for more than the profile allows", markdown))
        out += [f"- {hit.line()}" if markdown else f"  {hit.line()}" for hit in cal.at_bounds] + [""]
    if profile_path is not None:
        out.append(f"Profile written: {profile_path}")
    if report_paths:
        out.append(f"Report: {', '.join(str(p) for p in report_paths)}")
    out.append(f"Next: use it with --twin {name} (e.g. `slm-dvfs sweep --fast --twin {name} --model M --task T`, "
               f"`slm-dvfs select --twin {name} --probes 2 ...`)")
    return "\n".join(out).rstrip() + "\n"


def _loso(cal: Calibration, markdown: bool) -> list[str]:
    if not cal.loso:
        why = ("needs 2+ sweeps (each is predicted by a fit to the others)" if cal.n_sweeps < 2
               else "not computed (--no-loso)")
        return [f"Leave-one-sweep-out: {why}", ""]
    out = [_title("Leave-one-sweep-out: each sweep predicted by a fit to the others [predicted vs measured]", markdown)]
    before = {e.sweep: e for e in cal.loso_before}
    rows = []
    for e in cal.loso:
        old = before.get(e.sweep)
        rows.append([e.sweep, _pct(e.curve_mape_pct), _pct(e.curve_rmse_pct),
                     f"{e.optimum_measured or '-'} / {e.optimum_predicted or '-'}",
                     "-" if e.optimum_step_error is None else str(e.optimum_step_error),
                     _saving(e), "-" if old is None else f"{_pct(old.curve_rmse_pct)}, {_pts(old.saving_error_pts)}"])
    out += _table(["sweep", "curve MAPE", "curve RMSE", "optimum measured / predicted", "steps off",
                   "energy vs MAXN measured / predicted", f"{cal.base.name} [twin]: RMSE, saving error"], rows, markdown)
    s, b = cal.loso_summary(), _summary(cal.loso_before)
    out += [f"Mean: normalised curve MAPE {_pct(s['curve_mape_pct'])}, RMSE {_pct(s['curve_rmse_pct'])}; optimum "
            f"{_num(s['optimum_step_error'])} GPU steps off (worst {_num(s['optimum_step_error_max'])}, costing "
            f"{_pct(s['optimum_regret_pct_max'])} energy at worst); saving vs "
            f"MAXN {_num(s['saving_error_pts'])} points off (worst {_num(s['saving_error_pts_max'])})",
            f"Uncalibrated {cal.base.name} [twin] on the same sweeps: RMSE {_pct(b['curve_rmse_pct'])}, optimum "
            f"{_num(b['optimum_step_error'])} steps off, saving {_num(b['saving_error_pts'])} points off", ""]
    return out


def _summary(errors: Sequence[SweepError]) -> dict[str, float | None]:
    from engine.device.twin.calibration import loso_summary

    return loso_summary(errors)


def _saving(e: SweepError) -> str:
    if e.saving_measured_pct is None:
        return "- (no MAXN point)"
    # in words (engine.results.format): a MAXN that was already about optimal reads "0.4% more", not "-0.4%"
    return f"{saving_short(e.saving_measured_pct)} / {saving_short(e.saving_predicted_pct)} ({_pts(e.saving_error_pts)})"


def _title(text: str, markdown: bool) -> str:
    return f"## {text}\n" if markdown else f"{text}:"


def _table(head: Sequence[str], rows: Sequence[Sequence[str]], markdown: bool) -> list[str]:
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        return lines + ["| " + " | ".join(r) + " |" for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(head)]
    def line(cells: Sequence[str]) -> str:
        return "  " + "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()
    return [line(head)] + [line(r) for r in rows]


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}%"


def _pts(v: float | None) -> str:
    return "-" if v is None else f"{v:+.1f} pts"


def _num(v: float | None) -> str:
    return "-" if v is None else f"{v:.2g}"


def _val(path: str, v: float) -> str:
    if path.endswith("_hz"):
        return f"{v / 1e6:.4g} MHz"
    if path.endswith("_mw"):
        return f"{v:.4g} mW"
    return f"{v:.4g}"
