"""What every page shares: the identity header on top, the key footer below (help and quit
first, so that a narrow terminal cuts the page keys, not these), and a checkbox that reads
without colour."""

from __future__ import annotations

from collections.abc import Mapping

from textual.app import ComposeResult
from textual.binding import Binding
from textual.content import Content
from textual.screen import Screen
from textual.widgets import Checkbox, Footer, Input

from engine.device.base import ClockDomain
from engine.device.snapshot import DeviceSnapshot
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


class TickBox(Checkbox):
    """A checkbox whose state reads without colour: `[X]` or `[ ]` (Textual's `▐X▌` differs by
    colour alone, which NO_COLOR and 16-colour terminals lose)."""

    @property
    def _button(self) -> Content:
        return Content.assemble("[", ("X" if self.value else " ", self.get_visual_style("toggle--button")), "]")


class PageScreen(Screen):
    """A numbered page of the app; subclasses compose their body in `compose_body`."""

    BINDINGS = PAGE_BINDINGS

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

    composed = False  # set once the page's widgets exist (resume may come before that)

    def on_mount(self) -> None:
        self.composed = True
        self._sync()

    def on_screen_resume(self) -> None:
        if self.composed:
            self._sync()

    def _sync(self) -> None:
        """The app hands over what changed while the page was hidden."""
        sync = getattr(self.app, "sync_page", None)
        if sync is not None:
            sync(self)

    def compose_body(self) -> ComposeResult:  # pragma: no cover - every page overrides it
        yield from ()

    def show_device(
        self,
        snap: DeviceSnapshot,
        pinned_by_us: bool,
        notes: list[str],
        tables: Mapping[ClockDomain, tuple[int, ...]],
    ) -> None:
        """A fresh device reading (about twice a second): the header, and whatever the page shows of it."""
        self.query_one(IdentityBar).show(snap, pinned_by_us, page=self.TITLE_TEXT)
