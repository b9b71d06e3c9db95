"""How much dynamic padding changes a fine-tuning step's twin figures, task by task.

For each task, the workload (model, batch, maximum length) is resolved twice: every batch
padded to the maximum length (`--pad max`), and each batch padded to its longest example
(`--pad dynamic`, the default), whose steps are the mix of the lengths batches pad to under
the task's published length distribution (profiles/glue_lengths.toml). Both are costed on the
twin's fast path at MAXN Mode 0 and at the energy-optimal point of the `gpu` setting space; the
JSON printed gives each task's per-step time and energy and the ratios dynamic / max. Every
figure is the twin's ([twin]); the length summary is from published statistics, not measured.

    .venv/bin/python bench/bench_padding.py [--model bert-base-uncased] [--max-seq-len 128]
        [--batch-size B] [--tasks sst2,mnli,qnli]
"""

from __future__ import annotations

import argparse
from dataclasses import replace
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from engine.device.setting import MAXN  # noqa: E402
from engine.device.twin.fast import fast_sweep  # noqa: E402
from engine.device.twin.profile import load_profile  # noqa: E402
from engine.selector.dataset import profile_settings  # noqa: E402
from engine.workload.resolve import resolve_workload  # noqa: E402
from engine.workload.spec import WorkloadSpec  # noqa: E402
from engine.workload.trace.loop import TWIN_LOOP  # noqa: E402  # the twin computes: the published runs' loop


def costs(steps: object, profile: object, settings: list) -> dict[str, float]:
    """Per-step time and energy at MAXN, and the energy-optimal setting's."""
    points = fast_sweep(steps, profile, settings, steps=1)
    maxn = next(m for s, m in points if s == MAXN)
    best_setting, best = min(points, key=lambda p: p[1].energy_j)
    return {"maxn_time_s": maxn.time_s, "maxn_energy_j": maxn.energy_j,
            "optimum_energy_j": best.energy_j, "optimum_setting": best_setting.label(),
            "optimum_saving_vs_maxn_pct": 100.0 * (1.0 - best.energy_j / maxn.energy_j)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="bert-base-uncased")
    ap.add_argument("--max-seq-len", type=int, default=128)
    ap.add_argument("--batch-size", type=int, default=None, help="default: the zoo entry's")
    ap.add_argument("--tasks", default="sst2,mnli,qnli")
    ap.add_argument("--profile", default="agx-orin-64gb")
    args = ap.parse_args()
    profile = load_profile(args.profile)
    settings = list(profile_settings(profile, "gpu"))
    out: dict[str, object] = {"model": args.model, "max_seq_len": args.max_seq_len, "profile": args.profile,
                              "source": "twin", "tasks": {}}
    for task in args.tasks.split(","):
        asked = WorkloadSpec(args.model, task, batch_size=args.batch_size, seq_len=args.max_seq_len, loop=TWIN_LOOP)
        fixed = resolve_workload(replace(asked, padding="max_length"))
        dyn = resolve_workload(replace(asked, padding="dynamic"))
        a, b = costs(fixed.steps, profile, settings), costs(dyn.steps, profile, settings)
        out["batch_size"] = fixed.batch_size
        out["tasks"][task] = {  # type: ignore[index]
            "lengths [published]": dict(dyn.lengths or {}),
            "buckets": [[t.seq_len, round(w, 4)] for w, t in dyn.steps.parts],
            "max [twin]": a, "dynamic [twin]": b,
            "dynamic/max time at MAXN [twin]": b["maxn_time_s"] / a["maxn_time_s"],
            "dynamic/max energy at MAXN [twin]": b["maxn_energy_j"] / a["maxn_energy_j"],
            "dynamic/max energy at each optimum [twin]": b["optimum_energy_j"] / a["optimum_energy_j"],
        }
    print(json.dumps(out, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
