"""A fleet of three twins against one, on the issue's workload: 2 models x 2 tasks, GPU space.

Both sides go through the same fleet path (`connect(twins=N)`, `Fleet.sweep`): the serial side is
a fleet of one twin, so the four sweeps run one after another; the fleet side has three. The
twins run in fast mode *paced* (`--pace X`): each point also waits its twin time x X in wall time,
as a point takes its own time on a board. That makes the per-point work wall time rather than CPU,
so the figure says how the fleet spreads work, not how three processes share this host's cores
(on a 2-core machine three CPU-bound workers cannot go 3x). Each side's wall time is the sweep
call alone (the Ray instance and its workers are started, and the traces cached, before the clock
starts), median of `--rounds`. The fleet spreads each sweep's points over the boards in shares
(engine.run.fleet.dispatch), so four sweeps on three boards can take a third of the time, not half
as four whole sweeps would (two rounds).

    .venv/bin/python bench/bench_fleet.py [--pace 5] [--steps 2] [--rounds 1]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

MODELS = ("bert-tiny", "bert-mini")
TASKS = ("sst2", "mrpc")


def timed_side(n: int, plans: list, pace: float, rounds: int, base: Path) -> dict:
    from engine.results.store import Store
    from engine.run.fleet import connect

    walls, points = [], 0
    with connect(twins=n, folder=base / f"twins-{n}", pace=pace) as fleet:
        for r in range(rounds):
            with Store(base / f"fleet-{n}-{r}.sqlite") as store:
                start = time.perf_counter()
                result = fleet.sweep(plans, store=store)
                walls.append(time.perf_counter() - start)
                assert result.status == "finished", result
                points = sum(result.per_board.values())
                per_board = dict(result.per_board)
    return {"boards": n, "wall_s": round(statistics.median(walls), 3), "walls_s": [round(w, 3) for w in walls],
            "points": points, "points_per_board": per_board}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pace", type=float, default=5.0, help="wall seconds per twin second of a point")
    parser.add_argument("--steps", type=int, default=2, help="measured steps per point")
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-fleet-") as tmp:
        base = Path(tmp)
        for var, name in (("SLM_DVFS_STATE_DIR", "state"), ("SLM_DVFS_DATA_DIR", "data"),
                          ("SLM_DVFS_CACHE_DIR", "cache")):
            os.environ[var] = str(base / name)
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # local instances only
        from engine.run.fleet import SweepPlan
        from engine.run.harness import resolve_for

        plans = [SweepPlan(model=m, task=t, fast=True, steps=args.steps) for m in MODELS for t in TASKS]
        for plan in plans:  # traced once, before either clock starts
            resolve_for(plan)
        serial = timed_side(1, plans, args.pace, args.rounds, base)
        fleet = timed_side(3, plans, args.pace, args.rounds, base)
    print(json.dumps({
        "workloads": [f"{p.model}/{p.task}" for p in plans], "mode": "fast, paced", "pace": args.pace,
        "steps": args.steps, "host_cpus": os.cpu_count(), "serial": serial, "fleet": fleet,
        "ratio_fleet_over_serial": round(fleet["wall_s"] / serial["wall_s"], 3),
        "note": "each sweep's points spread over the boards in shares: 1/3 is the ideal on 3 boards "
                "(bert-mini points take longer than bert-tiny ones: the shares differ in points, not in time)",
    }, indent=1))


if __name__ == "__main__":
    main()
