"""Keys reach what they were typed for: a burst typed faster than the app handles it (the app
busy with a run) lands key by key where each was meant (tui.keys); an escape typed just before
another key is two keys, and the terminal reader stops when the terminal hangs up (tui.terminal,
on a real pseudo-terminal)."""

from __future__ import annotations

import os
import threading
import tty
from typing import Any

from textual import events

from engine.device.session import DeviceSession
from engine.results.store import Store
from test_tui_flow import _start_long_run, env  # noqa: F401 - env: that module's autouse isolation
from tui import demo
from tui.screens.compare import CompareScreen
from tui.terminal import ESC, LoneEscapes, TerminalInput
from tui_helpers import drive, make_app

CHARS = {"escape": ESC, "tab": "\t", "enter": "\r", "space": " "}


def burst(app: Any, *keys: str) -> None:
    """Keys as a terminal delivers a burst: all queued at once, none waiting for the one before."""
    for key in keys:
        app.post_message(events.Key(key, CHARS.get(key, key if len(key) == 1 else None)))


# --------------------------------------------------------------------------- a burst while a run steps
async def test_a_burst_typed_while_a_run_steps_lands_where_each_key_was_meant(twin_session: DeviceSession,
                                                                              results_store: Store) -> None:
    ids = demo.fill_store(results_store)
    app = make_app(twin_session, store=results_store)
    async with drive(app, size=(100, 30)) as ui:
        await _start_long_run(ui, twin_session)  # the engine steps in its thread the whole time
        # Setup: tab to the batch size, type 4, leave the field; History: mark two runs of one workload
        # (the static run and its MAXN run; the lone run is another workload's); compare them
        burst(app, "2", "tab", "tab", "tab", "4", "escape", "5", "down", "down", "m", "down", "m", "c")
        await ui.settle()
        assert app.get_screen("setup").query_one("#batch_size").value == "4"  # the 4 after the tabs
        history = app.get_screen("history")
        assert history.marked == [ids["static"], ids["maxn"]]  # below the running run and the lone one
        assert isinstance(app.screen, CompareScreen)  # `c` on History, not in a field
        assert (app.compare_view.run.id, app.compare_view.base.id) == (ids["static"], ids["maxn"])
        assert app.engine_busy == "experiment"  # none of it reached the run
        await ui.press("ctrl+c")


# --------------------------------------------------------------------------- escapes typed fast
def test_an_escape_typed_just_before_a_key_is_two_keys() -> None:
    lone = LoneEscapes()
    assert lone.feed(f"{ESC}s") == [None, "s"]  # escape, then s (Textual read alt+s)
    assert lone.feed(f"42{ESC}2") == ["42", None, "2"]  # not `™`
    assert lone.feed(f"{ESC}[A{ESC}OP") == [f"{ESC}[A{ESC}OP"]  # sequences stay whole: up, F1
    assert lone.feed(f"{ESC}{ESC}[B") == [None, f"{ESC}[B"]  # escape, down (not alt+down)
    assert lone.feed(f"{ESC}\x7f") == [f"{ESC}\x7f"]  # alt+backspace stays: a word deleted in a field
    assert lone.feed(f"q{ESC}") == ["q"]  # an ESC last in a read waits for what follows it
    assert lone.feed("[C") == [f"{ESC}[C"]  # a sequence split across reads
    assert lone.feed(ESC) == [] and lone.feed("5") == [None, "5"]
    assert lone.feed(ESC) == [] and lone.flush() == [None] and lone.flush() == []  # nothing followed: escape


def test_the_terminal_reader_reads_a_burst_as_typed_and_says_when_the_terminal_hangs_up() -> None:
    master, slave = os.openpty()
    tty.setraw(slave)  # as the app's driver sets it: keys as typed, not lines
    keys: list[str] = []
    lost: list[str] = []
    typed = threading.Event()

    def deliver(message: Any) -> None:
        if isinstance(message, events.Key):
            keys.append(message.key)
            if len(keys) == 7:
                typed.set()

    reader = TerminalInput(slave, deliver, lost.append, threading.Event())
    thread = threading.Thread(target=reader.run, daemon=True)
    thread.start()
    try:
        os.write(master, f"4{ESC}5m{ESC}2{ESC}[A{ESC}".encode())  # in one read: as a busy board reads a burst
        assert typed.wait(10), f"keys read: {keys}"
        assert keys == ["4", "escape", "5", "m", "escape", "2", "up"]
    finally:
        os.close(master)  # the terminal hangs up
    thread.join(10)
    assert not thread.is_alive()  # it stopped reading (Textual's reader spun on the end of input)
    assert keys[-1] == "escape"  # the ESC held at the end of the burst, then the hang-up
    assert len(lost) == 1 and ("hung up" in lost[0] or "refused a read" in lost[0])
    os.close(slave)


def test_the_terminal_reader_ends_as_textuals_does_with_what_it_held_delivered() -> None:
    """Stopped by the app, the reader makes Textual's last pass (its `final=True`): an escape read
    last, held to see what follows it, is the escape key, not dropped."""
    read_end, write_end = os.pipe()
    os.write(write_end, f"4{ESC}".encode())  # both in the first read
    keys: list[str] = []
    stop = threading.Event()

    def deliver(message: Any) -> None:
        if isinstance(message, events.Key):
            keys.append(message.key)
            stop.set()  # the app stops its input as the first key arrives: the ESC is still held

    reader = TerminalInput(read_end, deliver, lambda reason: None, stop)
    reader.run()
    assert keys == ["4", "escape"]
    os.close(read_end)
    os.close(write_end)
