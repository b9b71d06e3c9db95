"""Messages the app's workers post to the UI thread.

Workers never touch widgets: they post one of these and the app (on the UI thread)
updates the pages. Step events are coalesced: `RunProgress` carries no payload and is
posted again only once the UI has taken the last one (see tui.bridge).
"""

from __future__ import annotations

from typing import Any

from textual.message import Message

from engine.device.snapshot import DeviceSnapshot


class SnapshotTaken(Message):
    """A fresh reading of the device, taken in the poll worker."""

    def __init__(self, snapshot: DeviceSnapshot) -> None:
        super().__init__()
        self.snapshot = snapshot


class PollFailed(Message):
    """The poll worker could not read the device at all."""

    def __init__(self, error: str) -> None:
        super().__init__()
        self.error = error


class RunProgress(Message):
    """The run tracker has news: take a view of it."""


class SelectorPreviewed(Message):
    """What the selector would choose for the spec about to run (figures predicted)."""

    def __init__(self, preview: Any) -> None:
        super().__init__()
        self.preview = preview


class ExperimentDone(Message):
    """run_experiment returned (finished or cancelled)."""

    def __init__(self, result: Any) -> None:
        super().__init__()
        self.result = result


class EngineFailed(Message):
    """A worker's engine call raised: shown in the app, never a crash to the shell."""

    def __init__(self, what: str, error: BaseException) -> None:
        super().__init__()
        self.what = what  # "experiment" | "sweep" | "selector training" | ...
        self.error = error


class SweepProgress(Message):
    """The sweep tracker has news: take a view of it."""


class SweepDone(Message):
    def __init__(self, result: Any) -> None:
        super().__init__()
        self.result = result


class TwinCalibrated(Message):
    """The twin's profile was fitted to measured sweeps (an engine.run.calibrate.CalibrateResult)."""

    def __init__(self, result: object) -> None:
        super().__init__()
        self.result = result


class SelectorTrained(Message):
    def __init__(self, path: str, winner: str, rows: int, source: str, basis: str = "") -> None:
        super().__init__()
        self.path = path
        self.winner = winner
        self.rows = rows
        self.source = source
        self.basis = basis  # what it rests on (engine.selector.basis.DataBasis.line)


class FleetConnected(Message):
    """engine.run.fleet.connect returned: the app holds (and closes at exit) this Fleet."""

    def __init__(self, fleet: Any, where: str) -> None:
        super().__init__()
        self.fleet = fleet
        self.where = where


class FleetConnectFailed(Message):
    def __init__(self, where: str, error: str) -> None:
        super().__init__()
        self.where = where
        self.error = error


class FleetClosed(Message):
    """The Fleet page's disconnect closed the fleet the app had connected to (a local fleet's Ray stopped)."""

    def __init__(self, where: str, error: str = "") -> None:
        super().__init__()
        self.where = where
        self.error = error


class FleetPolled(Message):
    """One `Fleet.boards()` answer (a tuple of engine.run.fleet BoardInfo), or the error that stopped it."""

    def __init__(self, boards: tuple[Any, ...], error: str = "") -> None:
        super().__init__()
        self.boards = boards
        self.error = error


class FleetSweepDone(Message):
    """Fleet.sweep returned (finished or cancelled): an engine.run.fleet FleetSweepResult."""

    def __init__(self, result: Any) -> None:
        super().__init__()
        self.result = result
