"""Charts drawn with Unicode eighth blocks: no plotting library, any terminal.

`BlockChart` plots a series with a y axis; `HistoryGraph` is one live series in jtop's
habit: its name with current / average / peak on one line and a scrolling graph below,
as tall as its container makes it (a one-line sparkline at the smallest). Levels over a
threshold are coloured, and also marked (`!`, `!!`, bold), so they read without colour
(NO_COLOR) as well."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.widget import Widget

from tui.fmt import nice_ceiling
from tui.live_model import Stats

BLOCKS = " ▁▂▃▄▅▆▇█"


def resample(values: Sequence[float | None], width: int) -> list[float | None]:
    """`width` columns: the mean of the values each covers (None where all are None)."""
    n = len(values)
    if width <= 0 or n == 0:
        return []
    out: list[float | None] = []
    for i in range(width):
        lo = i * n // width
        hi = max(lo + 1, (i + 1) * n // width)
        chunk = [v for v in values[lo:hi] if v is not None]
        out.append(sum(chunk) / len(chunk) if chunk else None)
    return out


def bar_levels(values: Sequence[float | None], height: int, y_max: float, y_min: float = 0.0) -> list[int | None]:
    """Each column's bar in eighths of a row, 0 to `height * 8` (None: no value): what the rows draw."""
    rng = y_max - y_min
    return [None if v is None else max(0, min(height * 8, round((v - y_min) / rng * height * 8))) if rng > 0 else 0
            for v in values]


def block_rows(values: Sequence[float | None], height: int, y_max: float, y_min: float = 0.0) -> list[str]:
    """Rows of block characters, top row first; each column's bar is (value - y_min) / (y_max - y_min)
    of the height (a value at or below y_min draws nothing)."""
    rows = []
    levels = bar_levels(values, height, y_max, y_min)
    for r in range(height - 1, -1, -1):
        chars = []
        for lv in levels:
            if lv is None:
                chars.append(" ")
            else:
                chars.append(BLOCKS[max(0, min(8, lv - r * 8))])
        rows.append("".join(chars))
    return rows


def render_chart(values: Sequence[float | None], width: int, height: int, y_max: float | None,
                 caption: str = "", unit: str = "W", style: str = "cyan") -> Text:
    """The chart with its y axis (max at the top, 0 at the bottom) and a caption line."""
    label_w = 6
    plot_w = max(1, width - label_w)
    chart_h = max(1, height - (1 if caption else 0))
    cols = resample(values, plot_w) if len(values) != plot_w else list(values)
    top = y_max if y_max and y_max > 0 else nice_ceiling(max((v for v in cols if v is not None), default=0.0))
    text = Text()
    for i, row in enumerate(block_rows(cols, chart_h, top)):
        label = f"{top:.3g}{unit}" if i == 0 else ("0" if i == chart_h - 1 else "")
        text.append(f"{label:>{label_w - 1}}│", style="dim")
        text.append(row, style=style)
        text.append("\n")
    if caption:
        text.append(" " * label_w + caption[:plot_w], style="dim")
    else:
        text.rstrip()
    return text


