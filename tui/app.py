"""The slm-dvfs app: seven pages over one device session and one results store (and a Ray fleet).

Data flow, as Textual intends it: attributes down, messages up. The app's state that the pages
show (the poll's reading, the run's, the sweep's and the fleet's views, the comparison, the
stored records, the selector's line, Setup's values...) is reactive (tui.state.AppState); each
page binds what it shows (`data_bind`, below) and redraws in its `watch_*` methods, at once if
it is on view, else when next shown. A page tells the app what the user asked for with a message
(tui.messages), which the app handles; the app never calls a page, nor a page the app.

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
from typing import TYPE_CHECKING, Any

from textual import work
from textual.binding import Binding
from textual.screen import Screen
from textual.worker import get_current_worker

from engine.core.errors import SlmDvfsError
from engine.core.provenance import Source
from engine.device.base import ClockDomain
from engine.device.baseline import AGX_MAXN, Baseline, board_baseline
from engine.device.session import DeviceSession
from engine.device.twin.profile import TwinProfile
from engine.device.snapshot import DeviceSnapshot, take_snapshot
from engine.selector import policy_factory
from tui import forms
from tui.actions.calibrate import CalibrateActions
from tui.actions.experiments import ExperimentActions
from tui.actions.fleet import FleetActions
from tui.actions.store import StoreActions
from tui.actions.sweeps import SweepActions
from tui.commands import SlmDvfsCommands
from tui.live_model import DeviceHistory
from tui.keys import OrderedKeys
from tui.lifecycle import Lifecycle
from tui.messages import ExperimentRequested, PollFailed, SetupChanged, SnapshotTaken
from tui.polling import SlowModeDevice
from tui.remembered import load_setup
from tui.screens.base import PageScreen
from tui.screens.compare import CompareScreen
from tui.screens.device import DeviceScreen
from tui.screens.fleet import FleetScreen
from tui.screens.history import HistoryScreen
from tui.screens.run import RunScreen
from tui.screens.setup import SetupScreen
from tui.screens.sweep import SweepScreen
from tui.state import PAGES, AppState, DeviceReading

if TYPE_CHECKING:
    from engine.results.store import Store
    from engine.run.fleet import Fleet

log = logging.getLogger(__name__)

REFRESH_S = 0.5
# While a run or sweep is measured the UI redraws about once a second, the poll's reading
# drawn together with the run's progress: each redraw costs the CPU the run is measured on.
RUN_REFRESH_S = 1.0
QUIT_WAIT_S = 5.0  # how long quitting waits for the engine to reach a step boundary
PAGE_KEYS = Binding.Group("pages", compact=True)
# Each page's class (the help screen lists their keys); the app installs one of each, bound to its state.
PAGE_SCREENS: dict[str, type[PageScreen]] = {
    "device": DeviceScreen,
    "setup": SetupScreen,
    "run": RunScreen,
    "compare": CompareScreen,
    "history": HistoryScreen,
    "sweep": SweepScreen,
    "fleet": FleetScreen,
}


class SlmDvfsApp(OrderedKeys, Lifecycle, ExperimentActions, SweepActions, FleetActions, CalibrateActions,
                 StoreActions):
    CSS_PATH = "styles.tcss"
    TITLE = "slm-dvfs"
    COMMANDS = AppState.COMMANDS | {SlmDvfsCommands}
    BINDINGS = [
        # One compact footer entry, "1234567 pages": the page's own keys, help and quit fit at 80 columns.
        *(Binding(str(i), f"page('{name}')", name.capitalize(), group=PAGE_KEYS) for i, name in enumerate(PAGES, 1)),
        Binding("question_mark,f1", "help", "Help", key_display="?"),
        Binding("q", "quit", "Quit"),
        Binding("ctrl+c", "quit", "Quit", show=False, priority=True),
    ]

    def __init__(
        self,
        session: DeviceSession,
        refresh_s: float = REFRESH_S,
        *,
        store: Store | None = None,
        store_path: str | Path | None = None,
        poll: bool = True,
        quit_wait_s: float = QUIT_WAIT_S,
        handle_signals: bool = True,
        run_refresh_s: float = RUN_REFRESH_S,
        fleet: Fleet | None = None,
        fleet_address: str | None = None,
        fleet_twins: int | None = None,
        fleet_profile: str | None = None,
    ) -> None:
        super().__init__()
        self.policies = policy_factory()  # every policy a run may ask for, `ml` included: handed to each run
        self.session = session
        self.source = Source.TWIN if session.is_twin else Source.MEASURED  # the identity's, once read
        self.mem_total = session.memory_total_bytes()  # what memory fit sets a workload against
        self.baseline = session_baseline(session)  # what a comparison runs against
        self.baseline_label = self.baseline.label  # by its mode's name and id, for the pages
        self.board_profile = session_profile(session)  # the module the selector's preview chooses for
        self.refresh_s = refresh_s
        self.run_refresh_s = max(refresh_s, run_refresh_s)
        self.poll = poll
        self.quit_wait_s = quit_wait_s
        self.handle_signals = handle_signals
        self._store = store
        self._own_store = store is None
        self._store_path = store_path
        self.identity = None
        self.pinned_by_us = False  # an engine worker holds a clock guard
        self.last_snapshot: DeviceSnapshot | None = None
        self.device_history = DeviceHistory()  # what the live graphs show; fills while a page is hidden
        self.clock_tables: dict[ClockDomain, tuple[int, ...]] = {}
        self.control = None  # of the experiment or sweep in progress
        self.run_tracker = None
        self.run_bridge = None
        self.sweep_tracker = None
        self.sweep_bridge = None
        self.sweep_for = None  # the Setup policy a sweep was started for (oracle)
        self.selector_key = None  # the Setup workload selector_line is about
        self.highlighted_run = None
        self.last_result = None
        self.quit_requested_at: float | None = None  # monotonic times, for the tests' stopwatch
        self.exited_at: float | None = None
        self._signals: dict[int, Any] = {}
        self.polled = SlowModeDevice(session.device)  # what the poll reads: the mode seldom
        self._quitting = False
        self._quit_reason = "quit"  # what a run cancelled by quitting is stored with
        self.quit_note = None  # set when quitting found the engine busy
        self.engine_ended = None  # the engine's last line on how it ended (tui.actions)
        self.engine_failed = False  # and whether that was an error
        self.terminal_lost: str | None = None  # why, once the terminal went away (tui.terminal)
        # A Ray fleet (page 7): `fleet` one already connected (its caller closes it), else the one
        # the launch names is connected to in a worker once the app runs (closed by close_fleet).
        self.init_fleet(fleet, fleet_address, fleet_twins, fleet_profile)

    # ------------------------------------------------------------------ lifecycle
    def on_mount(self) -> None:
        try:
            self.identity = self.session.device.identity()
            self.source = Source.TWIN if self.identity.is_twin else Source.MEASURED
        except SlmDvfsError as exc:
            self.notify(str(exc), title="Cannot identify the device", severity="error")
        for domain in ClockDomain:
            try:
                self.clock_tables[domain] = self.session.device.clock_table(domain)
            except SlmDvfsError:
                pass  # the pane shows the domain's own error
        self._install_pages()
        self.push_screen("device")
        if self.poll:
            self.poll_device()
        self.start_fleet()
        if self.handle_signals:
            self._install_signal_handlers()

    def _install_pages(self) -> None:
        """One of each page, bound to the app's state it shows (attributes down): a page redraws when
        that changes. Bound here, where the app is Textual's active node (data_bind's parent)."""
        remembered = load_setup()
        self.setup_values = remembered.values
        s = AppState
        pages: dict[str, PageScreen] = {
            "device": DeviceScreen(self.device_history).data_bind(s.reading),
            "setup": SetupScreen(remembered.values, remembered.note).data_bind(
                s.reading, s.source, s.selector_line, s.policy_note, s.mem_total, s.baseline_label),
            "run": RunScreen(self.device_history, self.run_refresh_s).data_bind(
                s.reading, s.runs_started, s.selector_short, s.run_view),
            "compare": CompareScreen().data_bind(s.reading, view=s.compare_view),
            "history": HistoryScreen().data_bind(s.reading, s.records),
            # Setup's values before the sweep's view: an opened sweep's own workload is taken after them.
            "sweep": SweepScreen().data_bind(s.reading, s.engine_busy, s.setup_values, s.source, s.fleet_view,
                                             s.sweep_view, s.sweep_order),
            "fleet": FleetScreen().data_bind(s.reading, s.fleet_view),
        }
        for name, page in pages.items():
            self.install_screen(page, name)

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
        self.push_screen(HelpScreen(PAGE_SCREENS, getattr(store, "path", None) if store is not None
                                    else self._default_store_path()))

    def _default_store_path(self) -> Path | None:
        """Where the store will be opened (it opens on first use)."""
        if self._store_path is not None:
            return Path(self._store_path)
        try:
            from engine.results.store.db import default_db_path

            return default_db_path()
        except (ImportError, SlmDvfsError):
            return None

    def page(self, name: str) -> Screen:
        """The installed page `name` (for tests and the command palette)."""
        return self.get_screen(name)

    # ------------------------------------------------------------------ Setup
    def on_setup_changed(self, message: SetupChanged) -> None:
        """Setup's form changed (or was shown): the Sweep page follows it; a selector preview asked
        for another workload is stale (the Run page keeps its run's own line); the policy's needs
        are looked up again (the store may have a sweep now)."""
        values = message.values
        self.setup_values = values
        if self.selector_key is not None and forms.workload_key(values) != self.selector_key:
            self.selector_key = None
            self.selector_line = ""
        self.policy_note = self.policy_warning(values)

    def on_experiment_requested(self, message: ExperimentRequested) -> None:
        values = message.values
        if not self.policy_ready(values):
            return  # said, and the way to get what it needs offered
        self.selector_key = forms.workload_key(values)
        self.request_start(values)

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
        self.reading = DeviceReading(snap, self.pinned_by_us, tuple(self.session.notes), self.clock_tables)

    def on_poll_failed(self, message: PollFailed) -> None:
        self.notify(message.error, title="Cannot read the device", severity="error")


def session_profile(session: DeviceSession) -> TwinProfile | None:
    """The device profile of the session's board: a twin's own, else its module's (engine.device.jetson.identity);
    None where neither can be read (the selector then chooses as for the module it learnt first)."""
    from engine.device.twin.profile import load_profile

    try:
        identity = session.device.identity()
        name = identity.profile or identity.module_profile
        return load_profile(name) if name else None
    except SlmDvfsError as exc:
        log.info("no device profile for this board: %s", exc)
        return None


def session_baseline(session: DeviceSession) -> Baseline:
    """The session's board's baseline, its uncapped mode by name and id (engine.device.baseline); the AGX
    Orin's MAXN (mode 0) where its modes cannot be read or name none (a run's --compare then says why)."""
    try:
        return board_baseline(session.device.power_modes())
    except SlmDvfsError as exc:
        log.info("no baseline mode on this board: %s", exc)
        return AGX_MAXN
