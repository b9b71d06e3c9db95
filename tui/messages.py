"""The app's messages: what its workers post to the UI thread, and what its pages ask of it.

Workers never touch widgets: they post one of these and the app (on the UI thread) updates its
state, which the pages bind to (tui.state). Step events are coalesced: `RunProgress` carries no
payload and is posted again only once the UI has taken the last one (see tui.bridge).

Pages never call the app either: what the user asks for on a page (start, open, connect...) goes
up as one of the requests at the end of this module, which the app handles with `@on`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from textual.message import Message

from engine.device.snapshot import DeviceSnapshot
from tui.forms import SetupValues

if TYPE_CHECKING:  # the engine's run pipeline loads when a run starts, not with the app
    from engine.run.calibrate import CalibrateResult
    from engine.run.experiment import ExperimentResult
    from engine.run.fleet import BoardInfo, Fleet, FleetSweepResult
    from engine.run.sweep import SweepResult
    from tui.selection import SelectorPreview


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

    def __init__(self, preview: SelectorPreview) -> None:
        super().__init__()
        self.preview = preview


class ExperimentDone(Message):
    """run_experiment returned (finished or cancelled)."""

    def __init__(self, result: ExperimentResult) -> None:
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
    def __init__(self, result: SweepResult) -> None:
        super().__init__()
        self.result = result


class TwinCalibrated(Message):
    """The twin's profile was fitted to measured sweeps."""

    def __init__(self, result: CalibrateResult) -> None:
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

    def __init__(self, fleet: Fleet, where: str) -> None:
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
    """One `Fleet.boards()` answer, or the error that stopped it."""

    def __init__(self, boards: tuple[BoardInfo, ...], error: str = "") -> None:
        super().__init__()
        self.boards = boards
        self.error = error


class FleetSweepDone(Message):
    """Fleet.sweep returned (finished or cancelled)."""

    def __init__(self, result: FleetSweepResult) -> None:
        super().__init__()
        self.result = result


# ---------------------------------------------------------------------- what the pages ask of the app
@dataclass
class SetupChanged(Message):
    """Setup's form changed, or the page was shown (its policy's needs are looked up again)."""

    values: SetupValues


@dataclass
class ExperimentRequested(Message):
    """Setup's `s`: start the experiment the form describes (its fields all check)."""

    values: SetupValues


@dataclass
class PreviewRequested(Message):
    """Setup's `p`: ask the selector what it would choose for the form's workload."""

    values: SetupValues


@dataclass
class SweepRequested(Message):
    """The Sweep page's `s` (here) or `f` (on the connected fleet): the form's values (SweepScreen.values)."""

    values: dict[str, Any]
    on_fleet: bool = False


@dataclass
class SelectorTrainingRequested(Message):
    """The Sweep page's `t`: train the selector on this store's sweeps."""


@dataclass
class CalibrationRequested(Message):
    """The Sweep page's `c`: calibrate the twin to this store's measured sweeps."""


@dataclass
class RecordsRequested(Message):
    """History was shown, or its `r`: read the store's runs and sweeps again (their first page);
    `more` "runs" or "sweeps": the page after the rows of that table already read."""

    more: str | None = None


@dataclass
class RunHighlighted(Message):
    """History's runs table highlights this run (None: no run), for the palette's export and delete."""

    run_id: int | None


@dataclass
class RunOpenRequested(Message):
    """History's `o`/enter on a run: that run against its baseline on Compare."""

    run_id: int


@dataclass
class SweepOpenRequested(Message):
    """History's `o`/enter on a sweep: that sweep on the Sweep page."""

    sweep_id: int


@dataclass
class PairRequested(Message):
    """History's `c` on two marked runs: one against the other (a MAXN one is the baseline)."""

    first: int
    second: int


@dataclass
class ExportRequested(Message):
    """History's `e`: the run's summary and power trace as CSV."""

    run_id: int


@dataclass
class DeleteRequested(Message):
    """History's `d`: delete the run (the app asks first)."""

    run_id: int


@dataclass
class FleetConnectRequested(Message):
    """The Fleet page's `c`: connect to what its field names (an address, or `twins:N[:profile]`)."""

    target: str


@dataclass
class FleetWatched(Message):
    """The Fleet page was shown (True) or left (False): the boards are polled only while it is on
    view (a Ray call to every board each second, for a page nobody reads, otherwise)."""

    watched: bool


@dataclass
class FleetDisconnectRequested(Message):
    """The Fleet page's `d`: disconnect (a local fleet's Ray stops)."""