class BlockChart(Widget):
    """A block chart that redraws to its own size; `plot` sets the data and the axis."""

    DEFAULT_CSS = """
    BlockChart { height: 5; }
    """

    def __init__(self, *, style: str = "cyan", unit: str = "W", id: str | None = None,
                 classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self._values: tuple[float | None, ...] = ()
        self._y_max: float | None = None
        self._caption = ""
        self._style = style
        self._unit = unit

    def plot(self, values: Sequence[float | None], y_max: float | None = None, caption: str = "") -> None:
        values = tuple(values)
        if (values, y_max, caption) == (self._values, self._y_max, self._caption):
            return  # unchanged: a redraw would cost the measured run's CPU for nothing
        self._values = values
        self._y_max = y_max
        self._caption = caption
        self.refresh()

    @property
    def values(self) -> tuple[float | None, ...]:
        return self._values

    def render(self) -> Text:
        width, height = self.content_size.width, self.content_size.height
        if not self._values:
            return Text(self._caption or "no data yet", style="dim")
        return render_chart(self._values, width, height, self._y_max, self._caption, self._unit, self._style)


# ---------------------------------------------------------------------------- live histories
LEVEL_STYLE = ("green", "yellow", "bold red")  # normal, warm, hot
LEVEL_MARK = ("", "!", "!!")  # the same levels without colour
POWER_WARN = 0.6  # power levels: fractions of the rail's scale (the top of its graph)
POWER_HOT = 0.85


def level(value: float | None, warn: float | None, hot: float | None) -> int:
    """0 normal, 1 over `warn`, 2 over `hot` (None thresholds never trip)."""
    if value is None:
        return 0
    if hot is not None and value >= hot:
        return 2
    if warn is not None and value >= warn:
        return 1
    return 0


def tail(values: Sequence[float | None], width: int) -> list[float | None]:
    """The last `width` values, one a column (jtop's scrolling graph), padded on the left."""
    if width <= 0:
        return []
    shown = list(values[-width:])
    return [None] * (width - len(shown)) + shown


class HistoryGraph(Widget):
    """One live series: `name  now N · avg A · peak P` and its graph, newest on the right."""

    DEFAULT_CSS = """
    HistoryGraph { height: 1fr; min-height: 1; }
    """

    def __init__(self, name: str, *, unit: str = "", fmt: str = ".2f", name_width: int = 8, style: str = "cyan",
                 mark: bool = True, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.series_name = name
        self.mark = mark  # mark the figures' levels (absolute thresholds); else only the graph's colours
        self.unit = unit
        self.fmt = fmt
        self.name_width = name_width
        self.style = style
        self._values: Sequence[float | None] = ()
        self._stats = Stats()
        self._y: tuple[float, float] = (0.0, 1.0)
        self._warn: float | None = None
        self._hot: float | None = None
        self.shared_height: int | None = None  # the height its GraphStack gave it last (tui.widgets.live)
        self.columns = 0  # how many values the graph shows at its width (for the page feeding it)
        self._drawn: tuple[object, ...] = ()  # what it showed when last asked to repaint (drawn())

    def plot(self, values: Sequence[float | None], stats: Stats, *, y_min: float = 0.0, y_max: float | None = None,
             warn: float | None = None, hot: float | None = None) -> None:
        """Show `values` (oldest first; one a column from the right), with `stats`; y from y_min to
        y_max (default: a round number over the peak). warn/hot: absolute thresholds of the levels."""
        values = tuple(values)
        peak = max((v for v in values if v is not None), default=stats.peak or 0.0)
        top = y_max if y_max is not None else nice_ceiling(max(peak - y_min, 0.0)) + y_min
        self._values = values
        self._stats = stats
        self._y = (y_min, max(top, y_min + 1e-9))
        self._warn, self._hot = warn, hot
        drawn = self.drawn()
        if drawn == self._drawn:
            return  # it would draw what it shows (a steady rail, an idle board): no repaint
        self._drawn = drawn
        self.refresh()

    def drawn(self) -> tuple[object, ...]:
        """What `render` draws of the state at this size, without drawing it: the figures as
        written, the axis, and the bars (in eighths of a row) and levels of the columns on view.
        The history behind them grows with every poll and the raw averages move in the last digit,
        but a redraw is due only when one of these changes."""
        y_min, y_max = self._y
        width, height = self.content_size.width, self.content_size.height
        cols = tail(self._values, self._columns(width, height)) if width else self._values  # not laid out: all
        levels = tuple(bar_levels(cols, max(1, height - 1), y_max, y_min))
        colours = (tuple(level(v, self._warn, self._hot) for v in cols)
                   if self._warn is not None or self._hot is not None else ())
        return self.figures_text().plain, self._y, height, levels, colours

    def figure(self, value: float | None) -> Text:
        lv = level(value, self._warn, self._hot) if self.mark else 0
        text = Text("-" if value is None else format(value, self.fmt), style=LEVEL_STYLE[lv] if lv else "")
        if lv:
            text.stylize("bold")
            text.append(LEVEL_MARK[lv], style=LEVEL_STYLE[lv])
        return text

    def name_text(self, width: int | None = None) -> Text:
        w = self.name_width if width is None else max(1, min(self.name_width, width))
        name = self.series_name if len(self.series_name) <= w else self.series_name[:w - 1] + "…"
        return Text(f"{name:<{w}} ", style="bold")

    def figures_text(self, words: bool = True) -> Text:
        """`now` (with its level's mark), avg, pk: what the graph's line says of the series;
        without `words`, three figures in that order (the pane's title names them)."""
        s = self._stats
        text = Text(no_wrap=True, overflow="ellipsis")
        text.append_text(self.figure(s.now))
        text.append(f"{self.unit} avg " if words else " ", style="dim")
        text.append(format(s.avg, self.fmt) if s.avg is not None else "-")
        text.append(" pk " if words else " ", style="dim")
        text.append_text(self.figure(s.peak))
        return text

    def stats_text(self, width: int | None = None) -> Text:
        """The name (shortened to leave the figures room in `width`) and the figures."""
        figures = self.figures_text()
        name_w = None if width is None else width - figures.cell_len - 1
        text = self.name_text(name_w)
        text.append_text(figures)
        return text

    def _graph_row_styles(self, cols: Sequence[float | None]) -> list[str]:
        return [LEVEL_STYLE[level(v, self._warn, self._hot)] if self._warn is not None or self._hot is not None
                else self.style for v in cols]

    def render(self) -> Text:
        width, height = self.content_size.width, self.content_size.height
        y_min, y_max = self._y
        if height <= 1:  # one line: name, sparkline, figures (now avg pk, without the words)
            figures = self.figures_text(words=False)
            # a narrow pane gives up the sparkline, then the name's tail: never a figure
            head = self.name_text(min(self.name_width, width - figures.cell_len - 1))
            spark_w = self.columns = self._columns(width, height)
            cols = tail(self._values, spark_w)
            text = Text(no_wrap=True, overflow="ellipsis")
            text.append_text(head)
            if spark_w:
                text.append_text(self._styled(block_rows(cols, 1, y_max, y_min)[0], cols))
                text.append(" ")
            text.append_text(figures)
            return text
        self.columns = width
        cols = tail(self._values, width)
        text = self.stats_text(width)
        scale = f"  ↑{y_max:.4g}"
        if text.cell_len + len(scale) <= width:
            text.append(scale, style="dim")
        text.truncate(width, overflow="ellipsis")
        for row in block_rows(cols, height - 1, y_max, y_min):
            text.append("\n")
            text.append_text(self._styled(row, cols))
        return text

    def _columns(self, width: int, height: int) -> int:
        """How many values the graph shows: its width, or on one line what the name and figures leave."""
        if height > 1:
            return width
        figures = self.figures_text(words=False).cell_len
        head = self.name_text(min(self.name_width, width - figures - 1)).cell_len
        return max(0, width - head - figures - 1)

    def _styled(self, row: str, cols: Sequence[float | None]) -> Text:
        """The row with each column in its level's colour (runs of one colour in one span)."""
        out = Text()
        styles = self._graph_row_styles(cols)
        start = 0
        for i in range(1, len(row) + 1):
            if i == len(row) or styles[i] != styles[start]:
                out.append(row[start:i], style=styles[start])
                start = i
        return out
