"""Page 4: a run and its baseline (the board's uncapped mode by name and id: MAXN (mode 0), MAXN_SUPER (mode 2))
side by side, every figure labelled by source."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.reactive import var
from textual.widgets import Static

from tui.compare_model import CompareView, describe_run
from engine.results.baseline import stored_mode_name
from engine.results.format import board_estimate_text, saving_short, saving_text, slowdown_text
from tui.fmt import num, sig3, tag
from tui.screens.base import PageScreen
from tui.widgets.charts import BlockChart
from tui.widgets.live import short_rail

EMPTY = ("Nothing to compare yet: run an experiment with 'compare with' the board's baseline ticked (page 2), "
         "or open a run in History (page 5).")


class CompareScreen(PageScreen):
    PAGE = "compare"
    TITLE_TEXT = "4 Compare"

    # Bound to the app's compare_view: the comparison opened last (None: none, or its run deleted).
    view: var[CompareView | None] = var(None, init=False)

    def __init__(self) -> None:
        super().__init__()
        self._drawn: CompareView | None = None

    def compose_body(self) -> ComposeResult:
        yield Static(EMPTY, id="compare-title")
        yield Static(id="compare-figures", classes="pane")
        with Horizontal(id="compare-bottom"):
            yield Static(id="compare-rails", classes="pane")
            with Vertical(id="compare-charts", classes="pane"):
                yield BlockChart(id="chart-run", style="green")
                yield BlockChart(id="chart-base", style="yellow")

    def on_mount(self) -> None:
        self.query_one("#compare-figures").border_title = "Side by side"
        self.query_one("#compare-rails").border_title = "Energy per rail"
        self.query_one("#compare-charts").border_title = "Power (W), same axes"

    def watch_view(self, view: CompareView | None) -> None:
        if view is not None or self._drawn is not None:  # none at all: the page as composed says so
            self.paint("comparison", lambda: self.draw_comparison(view))

    def draw_comparison(self, view: CompareView | None) -> None:
        if view is self._drawn:
            return
        self._drawn = view
        if view is None:  # its run was deleted: nothing to compare any more
            self.query_one("#compare-title", Static).update(EMPTY)
            self.query_one("#compare-figures", Static).update("")
            self.query_one("#compare-figures").border_title = "Side by side"
            self.query_one("#compare-rails", Static).update("")
            self.query_one("#compare-charts").border_title = "Power (W), same axes"
            for chart in self.query(BlockChart):
                chart.plot((), None)
            return
        run, base = view.run, view.base
        title = Text()
        title.append(f"run {run.id} ", style="bold green")
        title.append(describe_run(run))
        if base is not None:
            title.append("  vs  ")
            title.append(f"run {base.id} ", style="bold yellow")
            title.append(view.baseline_note)
        else:
            title.append(f"  ({view.baseline_note})", style="dim")
        if view.saving_pct is not None:
            # in words, as the CLI says it (engine.results.format): no signs to decode, no double negatives
            # the baseline's mode by name, as stored (MAXN_SUPER on an Orin Nano; the title above gives its id)
            name = stored_mode_name(base.setting if base is not None else None)
            title.append(f"\nvs {name}" + (" per sample" if view.per_sample else "") + ": ")
            title.append(saving_text(view.saving_pct, than=None),
                         style="bold green" if view.saving_pct >= 0 else "bold red")
            title.append(", ")
            title.append(slowdown_text(view.slowdown_pct, than=None), style="bold")
            title.append(" ")
            title.append_text(tag(view.source))
            if view.estimate is not None and not view.per_sample:  # the engine's, as the CLI prints it
                title.append(f"\n{board_estimate_text(view.saving_pct, view.estimate, name)}", style="dim")
        for note in view.notes:
            title.append(f"\n{note}", style="yellow")
        self.query_one("#compare-title", Static).update(title)
        self.query_one("#compare-figures").border_title = f"Side by side · {view.workload_text}"

        table = Table(box=None, expand=True, padding=(0, 1))
        table.add_column("")
        table.add_column(Text(f"run {run.id}", style="green"), justify="right")
        table.add_column(Text("MAXN" if base else "-", style="yellow"), justify="right")
        table.add_column("vs MAXN", justify="right")
        table.add_column("src")
        for f in view.figures:
            style = {True: "green", False: "red", None: ""}[f.better]
            name = f"{f.name} {f.unit}".strip()
            src = tag(f.source) if f.label is None else Text(f.source_text, style="green" if f.meaningful else "red")
            table.add_row(name, num(f.run, f.fmt), num(f.base, f.fmt), Text(f.delta_text, style=style), src)
        self.query_one("#compare-figures", Static).update(table)

        rails = Table(box=None, expand=True, padding=(0, 0, 0, 1))
        # the rails' short names (as on the Run and Device pages): 80 columns keep every figure whole
        rails.add_column(Text.assemble("J ", tag(view.source)), no_wrap=True, overflow="ellipsis")
        rails.add_column(Text("run", style="green"), justify="right", no_wrap=True)
        rails.add_column(Text("MAXN", style="yellow"), justify="right", no_wrap=True)
        rails.add_column("vs MAXN", justify="right", no_wrap=True)
        for rail, rj, bj, saving in view.rails:
            style = "" if saving is None else ("green" if saving > 0 else "red")
            rails.add_row(short_rail(rail), sig3(rj), sig3(bj),
                          Text("-" if saving is None else saving_short(saving), style=style))
        self.query_one("#compare-rails", Static).update(rails)

        span = view.span_s
        charts = self.query_one("#compare-charts")
        charts.border_title = Text(f"Power W, 0–{span:.3g} s [{view.run_series.source.value}]")
        self.query_one("#chart-run", BlockChart).plot(view.run_series.resample(120, span), view.peak_w,
                                                      f"run {run.id}")
        base_chart = self.query_one("#chart-base", BlockChart)
        if view.base_series is not None and base is not None:
            base_chart.plot(view.base_series.resample(120, span), view.peak_w, f"MAXN run {base.id}")
        else:
            base_chart.plot((), None, "no MAXN run to chart")
