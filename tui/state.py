"""What the app knows and its pages show: attributes down, messages up.

`AppState` holds, as Textual reactive attributes, everything a page draws that the app learns
(the poll's reading, the run's and the sweep's views, the comparison, the stored records, the
fleet, the selector's line, Setup's values...). Each page binds the ones it shows with
`data_bind` (tui.app installs the pages) and redraws in its `watch_*` methods; a page never
reads the app, and the app never calls a page. Pages tell the app what the user asked for with
the messages in tui.messages, which the app's actions (tui.actions, mixins over this class)
handle. The values handed down here are frozen.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_args

from textual.app import App
from textual.reactive import var
from textual.screen import ModalScreen

from engine.core.errors import NoRecordedSweepError, SlmDvfsError
from engine.core.provenance import Source
from engine.device.base import ClockDomain
from engine.device.snapshot import DeviceSnapshot
from tui.compare_model import CompareView
from tui.fleet_model import FleetTracker, FleetView
from tui.forms import SetupValues
from tui.runstate import RunView
from tui.sweep_model import SweepView

if TYPE_CHECKING:
    from engine.core.interval import Interval
    from engine.device.baseline import Baseline
    from engine.device.base import DeviceIdentity
    from engine.device.session import DeviceSession
    from engine.device.twin.profile import TwinProfile
    from engine.dvfs.policies import PolicyFactory
    from engine.results.records import RunRecord, SweepRecord
    from engine.results.store import Store
    from engine.run.experiment import ExperimentResult
    from engine.workload.training.loop import TrainControl
    from tui.actions.fleet import FleetCancel
    from tui.bridge import EventBridge
    from tui.fleet_model import FleetSweepTracker
    from tui.live_model import DeviceHistory
    from tui.lifecycle import QuitNote
    from tui.polling import SlowModeDevice
    from tui.runstate import RunTracker
    from tui.sweep_model import SweepTracker

log = logging.getLogger(__name__)

# What the engine's worker is doing (one at a time); the app's engine_busy holds one, or None when idle.
EngineTask = Literal["experiment", "sweep", "fleet sweep", "selector training", "calibration"]
ENGINE_TASKS: tuple[EngineTask, ...] = get_args(EngineTask)
PAGES = ("device", "setup", "run", "compare", "history", "sweep", "fleet")  # keys 1-7
IDLE_RUN = RunView(status="idle", log=("no run yet: start one on the Setup page (2)",))


@dataclass(frozen=True)
class DeviceReading:
    """One poll of the device as the pages draw it: the snapshot, whether our run holds the
    clocks (the header's second line), the session's notes and the clocks' tables."""

    snapshot: DeviceSnapshot
    pinned_by_us: bool = False
    notes: tuple[str, ...] = ()
    tables: Mapping[ClockDomain, tuple[int, ...]] | None = None


@dataclass(frozen=True)
class StoredRecords:
    """What the History page lists: runs (RunRecord), and sweeps as (SweepRecord, workload text,
    points stored), the pages read so far (engine.results.history); `more_*`: older rows follow."""

    runs: Sequence[RunRecord] = ()
    sweeps: Sequence[tuple[SweepRecord, str, int]] = ()
    more_runs: bool = False
    more_sweeps: bool = False


@dataclass(frozen=True)
class SweepOrder:
    """The app asks the Sweep page's form to take Setup's workload (`values`), with `fast`
    ticked, and with `start` to start it (as its `s` does: the form's own checks first).
    `serial` tells one order from the next of the same values."""

    values: SetupValues
    fast: bool
    start: bool
    serial: int


class AppState(App[None]):
    """The app's state: reactive attributes the pages bind to, and the engine's bookkeeping the
    actions share (SlmDvfsApp.__init__ sets the plain attributes declared here)."""

    # ---------------------------------------------------------------- bound by the pages
    # the latest poll (every page's header); each is news, equal or not: the history behind it grew
    reading: var[DeviceReading | None] = var(None, always_update=True)
    source: var[Source] = var(Source.TWIN)  # of what this device measures: twin or measured
    mem_total: var[int | None] = var(None)  # the device's MemTotal in bytes (Setup's memory budget); None: unknown
    baseline_label: var[str] = var("MAXN (mode 0)")  # the board's baseline by mode name and id: MAXN_SUPER (mode 2)
    run_view: var[RunView] = var(IDLE_RUN)
    runs_started: var[int] = var(0)  # experiments started: the Run page's log starts afresh
    selector_line: var[str] = var("")  # the Setup page's (long) line
    selector_short: var[str | tuple[str, ...]] = var("")  # the Run page's: its forms, longest first
    policy_note: var[str] = var("")  # what Setup's policy still needs, or ""
    setup_values: var[SetupValues] = var(SetupValues())  # what Setup holds (the Sweep form follows it)
    engine_busy: var[EngineTask | None] = var(None)  # what the engine is doing; None: idle
    sweep_view: var[SweepView | None] = var(None)
    sweep_order: var[SweepOrder | None] = var(None)
    compare_view: var[CompareView | None] = var(None)
    records: var[StoredRecords | None] = var(None, always_update=True)  # a reload redraws (a deletion elsewhere)
    fleet_view: var[FleetView] = var(FleetTracker().view())

    # ---------------------------------------------------------------- plain state, set in SlmDvfsApp.__init__
    session: DeviceSession
    policies: PolicyFactory  # every policy a run may ask for (`ml` included), handed to each run
    identity: DeviceIdentity | None  # read at mount
    baseline: Baseline  # the board's uncapped mode (engine.device.baseline), read at start
    board_profile: TwinProfile | None  # the board's module profile (the selector chooses for it), read at start
    run_refresh_s: float
    device_history: DeviceHistory
    polled: SlowModeDevice  # what the poll reads
    control: TrainControl | FleetCancel | None  # of the experiment or sweep in progress
    pinned_by_us: bool  # an engine worker holds a clock guard
    run_tracker: RunTracker | None
    run_bridge: EventBridge | None
    sweep_tracker: SweepTracker | FleetSweepTracker | None
    sweep_bridge: EventBridge | None
    sweep_for: str | None  # the Setup policy a sweep was started for (oracle)
    selector_key: tuple[str, ...] | None  # the Setup workload selector_line is about
    highlighted_run: int | None  # the run highlighted on History (the palette's export and delete)
    last_result: ExperimentResult | None
    fleet_tracker: FleetTracker  # what the Fleet page shows, folded from polls and a fleet sweep's events
    engine_ended: str | None  # the engine's last line on how it ended
    engine_failed: bool
    quit_note: QuitNote | None
    _quitting: bool
    _store: Store | None
    _store_path: str | Path | None

    if TYPE_CHECKING:
        # What one action mixin asks of another (each is defined by its mixin, tui.actions): declared
        # here so that every mixin sees the whole app through this class.
        def open_run(self, run_id: int, baseline_id: int | None = None, *, switch: bool = True,
                     estimate: Interval | None = None) -> None: ...

        def open_sweep(self, sweep_id: int) -> None: ...

        def request_fleet_sweep(self, values: dict[str, Any]) -> None: ...

    @property
    def is_twin(self) -> bool:
        return self.source is Source.TWIN

    @property
    def store(self) -> Store | None:
        """The results store, opened on first use; None (and said) when it cannot be opened."""
        if self._store is None:
            from engine.results.store import Store

            try:
                self._store = Store(self._store_path)
            except SlmDvfsError as exc:
                self.notify(f"{exc.what}\n{exc.remedy}", title="Cannot open the results store", severity="error")
                return None
        return self._store

    def showing(self, name: str) -> bool:
        """Page `name` is the current screen (not under a dialog)."""
        return getattr(self.screen, "PAGE", None) == name

    def action_page(self, name: str) -> None:
        """Show page `name` (its number key): not while quitting or over a dialog."""
        if self._quitting or isinstance(self.screen, ModalScreen) or name not in PAGES:
            return
        if not self.showing(name):
            self.switch_screen(name)

    def _refuse_if_busy(self) -> bool:
        if self._quitting:
            return True  # nothing new starts while quitting waits for the run to stop
        if self.engine_busy is not None:
            self.notify(f"a {self.engine_busy} is in progress: wait for it, or cancel it (x on page 3)",
                        severity="warning")
            return True
        return False

    def _engine_idle(self, ended: str | None = None, *, failed: bool = False) -> None:
        """The engine worker has finished (`ended`: its line on how, for quitting to repeat)."""
        self.polled.invalidate()  # the guard has put the mode back: show it at the next poll
        self.engine_ended = ended
        self.engine_failed = failed
        self.engine_busy = None
        self.control = None
        self.pinned_by_us = False

    def fleet_changed(self) -> None:
        """The tracker folded a poll or a batch of events: the Fleet page's view (and the Sweep page's `f`)."""
        self.fleet_view = self.fleet_tracker.view()

    def app_remedy(self, exc: SlmDvfsError) -> str:
        """An engine error's remedy as the app offers it: the engine names the CLI's commands,
        the app its own pages for the same step."""
        if isinstance(exc, NoRecordedSweepError):
            where = "s on Setup (2) offers a fast one on the twin" if self.is_twin else "every setting is applied in turn"
            return f"sweep this workload on the Sweep page (6) ({where}), then start the run again"
        return exc.remedy
