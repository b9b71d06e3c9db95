"""Panes of the Run page, each drawing one RunView."""

from __future__ import annotations

from rich.text import Text

from engine.core.provenance import MetricProvenance, Source
from tui.fmt import duration_pm, energy, energy_pm, num, tag
from tui.runstate import RunView, format_duration
from tui.widgets.device_panes import Pane
from tui.widgets.live import GraphStack, show_run_rails

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
        self.border_title = Text.assemble("Power W ", tag(view.source), f" {now} avg pk{over}")
        if not view.spans:
            return
        show_run_rails(self, view.spans, rails, view.rails or rails)


class ProgressPane(Pane):
    """Which run, step of total with a bar, loss, ETA, throughput, energy so far and projected."""

    def on_mount(self) -> None:
        self.border_title = "Run"

    def show(self, view: RunView, extra_line: str = "") -> None:
        text = Text()
        status = view.status
        text.append(f"{status.upper()}", style=STATUS_STYLE.get(status, "bold"))
        if view.total_runs:
            what = "MAXN baseline" if view.role == "baseline" else view.policy
            text.append(f" {view.index}/{view.total_runs} {what}")
        if view.model:
            text.append(f" {view.model}/{view.task}", style="dim")
        text.append("\n")
        frac = view.step / view.total_steps if view.total_steps else 0.0
        filled = round(frac * BAR_WIDTH)
        text.append("█" * filled, style="green")
        text.append("░" * (BAR_WIDTH - filled), style="grey50")
        text.append(f" {view.step}/{view.total_steps or '?'} steps")
        eta = duration_pm(view.eta_s, view.eta_interval, format_duration)  # ± its interval: predicted
        text.append(f"\nloss {num(view.loss, '.4f')} · ETA {eta} ")
        text.append_text(tag(Source.PREDICTED))
        if view.source is Source.TWIN:
            text.append(f"\nsamples/s host {num(view.host_samples_per_s, '.0f')} ")
            text.append_text(tag(Source.MEASURED))
            text.append(f"\nsamples/s board {num(view.device_samples_per_s, '.0f')} ")
            text.append_text(tag(view.source))
        else:
            text.append(f"\nsamples/s {num(view.host_samples_per_s, '.1f')} ")
            text.append_text(tag(Source.MEASURED))
        text.append("\nenergy ")
        text.append(energy(view.energy_j if view.step else None), style="bold")
        text.append(" ")
        text.append_text(tag(view.source))
        text.append(" → ")
        text.append(energy_pm(view.projected_j, view.projected_interval), style="bold")
        text.append(" ")
        text.append_text(tag(Source.PREDICTED))
        if view.metrics:
            shown = ", ".join(f"{k} {v:.4g}" for k, v in view.metrics.items())
            text.append(f"\neval {shown} ")
            prov = view.metrics_provenance or MetricProvenance(None, None)  # untold: never shown as measured
            text.append(prov.tag(view.source), style="green" if prov.meaningful else "red")
        elif extra_line:
            text.append(f"\n{extra_line}", style="magenta")
        self.show_if_changed(None, lambda: (text, text.plain.count("\n") + 1))
