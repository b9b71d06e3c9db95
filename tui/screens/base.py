"""What every page shares: the identity header on top, the key footer below (help and quit
first, so that a narrow terminal cuts the page keys, not these), a checkbox that reads without
colour, and how a page draws the app's state it binds (tui.state): now if it is on view (also
under a dialog), else when it is next shown."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from textual.app import ComposeResult
from textual.binding import Binding
from textual.content import Content
from textual.css.query import NoMatches
from textual.message import Message
from textual.reactive import var
from textual.screen import ModalScreen, Screen
from textual.widgets import Checkbox, Footer, Input

from tui.state import DeviceReading
from tui.widgets.device_panes import IdentityBar


# The footer lists the focused widget's keys, then the page's, then the app's: these come first
# on every page (a page's own BINDINGS follow them). The app binds the same keys for dialogs.
# While a field takes typed keys, `?` and `q` type: the footer then shows F1 and ctrl+c instead
# (it shows the first binding of an action that the focused widget does not consume).
PAGE_BINDINGS = [
    Binding("question_mark", "app.help", "Help", key_display="?"),
    Binding("f1", "app.help", "Help"),
    Binding("q", "app.quit", "Quit"),
    Binding("ctrl+c", "quit_field", "Quit", priority=True),  # in the footer only while a field takes q
]
GLOBAL_ACTIONS = frozenset(b.action for b in PAGE_BINDINGS)


def live(screen: Screen) -> bool:
    """A page whose widgets exist: composed, and not being taken apart. At exit Textual removes
    a page's widgets one by one while messages are still handled; from its start `display`
    reads False (tests/test_textual_internals.py), so a late message draws nothing."""
    return bool(getattr(screen, "composed", False)) and bool(screen.children) and screen.display


class TickBox(Checkbox):
    """A checkbox whose state reads without colour: `[X]` or `[ ]` (Textual's `▐X▌` differs by
    colour alone, which NO_COLOR and 16-colour terminals lose)."""

    @property
    def _button(self) -> Content:
        return Content.assemble("[", ("X" if self.value else " ", self.get_visual_style("toggle--button")), "]")


class PageScreen(Screen):
    """A numbered page of the app; subclasses compose their body in `compose_body`."""

    BINDINGS = [*PAGE_BINDINGS]  # a list of its own: Screen.BINDINGS is typed list[BindingType]

    AUTO_FOCUS = ""  # nothing focused: the number keys switch pages until tab enters a form
    PAGE = ""  # the name the app switches to
    TITLE_TEXT = ""

    def compose(self) -> ComposeResult:
        yield IdentityBar(classes="identity")
        yield from self.compose_body()
        yield Footer()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "quit_field":  # hidden (and left to the app's own ctrl+c) unless a field takes q
            return isinstance(self.focused, Input)
        return True

    async def action_quit_field(self) -> None:
        await self.app.action_quit()

    # The app's latest device reading (bound: tui.app installs every page with data_bind).
    reading: var[DeviceReading | None] = var(None, init=False)

    composed = False  # set once the page's widgets exist (a binding may come before that)

    def __init__(self) -> None:
        super().__init__()
        self._stale: dict[str, Callable[[], None]] = {}  # what changed while the page was hidden

    def on_mount(self) -> None:
        self.composed = True
        self._catch_up()

    def on_screen_resume(self) -> None:
        if self.composed:
            self._catch_up()

    def on_view(self) -> bool:
        """The page is on view: the current screen, or the page under the dialogs over it (a dialog
        shows the page beneath it, which must keep updating), with its widgets (`live`)."""
        if not live(self):
            return False
        for screen in reversed(self.app.screen_stack):
            if not isinstance(screen, ModalScreen):
                return screen is self
        return False

    def paint(self, part: str, draw: Callable[[], None]) -> None:
        """Draw `part` of the page now if it is on view, else once it is shown again (the latest
        state then, drawn once, not every change it missed)."""
        if not self.on_view():
            self._stale[part] = draw
            return
        self._stale.pop(part, None)
        with contextlib.suppress(NoMatches):  # a page being taken apart at exit
            draw()

    def _catch_up(self) -> None:
        stale, self._stale = self._stale, {}
        for part, draw in stale.items():
            self.paint(part, draw)

    def tell(self, message: Message) -> None:
        """Up to the app: posted to the app's own queue rather than bubbling through the page's, so
        the app handles it before the next typed key (tui.keys holds a key until the app has
        handled what the one before posted)."""
        self.app.post_message(message)

    def compose_body(self) -> ComposeResult:  # pragma: no cover - every page overrides it
        yield from ()

    def watch_reading(self, reading: DeviceReading | None) -> None:
        if reading is not None:
            self.paint("device", lambda: self.draw_device(reading))

    def draw_device(self, reading: DeviceReading) -> None:
        """A fresh device reading (about twice a second): the header, and whatever the page shows of it."""
        self.query_one(IdentityBar).show(reading.snapshot, reading.pinned_by_us, page=self.TITLE_TEXT)
