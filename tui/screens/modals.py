"""Modal dialogs: a yes/no confirmation before anything disruptive; the zoo's models to pick from;
a long text report to read (a calibration's)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, OptionList, Static
from textual.widgets.option_list import Option

if TYPE_CHECKING:
    from tui.setup_fit import ZooRow


class ConfirmScreen(ModalScreen[bool]):
    """Asks a question; dismisses with True (y / enter on Yes) or False (n / escape)."""

    BINDINGS = [
        Binding("y", "answer(True)", "Yes"),
        Binding("n,escape", "answer(False)", "No"),
    ]

    def __init__(self, question: str, detail: str = "", yes: str = "Yes", no: str = "No") -> None:
        super().__init__()
        self.question = question
        self.detail = detail
        self.yes_label = yes
        self.no_label = no

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm-box"):
            yield Static(self.question, id="confirm-question")
            if self.detail:
                yield Static(self.detail, id="confirm-detail")
            with Horizontal(id="confirm-buttons"):
                yield Button(f"{self.yes_label} (y)", id="yes", variant="warning")
                yield Button(f"{self.no_label} (n)", id="no", variant="primary")

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()  # the safe answer is the default

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.dismiss(event.button.id == "yes")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


class ZooPickerScreen(ModalScreen["str | None"]):
    """Every zoo model (name, family, parameters, default batch, length and precision), smallest
    first; enter picks one (dismissed with its name), escape keeps the field as it was (None)."""

    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, rows: Iterable[ZooRow], current: str = "") -> None:
        super().__init__()
        self.rows = tuple(rows)
        self.current = current

    def compose(self) -> ComposeResult:
        with Vertical(id="zoo-box"):
            yield Static("the model zoo: enter picks, escape keeps the field (hub ids and folders are "
                         "typed in it)", id="zoo-title")
            yield OptionList(*(Option(row.label(), id=row.name) for row in self.rows), id="zoo-list")

    def on_mount(self) -> None:
        listing = self.query_one(OptionList)
        names = [row.name.lower() for row in self.rows]
        if self.current.lower() in names:
            listing.highlighted = names.index(self.current.lower())
        listing.focus()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self.dismiss(event.option.id)

    def action_cancel(self) -> None:
        self.dismiss(None)



class ReportScreen(ModalScreen[None]):
    """A long plain-text report, scrolled with the arrows and page keys; escape or q closes it."""

    BINDINGS = [Binding("escape,q", "close", "Close")]

    def __init__(self, title: str, text: str) -> None:
        super().__init__()
        self.title_text = title
        self.text = text

    def compose(self) -> ComposeResult:
        with Vertical(id="report-box"):
            yield Static(f"{self.title_text}  (escape closes)", id="report-title")
            with VerticalScroll(id="report-scroll"):
                # markup off: the report's [twin]/[measured] labels are text, not Rich tags
                yield Static(self.text, id="report-text", markup=False)

    def on_mount(self) -> None:
        self.query_one("#report-scroll", VerticalScroll).focus()

    def action_close(self) -> None:
        self.dismiss(None)
