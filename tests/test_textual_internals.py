"""The Textual internals the app leans on are there, as it uses them: tui.terminal's reader (the
xterm parser, fed, ticked and ended) and driver (the Linux driver's signal flag, streams and exit
event), and tui.keys' priority-binding check. A Textual release that renames or drops one fails
here, not in a user's session; pyproject pins the range these were checked on."""

from __future__ import annotations

import inspect
import signal
import sys
import threading
from importlib.metadata import version
from pathlib import Path
from types import SimpleNamespace

import pytest
from packaging.requirements import Requirement

# At module level, where vermin (the README's Python 3.10 check) sees the version guard.
if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 (JetPack 6)
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]


def test_the_installed_textual_is_in_the_range_pyproject_pins() -> None:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    pin = next(Requirement(d) for d in deps if Requirement(d).name == "textual")
    assert pin.specifier.contains(version("textual")), f"textual {version('textual')} is outside {pin}"
    assert any(s.operator == "<" for s in pin.specifier), f"{pin}: internals change between majors"


def test_the_xterm_parser_is_fed_ticked_and_ended_as_the_reader_does() -> None:
    from textual import events
    from textual._parser import ParseError
    from textual._xterm_parser import XTermParser

    parser = XTermParser(False)  # tui.terminal: XTermParser(debug)
    keys = [e.key for e in parser.feed("a\x1b[A") if isinstance(e, events.Key)]
    assert keys == ["a", "up"]
    assert list(parser.tick()) == []  # nothing held, nothing timed out
    list(parser.feed(""))  # the end of input
    with pytest.raises(ParseError):
        list(parser.feed("b"))


async def test_the_linux_driver_has_what_the_terminal_driver_overrides_and_reads() -> None:
    from textual.drivers.linux_driver import LinuxDriver

    from tui.terminal import TerminalDriver, TerminalOutput

    for method in ("run_input_thread", "_sigcont_application", "process_message"):
        assert callable(getattr(LinuxDriver, method, None)), method
    app = SimpleNamespace(post_message=lambda message: True)
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTSTP, signal.SIGCONT)}
    try:
        driver = TerminalDriver(app)  # the driver sets its SIGTSTP and SIGCONT handlers
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    assert driver._app is app and driver._debug is False
    assert driver._must_signal_resume is False  # the flag _sigcont_application reads
    assert isinstance(driver._file, TerminalOutput)  # the stream the writer thread is given
    assert isinstance(driver.exit_event, threading.Event) and isinstance(driver.fileno, int)


def test_the_apps_binding_check_takes_a_key_and_priority() -> None:
    from textual.app import App

    check = App._check_bindings  # tui.keys: await app._check_bindings(key, priority=True)
    assert inspect.iscoroutinefunction(check)
    params = inspect.signature(check).parameters
    assert list(params)[:3] == ["self", "key", "priority"] and params["priority"].default is False


async def test_a_page_taken_apart_at_exit_reads_display_false_before_its_widgets_go() -> None:
    """tui.screens.base.live (PageScreen.on_view's check): a message handled while the app exits
    must not draw on a page whose widgets Textual is removing (was: NoMatches on '#run-chart' from a progress message after quit)."""
    from textual.app import App, ComposeResult
    from textual.screen import Screen
    from textual.widgets import Static

    from tui.screens.base import live as _live

    seen: list[tuple[bool, bool]] = []

    class Part(Static):
        def on_unmount(self) -> None:
            page = self.app.get_screen("page")
            seen.append((page.display, _live(page)))

    class Page(Screen):
        composed = True

        def compose(self) -> ComposeResult:
            yield Part("a", id="a")
            yield Part("b", id="b")

    class Demo(App):
        SCREENS = {"page": Page}

        def on_mount(self) -> None:
            self.push_screen("page")

    app = Demo()
    async with app.run_test() as pilot:
        await pilot.pause()
        assert _live(app.get_screen("page"))
        app.exit()
    assert seen and all(s == (False, False) for s in seen), seen
