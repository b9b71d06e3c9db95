"""Stacks of live graphs for the Device and Run pages, fed from the app's histories.

A `GraphStack` holds one `HistoryGraph` per series, made the first time the series is
shown (a board's rails and zones are known only once it has been read); the graphs share
the stack's height, so they grow with the terminal. The `plot_*` helpers draw the poll's
history (`tui.live_model.DeviceHistory`) and a run's per-step spans into a stack.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from textual.containers import Vertical

from engine.device.base import ClockDomain
from tui.live_model import TOTAL, DeviceHistory, Span, Stats, clock_key, group_stats, power_columns, rail_key, temp_key
from tui.widgets.charts import POWER_HOT, POWER_WARN, HistoryGraph
from tui.widgets.device_panes import TEMP_HOT_C, TEMP_WARN_C

TEMP_AXIS_C = (20.0, 100.0)  # a fixed axis: temperatures compare across graphs and time
RUN_GRAPH_COLUMNS = 40  # before a graph has been laid out


def short_rail(name: str) -> str:
    """`VDD_GPU_SOC` -> `GPU_SOC`, `VDDQ_VDD2_1V8AO` -> `VDDQ_VDD2`: the INA3221 labels without
    their supply prefix, and at most two parts of them."""
    for prefix in ("VDD_", "VIN_"):
        if name.startswith(prefix) and len(name) > len(prefix):
            name = name[len(prefix):]
            break
    return "_".join(name.split("_")[:2])


class GraphStack(Vertical):
    """HistoryGraphs made on demand, one per key, in the order first shown."""

    DEFAULT_CSS = """
    GraphStack { height: 1fr; }
    """

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.graphs: dict[str, HistoryGraph] = {}

    def graph(self, key: str, name: str, **kw: object) -> HistoryGraph:
        g = self.graphs.get(key)
        if g is None:
            g = self.graphs[key] = HistoryGraph(name, **kw)  # type: ignore[arg-type]
            self.mount(g)
            self._share()
        return g

    def on_resize(self) -> None:
        self._share()

    def _share(self) -> None:
        """Every graph the same height (what is left over stays below), at least a line each."""
        if not self.graphs or not self.content_size.height:
            return
        h = max(1, self.content_size.height // len(self.graphs))
        for g in self.graphs.values():
            if g.shared_height != h:
                g.styles.height = h
                g.shared_height = h


def power_scale(peak: float | None) -> float:
    """A rail's scale: the top of its graph (a round number over its peak)."""
    from tui.fmt import nice_ceiling

    return nice_ceiling(peak or 0.0)


def plot_power(g: HistoryGraph, values: Sequence[float | None], stats: Stats) -> None:
    """A power graph: its columns coloured by level relative to the rail's scale (the top of its
    graph, over the whole history kept); a rail has no absolute limit, so its figures are not marked."""
    top = power_scale(max([v for v in values if v is not None] + [stats.peak or 0.0]))
    g.plot(values, stats, y_max=top, warn=POWER_WARN * top, hot=POWER_HOT * top)


def plot_rails(stack: GraphStack, history: DeviceHistory, rails: Sequence[str]) -> None:
    """A graph per rail and one of their total, from the poll (W)."""
    width = max((len(short_rail(r)) for r in rails), default=5)
    width = max(5, min(width, 15))
    for rail in [*rails, TOTAL]:
        key = rail_key(rail)
        g = stack.graph(key, short_rail(rail), name_width=width, mark=False)
        plot_power(g, history.values(key, 2 * stack.size.width or None), history.stats(key))


def plot_clocks(stack: GraphStack, history: DeviceHistory, tables: Mapping[ClockDomain, tuple[int, ...]],
                domains: Sequence[ClockDomain] = tuple(ClockDomain)) -> None:
    """A graph per clock domain (MHz), its axis the domain's highest clock."""
    for domain in domains:
        key = clock_key(domain.value)
        values = history.values(key, 2 * stack.size.width or None)
        if not values:
            continue
        table = tables.get(domain)
        top = max(table) / 1e6 if table else None
        g = stack.graph(key, domain.value.upper(), fmt=".0f", name_width=3)
        g.plot(values, history.stats(key), y_max=top)


def plot_load(stack: GraphStack, history: DeviceHistory) -> None:
    """The GPU's load (%), as the board reports it (on the twin: the phase of the step it shows)."""
    values = history.values("load:gpu", 2 * stack.size.width or None)
    if values:
        g = stack.graph("load:gpu", "GPU%", fmt=".0f", name_width=4)
        g.plot(values, history.stats("load:gpu"), y_max=100.0)


def plot_temps(stack: GraphStack, history: DeviceHistory, zones: Sequence[str] = ("max",)) -> None:
    """A graph per zone named (`max`: the hottest zone at each reading), coloured by the thresholds."""
    for zone in zones:
        key = temp_key(zone)
        values = history.values(key, 2 * stack.size.width or None)
        if not values:
            continue
        name = "hottest" if zone == "max" else zone.removesuffix("-thermal")
        g = stack.graph(key, name, fmt=".1f", name_width=7)
        g.plot(values, history.stats(key), y_min=TEMP_AXIS_C[0], y_max=TEMP_AXIS_C[1], warn=TEMP_WARN_C,
               hot=TEMP_HOT_C)


def plot_run_rails(stack: GraphStack, spans: Sequence[Span], rails: Sequence[str], in_total: Sequence[str]) -> None:
    """A graph per rail and one of the total over `in_total`, from the run's steps (W, time buckets);
    every graph's columns and figures in one pass over the spans."""
    width = max(5, min(max((len(short_rail(r)) for r in rails), default=5), 15))
    groups: dict[str, Sequence[str]] = {rail_key(r): (r,) for r in rails}
    groups[rail_key(TOTAL)] = tuple(in_total)
    graphs = {key: stack.graph(key, short_rail(key.removeprefix("rail:")), name_width=width, mark=False)
              for key in groups}
    cols = next(iter(graphs.values())).columns or RUN_GRAPH_COLUMNS  # the graphs share the stack's width
    values, _span = power_columns(spans, cols, groups)
    stats = group_stats(spans, groups)
    for key, g in graphs.items():
        plot_power(g, values[key], stats[key])
