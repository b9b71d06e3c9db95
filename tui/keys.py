"""Typed keys handled in the order they were typed, one at a time, so that a burst typed faster
than the app handles it (over SSH, on a board busy training) lands where each key was meant to.

Why keys were lost: Textual routes a key to the focused widget (or the page) when the app takes
it from its queue, but a key moves the focus or changes the page only when it has come back up
to the app, some queues later, where the bindings run (tab's focus_next, a page key, escape
leaving a field). In a burst, the keys behind it were already routed to the old widget or page,
and came back to bindings that no longer held them: the `4` after a `tab` went to the field
before, whose ancestors' bindings the newly focused field then filtered out, and was dropped.

Here the app holds each key until the one before it has been through every widget it went to
and back to the app twice: once for the key itself (its widget's handling, the bindings), once
for what that posted (a field's Submitted that moves to the next field, a button's Pressed that
closes a dialog, a row's RowSelected that opens a page). A key that changed the page also waits
for the new page to have handled what was queued for it (mounting, its auto focus).
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from textual import events
from textual.message_pump import MessagePump

ROUNDS = 2  # the key's own trip, then what its handling posted
# Only a handler that never returns (none here) keeps a key in flight this long; then the keys
# behind it are routed as Textual routes them, rather than leaving the app deaf.
STALL_S = 3.0


@dataclass
class _Trip:
    """A key on its way: the widgets it was routed through (focused widget up to the app)."""

    key: events.Key
    path: tuple[MessagePump, ...]
    screen: Any  # the page it was typed on
    rounds: int = ROUNDS
    stall: asyncio.TimerHandle | None = field(default=None, repr=False)


class OrderedKeys:
    """Mixin of SlmDvfsApp, before textual's App: typed keys routed one at a time."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._keys_waiting: deque[events.Key] = deque()
        self._trip: _Trip | None = None

    async def on_event(self, event: events.Event) -> None:
        if isinstance(event, events.Key) and not event.is_forwarded:  # a typed key, not one bubbling back
            app: Any = self
            # A priority binding (ctrl+c, ctrl+q: quit) runs as it arrives, as Textual runs it, never
            # behind a key still on its way.
            if self._trip is not None and await app._check_bindings(event.key, priority=True):
                return
            self._keys_waiting.append(event)
            await self._route_keys()
            return
        await super().on_event(event)  # type: ignore[misc]

    async def _route_keys(self) -> None:
        app: Any = self
        if not app.screen_stack:  # the app is closing: nothing takes keys any more
            self._keys_waiting.clear()
            return
        while self._trip is None and self._keys_waiting:
            key = self._keys_waiting.popleft()
            target = app.focused or app.screen
            await super().on_event(key)  # type: ignore[misc] # priority bindings, else forwarded to `target`
            if not key.is_forwarded:
                continue  # handled here (a priority binding: ctrl+c)
            trip = _Trip(key, tuple(target.ancestors_with_self), app.screen)
            trip.stall = asyncio.get_running_loop().call_later(STALL_S, self._stalled, trip)
            self._trip = trip
            self._hop(trip, 0)

    def _hop(self, trip: _Trip, index: int) -> None:
        """Queue the trip's next step behind everything `trip.path[index]` has queued."""
        path = trip.path
        while index < len(path):
            if path[index].call_later(self._arrived, trip, index):
                return
            index += 1  # a widget that closed meanwhile: nothing of the key is left in it
        self._round_done(trip)

    def _arrived(self, trip: _Trip, index: int) -> None:
        """Runs on `trip.path[index]` once it has handled what was queued before: on up."""
        if index + 1 < len(trip.path):
            self._hop(trip, index + 1)
        else:
            self._round_done(trip)

    def _round_done(self, trip: _Trip) -> None:
        if self._trip is not trip:
            return  # released already (stalled)
        trip.rounds -= 1
        if trip.rounds > 0:
            self._hop(trip, 0)
            return
        screen = getattr(self, "screen", None)
        if screen is not None and screen is not trip.screen:
            # the key changed the page: let the new one mount and take its focus first
            trip.screen = screen
            if screen.call_later(self._release, trip):
                return
        self._release(trip)

    def _release(self, trip: _Trip) -> None:
        if self._trip is not trip:
            return
        if trip.stall is not None:
            trip.stall.cancel()
        self._trip = None
        app: Any = self
        app.call_later(self._route_keys)  # the next key, from the app's own queue

    def _stalled(self, trip: _Trip) -> None:
        self._release(trip)
