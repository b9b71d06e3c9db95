"""The app's terminal: Textual's Linux driver, made to notice when the terminal goes away and to
read an escape typed just before another key as two keys.

A terminal goes away when an SSH session drops, its tmux session is killed, or its window closes.
The kernel then hangs the tty up: reads return end of input (or EIO), writes fail with EIO, and
SIGHUP goes to the session's processes (unless they ignore it, under nohup, or are not in it).
Textual's driver does not expect any of that: its input thread spins on the end of input, its
writer thread dies on the first EIO, leaving the app blocked on the writer's full queue, and the
SIGCONT that comes with the hang-up starts a second reader and writer. A TUI in that state
lived on for 86 minutes, until killed by hand. Here the driver reports the first sign
(end of input, a read or write refused) to the app as `TerminalLost`, once; the app then quits
as for SIGHUP (cancel the run at the next step, restore the clocks, exit). Output to the gone
terminal is dropped from then on, so nothing blocks on it.

Escapes: a terminal sends the escape key and alt+key alike as ESC followed by the key, and
Textual reads an ESC with a key behind it in the same read (or within 100 ms) as alt+key, or
as a macOS symbol for a digit (`escape` `2` typed fast became `™` in the field). On a board
busy training, the input thread reads late and keys typed apart arrive together. The app binds
no alt keys, so here an ESC followed by a printable key other than `[` and `O` (which start
escape sequences) or by another ESC is the escape key, and the key behind it is read on its
own. An ESC before a control key is left as Textual reads it (ESC DEL: alt+backspace, which
deletes a word in a field).

This replaces Textual's own reader and wraps its Linux driver, so it leans on Textual's internals
(the xterm parser, the driver's signal flags and streams, the app's binding check in tui.keys):
pyproject pins the tested Textual major, and tests/test_textual_internals.py fails on a release
that lacks one. When the app stops its input, the reader ends as Textual's does: a last pass
delivers what is still held (an escape typed last, a sequence cut short), then the parser ends.
"""

from __future__ import annotations

import errno
import os
import selectors
import threading
import time
from codecs import getincrementaldecoder
from collections.abc import Callable
from typing import Any

from textual import events
from textual._parser import ParseError
from textual._xterm_parser import XTermParser
from textual.drivers.linux_driver import LinuxDriver
from textual.message import Message

ESC = "\x1b"
SEQUENCE_STARTS = "[O"  # CSI and SS3: every key, mouse and report sequence Textual asks the terminal for
POLL_S = 0.1  # as Textual's reader: a held ESC is the escape key when nothing follows it this soon


class TerminalLost(Message):
    """The terminal went away: the app quits as for SIGHUP."""

    def __init__(self, reason: str) -> None:
        super().__init__()
        self.reason = reason


def _lone(after: str) -> bool:
    """An ESC followed by `after` is the escape key typed before it."""
    return after == ESC or (after.isprintable() and after not in SEQUENCE_STARTS)


class LoneEscapes:
    """Splits a terminal's input at each ESC that is the escape key typed before a printable key
    or another escape: the text around it goes to the parser, the ESC itself (None in the pieces)
    is the escape key."""

    def __init__(self) -> None:
        self._held = False  # an ESC ended the last read: what follows decides

    def feed(self, text: str) -> list[str | None]:
        if self._held:
            text, self._held = ESC + text, False
        pieces: list[str | None] = []
        start = 0
        at = text.find(ESC)
        while at != -1:
            if at + 1 == len(text):
                pieces.append(text[start:at])
                self._held = True
                start = len(text)
                break
            if _lone(text[at + 1]):
                pieces += [text[start:at], None]
                start = at + 1
            at = text.find(ESC, at + 1)
        pieces.append(text[start:])
        return [p for p in pieces if p != ""]

    def flush(self) -> list[str | None]:
        """Nothing followed the held ESC in time: it was the escape key."""
        if self._held:
            self._held = False
            return [None]
        return []


