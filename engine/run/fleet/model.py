"""The fleet's values: what a board reports, what a sweep plan is, what the driver emits and returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, Tuple

from engine.core.jsontypes import JsonObject, JsonValue
from engine.core.provenance import Source
from engine.device.setting import DvfsSetting
from engine.results.records import DeviceRecord, WorkloadRecord
# The fleet driver's events, defined with every other event of a run (engine.run.events.Event).
from engine.run.events import ExperimentEvent as ExperimentEvent, FleetEvent as FleetEvent
from engine.run.sweep import SweepSpec

if TYPE_CHECKING:
    from engine.results.compare import RunRole
    from engine.results.store.run_import import RunBundle

# A fleet sweep is the local sweep's spec; the board it runs on supplies the device (its twin or
# its sysfs root), so a plan's `twin` / `sysfs_root` are ignored.
SweepPlan = SweepSpec

# Ray's handle of a board's BoardWorker actor. Ray types an actor's method calls only through its
# @ray.method stubs (ActorHandle.__getattr__ is typed Never), so a call through a handle is unchecked.
BoardActor = Any

# The last item of a board's stream: (engine.run.fleet.board.END, status, error).
StreamEnd = Tuple[str, str, str]

# started / done: a board's share (a chunk of a workload's points) began / ended; finished /
# cancelled: a workload's whole sweep (board "")
EVENT_KINDS = ("started", "point", "done", "finished", "retried", "board_lost", "cancelled")


@dataclass(frozen=True)
class BoardInfo:
    """One board of the fleet as its actor sees it now (a cheap snapshot)."""

    name: str  # the actor's name, e.g. "board-twin-0"
    serial: str
    module: str
    l4t: str | None
    profile: str | None  # the twin profile; None on a board
    is_twin: bool
    temps_c: Mapping[str, float] = field(default_factory=dict)
    power_w: float | None = None
    busy: bool = False
    running: str = ""  # what it runs, e.g. "bert-tiny/sst2 12/30"
    node: str = ""  # the Ray node's address

    def to_json(self) -> JsonObject:
        out: JsonObject = dict(self.__dict__)
        out["temps_c"] = dict(self.temps_c)
        return out


@dataclass(frozen=True)
class UnitPlan:
    """What a board answers for one workload before it measures: records the driver stores."""

    device: DeviceRecord
    workload: WorkloadRecord
    settings: tuple[DvfsSetting, ...]
    source: Source
    space: Mapping[str, JsonValue]  # the sweep's space key, as a local sweep of the same plan stores it


@dataclass(frozen=True)
class StreamedPoint:
    """One measured point, streamed from a board to the driver."""

    setting: DvfsSetting
    repeat: int
    time_s: float
    energy_j: float
    samples: int
    rail_energy_j: Mapping[str, float]
    avg_power_w: float | None
    peak_power_w: float | None


@dataclass(frozen=True)
class SweepOutcome:
    """One workload's sweep as the fleet left it."""

    sweep_id: int | None
    model: str
    task: str
    status: str  # finished | cancelled | failed
    points: int  # points stored (all of them, resumed ones included)
    total: int  # points the sweep has
    boards: tuple[str, ...]  # serials that measured points of it (in order)
    retries: int = 0  # shares handed back to the pool after their board was lost
    error: str = ""
    label: str = ""  # model/task, and the batch size and space where the plan names them

    @property
    def name(self) -> str:
        return self.label or f"{self.model}/{self.task}"


def plan_label(plan: SweepPlan) -> str:
    """A sweep plan as the fleet names it: `bert-tiny/sst2`, `bert-tiny/sst2 batch 8 full`."""
    w = plan.workload
    return (f"{w.model}/{w.task}" + (f" batch {w.batch_size}" if w.batch_size else "")
            + ("" if plan.space == "gpu" or plan.settings else f" {plan.space}"))


@dataclass(frozen=True)
class FleetSweepResult:
    sweeps: tuple[SweepOutcome, ...]
    per_board: Mapping[str, int]  # serial -> points it measured in this invocation
    wall_s: float
    status: str  # finished | cancelled | failed

    @property
    def complete(self) -> bool:
        return self.status == "finished"

    def to_json(self) -> JsonObject:
        return {"status": self.status, "wall_s": self.wall_s, "per_board": dict(self.per_board),
                "sweeps": [dict(s.__dict__, boards=list(s.boards)) for s in self.sweeps]}


# --------------------------------------------------------------------------- experiments (`fleet run`)
# An experiment on the fleet is the local experiment's spec; the board supplies the device.
RUN_EVENT_KINDS = ("started", "phase", "progress", "finished", "cancelled", "failed", "retried", "board_lost")


@dataclass(frozen=True)
class SelectorFiles:
    """The `ml` policy's selector as the driver resolved and checked it, sent by value (a board cannot
    see the driver's data folder): the joblib file, its sidecar and its compact form, if any."""

    name: str  # the joblib file's name, e.g. "default.joblib"
    joblib: bytes
    sidecar: bytes
    compact: bytes | None = None
    origin: str = ""  # where the driver found it


@dataclass(frozen=True)
class ExperimentPlan:
    """What a board answers for an experiment before it runs: the records its runs will carry."""

    device: DeviceRecord
    workload: WorkloadRecord
    source: Source


@dataclass(frozen=True)
class RunProgress:
    """Streamed from a board while an experiment runs: a run begins ("phase") or a few more steps are done."""

    kind: str  # "phase" | "step"
    role: RunRole
    policy: str
    step: int = 0  # steps done of `steps`
    steps: int = 0
    time_s: float = 0.0  # device time and energy of the run so far
    energy_j: float = 0.0
    source: Source | None = None


@dataclass(frozen=True)
class ExperimentRecords:
    """Streamed from a board when an experiment ends: what its own store recorded (board-local ids)."""

    bundle: RunBundle
    run_id: int | None  # the policy run
    baseline_run_id: int | None
    comparison_id: int | None
    notes: tuple[str, ...] = ()
    status: str = "finished"  # finished | cancelled | failed
    error: str = ""


@dataclass(frozen=True)
class ExperimentOutcome:
    """One experiment as the fleet left it; ids are the driver's store's."""

    index: int
    label: str
    model: str
    task: str
    batch_size: int | None
    policy: str
    objective: str
    status: str  # finished | cancelled | failed
    board: str = ""  # the serial of the board that ran it to the end ("" if none did)
    boards: tuple[str, ...] = ()  # every board that started it (a lost one, then its retry)
    retries: int = 0
    run_id: int | None = None
    baseline_run_id: int | None = None
    comparison_id: int | None = None
    source: Source | None = None
    time_s: float | None = None
    energy_j: float | None = None
    baseline_time_s: float | None = None
    baseline_energy_j: float | None = None
    saving_pct: float | None = None
    slowdown_pct: float | None = None
    notes: tuple[str, ...] = ()
    error: str = ""

    def to_json(self) -> JsonObject:
        out: JsonObject = dict(self.__dict__)
        out.update(boards=list(self.boards), notes=list(self.notes),
                   source=None if self.source is None else self.source.value)
        return out


@dataclass(frozen=True)
class FleetRunResult:
    experiments: tuple[ExperimentOutcome, ...]
    per_board: Mapping[str, int]  # serial -> experiments it ran to the end in this invocation
    wall_s: float
    status: str  # finished | cancelled | failed

    @property
    def complete(self) -> bool:
        return self.status == "finished"

    def to_json(self) -> JsonObject:
        return {"status": self.status, "wall_s": self.wall_s, "per_board": dict(self.per_board),
                "experiments": [e.to_json() for e in self.experiments]}
