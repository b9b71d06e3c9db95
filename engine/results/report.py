"""Reports: a Markdown file with PNG figures for a stored sweep or run.

IDs: `s12` is sweep 12; `12` (or `r12`) is run 12 (`slm-dvfs runs` lists run ids; a
sweep's id is printed when it runs).

A sweep report plots energy per sample, time per sample and average power against the
GPU clock, with 95% confidence bars over the repetitions, the optimum marked and MAXN
Mode 0's level as a horizontal line; its Markdown names the optimum and tabulates every
point. A run report gives the run's figures, and for a run compared with MAXN the
per-rail energy bars of both and their power traces. Every figure's title carries its
source label (measured / twin). matplotlib draws off-screen (Agg), without pyplot, so
no global backend state is touched.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from engine.core.errors import ConfigError
from engine.core.paths import reports_dir
from engine.core.stats import Stat
from engine.device.power import PowerSample
from engine.results.baseline import device_baseline, mode_text
from engine.results.compare import Side, mismatch, optimum_vs_maxn
from engine.core.text import clean_text
from engine.results.records import DeviceRecord, RunRecord, SweepRecord
from engine.results.format import UNKNOWN, format_stat, saving_text, setting_label, slowdown_text
from engine.results.sweeps import PointSummary, Ranking, maxn_of, optimum, summarize_points
from engine.core.text import shown

if TYPE_CHECKING:  # annotations only: engine.results.store imports the results modules; matplotlib loads on a report
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from engine.results.store import Store

log = logging.getLogger(__name__)

DPI = 110


@dataclass(frozen=True)
class Report:
    kind: str  # "sweep" | "run"
    id: int
    markdown: Path
    figures: tuple[Path, ...]
    title: str


def parse_report_id(text: str) -> tuple[str, int]:
    """`s12` -> ("sweep", 12); `12` or `r12` -> ("run", 12)."""
    m = re.fullmatch(r"\s*([sSrR]?)([0-9]{1,19})\s*", str(text))  # ASCII digits; 19: SQLite's ids fit
    if not m:
        raise ConfigError(f"{shown(text)!r} is not a report id",
                          "give a run id (e.g. 12 or r12; `slm-dvfs runs` lists them) or a sweep id (e.g. s3)")
    return ("sweep" if m.group(1).lower() == "s" else "run"), int(m.group(2))


def write_report(store: Store, ident: str, out_dir: str | Path | None = None, *,
                 objective: Ranking | None = None) -> Report:
    """Write the report of a sweep (`s12`) or run (`12`) into `out_dir` (None: the data dir's
    `reports/`, engine.core.paths.reports_dir). A sweep's optimum is the one `objective` ranks
    best (an engine.dvfs Objective, parsed by the caller); without one, the least energy per sample."""
    kind, number = parse_report_id(ident)
    out = default_report_dir(store) if out_dir is None else Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create the report folder {out}: {exc.strerror}", "pass a writable --out DIR") from None
    if kind == "sweep":
        return sweep_report(store, number, out, objective=objective)
    return run_report(store, number, out)


def default_report_dir(store: Store) -> Path:
    """DATA_DIR/reports for the default store; DATA_DIR/reports/<db name> for another one, so
    run 12 of two stores do not overwrite each other's report."""
    from engine.results.store.db import default_db_path

    path = getattr(store, "path", None)
    if path is None or Path(path).resolve() == default_db_path().resolve():
        return reports_dir()
    return reports_dir() / Path(path).stem


