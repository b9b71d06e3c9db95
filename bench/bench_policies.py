"""Policies on the digital twin: what the oracle and the online policy save against MAXN Mode 0.

For every zoo model on two GLUE tasks (sst2, mnli by default), on the twin, in simulate
mode (the workload's step trace advances the twin; nothing is trained):
- oracle: a fast sweep of the workload (GPU space, MAXN included), then a run at its
  optimum; its saving against a MAXN run of the same length;
- online: a run that profiles GPU clocks during its first steps, its profiling included
  in its energy; its saving against the same MAXN run;
- regret: how much more energy the online run used than the oracle's run.
Prints one JSON object: per workload, and the means. Every figure is `twin`.

    .venv/bin/python bench/bench_policies.py [--steps 200] [--tasks sst2,mnli] [--models bert-tiny,...]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def bench_workload(model: str, task: str, steps: int, store, session, rails: str = "all") -> dict:
    from engine.results.compare import optimum_vs_maxn
    from engine.run.experiment import ExperimentSpec, run_experiment
    from engine.workload.resolve import resolve_workload
    from engine.workload.spec import WorkloadSpec
    from engine.workload.trace.loop import TWIN_LOOP  # the twin computes: the published runs' loop
    from engine.run.sweep import SweepSpec, run_sweep

    asked = WorkloadSpec(model, task, padding="max_length", loop=TWIN_LOOP)  # every batch at the maximum length
    workload = resolve_workload(asked)
    twin = session.profile_name
    sweep = run_sweep(SweepSpec(asked, fast=True, twin=twin, rails=rails), store=store, session=session,
                      workload=workload)
    common = dict(workload=asked, twin=twin, simulate=True, steps=steps, compare="maxn", reuse_baseline=True,
                  rails=rails)
    oracle = run_experiment(ExperimentSpec(policy="oracle", **common), store=store, session=session, workload=workload)
    online = run_experiment(ExperimentSpec(policy="online", **common), store=store, session=session, workload=workload)
    assert oracle.baseline is not None and online.baseline is not None
    assert online.baseline.run_id == oracle.baseline.run_id  # one MAXN run per workload
    sweep_saving = optimum_vs_maxn(sweep.optimum, sweep.maxn).saving_pct  # type: ignore[union-attr]
    return {
        "model": workload.model, "task": workload.task, "batch_size": workload.batch_size,
        "seq_len": workload.seq_len, "precision": workload.precision,
        "maxn": {"energy_j": oracle.baseline.energy_j, "time_s": oracle.baseline.time_s},
        "oracle": {
            "setting": oracle.run.setting.label(),
            "sweep_saving_pct": sweep_saving,
            "saving_pct": oracle.comparison.saving_pct,
            "slowdown_pct": oracle.comparison.slowdown_pct,
        },
        "online": {
            "setting": online.run.setting.label(),
            "saving_pct": online.comparison.saving_pct,
            "slowdown_pct": online.comparison.slowdown_pct,
            "profiling_steps": online.run.detail.get("profiling_steps"),
        },
        "online_regret_pct": 100.0 * (online.run.energy_j / oracle.run.energy_j - 1.0),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=200, help="steps of each simulated run (default 200)")
    p.add_argument("--tasks", default="sst2,mnli", help="comma list of GLUE tasks (default sst2,mnli)")
    p.add_argument("--models", help="comma list of zoo models (default: the whole zoo)")
    p.add_argument("--twin", default="agx-orin-64gb", help="twin profile (default agx-orin-64gb)")
    p.add_argument("--rails", default="all", choices=("all", "gpu+cpu"),
                   help="the energy the policies minimise and are compared on (gpu+cpu: VDD_GPU_SOC + VDD_CPU_CV, "
                        "as the seed paper measured; default all)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)

    work = Path(tempfile.mkdtemp(prefix="slm-dvfs-bench-"))
    os.environ["SLM_DVFS_STATE_DIR"] = str(work / "state")  # a private twin and journal folder
    from engine.results.store import Store
    from engine.run.harness import open_session
    from engine.workload.zoo import load_zoo

    models = args.models.split(",") if args.models else list(load_zoo())
    tasks = args.tasks.split(",")
    t0 = time.perf_counter()
    rows = []
    with Store(work / "bench.sqlite") as store, open_session(twin=args.twin) as session:
        for model in models:
            for task in tasks:
                rows.append(bench_workload(model, task, args.steps, store, session, args.rails))
                print(f"{model}/{task}: oracle {rows[-1]['oracle']['saving_pct']:+.1f}%, online "
                      f"{rows[-1]['online']['saving_pct']:+.1f}%", file=sys.stderr)
    out = {
        "source": "twin",
        "simulated": True,
        "twin": args.twin,
        "steps": args.steps,
        "rails": args.rails,
        "workloads": rows,
        "means": {
            "oracle_saving_pct": statistics.fmean(r["oracle"]["saving_pct"] for r in rows),
            "online_saving_pct": statistics.fmean(r["online"]["saving_pct"] for r in rows),
            "online_regret_pct": statistics.fmean(r["online_regret_pct"] for r in rows),
            "oracle_slowdown_pct": statistics.fmean(r["oracle"]["slowdown_pct"] for r in rows),
            "online_slowdown_pct": statistics.fmean(r["online"]["slowdown_pct"] for r in rows),
        },
        "host_wall_s": {"value": time.perf_counter() - t0, "source": "measured"},
    }
    json.dump(out, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