class TerminalInput:
    """Reads keys from the terminal `fd` until `stop` is set or the terminal goes away (end of
    input, or a read refused), which it reports through `lost` before it returns."""

    def __init__(self, fd: int, deliver: Callable[[Message], None], lost: Callable[[str], None],
                 stop: threading.Event, debug: bool = False) -> None:
        self.fd = fd
        self.deliver = deliver
        self.lost = lost
        self.stop = stop
        self.debug = debug

    def run(self) -> None:
        selector = selectors.SelectSelector()  # as Textual's: epoll refuses some ttys
        selector.register(self.fd, selectors.EVENT_READ)
        parser = XTermParser(self.debug)
        decode = getincrementaldecoder("utf-8")(errors="replace").decode
        escapes = LoneEscapes()
        try:
            while not self.stop.is_set():
                if selector.select(POLL_S):
                    try:
                        data = os.read(self.fd, 4096)
                    except OSError as exc:
                        if exc.errno in (errno.EINTR, errno.EAGAIN):
                            continue
                        self._deliver_all(escapes.flush(), parser)
                        self.lost(f"the terminal refused a read ({exc.strerror or exc})")
                        return
                    if not data:
                        self._deliver_all(escapes.flush(), parser)  # an escape typed last is still a key
                        self.lost("the terminal's input ended (hung up)")
                        return
                    pieces = escapes.feed(decode(data))
                else:
                    pieces = escapes.flush()
                self._deliver_all(pieces, parser)
                for event in parser.tick():
                    self.deliver(event)
            self._last_pass(escapes, parser)
        finally:
            selector.close()
            try:  # the parser's end, as Textual's reader ends it (what it still held is dropped)
                for _event in parser.feed(""):
                    pass
            except (EOFError, ParseError):
                pass

    def _last_pass(self, escapes: LoneEscapes, parser: XTermParser) -> None:
        """The app stopped reading: as Textual's reader (its `final=True` pass), after one poll's wait
        and with no new read (the driver flushes unread input), what is held is delivered: an ESC read
        last is the escape key, and a sequence cut short is whatever the parser makes of it on its timeout."""
        time.sleep(POLL_S)
        self._deliver_all(escapes.flush(), parser)
        for event in parser.tick():
            self.deliver(event)

    def _deliver_all(self, pieces: list[str | None], parser: XTermParser) -> None:
        for piece in pieces:
            if piece is None:
                self.deliver(events.Key("escape", ESC))
            else:
                for event in parser.feed(piece):
                    self.deliver(event)


class TerminalOutput:
    """The driver's output stream: once a write is refused (EIO: the terminal hung up), that is
    reported and the rest is dropped, so the writer thread lives and nothing waits on it."""

    def __init__(self, stream: Any, lost: Callable[[str], None]) -> None:
        self._stream = stream
        self._lost = lost
        self.gone = False

    def _refused(self, exc: OSError) -> None:
        self.gone = True
        self._lost(f"the terminal refused output ({exc.strerror or exc})")

    def write(self, text: str) -> int:
        if not self.gone:
            try:
                self._stream.write(text)
            except OSError as exc:
                self._refused(exc)
        return len(text)

    def flush(self) -> None:
        if not self.gone:
            try:
                self._stream.flush()
            except OSError as exc:
                self._refused(exc)

    def fileno(self) -> int:
        return int(self._stream.fileno())

    def isatty(self) -> bool:
        return not self.gone and bool(self._stream.isatty())


class TerminalDriver(LinuxDriver):
    """Textual's Linux driver with the reader and writer above; `lost_reason` says why the
    terminal went away (None while it is there)."""

    def __init__(self, app: Any, **kwargs: Any) -> None:
        super().__init__(app, **kwargs)
        self.lost_reason: str | None = None
        self._lost_lock = threading.Lock()
        # Textual types its private stream a TextIOWrapper; the driver only writes, flushes and asks isatty/fileno of it
        self._file = TerminalOutput(self._file, self._report_lost)  # type: ignore[assignment]

    def run_input_thread(self) -> None:
        TerminalInput(self.fileno, self.process_message, self._report_lost, self.exit_event,
                      debug=self._debug).run()

    def _sigcont_application(self, *args: Any) -> None:
        # The hang-up comes with SIGCONT: resuming then would start a second reader and writer on
        # a terminal that is gone. Only what SIGTSTP (ctrl+z) suspended is resumed.
        if self._must_signal_resume and self.lost_reason is None:
            super()._sigcont_application(*args)

    def _report_lost(self, reason: str) -> None:
        with self._lost_lock:
            if self.lost_reason is not None:
                return
            self.lost_reason = reason
        self._app.post_message(TerminalLost(reason))
