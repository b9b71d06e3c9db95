"""The slm-dvfs app: seven pages over one device session and one results store (and a Ray fleet).

Threads: a poll worker reads the device about twice a second (once a second while a run
or sweep is measured); one engine worker at a time runs an experiment, a sweep or a
selector training. Workers post Messages (tui.messages); step events are folded into a
tracker and coalesced (tui.bridge), so while a run is measured the UI redraws about once
a second, the poll's reading with the run's progress, and does not distort the energy it
measures (bench/bench_tui.py).

Clocks: run_experiment and run_sweep wrap their runs in a ClockGuard. Every exit path
(q, ctrl+c, the command palette, SIGHUP from a closed SSH session, SIGTERM, and a terminal
that went away without a SIGHUP: tui.terminal) cancels the TrainControl, waits a bounded time
for the worker to reach a step boundary and leave its guard (which restores the clocks), then
exits. While it waits the page says so; after the app exits, `farewell()` is what the
terminal is told (engine.cli.tui_launch prints it).

Keys: typed keys are handled one at a time, in order (tui.keys), and an escape typed just
before another key is read as two keys (tui.terminal).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from textual import work
from textual.app import App
from textual.binding import Binding
from textual.css.query import NoMatches
from textual.screen import ModalScreen, Screen
from textual.worker import get_current_worker

from engine.device.base import ClockDomain
from engine.device.session import DeviceSession
from engine.device.snapshot import take_snapshot
from engine.core.errors import SlmDvfsError
from engine.core.provenance import Source
from engine.selector import register_ml_policy
from tui.actions.calibrate import CalibrateActions
from tui.actions.experiments import ExperimentActions
from tui.actions.fleet import FleetActions
from tui.actions.store import StoreActions
from tui.actions.sweeps import SweepActions
from tui.bridge import EventBridge
from tui.commands import SlmDvfsCommands
from tui.history import DeviceHistory
from tui.keys import OrderedKeys
from tui.lifecycle import Lifecycle
from tui.messages import PollFailed, SnapshotTaken
from tui.polling import SlowModeDevice
from tui.runstate import RunTracker, RunView
from tui.screens.compare import CompareScreen
from tui.screens.device import DeviceScreen
from tui.screens.fleet import FleetScreen
from tui.screens.history import HistoryScreen
from tui.screens.run import RunScreen
from tui.screens.setup import SetupScreen
from tui.screens.sweep import SweepScreen
from tui.sweep_model import SweepTracker, SweepView

log = logging.getLogger(__name__)

REFRESH_S = 0.5
# While a run or sweep is measured the UI redraws about once a second, the poll's reading
# drawn together with the run's progress: each redraw costs the CPU the run is measured on.
RUN_REFRESH_S = 1.0
QUIT_WAIT_S = 5.0  # how long quitting waits for the engine to reach a step boundary
PAGES = ("device", "setup", "run", "compare", "history", "sweep", "fleet")
PAGE_KEYS = Binding.Group("pages", compact=True)


class SlmDvfsApp(OrderedKeys, Lifecycle, ExperimentActions, SweepActions, FleetActions, CalibrateActions,
                 StoreActions, App):
    CSS_PATH = "styles.tcss"
    TITLE = "slm-dvfs"
    COMMANDS = App.COMMANDS | {SlmDvfsCommands}
    BINDINGS = [
        # One compact footer entry, "1234567 pages": the page's own keys, help and quit fit at 80 columns.
        *(Binding(str(i), f"page('{name}')", name.capitalize(), group=PAGE_KEYS) for i, name in enumerate(PAGES, 1)),
        Binding("question_mark,f1", "help", "Help", key_display="?"),
        Binding("q", "quit", "Quit"),
        Binding("ctrl+c", "quit", "Quit", show=False, priority=True),
    ]
    SCREENS = {
        "device": DeviceScreen,
        "setup": SetupScreen,
        "run": RunScreen,
        "compare": CompareScreen,
        "history": HistoryScreen,
        "sweep": SweepScreen,
        "fleet": FleetScreen,
    }

    def __init__(
        self,
        session: DeviceSession,
        refresh_s: float = REFRESH_S,
        *,
        store: Any = None,
        store_path: str | Path | None = None,
        poll: bool = True,
        quit_wait_s: float = QUIT_WAIT_S,
        handle_signals: bool = True,
        run_refresh_s: float = RUN_REFRESH_S,
        fleet: Any = None,
        fleet_address: str | None = None,
        fleet_twins: int | None = None,
        fleet_profile: str | None = None,
    ) -> None:
        super().__init__()
        register_ml_policy()  # the dvfs layer's `ml` plug point: filled by the client
        self.session = session
        self.refresh_s = refresh_s
        self.run_refresh_s = max(refresh_s, run_refresh_s)
        self._device_behind = False  # a reading the Run page has not drawn yet (drawn with the progress)
        self.progress_drawn_at = -float("inf")  # monotonic: when the Run page last drew the run's progress
        self.poll = poll
        self.quit_wait_s = quit_wait_s
        self.handle_signals = handle_signals
        self._store = store
        self._own_store = store is None
        self._store_path = store_path
        self.identity: Any = None
        self.pinned_by_us = False  # an engine worker holds a clock guard
        self.last_snapshot = None
        self.device_history = DeviceHistory()  # what the live graphs show; fills while a page is hidden
        self.clock_tables: dict[ClockDomain, tuple[int, ...]] = {}
        self.control: Any = None  # TrainControl of the experiment or sweep in progress
        self.engine_busy: str | None = None  # "experiment" | "sweep" | "selector training" | "calibration"
        self.run_tracker: RunTracker | None = None
        self.run_bridge: EventBridge | None = None
        self.run_view = RunView(status="idle", log=("no run yet: start one on the Setup page (2)",))
        self.sweep_tracker: SweepTracker | None = None
        self.sweep_bridge: EventBridge | None = None
        self.sweep_view: SweepView | None = None
        self.sweep_for: str | None = None  # the Setup policy a sweep was started for (oracle)
        self.compare_view: Any = None
        self.selector_line = ""  # the Setup page's (long) and the Run page's (short) line
        self.selector_short: str | tuple[str, ...] = ""  # or its forms, longest first (SelectorPreview.short_forms)
        self.selector_key: tuple[str, ...] | None = None  # the Setup workload selector_line is about
        self.last_result: Any = None
        self.quit_requested_at: float | None = None  # monotonic times, for the tests' stopwatch
        self.exited_at: float | None = None
        self._signals: dict[int, Any] = {}
        self.polled = SlowModeDevice(session.device)  # what the poll reads: the mode seldom
        self._quitting = False
        self._quit_reason = "quit"  # what a run cancelled by quitting is stored with
        self.quit_note: QuitNote | None = None  # set when quitting found the engine busy
        self.engine_ended: str | None = None  # the engine's last line on how it ended (tui.actions)
        self.engine_failed = False  # and whether that was an error
        self.terminal_lost: str | None = None  # why, once the terminal went away (tui.terminal)
        # A Ray fleet (page 7): `fleet` one already connected (its caller closes it), else the one
        # the launch names is connected to in a worker once the app runs (closed by close_fleet).
        self.init_fleet(fleet, fleet_address, fleet_twins, fleet_profile)

    # ------------------------------------------------------------------ lifecycle
    @property
    def is_twin(self) -> bool:
        return bool(self.identity.is_twin) if self.identity is not None else self.session.is_twin

    @property
    def source(self) -> Source:
        return Source.TWIN if self.is_twin else Source.MEASURED

    @property
    def store(self) -> Any:
        """The results store, opened on first use; None (and said) when it cannot be opened."""
        if self._store is None:
            from engine.results.store import Store

            try:
                self._store = Store(self._store_path)
            except SlmDvfsError as exc:
                self.notify(f"{exc.what}\n{exc.remedy}", title="Cannot open the results store", severity="error")
                return None
        return self._store

    def on_mount(self) -> None:
        try:
            self.identity = self.session.device.identity()
        except SlmDvfsError as exc:
            self.notify(str(exc), title="Cannot identify the device", severity="error")
        for domain in ClockDomain:
            try:
                self.clock_tables[domain] = self.session.device.clock_table(domain)
            except SlmDvfsError:
                pass  # the pane shows the domain's own error
        self.push_screen("device")
        if self.poll:
            self.poll_device()
        self.start_fleet()
        if self.handle_signals:
            self._install_signal_handlers()

    def on_unmount(self) -> None:
        self._remove_signal_handlers()
        if self.control is not None:
            self.control.cancel("the app closed")
        if self._own_store and self._store is not None and self.engine_busy is None:
            self._store.close()

    # ------------------------------------------------------------------ pages
    def action_help(self) -> None:
        """The help screen (? or F1): every page's keys, the Setup fields, the policies, the store."""
        from tui.screens.help import HelpScreen

        if self._quitting or isinstance(self.screen, HelpScreen):
            return
        store = self._store
        self.push_screen(HelpScreen(self.SCREENS, getattr(store, "path", None) if store is not None
                                    else self._default_store_path()))

    def _default_store_path(self) -> Path | None:
        """Where the store will be opened (it opens on first use)."""
        if self._store_path is not None:
            return Path(self._store_path)
        try:
            from engine.results.db import default_db_path

            return default_db_path()
        except (ImportError, SlmDvfsError):
            return None

    def action_page(self, name: str) -> None:
        if self._quitting or isinstance(self.screen, ModalScreen) or name not in PAGES:
            return
        current = self.screen
        if getattr(current, "PAGE", None) == name:
            return
        self.switch_screen(name)

    def sync_page(self, screen: Screen) -> None:
        """A page became current: give it the state it missed while hidden."""
        if self.last_snapshot is not None and hasattr(screen, "show_device"):
            screen.show_device(self.last_snapshot, self.pinned_by_us, self.session.notes, self.clock_tables)
        if isinstance(screen, SetupScreen):
            screen.set_simulate_allowed(self.is_twin)
            screen.show_selector(self.selector_line)
            screen.show_policy_note(self.policy_warning(screen.values()))
        elif isinstance(screen, RunScreen):
            screen.show_selector(self.selector_short)
            screen.show_run(self.run_view)
        elif isinstance(screen, CompareScreen):
            if self.compare_view is not None and screen.view is not self.compare_view:
                screen.show_comparison(self.compare_view)
        elif isinstance(screen, HistoryScreen):
            self.reload_history()
        elif isinstance(screen, FleetScreen):
            screen.show_fleet(self.fleet_tracker.view())
        elif isinstance(screen, SweepScreen):
            screen.set_fast_allowed(self.is_twin)
            screen.refresh_bindings()  # `f` (fleet sweep) shows while a fleet is connected
            if self.engine_busy not in ("sweep", "fleet sweep"):  # the form says what runs while it runs
                screen.follow_setup(self.setup_values())
            if self.sweep_view is not None:
                screen.show_sweep(self.sweep_view)

    @property
    def page_shown(self) -> Screen | None:
        """The page on view: the current screen, or the page under the dialogs over it (a
        dialog shows the page beneath it, which must keep updating). None once quitting has
        emptied the stack: a worker's last message may still arrive then."""
        for screen in reversed(self.screen_stack):
            if not isinstance(screen, ModalScreen):
                return screen
        return self.screen_stack[-1] if self.screen_stack else None

    def setup_values(self) -> Any:
        """What the Setup page holds (its initial values before it was first shown)."""
        setup = self.get_screen("setup")
        return setup.values() if getattr(setup, "composed", False) else setup.initial  # type: ignore[attr-defined]

    def setup_changed(self, values: Any) -> None:
        """Setup's workload or policy changed: a selector preview asked for another workload is
        stale (the Run page keeps its run's own line), and the policy note is said again."""
        from tui.forms import workload_key

        if self.selector_key is not None and workload_key(values) != self.selector_key:
            self.selector_key = None
            self.selector_line = ""
        if (page := self._current(SetupScreen)) is not None:
            page.show_selector(self.selector_line)
            page.show_policy_note(self.policy_warning(values))

    def _current(self, cls: type) -> Any:
        """The page on view (under any dialog) if it is a `cls` that has been composed (else None:
        it syncs when shown)."""
        screen = self.page_shown
        return screen if isinstance(screen, cls) and _live(screen) else None

    def page(self, name: str) -> Screen:
        """The installed page `name` (for tests and the command palette)."""
        return self.get_screen(name)

    # ------------------------------------------------------------------ device polling
    @work(thread=True, exclusive=True, exit_on_error=False, group="poll")
    def poll_device(self) -> None:
        worker = get_current_worker()
        identity = self.identity or self.session.device.identity()
        while not worker.is_cancelled:
            try:
                self.post_message(SnapshotTaken(take_snapshot(self.polled, identity)))
            except Exception as exc:  # noqa: BLE001 - shown in the app, never a crash to the shell
                self.post_message(PollFailed(str(exc)))
            time.sleep(self.run_refresh_s if self.engine_busy else self.refresh_s)

    def on_snapshot_taken(self, message: SnapshotTaken) -> None:
        snap = message.snapshot
        self.last_snapshot = snap
        self.device_history.add(snap)
        screen = self.page_shown
        if screen is None:
            return
        if (isinstance(screen, RunScreen) and self.run_view.status == "running"
                and time.monotonic() - self.progress_drawn_at < 2 * self.run_refresh_s):
            self._device_behind = True  # drawn with the run's next progress: one redraw, not two
            return
        self.draw_device(screen)

    def draw_device(self, screen: Screen) -> None:
        """The latest reading on `screen`, if it shows the device and is live."""
        self._device_behind = False
        snap = self.last_snapshot
        if snap is not None and hasattr(screen, "show_device") and _live(screen):
            try:
                screen.show_device(snap, self.pinned_by_us, self.session.notes, self.clock_tables)
            except NoMatches:  # a page taken apart at exit, under a dialog
                pass

    def on_poll_failed(self, message: PollFailed) -> None:
        self.notify(message.error, title="Cannot read the device", severity="error")


def _live(screen: Screen) -> bool:
    """A page whose widgets exist: composed, and not being taken apart. At exit Textual removes
    a page's widgets one by one while messages are still handled; from its start `display`
    reads False (tests/test_textual_internals.py), so a late progress message draws nothing."""
    return bool(getattr(screen, "composed", False)) and bool(screen.children) and screen.display
