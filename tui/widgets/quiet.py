"""Setting what a widget shows only when it differs from what it shows now.

Textual repaints on every set, equal or not: `border_title = t` refreshes the widget (a container's
whole region, every graph in it, goes back through the compositor), and `Static.update` also lays
the screen out again. A page redrawn on each poll (twice a second) with the same titles and notes
kept the idle Device page at 5-9% of a core; with these, an unchanged reading costs no repaint.
Every title or text a page sets again and again goes through here, so the comparison lives in one
place: the value last given (a rich `Text` compares by its characters and styles; a `Table`, which
cannot be compared, is always new).
"""

from __future__ import annotations

from typing import Any
from weakref import WeakKeyDictionary

from textual.widget import Widget
from textual.widgets import Static

_UNSET = object()
_titles: WeakKeyDictionary[Widget, Any] = WeakKeyDictionary()
_contents: WeakKeyDictionary[Widget, Any] = WeakKeyDictionary()


def set_title(widget: Widget, title: Any) -> bool:
    """Give `widget` the border title `title` unless it already has it; returns whether it changed."""
    if _same(_titles.get(widget, _UNSET), title):
        return False
    _titles[widget] = title
    widget.border_title = title
    return True


def show(static: Static, content: Any, *, layout: bool = True) -> bool:
    """`static.update(content)` unless it already shows `content`; returns whether it changed."""
    if _same(_contents.get(static, _UNSET), content):
        return False
    _contents[static] = content
    static.update(content, layout=layout)
    return True


def _same(old: Any, new: Any) -> bool:
    if old is _UNSET or type(old) is not type(new):
        return False
    try:
        return bool(old == new)
    except Exception:  # noqa: BLE001 - a renderable that cannot compare is taken as new
        return False
