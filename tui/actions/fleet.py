"""The fleet from the app (docs/fleet.md): connecting to a Ray cluster (or starting a local fleet of
twins), polling its boards for the Fleet page (7), and fleet sweeps from the Sweep page (6).

Connecting takes seconds (Ray starts in ~10 s) and `boards()` asks every board: both run in
thread workers that post messages, so the UI never waits on Ray. A fleet sweep runs in the
engine worker like a local sweep: `x`, quitting, SIGHUP and SIGTERM cancel it through
`self.control` (a FleetCancel), and quitting waits for the boards to restore their clocks.

A fleet the app connected to is its own: closed (a local fleet's Ray stopped) by the page's
disconnect, and by close_fleet once the app has exited, however it exited; a connect that ends
after that closes its fleet itself. A failed connect leaves no Ray behind (engine.run.fleet)."""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

from textual import work
from textual.worker import get_current_worker

from engine.core.errors import SlmDvfsError
from tui.actions.experiments import ENGINE
from tui.bridge import EventBridge
from tui.fleet_model import FleetSweepTracker, FleetTracker, fleet_where, parse_target
from tui.messages import (
    EngineFailed,
    FleetClosed,
    FleetConnected,
    FleetConnectFailed,
    FleetConnectRequested,
    FleetDisconnectRequested,
    FleetPolled,
    FleetSweepDone,
    FleetWatched,
    SweepProgress,
)
from tui.screens.modals import ConfirmScreen
from tui.state import AppState

if TYPE_CHECKING:  # the engine's run pipeline (and Ray) is imported when a fleet is connected
    from engine.results.store import Store
    from engine.run.fleet import Fleet, FleetSweepResult
    from engine.run.sweep import SweepSpec

FLEET_POLL_S = 1.0  # Fleet.boards() asks every board: once a second is live enough
FLEET_QUIT_WAIT_S = 20.0  # quitting mid fleet sweep: the boards' tasks stop and restore their clocks
DEFAULT_PROFILE = "agx-orin-64gb"


class FleetCancel:
    """What the app cancels (`x`, quit, signals) during a fleet sweep, shaped like a TrainControl:
    it sets the event Fleet.sweep watches."""

    paused = False

    def __init__(self) -> None:
        self.event = threading.Event()
        self.reason = ""

    def cancel(self, reason: str = "cancelled") -> None:
        self.reason = reason
        self.event.set()


def split_models(text: str) -> list[str]:
    """The Sweep form's model field as a list: `bert-tiny, pythia-70m` (a fleet sweep takes several)."""
    return [m.strip() for m in text.split(",") if m.strip()]


