"""A block chart drawn with Unicode eighth blocks: no plotting library, any terminal."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.widget import Widget

from tui.fmt import nice_ceiling

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


def block_rows(values: Sequence[float | None], height: int, y_max: float) -> list[str]:
    """Rows of block characters, top row first; each column's bar is value / y_max of the height."""
    rows = []
    levels = [None if v is None else max(0, min(height * 8, round(v / y_max * height * 8))) if y_max > 0 else 0
              for v in values]
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
        self._values = tuple(values)
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
