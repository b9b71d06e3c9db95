"""The help screen (? or F1): every page's keys, what each Setup field and policy means, and
where results are stored. The keys come from the pages' own bindings, the policies and
objectives from the engine's docstrings, the folders from engine.core.paths, so none drifts."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from rich.console import Group
from rich.padding import Padding
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from tui import forms
from tui.runstate import MIN_SPREAD_STEPS
from tui.screens.base import GLOBAL_ACTIONS

# Keys that work on every page (the app's own, and Textual's for forms), as the footer names them.
GLOBAL_KEYS: tuple[tuple[str, str], ...] = (
    ("1 … 7", "switch page: Device, Setup, Run, Compare, History, Sweep, Fleet"),
    ("? / F1", "this help (escape, q or ? closes it)"),
    ("q / ctrl+c", "quit: cancels any run or sweep at the next step and restores the clocks"),
    ("ctrl+p", "command palette: every action by name"),
    ("tab / shift+tab", "into a form and between its fields (enter moves on too)"),
    ("escape", "leave the form, so the number keys switch pages again"),
)


def doc_items(doc: str | None) -> tuple[tuple[str, str], ...]:
    """The `- `name`: text` bullets of a module docstring (continuation lines joined)."""
    items: list[tuple[str, str]] = []
    for line in (doc or "").splitlines():
        bullet = re.match(r"\s*- `([^`]+)`(?: \(([^)]*)\))?:\s*(.*)", line)
        if bullet:
            name, note, text = bullet.groups()
            items.append((name, f"({note}) {text}" if note else text))
        elif items and line.startswith("  ") and line.strip() and not line.lstrip().startswith("- "):
            name, text = items[-1]
            items[-1] = (name, f"{text} {line.strip()}")
        elif items and not line.strip():
            items.append(("", ""))  # a blank line ends the list
    return tuple(i for i in items if i[0])


def policy_help() -> tuple[tuple[str, str], ...]:
    from engine.dvfs import policies

    return doc_items(policies.__doc__) or (("policies", policies.SPEC_HELP),)


def objective_help() -> tuple[tuple[str, str], ...]:
    from engine.dvfs import objectives

    return doc_items(objectives.__doc__)


def page_keys(screens: Mapping[str, Any]) -> tuple[tuple[str, tuple[tuple[str, str], ...]], ...]:
    """(page title, ((key, description), ...)) from each page class's shown bindings."""
    pages = []
    for cls in screens.values():
        keys = []
        for binding in getattr(cls, "BINDINGS", ()):
            if (isinstance(binding, Binding) and binding.show and binding.description
                    and binding.action not in GLOBAL_ACTIONS):
                key = binding.key_display or binding.key
                keys.append((key, binding.tooltip or binding.description))  # the longer text where a footer's is cut
        pages.append((getattr(cls, "TITLE_TEXT", "") or cls.__name__, tuple(keys)))
    return tuple(pages)


def page_notes() -> dict[str, str]:
    """What a page's keys leave unsaid, under its keys (by the page's title)."""
    return {"5 History": "e writes the highlighted run's summary and power trace as CSV to "
                         "exports/run-N.csv in the data folder (N: the run's id; the full path is under "
                         "Where results are stored, below)."}


def storage_lines(store_path: Path | None) -> tuple[tuple[str, str], ...]:
    from engine.core import paths

    data = paths.data_dir()
    return (
        ("results store", str(store_path) if store_path is not None else f"{data / 'results.sqlite'} (not opened)"),
        ("exports (e on History)", f"{data / 'exports' / 'run-N.csv'}: a run's summary and power trace as CSV "
                                   "(N: its id)"),
        ("trained selectors", str(data / "selectors")),
        ("step traces (cache)", str(paths.cache_dir())),
        ("clock journals", str(paths.state_dir() / "journals")),
        ("override", "SLM_DVFS_DATA_DIR, SLM_DVFS_CACHE_DIR, SLM_DVFS_STATE_DIR (or the XDG variables); "
                     "SLM_DVFS_DB names the store itself; SLM_DVFS_TWIN_DIR the twins' trees"),
    )


def _table(rows: Iterable[tuple[str, str]], key_width: int = 18) -> Table:
    table = Table(box=None, show_header=False, padding=(0, 1), expand=True)
    table.add_column(style="bold", no_wrap=True, width=key_width)
    table.add_column(ratio=1)
    for key, text in rows:
        table.add_row(key, text)
    return table


def _listing(rows: Iterable[tuple[str, str]]) -> Table:
    """Long names (a static policy's spec) on their own line, the meaning indented below (its
    wrapped lines too)."""
    table = Table(box=None, show_header=False, padding=(0, 1, 0, 1), expand=True)
    table.add_column(ratio=1)
    for name, text in rows:
        table.add_row(Group(Text(name, style="bold"), Padding(Text(text), (0, 0, 0, 4))))
    return table


def help_renderables(screens: Mapping[str, Any], store_path: Path | None) -> list[Any]:
    """The help's sections, in order, as Rich renderables."""
    out: list[Any] = [Text("Keys on every page", style="bold underline"), _table(GLOBAL_KEYS)]
    notes = page_notes()
    for title, keys in page_keys(screens):
        if keys:
            out += [Text(f"\nPage {title}", style="bold underline"), _table(keys)]
            if title in notes:
                out.append(Text(notes[title], style="italic"))
    out += [Text("\nSetup fields (page 2)", style="bold underline"), _table(forms.FIELD_HELP.items())]
    out += [Text("\nPolicies (the setup field `policy`)", style="bold underline"), _listing(policy_help())]
    out += [Text("\nObjectives (the setup field `objective`)", style="bold underline"),
            _listing(objective_help())]
    out += [Text("\nFigures", style="bold underline"),
            Text("Every figure carries its source: [measured] on a board's sensors, [twin] from the digital "
                 "twin, [predicted] by a model (the selector, a projection, the ETA). A predicted figure shows "
                 "its 90% interval: 13% (4–17%) or 30.4±0.2 J (the selector's from the twin ensemble of "
                 "plausible profiles and its cross-validated regret; a projection's and the ETA's from the "
                 f"spread of the run's steps so far, ±? before {MIN_SPREAD_STEPS} steps, when there is no "
                 "spread to go by yet). The ETA is the time left (16 min 36 s), not a time of day. Against "
                 "the board's baseline, its uncapped mode by name and id (MAXN (mode 0) on an AGX Orin, MAXN_SUPER "
                 "(mode 2) on an Orin Nano 8GB), a run or a setting uses less or more energy and is slower or faster; "
                 "on the Sweep page the baseline's row is marked. Sizes are in binary units (MiB, GiB).")]
    out += [Text("\nWhere results are stored", style="bold underline"), _table(storage_lines(store_path), 24)]
    return out


class HelpScreen(ModalScreen[None]):
    """Scrolls with the arrows and page keys; escape, q, ? or F1 closes it."""

    BINDINGS = [
        Binding("escape,q,question_mark,f1", "close", "Close"),
    ]

    def __init__(self, screens: Mapping[str, Any], store_path: Path | None) -> None:
        super().__init__()
        self.screens = screens
        self.store_path = store_path

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-box"):
            for renderable in help_renderables(self.screens, self.store_path):
                yield Static(renderable, classes="help-part")

    def on_mount(self) -> None:
        box = self.query_one("#help-box", VerticalScroll)
        box.border_title = "Help: ↑↓ PgUp PgDn scroll · escape / q / ? close"
        box.focus()

    def action_close(self) -> None:
        self.dismiss(None)
