"""Does a store's cost stay independent of its size? `runs`, `show`, `export` and the History page's
query, on a small store and on a large one (~200 MB: 10k runs, 1k sweeps, 1M power samples).

Both stores are built through the store's own bulk paths, the ones the product uses: `import_runs`
(a fleet board's runs, one transaction each bundle) and `add_finished_sweeps` (`import-sweep`).
Each command runs in this process through `engine.cli.main`, as a user's `slm-dvfs runs --db F`
does (opening the store, reading, printing to a discarded stdout); the History page's query is
what the TUI's History page runs (`engine.results.history.history_page` on a store just opened).
Rounds alternate small and large, in a rotated order, so drifting load on a shared host hits both
alike; a figure is the median CPU time (process_time) over rounds, and `*_ratio` is the large
store's median over the small's. The aim (issue 24): every ratio at most 1.5.

    .venv/bin/python bench/bench_store.py [--reps 9] [--runs 10000] [--sweeps 1000] [--samples 1000000]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine.core.provenance import Source  # noqa: E402
from engine.device.power import PowerSample  # noqa: E402
from engine.results.records import DeviceRecord, RunRecord, SweepPoint, WorkloadRecord  # noqa: E402
from engine.results.store import Store  # noqa: E402
from engine.results.store.run_import import RunBundle  # noqa: E402
from engine.results.store.sweep_tables import FinishedSweep  # noqa: E402

AIM = 1.5
RAILS = ("VDD_GPU_SOC", "VDD_CPU_CV", "VIN_SYS_5V0", "VDDQ_VDD2_1V8AO", "VDD_SOC", "VDD_CV")
DEVICE = DeviceRecord("bench twin", "P3701-0005 (AGX Orin 64GB)", "36.4.0", "6.1", "agx-orin-64gb", True)
WORKLOADS = tuple(WorkloadRecord(model=m, task=t, batch_size=16, seq_len=128, precision="fp32", source=Source.TWIN)
                  for m in ("bert-tiny", "bert-mini", "pythia-70m") for t in ("sst2", "mrpc"))
BUNDLE = 500  # runs a transaction


def build(path: Path, runs: int, sweeps: int, samples: int) -> dict[str, float]:
    """A store of `runs` runs (their `samples` power samples spread evenly) and `sweeps` sweeps of 20
    points; returns its size and how long it took."""
    t0 = time.perf_counter()
    per_run = max(1, samples // max(1, runs))
    with Store(path) as store:
        wl_ids = [store.ensure_workload(w) for w in WORKLOADS]
        for start in range(0, runs, BUNDLE):
            recs, traces = [], {}
            for i in range(start, min(runs, start + BUNDLE)):
                policy = "maxn" if i % 2 == 0 else "static"
                recs.append(RunRecord(
                    id=i + 1, policy=policy, status="finished", source=Source.TWIN, started_at="2026-01-01T00:00:00",
                    finished_at="2026-01-01T00:01:00", device=DEVICE, workload=WORKLOADS[i % len(WORKLOADS)],
                    setting={"gpu_hz": 816_000_000, "nvpmodel_id": 0} if policy == "static" else None, seed=0,
                    steps=100, samples=1600, time_s=60.0, energy_j=900.0 + i % 97, wall_s=61.0, rails="gpu+cpu",
                    rail_energy_j={r: 200.0 for r in RAILS}, avg_power_w=15.0, samples_per_s=26.7,
                    joules_per_sample=0.56, simulated=True))
                traces[i + 1] = tuple(PowerSample(k * 0.6, {r: 4000.0 + 10 * ((k + j) % 13) for j, r in enumerate(RAILS)})
                                      for k in range(per_run))
            store.import_runs(RunBundle(tuple(recs), traces))
        gpu = (306_000_000, 408_000_000, 510_000_000, 612_000_000, 714_000_000, 816_000_000, 918_000_000,
               1_020_000_000, 1_122_000_000, 1_224_000_000)
        for start in range(0, sweeps, 100):
            batch = [FinishedSweep(
                workload=wl_ids[s % len(wl_ids)], space={"space": "gpu", "n": s}, repeats=2, source=Source.TWIN,
                points=tuple(SweepPoint(sweep_id=0, setting={"gpu_hz": g, "nvpmodel_id": 0}, repeat=r,
                                        time_s=10.0 + k, energy_j=100.0 + k, samples=320,
                                        rail_energy_j={x: 25.0 for x in RAILS})
                             for k, g in enumerate(gpu) for r in range(2)))
                for s in range(start, min(sweeps, start + 100))]
            store.add_finished_sweeps(DEVICE, batch)
    return {"size_mb": round(path.stat().st_size / 1e6, 1), "build_s": round(time.perf_counter() - t0, 1)}


def cpu_of(fn: Callable[[], object]) -> float:
    t0 = time.process_time()
    with contextlib.redirect_stdout(io.StringIO()):
        fn()
    return time.process_time() - t0


def commands(db: Path, out: Path, runs: int) -> dict[str, Callable[[], object]]:
    from engine.cli import main

    mid = str(max(1, runs // 2))  # a run in the middle of the file, as an older run a user looks up

    def history() -> None:
        with Store(db) as store:
            try:
                from engine.results.history import history_page
            except ImportError:  # a checkout before issue 24 (a baseline): its History read all of this
                store.list_runs(limit=500)
                stored = store.stored_point_counts()
                for s in store.list_sweeps():
                    store.get_workload(s.workload_id)
                    stored.get(s.id, 0)
                return
            history_page(store)

    def run(argv: list[str]) -> Callable[[], None]:
        def go() -> None:
            if main(argv) != 0:
                raise SystemExit(f"slm-dvfs {' '.join(argv)} failed")
        return go

    return {"runs": run(["runs", "--db", str(db)]), "show": run(["show", mid, "--db", str(db)]),
            "export": run(["export", mid, "--db", str(db), "--out", str(out)]), "history": history}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--runs", type=int, default=10_000)
    ap.add_argument("--sweeps", type=int, default=1_000)
    ap.add_argument("--samples", type=int, default=1_000_000)
    # A small store still fills a listing (`runs`' 50, a History page's 100): what is compared is what
    # a store's size adds, not the rows a fuller listing shows.
    ap.add_argument("--small-runs", type=int, default=200)
    ap.add_argument("--keep", metavar="DIR", help="build (or reuse) the stores in DIR instead of a temporary one")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-store-") as tmp:
        where = Path(args.keep) if args.keep else Path(tmp)
        where.mkdir(parents=True, exist_ok=True)
        os.environ.setdefault("SLM_DVFS_STATE_DIR", str(Path(tmp) / "state"))
        os.environ.setdefault("SLM_DVFS_DATA_DIR", str(Path(tmp) / "data"))
        small, big = where / "small.sqlite", where / "big.sqlite"
        info = {}
        for path, (r, s, n) in ((small, (args.small_runs, args.small_runs, args.small_runs * 100)),
                                (big, (args.runs, args.sweeps, args.samples))):
            info[path.stem] = build(path, r, s, n) if not path.exists() else {"size_mb": round(path.stat().st_size / 1e6, 1)}
        cmds = {"small": commands(small, Path(tmp) / "small.csv", args.small_runs),
                "big": commands(big, Path(tmp) / "big.csv", args.runs)}
        for which in cmds.values():  # imports and first-use caches, untimed
            for fn in which.values():
                cpu_of(fn)
        times: dict[str, dict[str, list[float]]] = {k: {c: [] for c in cmds[k]} for k in cmds}
        for rep in range(args.reps):
            order = ["small", "big"] if rep % 2 == 0 else ["big", "small"]
            for name in cmds["small"]:
                for which in order:
                    times[which][name].append(cpu_of(cmds[which][name]))
    result: dict[str, object] = {"stores": info, "reps": args.reps, "aim": AIM}
    for name in cmds["small"]:
        s_med, b_med = statistics.median(times["small"][name]), statistics.median(times["big"][name])
        pairs = sorted(b / s for b, s in zip(times["big"][name], times["small"][name]) if s > 0)
        result[f"{name}_small_cpu_ms"] = round(s_med * 1e3, 2)
        result[f"{name}_big_cpu_ms"] = round(b_med * 1e3, 2)
        result[f"{name}_ratio"] = round(b_med / s_med, 3) if s_med > 0 else None
        result[f"{name}_pair_ratio_range"] = [round(pairs[0], 3), round(pairs[-1], 3)] if pairs else None
    result["all_within_aim"] = all(isinstance(result[f"{n}_ratio"], float) and result[f"{n}_ratio"] <= AIM
                                   for n in cmds["small"])
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
