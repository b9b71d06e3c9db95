"""How the app ends: `q`, ctrl+c and the palette's Quit; SIGHUP (the SSH session closed) and
SIGTERM; and a terminal that went away without a SIGHUP reaching the app (tui.terminal's driver
reports it). Each cancels the engine's run at its next step boundary, waits a bounded time for
its clock guard to restore the clocks, then exits. The waiting runs in a worker, so the page
stays live and says what happens; once the app has exited, `farewell()` is what the terminal is
told (engine.cli.tui_launch prints it), unless the terminal is gone.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from textual.driver import Driver
from textual.worker import WorkerState

from tui.actions.experiments import ENGINE
from tui.actions.fleet import FLEET_QUIT_WAIT_S
from tui.state import AppState

if TYPE_CHECKING:
    from tui.terminal import TerminalLost

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class QuitNote:
    """What quitting found running and how it ended: the page says it before the app exits,
    the terminal after (SlmDvfsApp.farewell)."""

    busy: str  # "experiment", "sweep", "fleet sweep", "selector training", "calibration"
    clocks: bool  # it held the clocks (a fleet sweep: its boards')
    wait_s: float
    stopped: bool | None = None  # it left its clock guard within wait_s; None while quitting waits
    ended: str | None = None  # the engine's own line on how it ended, when it said one
    failed: bool = False  # it ended in an error: whether its guard restored the clocks is not known here


class Lifecycle(AppState):
    """Mixin of SlmDvfsApp: its driver, the signals it quits on, quitting."""

    quit_wait_s: float
    _quit_reason: str  # what a run cancelled by quitting is stored with
    _signals: dict[int, Any]
    quit_requested_at: float | None
    exited_at: float | None
    terminal_lost: str | None

    def get_driver_class(self) -> type[Driver]:
        """Textual's driver for this terminal; on Linux and macOS the one that notices the terminal
        going away and reads escapes typed fast (tui.terminal)."""
        driver = super().get_driver_class()
        if sys.platform != "win32":
            from textual.drivers.linux_driver import LinuxDriver

            if driver is LinuxDriver:  # not one TEXTUAL_DRIVER names
                from tui.terminal import TerminalDriver

                return TerminalDriver
        return driver

    def _install_signal_handlers(self) -> None:
        """SIGHUP (SSH closed) and SIGTERM quit the app the same way q does."""
        if threading.current_thread() is not threading.main_thread():
            return
        loop = asyncio.get_running_loop()
        for name in ("SIGHUP", "SIGTERM"):
            sig = getattr(signal, name, None)
            if sig is None:
                continue
            try:
                previous = signal.getsignal(sig)
                loop.add_signal_handler(sig, self._on_signal, sig)
            except (NotImplementedError, RuntimeError, ValueError):
                continue
            self._signals[sig] = previous

    def _remove_signal_handlers(self) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        for sig, previous in self._signals.items():
            try:
                if loop is not None:
                    loop.remove_signal_handler(sig)
                signal.signal(sig, previous if previous is not None else signal.SIG_DFL)
            except (ValueError, TypeError, RuntimeError):
                pass
        self._signals.clear()

    def _on_signal(self, sig: int) -> None:
        name = signal.Signals(sig).name
        self._hang_up(f"{name}: the terminal went away" if name == "SIGHUP" else name)

    def on_terminal_lost(self, message: TerminalLost) -> None:
        """The terminal hung up without a SIGHUP reaching us (tui.terminal.TerminalLost)."""
        self.terminal_lost = message.reason
        self._hang_up(f"the terminal went away: {message.reason}")

    def _hang_up(self, reason: str) -> None:
        """A signal or a lost terminal: quit as `q` does, the run stored with `reason`."""
        log.warning("%s: cancelling the run and quitting (clocks are restored)", reason)
        if not self._quitting:
            self._quit_reason = reason
        if self.control is not None:
            self.control.cancel(reason)
        self.call_later(self.action_quit)

    async def action_quit(self) -> None:
        """Cancel whatever runs, wait (bounded) for its guard to restore the clocks, exit. The
        waiting runs in a worker, so the page stays live and says what happens meanwhile."""
        if self._quitting:
            return
        self._quitting = True
        self.quit_requested_at = time.monotonic()
        busy = self.engine_busy
        # a fleet sweep stops when every board's task has restored its clocks: Ray takes longer
        wait = max(self.quit_wait_s, FLEET_QUIT_WAIT_S) if busy == "fleet sweep" else self.quit_wait_s
        if busy is None and not self._engine_workers():
            self.exited_at = time.monotonic()
            self.exit()
            return
        if busy is not None:
            self.quit_note = QuitNote(busy, self.pinned_by_us or busy == "fleet sweep", wait)
            clocks = "; the clocks are restored before slm-dvfs exits" if self.quit_note.clocks else ""
            self._say_quitting(f"quitting: cancelling the {busy} at the next step boundary{clocks}")
        self.run_worker(self._stop_then_exit(wait), name="quit", group="quit", exclusive=True, exit_on_error=False)

    async def _stop_then_exit(self, wait: float) -> None:
        stopped = await self.stop_engine(self._quit_reason, wait)
        # behind the engine's last message (its Done, posted before it finished): what it said is known then
        self.call_later(self._quit_done, stopped)

    def _quit_done(self, stopped: bool) -> None:
        note = self.quit_note
        if note is not None:
            self.quit_note = note = QuitNote(note.busy, note.clocks, note.wait_s, stopped, self.engine_ended,
                                             self.engine_failed)
            self._say_quitting(self._quit_outcome(note))
        self.exited_at = time.monotonic()
        self.call_after_refresh(self.exit)  # the page shows how the run ended, then the app exits

    def _say_quitting(self, line: str) -> None:
        """While quitting: the line in the log of the page that shows the engine's work (the Run
        page's for an experiment, the Sweep page's for a sweep) and as a notification."""
        busy = self.quit_note.busy if self.quit_note is not None else None
        if busy == "experiment" and self.run_tracker is not None:
            self.run_tracker.note(line)
            self.run_view = self.run_tracker.view()
        elif busy in ("sweep", "fleet sweep") and self.sweep_tracker is not None:
            self.sweep_tracker.note(line)
            self.sweep_view = self.sweep_tracker.view()
        self.notify(line, title="Quitting", timeout=60)

    @staticmethod
    def _quit_outcome(note: QuitNote) -> str:
        ended = note.ended or f"the {note.busy} was cancelled"
        if not note.clocks:
            return ended
        if note.failed:
            return f"{ended}; if its clocks were not restored, `slm-dvfs restore` puts them back from its journal"
        if note.stopped:
            return f"{ended}; the clocks are restored"
        return (f"{ended}; it had not stopped {note.wait_s:g} s after quitting: its clock guard restores the "
                "clocks when it does (or, if slm-dvfs is killed first, its next start restores them)")

    def farewell(self) -> list[str]:
        """What the terminal is told once the app has exited: how the run that quitting stopped
        ended, and whether its clocks are back. Empty when quitting found nothing running."""
        note = self.quit_note
        if note is None or note.stopped is None:
            return []
        return [f"slm-dvfs: {self._quit_outcome(note)}"]

    async def stop_engine(self, reason: str, timeout: float | None) -> bool:
        """Cancel the engine worker and wait for it; False when it outlived the timeout."""
        if self.control is not None:
            self.control.cancel(reason)
        busy = self._engine_workers()
        if not busy:
            return True
        try:
            await asyncio.wait_for(asyncio.gather(*(w.wait() for w in busy), return_exceptions=True), timeout)
        except asyncio.TimeoutError:
            log.warning("the %s did not stop within %.0f s; its clock guard restores the clocks when it does "
                        "(or at exit)", self.engine_busy, timeout or 0)
            return False
        return True

    def _engine_workers(self) -> list[Any]:
        return [w for w in self.workers if w.group == ENGINE and w.state in (WorkerState.PENDING, WorkerState.RUNNING)]
