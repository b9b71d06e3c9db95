"""What every page shares: the identity header on top, the key footer below."""

from __future__ import annotations

from collections.abc import Mapping

from textual.app import ComposeResult
from textual.screen import Screen
from textual.widgets import Footer

from engine.device.base import ClockDomain
from engine.device.snapshot import DeviceSnapshot
from tui.widgets.device_panes import IdentityBar


class PageScreen(Screen):
    """A numbered page of the app; subclasses compose their body in `compose_body`."""

    AUTO_FOCUS = ""  # nothing focused: the number keys switch pages until tab enters a form
    PAGE = ""  # the name the app switches to
    TITLE_TEXT = ""

    def compose(self) -> ComposeResult:
        yield IdentityBar(classes="identity")
        yield from self.compose_body()
        yield Footer()

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
