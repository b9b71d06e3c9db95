"""What the fleet's two drivers share (`fleet sweep`: engine.run.fleet.dispatch; `fleet run`:
engine.run.fleet.runs): free boards handed jobs, each job read in a thread of the driver, its end
settled on the driver's own thread, a lost board dropped, a cancel sent to every busy board and
waited for (each stops at a step boundary and its clock guard restores its clocks)."""

from __future__ import annotations

import logging
import queue
import threading
import time
from types import ModuleType
from typing import TYPE_CHECKING, Callable, Generic, Iterable, Mapping, TypeVar

from engine.core.errors import ConfigError, one_line
from engine.run.fleet.board import END
from engine.run.fleet.model import BoardActor

if TYPE_CHECKING:
    from engine.results.records import RunStatus

log = logging.getLogger(__name__)

Unit = TypeVar("Unit")  # a driver's job: a sweep's work, an experiment
Event = TypeVar("Event")  # the driver's events: FleetEvent, ExperimentEvent
Item = TypeVar("Item")  # what a board streams (a point, an experiment's progress and records)

CANCEL_WAIT_S = 120.0  # how long cancelled boards get to stop at a step boundary, restore and report
POLL_S = 0.2


class BoardLoop(Generic[Unit, Event]):
    """The loop; a driver gives `_assign` (start jobs on free boards with `_start`) and `_settle`
    (a job's end: "finished", "cancelled", "failed" or "lost"), and `_stopped` (after a cancel).
    `boards` maps serial -> (actor, kind): boards of one kind stand in for one another."""

    def __init__(self, ray: ModuleType, boards: Mapping[str, tuple[BoardActor, str]], *,
                 on_event: Callable[[Event], None] | None,
                 cancel: threading.Event | None, lost: Callable[[str], None]) -> None:
        self.ray = ray
        self.boards = dict(boards)
        self.on_event = on_event
        self.cancel = cancel or threading.Event()
        self.lost = lost
        self._lock = threading.RLock()  # the store's writes, the jobs' state, events
        self._done: queue.Queue[tuple[str, Unit, str, str] | None] = queue.Queue()  # (serial, unit, outcome, error)
        self._active: dict[str, tuple[Unit, threading.Thread]] = {}

    # ------------------------------------------------------------------ what a driver gives
    def _assign(self) -> None:
        raise NotImplementedError

    def _settle(self, serial: str, unit: Unit, outcome: str, error: str) -> None:
        raise NotImplementedError

    def _stopped(self, why: RunStatus) -> None:
        """After a cancel: every unit still open is `why` (a stored status: "cancelled")."""

    # ------------------------------------------------------------------ the loop
    def _loop(self) -> None:
        try:
            while True:
                if self.cancel.is_set():
                    self._stop("cancelled")
                    break
                self._assign()
                if not self._active:
                    break  # nothing runs and nothing more can start
                try:
                    item = self._done.get(timeout=POLL_S)
                except queue.Empty:
                    continue
                if item is not None:  # None: a nudge, work to hand out (a sweep's pool just opened)
                    self._end(*item)
        except KeyboardInterrupt:
            self._stop("cancelled")
            raise

    def _free(self, kind: str | None = None) -> list[str]:
        """Serials of the boards with no job (of this kind)."""
        return [s for s, (_a, k) in self.boards.items() if s not in self._active and kind in (None, k)]

    def _start(self, serial: str, unit: Unit, job: Callable[[str, Unit], None]) -> None:
        """Run `job(serial, unit)` in a thread; its end is reported back with `_report`."""
        thread = threading.Thread(target=job, args=(serial, unit), name=f"fleet-{serial}", daemon=True)
        self._active[serial] = (unit, thread)
        thread.start()

    def _end(self, serial: str, unit: Unit, outcome: str, error: str) -> None:
        _unit, thread = self._active.pop(serial)
        thread.join()
        if outcome == "lost":
            self.boards.pop(serial, None)
            self.lost(serial)
        self._settle(serial, unit, outcome, error)

    def _stop(self, why: RunStatus) -> None:
        """Cancel every running job; wait for the boards to stop, restore and report."""
        self.cancel.set()
        for serial in list(self._active):
            actor, _kind = self.boards[serial]
            try:
                actor.cancel.remote()
            except Exception as exc:  # noqa: BLE001 - a dead board has nothing left to stop
                log.debug("cancel on %s: %s", serial, exc)
        deadline = time.monotonic() + CANCEL_WAIT_S
        while self._active and time.monotonic() < deadline:
            try:
                item = self._done.get(timeout=POLL_S)
            except queue.Empty:
                continue
            if item is not None:
                self._end(*item)
        self._stopped(why)

    # ------------------------------------------------------------------ in a job's thread
    def _nudge(self) -> None:
        """Have the loop hand out work now (the free boards wait for no job's end to take it)."""
        self._done.put(None)

    def _report(self, serial: str, unit: Unit, work: Callable[[], tuple[str, str]], what: str) -> None:
        """Run a job's `work` (-> (outcome, error)) and report its end; a board that is gone is "lost"."""
        from ray.exceptions import GetTimeoutError, RayActorError

        try:
            outcome, error = work()
        except RayActorError as exc:  # ActorDiedError, ActorUnavailableError: the board (or its node) is gone
            outcome, error = "lost", type(exc).__name__
        except GetTimeoutError as exc:
            outcome, error = "lost", str(exc)
        except Exception as exc:  # noqa: BLE001 - this job fails; the others go on
            log.exception("fleet: %s on %s", what, serial)
            outcome, error = "failed", one_line(exc)
        self._done.put((serial, unit, outcome, error))

    def _read(self, serial: str, actor: BoardActor, stream: Iterable[object], take: Callable[[Item], None],
              what: str) -> tuple[str, str]:
        """Hand each item of a board's stream (Ray's generator of its items' refs) to `take` until its
        (END, status, error)."""
        told = False
        for ref in stream:
            item = self.ray.get(ref)
            if self.cancel.is_set() and not told:  # a cancel sent before the board's job began found nothing to stop
                actor.cancel.remote()
                told = True
            if isinstance(item, tuple) and item and item[0] == END:
                _end, status, error = item
                return status, error
            take(item)
        raise ConfigError(f"board {serial} ended {what} without a status", "run the same command again")

    def _emit(self, event: Event) -> None:
        if self.on_event is None:
            return
        with self._lock:
            try:
                self.on_event(event)
            except Exception:  # noqa: BLE001 - a listener's bug must not lose results
                log.exception("fleet event listener failed on %s", event)


def board_kind(module: str, is_twin: bool, profile: str | None) -> str:
    """Which boards stand in for one another: one module, and boards with boards, twins of one
    profile with each other (their results' sources and figures differ)."""
    return module + (f" [twin {profile}]" if is_twin else "")
