"""A fleet of boards (or local twins) over a Ray cluster: status, and sweeps spread one per board.

    with connect(twins=3) as fleet:              # or connect("head:6379") / RAY_ADDRESS
        fleet.boards()                           # BoardInfo per board, live
        fleet.sweep([SweepPlan("bert-tiny", "sst2", fast=True)], store=store, on_event=print)

Ray is imported only when a fleet is connected (`pip install -e '.[fleet]'`): nothing else pays
for it. See docs/fleet.md.
"""

from engine.run.fleet.cluster import Fleet, connect, parse_twins
from engine.run.fleet.model import BoardInfo, FleetEvent, FleetSweepResult, SweepOutcome, SweepPlan

__all__ = ["BoardInfo", "Fleet", "FleetEvent", "FleetSweepResult", "SweepOutcome", "SweepPlan", "connect",
           "parse_twins"]