# --------------------------------------------------------------------------- sweeps
def sweep_report(store: Store, sweep_id: int, out: Path, *, objective: Ranking | None = None) -> Report:
    sweep = store.get_sweep(sweep_id)
    summaries = summarize_points(store.sweep_points(sweep_id))
    if not summaries:
        raise ConfigError(f"sweep s{sweep_id} has no points yet",
                          "run (or resume) it with `slm-dvfs sweep` first")
    device = store.get_device(sweep.device_id)
    wl = store.get_workload(sweep.workload_id)
    src = sweep.source.value
    base = device_baseline(device, sweep.space)  # its module's uncapped mode: MAXN_SUPER (mode 2) on an Orin Nano
    best = optimum(summaries, objective, baseline=base.setting)
    maxn = maxn_of(summaries, base.setting)
    assert best is not None
    title = f"Sweep s{sweep_id}: {wl.model} / {wl.task} on {device.board} [{src}]"
    prefix = f"sweep-s{sweep_id}"
    figures = [
        _sweep_figure(summaries, best, maxn, "joules_per_sample", 1.0, "energy per sample (J)",
                      f"Energy per sample vs GPU clock [{src}]", out / f"{prefix}-energy.png", base.label),
    ]
    timed = [s for s in summaries if not s.energy_only]  # energy-only points have no time to draw
    if timed:
        figures += [
            _sweep_figure(timed, best, maxn, "seconds_per_sample", 1000.0, "time per sample (ms)",
                          f"Time per sample vs GPU clock [{src}]", out / f"{prefix}-time.png", base.label),
            _sweep_figure(timed, best, maxn, "power_w", 1.0, "average power (W)",
                          f"Average power vs GPU clock [{src}]", out / f"{prefix}-power.png", base.label),
        ]
    rails = sweep.space.get("rails", "all")
    untimed = len(summaries) - len(timed)
    lines = [
        f"# {title}", "",
        f"Workload: **{wl.model}** on **{wl.task}**, batch {wl.batch_size}, sequence {wl.seq_len}, "
        f"{wl.precision}, {wl.mode} fine-tuning.  ",
        f"Device: {device.board}, {device.module}" + (f", serial {device.serial}" if device.serial else "")
        + (f", L4T {device.l4t}" if device.l4t else "")
        + (f" (digital twin {device.profile})" if device.is_twin else "") + ".  ",
        *_boards_line(store.sweep_boards(sweep_id)),
        _method(sweep),
        f"Energy is over the rails preset `{rails}`. All figures are **{src}**"
        + (" (computed by the digital twin)." if src == "twin" else
           " (measured on a board, imported from a file)." if sweep.space.get("method") == "import"
           else " (read on the board).") , "",
        "## Optimum", "",
        f"The optimum for objective `{objective.spec if objective is not None else 'energy'}` is **{best.setting.label()}**: "
        f"{format_stat(best.joules_per_sample, '.4g')} J/sample, "
        f"{format_stat(best.seconds_per_sample, '.4g', 1000)} ms/sample, "
        f"{format_stat(best.power_w, '.3g')} W [{src}].",
    ]
    if untimed:
        lines += ["", f"{untimed} of the {len(summaries)} settings are energy-only (their time was not recorded): "
                      f"{UNKNOWN} marks the figures that need it."]
    vs_maxn = optimum_vs_maxn(best, maxn)
    if maxn is not None and vs_maxn is not None:
        time = "time not recorded" if vs_maxn.slowdown_pct is None else slowdown_text(vs_maxn.slowdown_pct, than=None)
        lines += ["", f"Against {base.label} ({maxn.joules_per_sample.mean:.4g} J/sample): "
                      f"**{saving_text(vs_maxn.saving_pct, than=None)}**, **{time}** [{src}], per sample."]
    else:
        lines += ["", f"{base.label}, the board's baseline, was not part of this sweep, so no saving against it "
                      "is given."]
    lines += ["", "## Figures", ""]
    lines += [f"![{p.stem}]({p.name})" for p in figures]
    lines += ["", f"## Points [{src}]", "",
              "| setting | n | J/sample | ms/sample | W | samples/s |", "|---|---:|---:|---:|---:|---:|"]
    for s in summaries:
        mark = " **(optimum)**" if s is best else (f" ({base.name})" if s is maxn else "")
        lines.append(
            f"| {s.setting.label()}{mark} | {s.n} | {format_stat(s.joules_per_sample, '.4g')}"
            f" | {format_stat(s.seconds_per_sample, '.4g', 1000)}"
            f" | {format_stat(s.power_w, '.3g')} | {_mean(s.samples_per_s, '.4g')} |")
    lines += ["", "± is the half-width of the 95% confidence interval (Student's t over the repetitions); "
                  "a single repetition has none."]
    md = out / f"{prefix}.md"
    md.write_text(clean_text("\n".join(lines)) + "\n")  # stored names and labels, escapes removed
    log.info("wrote %s", md)
    return Report("sweep", sweep_id, md, tuple(figures), title)


def _series(summaries: Sequence[PointSummary]) -> dict[str, list[PointSummary]]:
    """Points with a pinned GPU clock, one series per (CPU, EMC, mode, jetson_clocks)."""
    groups: dict[str, list[PointSummary]] = {}
    for s in summaries:
        if s.setting.gpu_hz is None:
            continue
        st = s.setting
        name = " · ".join([f"CPU {st.cpu_hz / 1e6:g}" if st.cpu_hz else "CPU gov",
                           f"EMC {st.emc_hz / 1e6:g}" if st.emc_hz else "EMC gov",
                           "mode as is" if st.nvpmodel is None else f"mode {st.nvpmodel}"])
        groups.setdefault(name, []).append(s)
    for pts in groups.values():
        pts.sort(key=lambda p: p.setting.gpu_hz or 0)
    return groups