class FleetActions(AppState):
    """Mixin of SlmDvfsApp."""

    fleet: Fleet | None = None

    def init_fleet(self, fleet: Fleet | None, address: str | None, twins: int | None, profile: str | None,
                   refresh_s: float = FLEET_POLL_S) -> None:
        """`fleet`: one already connected (the caller closes it); else `address`/`twins` are connected
        to when the app starts (and closed by close_fleet)."""
        self.fleet = fleet
        self._fleet_target = (address, twins, profile)
        self.fleet_refresh_s = refresh_s
        self.fleet_tracker = FleetTracker()
        # The fleet this app connected to (None: none, or one handed to it), set by the connect worker
        # the moment connect returns, so close_fleet finds it even if FleetConnected was never handled.
        self._owned_fleet: Fleet | None = None
        self._fleet_closed = False  # close_fleet ran: a connect that ends later closes its own fleet
        self._fleet_lock = threading.Lock()
        self._fleet_watched = threading.Event()  # set while the Fleet page is on view: only then are boards polled

    def start_fleet(self) -> None:
        """On mount: poll a fleet given, or connect to the one the launch named."""
        address, twins, profile = self._fleet_target
        if self.fleet is not None:
            self.fleet_tracker.connected(getattr(self.fleet, "where", None) or fleet_where(address, twins))
            self.fleet_changed()
            self.poll_fleet(self.fleet)
        elif address or twins:
            self.connect_fleet(address, twins, profile)

    def on_fleet_connect_requested(self, message: FleetConnectRequested) -> None:
        self.connect_fleet_from(message.target)

    def on_fleet_disconnect_requested(self, message: FleetDisconnectRequested) -> None:
        self.disconnect_fleet()

    def connect_fleet_from(self, text: str) -> None:
        """The Fleet page's `c`: the field's address or `twins:N[:profile]`."""
        if self.fleet is not None:
            self.notify(f"already connected to {self.fleet_tracker.where}", severity="warning")
            return
        try:
            address, twins, profile = parse_target(text)
        except SlmDvfsError as exc:
            self.notify(f"{exc.what}\n{exc.remedy}", title="Cannot connect", severity="error")
            return
        self.connect_fleet(address, twins, profile)

    def connect_fleet(self, address: str | None, twins: int | None, profile: str | None) -> None:
        if self._fleet_working("fleet-connect"):
            self.notify("already connecting", severity="warning")
            return
        if self._fleet_working("fleet-close"):  # Ray allows one connection per process
            self.notify("still disconnecting: connect again in a moment", severity="warning")
            return
        where = fleet_where(address, twins)
        self.fleet_tracker.connecting(where)
        self.fleet_changed()
        self.fleet_connect_worker(address, twins, profile or DEFAULT_PROFILE, where)

    @work(thread=True, exclusive=True, exit_on_error=False, group="fleet-connect")
    def fleet_connect_worker(self, address: str | None, twins: int | None, profile: str, where: str) -> None:
        try:
            from engine.run.fleet import connect

            fleet = connect(address, twins=twins, profile=profile, thermal=twins is not None)  # as the app's twin
        except BaseException as exc:  # noqa: BLE001 - said on the page, never a crash to the shell
            text = f"{exc.what}: {exc.remedy}" if isinstance(exc, SlmDvfsError) else f"{type(exc).__name__}: {exc}"
            self.post_message(FleetConnectFailed(where, text))
            return
        with self._fleet_lock:
            leaving = self._fleet_closed or self._quitting
            if not leaving:
                self._owned_fleet = fleet
        if leaving:
            fleet.close()  # the app left while Ray started: nobody else will close it
            return
        self.post_message(FleetConnected(fleet, where))

    def on_fleet_connected(self, message: FleetConnected) -> None:
        self.fleet = message.fleet
        self.fleet_tracker.connected(message.where)
        self.fleet_changed()
        self.notify(f"connected to {message.where}", title="Fleet")
        self.poll_fleet(message.fleet)

    def on_fleet_connect_failed(self, message: FleetConnectFailed) -> None:
        self.fleet_tracker.failed(message.where, message.error)
        self.fleet_changed()
        self.notify(message.error, title=f"Cannot connect to {message.where}", severity="error", timeout=15)

    def on_fleet_watched(self, message: FleetWatched) -> None:
        if message.watched:
            self._fleet_watched.set()  # the poll waiting for it reads the boards at once
        else:
            self._fleet_watched.clear()

    @work(thread=True, exclusive=True, exit_on_error=False, group="fleet-poll")
    def poll_fleet(self, fleet: Fleet) -> None:
        """The boards once on connecting (the Sweep page's `f` needs them), then every
        `fleet_refresh_s` while the Fleet page is on view, and at once when it is shown again."""
        worker = get_current_worker()
        polled = False
        while not worker.is_cancelled and self.fleet is fleet:
            if polled and not self._fleet_watched.is_set():
                self._fleet_watched.wait(self.fleet_refresh_s)  # bounded: a cancelled worker must notice
                continue
            polled = True
            try:
                message = FleetPolled(tuple(fleet.boards()))
            except Exception as exc:  # noqa: BLE001 - said on the page; the next poll tries again
                message = FleetPolled((), f"{type(exc).__name__}: {exc}")
            if self.fleet is not fleet:
                return  # disconnected while the boards answered: nothing more to show of it
            self.post_message(message)
            time.sleep(self.fleet_refresh_s)

    def on_fleet_polled(self, message: FleetPolled) -> None:
        if message.error:
            self.fleet_tracker.note = f"cannot read the boards: {message.error}"
        else:
            self.fleet_tracker.note = ""
            self.fleet_tracker.poll(message.boards)
        self.fleet_changed()

    def disconnect_fleet(self) -> None:
        """The Fleet page's `d`: stop polling and close the fleet the app connected to (a local
        fleet's Ray stops, in a worker: it takes seconds); a fleet handed to the app is only let go."""
        fleet = self.fleet
        if fleet is None:
            return
        if self.engine_busy == "fleet sweep":
            self.notify("a fleet sweep runs: cancel it first (x on the Sweep page)", severity="warning")
            return
        where = self.fleet_tracker.where
        self.fleet = None  # the poll stops
        with self._fleet_lock:
            owned = self._owned_fleet is fleet
            if owned:
                self._owned_fleet = None
        self.fleet_tracker.disconnected()
        self.fleet_changed()
        if owned:
            self.fleet_close_worker(fleet, where)
        else:
            self.notify(f"disconnected from {where}", title="Fleet")

    @work(thread=True, exclusive=True, exit_on_error=False, group="fleet-close")
    def fleet_close_worker(self, fleet: Fleet, where: str) -> None:
        try:
            fleet.close()
        except Exception as exc:  # noqa: BLE001 - said on the page, never a crash to the shell
            self.post_message(FleetClosed(where, f"{type(exc).__name__}: {exc}"))
            return
        self.post_message(FleetClosed(where))

    def on_fleet_closed(self, message: FleetClosed) -> None:
        if message.error:
            self.notify(message.error, title=f"Closing {message.where}", severity="error", timeout=15)
        else:
            self.notify(f"disconnected from {message.where}", title="Fleet")

    def _fleet_working(self, group: str) -> bool:
        return any(w.group == group and not w.is_finished for w in self.workers)

    def close_fleet(self) -> None:
        """After the app exits, however it exited: close the fleet the app connected to (a local
        fleet's Ray stops), also one whose FleetConnected was never handled; a connect still running
        closes its fleet when it returns."""
        self.fleet = None
        with self._fleet_lock:
            self._fleet_closed = True
            fleet, self._owned_fleet = self._owned_fleet, None
        if fleet is not None:
            fleet.close()

    # ------------------------------------------------------------------ fleet sweeps
    def action_fleet_sweep(self) -> None:
        """The palette's Fleet sweep: the Sweep page's own `f` (its checks first), once shown."""
        self.action_page("sweep")
        self.call_after_refresh(self.run_action, "fleet_sweep", self.get_screen("sweep"))

    def request_fleet_sweep(self, values: dict[str, Any]) -> None:
        """The Sweep form's workload on every board: one sweep per model in its model field."""
        from tui.forms import sweep_spec

        if self.fleet is None:
            self.notify("not connected to a fleet: connect on the Fleet page (7)", severity="warning")
            return
        if self._refuse_if_busy():
            return
        boards = self.fleet_tracker.view().boards
        twins_only = bool(boards) and all(b.source.value == "twin" for b in boards)
        try:
            plans = []
            for model in split_models(values["model"]):
                spec = sweep_spec(model, values["task"], values.get("workload", {}), space=values["space"],
                                  warmup_steps=int(values["warmup"]), steps=int(values["steps"]),
                                  repeats=int(values["repeats"]), fast=bool(values["fast"]) and twins_only,
                                  twin=DEFAULT_PROFILE if bool(values["fast"]) and twins_only else None)
                spec.validate()
                plans.append(spec)
        except (SlmDvfsError, ValueError) as exc:
            self.notify(str(exc), title="Cannot start the fleet sweep", severity="error")
            return
        if twins_only:
            self.start_fleet_sweep(plans)
            return

        def answer(ok: bool | None) -> None:
            if ok:
                self.start_fleet_sweep(plans)

        self.push_screen(
            ConfirmScreen("Sweep the fleet's boards?",
                          f"{len(plans)} sweep(s) over the {plans[0].space} space run on the fleet's boards, each "
                          "setting applied in turn; every board restores its clocks when its work ends, is "
                          "cancelled, or on quit.", yes="Sweep"), answer)

    def start_fleet_sweep(self, plans: list[SweepSpec]) -> FleetCancel | None:
        fleet, store = self.fleet, self.store
        if self._refuse_if_busy() or store is None or fleet is None:
            return None
        tracker = FleetSweepTracker(self.fleet_tracker, len(plans))
        tracker.note(f"fleet sweep on {self.fleet_tracker.where}: "
                     + ", ".join(f"{p.workload.model}/{p.workload.task}" for p in plans) + f" over {plans[0].space}")
        self.sweep_tracker = tracker
        self.sweep_bridge = EventBridge(tracker, lambda: self.post_message(SweepProgress()),
                                        min_interval_s=self.run_refresh_s)
        self.control = cancel = FleetCancel()
        self.engine_busy = "fleet sweep"
        self.sweep_view = tracker.view()
        self.fleet_sweep_worker(fleet, store, tuple(plans), cancel, self.sweep_bridge)
        return cancel

    @work(thread=True, exclusive=True, exit_on_error=False, group=ENGINE)
    def fleet_sweep_worker(self, fleet: Fleet, store: Store, plans: tuple[SweepSpec, ...], cancel: FleetCancel,
                           bridge: EventBridge) -> None:
        try:
            result = fleet.sweep(plans, store=store, on_event=bridge, cancel=cancel.event)
        except BaseException as exc:  # noqa: BLE001 - shown in the app
            self.post_message(EngineFailed("fleet sweep", exc))
            return
        self.post_message(FleetSweepDone(result))

    def on_fleet_sweep_done(self, message: FleetSweepDone) -> None:
        result = message.result
        line = fleet_result_line(result)
        self._engine_idle(line)  # quitting repeats how it ended
        status = str(getattr(result, "status", "finished"))
        if isinstance(self.sweep_tracker, FleetSweepTracker):
            self.sweep_tracker.finish(status, line)
            self.sweep_view = self.sweep_tracker.view()
        self.fleet_changed()
        if not self._quitting:
            self.notify(line, title="Fleet sweep " + status)


def fleet_result_line(result: FleetSweepResult) -> str:
    """A FleetSweepResult in one line: its status, each sweep's points, what was retried."""
    sweeps = getattr(result, "sweeps", ())
    parts = [f"sweep {s.sweep_id} {s.model}/{s.task} {s.status} {s.points}/{s.total}"
             + (f" ({s.retries} retried)" if s.retries else "") for s in sweeps]
    wall = getattr(result, "wall_s", None)
    head = f"fleet sweep {result.status}" + (f" in {wall:.0f} s" if isinstance(wall, (int, float)) else "")
    return head + (": " + "; ".join(parts) if parts else "")
