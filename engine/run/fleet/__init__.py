"""A fleet of boards (or local twins) over a Ray cluster: status, and sweeps spread one per board.

    with connect(twins=3) as fleet:              # or connect("head:6379") / RAY_ADDRESS
        fleet.boards()                           # BoardInfo per board, live
        fleet.sweep([SweepPlan(WorkloadSpec("bert-tiny", "sst2"), fast=True)], store=store, on_event=print)
        fleet.run([ExperimentSpec(WorkloadSpec("bert-tiny", "sst2"), policy="online", compare="maxn", simulate=True)],
                  store=store, on_event=print)   # each experiment whole on one board, vs MAXN there

Ray is imported only when a fleet is connected (`pip install -e '.[fleet]'`): nothing else pays
for it. See docs/fleet.md.
"""

from engine.run.fleet.cluster import Fleet, connect, parse_twins
from engine.run.fleet.model import (
    BoardInfo,
    ExperimentEvent,
    ExperimentOutcome,
    FleetEvent,
    FleetRunResult,
    FleetSweepResult,
    SweepOutcome,
    SweepPlan,
)

__all__ = ["BoardInfo", "ExperimentEvent", "ExperimentOutcome", "Fleet", "FleetEvent", "FleetRunResult",
           "FleetSweepResult", "SweepOutcome", "SweepPlan", "connect", "parse_twins"]