def _sweep_figure(summaries: Sequence[PointSummary], best: PointSummary, maxn: PointSummary | None, attr: str,
                  scale: float, ylabel: str, title: str, path: Path, baseline_label: str = "MAXN (mode 0)") -> Path:
    fig, ax = _figure()
    series = _series(summaries)
    if series:
        for name, pts in series.items():
            xs = [(p.setting.gpu_hz or 0) / 1e6 for p in pts]  # _series keeps pinned GPU clocks only
            ys = [getattr(p, attr).mean * scale for p in pts]
            errs = [(getattr(p, attr).ci95 or 0.0) * scale for p in pts]
            ax.errorbar(xs, ys, yerr=errs, marker="o", ms=4, capsize=3, label=name if len(series) > 1 else None)
        if best.setting.gpu_hz is not None and getattr(best, attr) is not None:
            ax.plot([best.setting.gpu_hz / 1e6], [getattr(best, attr).mean * scale], marker="*", ms=16,
                    color="tab:red", linestyle="none", label=f"optimum ({best.setting.gpu_hz / 1e6:g} MHz)")
        ax.set_xlabel("GPU clock (MHz)")
    else:  # no pinned GPU clock (e.g. the `modes` space): one bar per setting
        labels = [s.setting.label() for s in summaries]
        ys = [getattr(s, attr).mean * scale for s in summaries]
        errs = [(getattr(s, attr).ci95 or 0.0) * scale for s in summaries]
        colors = ["tab:red" if s is best else "tab:blue" for s in summaries]
        ax.bar(range(len(ys)), ys, yerr=errs, color=colors, capsize=3)
        ax.set_xticks(range(len(ys)), labels, rotation=20, ha="right", fontsize=7)
    if maxn is not None and getattr(maxn, attr) is not None:
        ax.axhline(getattr(maxn, attr).mean * scale, color="tab:gray", linestyle="--", label=baseline_label)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    return _save(fig, path)


# --------------------------------------------------------------------------- runs
def run_report(store: Store, run_id: int, out: Path) -> Report:
    run = store.get_run(run_id)
    src = run.source.value
    comparisons = [c for c in store.comparisons_for(run_id) if c.run_id == run_id]
    comparison = comparisons[-1] if comparisons else None
    base = store.get_run(comparison.baseline_run_id) if comparison is not None else None
    # a comparison stored before comparability was checked (two workloads, ...) is not reported as a saving
    refused = None if base is None else mismatch(Side.of(run), Side.of(base))
    if refused is not None:
        comparison = base = None
    what = run.workload.label if run.workload else "unknown workload"
    title = f"Run {run_id}: {what}, policy {run.policy} [{src}]"
    prefix = f"run-{run_id}"
    figures: list[Path] = []
    if run.rail_energy_j:
        figures.append(_rail_figure(run, base, f"Energy per rail [{src}]", out / f"{prefix}-rails.png"))
    samples = store.power_samples(run_id)
    if samples:
        base_samples = store.power_samples(base.id) if base is not None else []
        figures.append(_trace_figure(run, samples, base, base_samples, f"Power over the run [{src}]",
                                     out / f"{prefix}-power.png"))
    setting = setting_label(run.setting)
    lines = [f"# {title}", ""]
    if run.device is not None:
        lines += [f"Device: {run.device.board}, {run.device.label()}.", ""]
    if run.simulated:
        lines += ["**Simulated**: the twin ran the workload's step trace; nothing was trained, so there is no "
                  "loss and no evaluation metric.", ""]
    lines += [f"Setting (last applied): **{setting}**; objective `{run.objective or '-'}`; seed {run.seed}; "
              f"{run.steps} steps, {run.samples} samples. Energy over the rails preset `{run.rails}`.", "",
              f"| figure [{src}] | run {run_id}" + (f" | {mode_text(base.setting)} run {base.id} |" if base else " |"),
              "|---|---:|" + ("---:|" if base else "")]
    for name, key, fmt in (("time (s)", "time_s", ".3f"), ("energy (J)", "energy_j", ".2f"),
                           ("average power (W)", "avg_power_w", ".2f"), ("samples/s", "samples_per_s", ".2f"),
                           ("J/sample", "joules_per_sample", ".4f")):
        row = f"| {name} | {_num(getattr(run, key), fmt)} |"
        if base is not None:
            row += f" {_num(getattr(base, key), fmt)} |"
        lines.append(row)
    # Evaluated where it trained (the host, on the twin); meaningful only for pretrained weights on real data.
    metric_tag = run.metric_provenance.tag(run.source)
    for metric, value in sorted(run.metrics.items()):
        row = f"| {metric} (eval) {metric_tag} | {value:.4f} |"
        if base is not None:
            other = base.metrics.get(metric)
            row += f" {'-' if other is None else format(other, '.4f')} |"
        lines.append(row)
    if refused is not None:
        lines += ["", f"Not compared with its stored baseline: {refused.what}."]
    if comparison is not None and base is not None:  # both, or neither
        same = ", of the same workload" if base.workload is not None else ""
        lines += ["", f"Against {mode_text(base.setting)} (run {base.id}{same}): "
                      f"**{saving_text(comparison.saving_pct, than=None)}**, "
                      f"**{slowdown_text(comparison.slowdown_pct, than=None)}** [{comparison.source.value}]."]
        if base is not None and run.device is not None and base.device is not None and run.device.other_board(base.device):
            lines += [f"The baseline run was on another board of the module (serial {base.device.serial})."]
    if figures:
        lines += ["", "## Figures", ""] + [f"![{p.stem}]({p.name})" for p in figures]
    md = out / f"{prefix}.md"
    md.write_text(clean_text("\n".join(lines)) + "\n")  # stored names and labels, escapes removed
    return Report("run", run_id, md, tuple(figures), title)


