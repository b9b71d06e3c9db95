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

It also says how evenly the work was shared: each board's points and board time (the measured
time of the points it stored: what a board would spend on them), paced, and for one sweep on three
fresh unpaced twins (a new fleet each round), whose points take milliseconds, so that a board's
setup of its first share weighs most: the case where one twin used to measure most of the sweep.

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


def board_seconds(store: object, result: object) -> dict[str, float]:
    """Each board's board time in this sweep call: the measured time of the points it stored."""
    out: dict[str, float] = {}
    for outcome in result.sweeps:
        for p in store.sweep_points(outcome.sweep_id):
            serial = store.get_device(p.device_id).serial
            out[serial] = out.get(serial, 0.0) + (p.time_s or 0.0)
    return {k: round(v, 3) for k, v in sorted(out.items())}


def timed_side(fleet: object, plans: list, pace: float, rounds: int, base: Path, tag: str) -> dict:
    from engine.results.store import Store

    fleet.set_pace(pace)
    walls, spread = [], []
    for r in range(rounds):
        with Store(base / f"fleet-{tag}-{r}.sqlite") as store:
            start = time.perf_counter()
            result = fleet.sweep(plans, store=store)
            walls.append(time.perf_counter() - start)
            assert result.status == "finished", result
            seconds = board_seconds(store, result)
            spread.append({"points": dict(sorted(result.per_board.items())), "board_s": seconds,
                           "max_over_min_board_s": round(max(seconds.values()) / max(min(seconds.values()), 1e-9), 2)
                           if len(seconds) == len(fleet.serials) else None})
    return {"boards": len(fleet.serials), "pace": pace, "wall_s": round(statistics.median(walls), 3),
            "walls_s": [round(w, 3) for w in walls], "points": sum(spread[-1]["points"].values()),
            "per_round": spread}


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
        from engine.workload.resolve import resolve_workload
        from engine.workload.spec import WorkloadSpec

        plans = [SweepPlan(WorkloadSpec(m, t), fast=True, steps=args.steps) for m in MODELS for t in TASKS]
        for plan in plans:  # traced once, before either clock starts
            resolve_workload(plan.workload)
        from engine.run.fleet import connect

        with connect(twins=1, folder=base / "twins-1") as one:
            serial = timed_side(one, plans, args.pace, args.rounds, base, "1")
        with connect(twins=3, folder=base / "twins-3") as three:
            fleet = timed_side(three, plans, args.pace, args.rounds, base, "3")
        cold = []
        for r in range(args.rounds):  # one sweep on a fresh fleet of three unpaced twins
            with connect(twins=3, folder=base / f"twins-cold-{r}") as fresh:
                cold += timed_side(fresh, plans[:1], 0.0, 1, base, f"cold-{r}")["per_round"]
    print(json.dumps({
        "workloads": [f"{p.workload.model}/{p.workload.task}" for p in plans], "mode": "fast, paced", "pace": args.pace,
        "steps": args.steps, "host_cpus": os.cpu_count(), "serial": serial, "fleet": fleet,
        "ratio_fleet_over_serial": round(fleet["wall_s"] / serial["wall_s"], 3),
        "one_sweep_on_three_fresh_unpaced_twins": {"workload": f"{plans[0].workload.model}/{plans[0].workload.task}", "per_round": cold},
        "note": "each sweep's points spread over the boards in shares: 1/3 is the ideal on 3 boards; the boards "
                "are balanced by board time (bert-mini points take longer than bert-tiny ones: shares differ in "
                "points, not in time)",
    }, indent=1))


if __name__ == "__main__":
    main()
