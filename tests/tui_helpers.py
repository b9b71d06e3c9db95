"""Deterministic waits for the TUI tests: one app factory, a log of the app's messages fed by
`run_test(message_hook=...)`, and waits on messages, on workers and on the app settling.

Nothing here sleeps for a set time. A wait ends when the app says that what the test waits for
has happened: a message of that type was handled, a worker finished, every queue the current
page reads from was drained. Each wait is bounded (WAIT_S) only so that a hang fails the test
with a message saying what was awaited; the bound is not a timing threshold.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import io
from collections.abc import AsyncIterator, Callable
from typing import Any

from textual import events
from textual import messages as textual_messages
from textual.message import Message
from textual.pilot import Pilot
from textual.worker import Worker, WorkerCancelled

from tui.app import SlmDvfsApp
from tui.messages import EngineFailed, FleetPolled, PollFailed, RunProgress, SnapshotTaken, SweepProgress

TWIN = "agx-orin-64gb"
WAIT_S = 30.0  # the bound on one wait (a hang becomes a failure, not a stopwatch)
POLL_GROUPS = ("poll", "fleet-poll")  # the device and fleet polls run until the app exits: never awaited
SETTLE_ROUNDS = 200  # settle() gives up (and says so) after this many rounds that saw news

# Messages that keep coming while nothing the test did is pending: the device and fleet polls, the engine's
# coalesced progress, repaints and timers. settle() does not wait for these to stop.
BACKGROUND = (SnapshotTaken, PollFailed, FleetPolled, RunProgress, SweepProgress, events.Timer,
              textual_messages.Update, textual_messages.Layout, textual_messages.UpdateScroll)


def make_app(session: Any, *, store: Any = None, refresh_s: float = 0.05, poll: bool = True,
             handle_signals: bool = True, **fleet: Any) -> SlmDvfsApp:
    """The one way the TUI tests build the app (as Posting's tests build theirs through one factory);
    `fleet=`, `fleet_twins=`... go to the app as they are."""
    return SlmDvfsApp(session, refresh_s=refresh_s, store=store, poll=poll, handle_signals=handle_signals,
                      run_refresh_s=refresh_s, **fleet)


def _sentinel(done: asyncio.Future) -> None:
    """Queued behind everything a node had to do; the message log knows it for ours."""
    if not done.done():
        done.set_result(None)


def _is_ours(message: Message) -> bool:
    return isinstance(message, events.Callback) and getattr(message.callback, "func", None) is _sentinel


class MessageLog:
    """The message_hook: every message the app's nodes handle, once each, in order.

    Textual calls the hook just before a node handles a message; a wait that matches one
    therefore drains the app's queue behind it before it returns, so the handler has run.
    """

    def __init__(self, app: SlmDvfsApp) -> None:
        self.app = app
        self.messages: list[Message] = []
        self.pages: list[str] = []  # the screens made current, in order (a repeat only after another)
        self.news = 0  # messages that are not BACKGROUND (nor our own sentinels)
        self.exiting = asyncio.Event()
        self._ids: set[int] = set()
        self._cursor: dict[type, int] = {}  # per message class: the index after the last one a wait returned
        self._arrived = asyncio.Event()

    def __call__(self, message: Message) -> None:
        if _is_ours(message) or id(message) in self._ids:  # a bubbling message reaches several nodes
            return
        self._ids.add(id(message))
        self.messages.append(message)
        if not isinstance(message, BACKGROUND):
            self.news += 1
        if isinstance(message, textual_messages.ExitApp):
            self.exiting.set()
        elif isinstance(message, events.ScreenResume):  # handled by the screen that is now current
            page = _page(self.app.screen)
            if not self.pages or self.pages[-1] != page:
                self.pages.append(page)
        self._arrived.set()

    def next_match(self, types: tuple[type, ...], fail_on: tuple[type, ...]) -> tuple[int, Message] | None:
        start = min((self._cursor.get(t, 0) for t in (*types, *fail_on)), default=0)
        for i in range(start, len(self.messages)):
            m = self.messages[i]
            if i < self._cursor.get(type(m), 0):
                continue
            if isinstance(m, types) or isinstance(m, fail_on):
                return i, m
        return None

    def take(self, index: int) -> None:
        message = self.messages[index]
        self._cursor[type(message)] = index + 1

    async def arrival(self) -> None:
        self._arrived.clear()
        await self._arrived.wait()

    def recent(self, n: int = 12) -> str:
        """The latest of the app's own messages and of the keys, for a failure message."""
        names = [f"Key({m.key})" if isinstance(m, events.Key) else type(m).__name__ for m in self.messages
                 if isinstance(m, events.Key) or type(m).__module__.startswith("tui.")]
        return ", ".join(names[-n:]) or "none"


class Ui:
    """The app under test, its pilot and its message log, with the waits the tests use."""

    def __init__(self, app: SlmDvfsApp, pilot: Pilot, log: MessageLog) -> None:
        self.app = app
        self.pilot = pilot
        self.log = log

    @property
    def pages(self) -> list[str]:
        """The pages (and dialogs) made current so far, in order."""
        return self.log.pages

    # ------------------------------------------------------------------ waits
    async def wait_for(self, *types: type[Message], until: Callable[[], bool] | None = None,
                       timeout: float = WAIT_S) -> Message | None:
        """The first message of `types` not returned by an earlier wait, once the app has handled it.
        With `until`: until `until()` holds, checked now and after each such message is handled
        (None when it held at once). An EngineFailed that the test does not wait for fails it at
        once, with the engine's error."""
        fail_on = () if any(issubclass(EngineFailed, t) for t in types) else (EngineFailed,)
        wanted = " or ".join(t.__name__ for t in types) + (f" (until: {_name(until)})" if until else "")

        async def wait() -> Message | None:
            if until is not None and until():
                return None
            while True:
                found = self.log.next_match(types, fail_on)
                if found is None:
                    await self.log.arrival()
                    continue
                index, message = found
                self.log.take(index)
                if isinstance(message, fail_on) and not isinstance(message, types):
                    raise AssertionError(f"waiting for {wanted}, the {message.what} failed: "
                                         f"{type(message.error).__name__}: {message.error}")
                await self._drain(self.app, with_screen=True)  # its handler has run
                if until is None or until():
                    return message

        try:
            return await asyncio.wait_for(wait(), timeout)
        except asyncio.TimeoutError:
            raise AssertionError(f"no {wanted} within {timeout:g} s; the app's latest messages: "
                                 f"{self.log.recent()}") from None

    async def workers_done(self, timeout: float = WAIT_S) -> None:
        """Every worker of the app but the device poll has finished (engine runs, previews, the
        command palette's search), and the messages they posted on the way out are handled."""
        async def wait() -> None:
            while busy := self._busy_workers():
                with contextlib.suppress(WorkerCancelled):  # an exclusive worker replaced by a newer one
                    await self.app.workers.wait_for_complete(busy)

        try:
            await asyncio.wait_for(wait(), timeout)
        except asyncio.TimeoutError:
            raise AssertionError(f"workers still running after {timeout:g} s: "
                                 f"{[w.name for w in self._busy_workers()]}") from None
        await self.settle()

    def _busy_workers(self) -> list[Worker]:
        return [w for w in self.app.workers if w.group not in POLL_GROUPS and not w.is_finished]

    async def settle(self, timeout: float = WAIT_S) -> None:
        """Until the app and the current page have handled everything queued, including what that
        handling queued in turn (a key travelling to the focused widget and bubbling back, a page
        switch and the new page's mount): rounds of draining until one sees no news and no new page."""
        for _ in range(SETTLE_ROUNDS):
            if self.log.exiting.is_set():
                return
            news, screen = self.log.news, self.app.screen
            await self._drain(self.app, with_screen=True, timeout=timeout)
            if self.log.news == news and self.app.screen is screen:
                return
        raise AssertionError(f"the app did not settle in {SETTLE_ROUNDS} rounds; its latest messages: "
                             f"{self.log.recent()}")

    async def _drain(self, app: SlmDvfsApp, *, with_screen: bool, timeout: float = WAIT_S) -> None:
        """One round: a sentinel behind the queue of the app (with_screen: and of the current screen
        and each of its running widgets). A widget not running yet is left out: it may be removed
        before it starts, its queue unread; when it does start, its Mount is news for another round."""
        if self.log.exiting.is_set():
            return  # a closing app drops its queues (and its screens)
        loop = asyncio.get_running_loop()
        nodes = [app, *(app.screen.walk_children(with_self=True) if with_screen else ())]
        pending = []
        for node in nodes:
            if not node.is_running:
                continue
            done = loop.create_future()
            if node.call_later(_sentinel, done):  # False once the node is closing
                pending.append(done)
        if not pending:
            return
        exiting = asyncio.ensure_future(self.log.exiting.wait())  # a closing app drops its queues
        try:
            finished, _ = await asyncio.wait([asyncio.gather(*pending), exiting], timeout=timeout,
                                             return_when=asyncio.FIRST_COMPLETED)
        finally:
            exiting.cancel()
        if not finished:
            raise AssertionError(f"the app's queues did not drain within {timeout:g} s; its latest messages: "
                                 f"{self.log.recent()}")

    # ------------------------------------------------------------------ input
    async def press(self, *keys: str) -> None:
        """Keys as the terminal sends them, each followed by settle() rather than by Textual's wait
        for the process to idle (which a training thread never lets it do)."""
        for key in keys:
            self.app.post_message(events.Key(key, _CHARS.get(key, key if len(key) == 1 else None)))
            await self.settle()

    async def until(self, condition: Callable[[], bool], what: str, timeout: float = WAIT_S) -> None:
        """Until `condition()` holds, for what the app does after a repaint rather than in answer
        to a message (the footer's keys are composed after the screen refreshes)."""
        async def wait() -> None:
            while not condition():
                await self.settle()
                await asyncio.sleep(0.01)  # a repaint's turn; the condition, not this, ends the wait

        try:
            await asyncio.wait_for(wait(), timeout)
        except asyncio.TimeoutError:
            raise AssertionError(f"not within {timeout:g} s: {what}") from None

    async def footer(self) -> str:
        """The footer's row as the terminal shows it, once its keys are laid out."""
        from textual.widgets import Footer
        from textual.widgets._footer import FooterKey

        def laid_out() -> bool:
            keys = list(self.app.screen.query_one(Footer).query(FooterKey))
            return any(k.region.width > 0 for k in keys)

        await self.until(laid_out, "the footer shows its keys")
        footer = self.app.screen.query_one(Footer)
        return screen_text(self.app).splitlines()[footer.region.y]

    async def type_into(self, field: str, text: str) -> None:
        self.app.screen.query_one(f"#{field}").focus()
        await self.settle()
        await self.press(*text)  # focusing selects the old value: typing replaces it


_CHARS = {"space": " ", "enter": "\r", "escape": "\x1b", "tab": "\t"}


def _page(screen: Any) -> str:
    """A page's name (its PAGE), or the class name of any other screen (a dialog, the palette)."""
    return getattr(screen, "PAGE", "") or type(screen).__name__


def _name(fn: Callable[[], bool]) -> str:
    """The condition as the test wrote it (a lambda's source line), for the failure message."""
    try:
        return inspect.getsource(fn).strip()
    except (OSError, TypeError):
        return getattr(fn, "__name__", repr(fn))


@contextlib.asynccontextmanager
async def drive(app: SlmDvfsApp, size: tuple[int, int] = (80, 24)) -> AsyncIterator[Ui]:
    """Run `app` headless with a message log; the page it opens on is mounted before the test starts."""
    log = MessageLog(app)
    async with app.run_test(size=size, message_hook=log) as pilot:
        ui = Ui(app, pilot, log)
        await ui.settle()
        yield ui


def plain(renderable: Any, width: int = 140) -> str:
    """What a renderable (a widget's content) reads as, without styles."""
    from rich.console import Console

    console = Console(width=width, record=True, file=io.StringIO())
    console.print(renderable)
    return console.export_text()


def screen_text(app: SlmDvfsApp) -> str:
    """The screen as the terminal shows it, without styles: one line a row (as export_screenshot
    renders it, dialogs over the pages below them)."""
    from rich.console import Console

    width, height = app.size
    console = Console(width=width, height=height, file=io.StringIO(), record=True, legacy_windows=False,
                      safe_box=False, color_system=None)
    console.print(app.screen._compositor.render_update(full=True, screen_stack=app._background_screens))
    return console.export_text()


def spy_run_draws(monkeypatch: Any) -> list[int]:
    """The steps of the run views the Run page draws from now on (RunScreen.draw_run, still drawing)."""
    from tui.screens.run import RunScreen

    drawn: list[int] = []
    original = RunScreen.draw_run

    def spy(self: RunScreen, view: Any) -> None:
        drawn.append(view.step)
        original(self, view)

    monkeypatch.setattr(RunScreen, "draw_run", spy)
    return drawn