def _rail_figure(run: RunRecord, base: RunRecord | None, title: str, path: Path) -> Path:
    fig, ax = _figure()
    rails = list(run.rail_energy_j)
    width = 0.4 if base is not None else 0.6
    xs = list(range(len(rails)))
    ax.bar([x - (width / 2 if base is not None else 0) for x in xs], [run.rail_energy_j[r] for r in rails],
           width, label=f"run {run.id} ({run.policy})")
    if base is not None:
        ax.bar([x + width / 2 for x in xs], [base.rail_energy_j.get(r, 0.0) for r in rails], width,
               label=f"{mode_text(base.setting)} (run {base.id})", color="tab:gray")
    ax.set_xticks(xs, rails, fontsize=8)
    ax.set_ylabel("energy (J)")
    ax.set_title(title)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)


def _trace_figure(run: RunRecord, samples: Sequence[PowerSample], base: RunRecord | None,
                  base_samples: Sequence[PowerSample], title: str,
                  path: Path) -> Path:
    fig, ax = _figure()
    for rec, pts, color in ((run, samples, "tab:blue"), (base, base_samples, "tab:gray")):
        if rec is None or not pts:
            continue
        t0 = pts[0].t
        ax.plot([p.t - t0 for p in pts], [p.total_mw / 1000.0 for p in pts], color=color,
                label=f"run {rec.id} ({rec.policy})")
    ax.set_xlabel("time (s)")
    ax.set_ylabel("power, all stored rails (W)")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)


# --------------------------------------------------------------------------- helpers
def _figure() -> tuple[Figure, Axes]:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.0, 4.2), dpi=DPI)
    return fig, fig.add_subplot(1, 1, 1)


def _save(fig: Figure, path: Path) -> Path:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    fig.tight_layout()
    fig.savefig(path, format="png")
    return path


def _boards_line(boards: Sequence[DeviceRecord]) -> list[str]:
    """A fleet sweep's boards (several boards of one module measured its points)."""
    if len(boards) < 2:
        return []
    serials = ", ".join(b.serial or "(no serial)" for b in boards)
    return [f"Its points were measured on {len(boards)} boards of the module (serials {serials}); "
            "each stored point names its board.  "]


def _method(sweep: SweepRecord) -> str:
    """How the sweep's points were obtained: run here, or imported from a file."""
    space = sweep.space
    if space.get("method") == "import":
        return (f"Method: imported from `{space.get('file', '?')}` (measured elsewhere; steps per point not known), "
                f"up to {sweep.repeats} repetition(s) per setting.  ")
    return (f"Method: {space.get('method', 'run')} sweep of space `{space.get('space', 'explicit settings')}`, "
            f"{sweep.steps} steps per point after {sweep.warmup_steps} uncounted warm-up step(s), "
            f"{sweep.repeats} repetition(s); status {sweep.status}.  ")


def _mean(stat: Stat | None, fmt: str) -> str:
    return UNKNOWN if stat is None else format(stat.mean, fmt)


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)
