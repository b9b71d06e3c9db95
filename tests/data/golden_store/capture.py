# Made by make.sh beside it (with the code of main at 4f4911d).
"""What today's code (main at 4f4911d) finds in the golden store: written beside it as JSON."""
import json, sys
from engine.results.store import Store
from engine.results.baseline import find_baseline
from engine.results.compare import fitting_baselines
from engine.results.sweeps import stored_points
from engine.selector.training import store_dataset

out = {"workloads": {}, "runs": {}, "comparisons": {}, "sweeps": {}, "oracle_points": {}, "datasets": {}}
with Store(sys.argv[1], create=False) as store:
    for wid, in store._query("SELECT id FROM workloads ORDER BY id"):
        w = store.get_workload(wid)
        out["workloads"][str(wid)] = {"key": w.key, "label": w.label}
    for r in store.list_runs(limit=None):
        b = find_baseline(store, r)
        out["runs"][str(r.id)] = {"baseline": None if b is None else b.id,
                                  "fitting": [f.id for f in fitting_baselines(store, r)],
                                  "workload_key": r.workload.key}
    for c in store._query("SELECT id, run_id, baseline_run_id FROM comparisons ORDER BY id"):
        cmp_ = store.compare_runs(c[1], c[2], record=False)
        out["comparisons"][str(c[0])] = {"run": c[1], "baseline": c[2], "saving_pct": cmp_.saving_pct,
                                         "slowdown_pct": cmp_.slowdown_pct}
    for s in store.list_sweeps():
        out["sweeps"][str(s.id)] = {"workload_id": s.workload_id, "device_id": s.device_id, "status": s.status,
                                    "points": len(store.sweep_points(s.id)), "space": dict(s.space)}
        for rails in ("all", "gpu+cpu"):
            pts = stored_points(store, s.device_id, s.workload_id, source=s.source, rails=rails)
            out["oracle_points"][f"{s.device_id}/{s.workload_id}/{s.source.value}/{rails}"] = len(pts)
    for source, rails in (("twin", "all"), ("measured", "gpu+cpu")):
        ds = store_dataset(store, source=source, rails=rails)
        out["datasets"][f"{source}/{rails}"] = sorted(w.key for w in ds.workloads)
json.dump(out, open(sys.argv[2], "w"), indent=1, sort_keys=True)
