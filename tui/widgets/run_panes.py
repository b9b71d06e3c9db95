"""Panes of the Run page, each drawing one RunView."""

from __future__ import annotations

from rich.text import Text

from engine.core.provenance import MetricProvenance, Source
from tui.fmt import WIDE, duration_pm, energy, energy_pm, fit, format_duration, num, tag, title_room
from tui.runstate import MIN_SPREAD_STEPS, RunView
from tui.widgets.device_panes import Pane
from tui.widgets.live import GraphStack, plot_run_rails
from tui.widgets.quiet import set_title

STATUS_STYLE = {"running": "bold green", "paused": "bold yellow", "finished": "bold cyan",
                "cancelled": "bold red", "failed": "bold red", "starting": "bold", "idle": "dim"}
BAR_WIDTH = 20


class RunPowerPane(GraphStack):
    """Power per rail and in total during the run, a graph each: from the run's steps (the energy
    windows the run is recorded with), in time buckets of device time; last step, avg, peak."""

    def on_mount(self) -> None:
        self.border_title = "Power W"

    def show(self, view: RunView) -> None:
        rails = list(view.rail_now_w) or list(view.rails)
        span = view.chart_span_s
        over = f" {span:.3g} s" if span else ""
        # `now` is the last step's: say so once the run is not stepping (the Device page shows the board now)
        now = "now" if view.status in ("running", "starting") else "last step"
        set_title(self, fit(title_room(self), Text.assemble("Power W ", tag(view.source), f" {now} avg pk{over}"),
                                Text.assemble("W ", tag(view.source), f" {now} avg pk{over}"),
                                Text.assemble("W ", tag(view.source), f" {now} avg pk"),
                                Text.assemble("W ", tag(view.source), f" {now.split()[0]} avg pk")))
        if not view.spans:
            return
        plot_run_rails(self, view.spans, rails, view.rails or rails)


class ProgressPane(Pane):
    """Which run, step of total with a bar, loss, ETA, throughput, energy so far and projected.

    Every line is laid out for the pane's width: where a line's long form does not fit, a shorter
    one that keeps every figure and its source whole (an 80-column terminal never cuts a figure)."""

    def on_mount(self) -> None:
        self.border_title = "Run"

    def show(self, view: RunView, extra_line: str | tuple[str, ...] = "") -> None:
        """`extra_line`: the selector's line, or its forms longest first (SelectorPreview.short_forms)."""
        width = self.content_size.width or WIDE  # before the first layout: the long forms
        if not isinstance(extra_line, str):
            extra_line = fit(width, *extra_line) if extra_line else ""
        lines = [_status_line(view), _steps_line(view, width), _eta_line(view, width), *_rate_lines(view),
                 _energy_line(view, width)]
        if view.metrics:
            lines.append(_eval_line(view, width))
        elif extra_line:
            lines.append(Text(extra_line, style="magenta"))
        text = Text("\n").join(lines)
        self.draw_if_changed(None, lambda: (text, len(lines)))


def _status_line(view: RunView) -> Text:
    text = Text(no_wrap=True, overflow="ellipsis")  # the policy's spec and the workload: names, not figures
    text.append(view.status.upper(), style=STATUS_STYLE.get(view.status, "bold"))
    if view.total_runs:
        what = "MAXN baseline" if view.role == "baseline" else view.policy
        text.append(f" {view.index}/{view.total_runs} {what}")
    if view.model:
        text.append(f" {view.model}/{view.task}", style="dim")
    return text


def _steps_line(view: RunView, width: int) -> Text:
    """The bar takes what the step count and the loss leave of the width (at most BAR_WIDTH)."""
    tail = f" {view.step}/{view.total_steps or '?'} steps · loss {num(view.loss, '.4f')}"
    bar_w = max(0, min(BAR_WIDTH, width - len(tail)))
    frac = view.step / view.total_steps if view.total_steps else 0.0
    filled = round(frac * bar_w)
    return Text.assemble(("█" * filled, "green"), ("░" * (bar_w - filled), "grey50"), tail if bar_w else tail[1:])


def _eta_line(view: RunView, width: int) -> Text:
    """`ETA 16 min 36 s ±2 min [predicted]`: a duration, not a clock time; its interval from the
    steps' spread, or said to be not known yet."""
    if view.eta_s is None:
        return Text.assemble("ETA -")
    eta = format_duration(view.eta_s)
    pred = tag(Source.PREDICTED)
    if view.eta_interval is not None:
        return Text.assemble(f"ETA {duration_pm(view.eta_s, view.eta_interval)} ", pred)
    return fit(width, Text.assemble(f"ETA {eta} (no range before {MIN_SPREAD_STEPS} steps) ", pred),
                Text.assemble(f"ETA {eta} ±? ", pred))


def _rate_lines(view: RunView) -> list[Text]:
    if view.source is Source.TWIN:
        return [Text.assemble(f"samples/s host {num(view.host_samples_per_s, '.0f')} ", tag(Source.MEASURED)),
                Text.assemble(f"samples/s board {num(view.device_samples_per_s, '.0f')} ", tag(view.source))]
    return [Text.assemble(f"samples/s {num(view.host_samples_per_s, '.1f')} ", tag(Source.MEASURED))]


def _eval_line(view: RunView, width: int) -> Text:
    """The last evaluation and what it means: `not meaningful (random weights / ...)`, its reasons
    dropped where the width is short (the Compare page and the log keep them)."""
    shown = ", ".join(f"{k} {v:.4g}" for k, v in view.metrics.items())
    prov = view.metrics_provenance or MetricProvenance(None, None)  # untold: never shown as measured
    style = "green" if prov.meaningful else "red"
    short = prov.tag(view.source) if prov.meaningful else prov.label(view.source, short=True)
    return fit(width, Text.assemble(f"eval {shown} ", (prov.tag(view.source), style)),
               Text.assemble(f"eval {shown} ", (short, style)))


def _energy_line(view: RunView, width: int) -> Text:
    """Energy so far (the run's source) and projected to the last step (predicted, with its range)."""
    head = Text.assemble("energy ", (energy(view.energy_j if view.step else None), "bold"), " ", tag(view.source),
                         " → ")
    pred = tag(Source.PREDICTED)
    projected = Text(energy_pm(view.projected_j, view.projected_interval), style="bold")
    if view.projected_j is None or view.projected_interval is not None:
        return Text.assemble(head, projected, " ", pred)
    return fit(width, Text.assemble(head, projected, f" (no range before {MIN_SPREAD_STEPS} steps) ", pred),
                Text.assemble(head, projected, " ±? ", pred))
