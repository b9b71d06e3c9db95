"""How well the selector chooses for workloads it was not trained on, on the twin.

    .venv/bin/python bench/bench_selector.py [--selector FILE] [--quick]

Held-out workloads: model shapes outside the zoo (BERT L6/H384, BERT L12/H256, Pythia
L8/H384) and zoo models at batch sizes and lengths off the training grid, over three
GLUE heads and two precisions. For each, the twin's fast sweep over the selector's
space is the truth (`twin`); the selector's choice (`predicted`) is scored against the
sweep's best setting (the oracle):

    regret = energy(chosen) / energy(oracle) - 1         saving = 1 - energy / energy(MAXN)

with 0, 1 and 3 probes (probe windows taken on the twin). Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.device.twin.profile import load_profile
from engine.dvfs.objectives import Objective
from engine.device.setting import MAXN
from engine.core.provenance import Source
from engine.selector.features import describe_workload
from engine.selector.persistence import load_selector
from engine.device.twin.fast import fast_sweep

OUT_OF_ZOO = {
    "bert-L6-H384": {"model_type": "bert", "vocab_size": 30522, "hidden_size": 384, "num_hidden_layers": 6,
                     "num_attention_heads": 6, "intermediate_size": 1536, "max_position_embeddings": 512,
                     "type_vocab_size": 2, "hidden_act": "gelu"},
    "bert-L12-H256": {"model_type": "bert", "vocab_size": 30522, "hidden_size": 256, "num_hidden_layers": 12,
                      "num_attention_heads": 4, "intermediate_size": 1024, "max_position_embeddings": 512,
                      "type_vocab_size": 2, "hidden_act": "gelu"},
    "pythia-L8-H384": {"model_type": "gpt_neox", "vocab_size": 50304, "hidden_size": 384, "num_hidden_layers": 8,
                       "num_attention_heads": 6, "intermediate_size": 1536, "max_position_embeddings": 2048,
                       "rotary_pct": 0.25, "rotary_emb_base": 10000, "use_parallel_residual": True,
                       "hidden_act": "gelu", "tie_word_embeddings": False, "layer_norm_eps": 1e-5},
}
ZOO_OFF_GRID = ("bert-mini", "bert-medium", "bert-base-uncased", "pythia-31m", "pythia-160m", "pythia-410m")


def workloads(quick: bool) -> list[tuple[str, dict[str, Any] | None, str, int, int, str]]:
    tasks = ("sst2",) if quick else ("sst2", "mnli", "stsb")
    out = []
    for name, cfg in OUT_OF_ZOO.items():
        for task in tasks:
            for b in ((16, 48) if quick else (16, 24, 48)):
                for seq in ((96,) if quick else (96, 128, 192)):
                    for p in ("fp32",) if quick else ("fp32", "fp16"):
                        out.append((name, cfg, task, b, seq, p))
    for name in ZOO_OFF_GRID[:2] if quick else ZOO_OFF_GRID:
        for b, seq in ((24, 96), (48, 192)):
            for p in ("fp32", "fp16"):
                out.append((name, None, "sst2", b, seq, p))
    return out


def _summary(vals: list[float]) -> dict[str, float]:
    return {"mean": statistics.fmean(vals), "worst": max(vals)}


def run(selector_path: str | None, quick: bool) -> dict[str, Any]:
    selector = load_selector(selector_path)
    profile = load_profile(selector.encoder.profile or "agx-orin-64gb")
    objective = Objective()
    rows: dict[int, list[dict[str, float]]] = {0: [], 1: [], 3: []}
    errors: dict[str, list[float]] = {"time": [], "power": [], "energy": []}
    t0 = time.perf_counter()
    cases = workloads(quick)
    for name, cfg, task, b, seq, prec in cases:
        w, trace = describe_workload(name, task, batch_size=b, seq_len=seq, precision=prec, config=cfg)
        truth = dict(fast_sweep(trace, profile, selector.candidates))
        oracle_e = min(m.joules_per_sample for m in truth.values())
        maxn_e = truth[MAXN].joules_per_sample
        for p in selector.predict(w, as_source=Source.TWIN):
            m = truth[p.setting]
            errors["time"].append(abs(p.time_per_sample / m.seconds_per_sample - 1))
            errors["power"].append(abs(p.power_w / m.avg_power_w - 1))
            errors["energy"].append(abs(p.energy_per_sample / m.joules_per_sample - 1))
        for k in rows:
            choice = selector.choose(w, objective, probes=k, measure=truth.__getitem__, as_source=Source.TWIN)
            e = truth[choice.setting].joules_per_sample
            rows[k].append({"regret": e / oracle_e - 1, "saving": 1 - e / maxn_e, "oracle_saving": 1 - oracle_e / maxn_e,
                            "workload": f"{w.key} (chose {choice.setting.label()})"})
    result: dict[str, Any] = {
        "bench": "selector",
        "source": {"truth": Source.TWIN.value, "choices": Source.PREDICTED.value,
                   "probes": Source.TWIN.value},
        "selector": {"path": str(getattr(selector, "path", "")), "winner": selector.winner,
                     "trained_on": selector.source, "training_rows": selector.training.get("rows"),
                     "cv_mean_regret": next((r["mean_regret"] for r in selector.cv_table
                                             if r["label"] == selector.winner), None),
                     "cv_worst_regret": next((r["worst_regret"] for r in selector.cv_table
                                              if r["label"] == selector.winner), None)},
        "objective": objective.spec,
        "workloads": len(cases),
        "held_out_models": sorted(OUT_OF_ZOO) + [f"{m} (off-grid batch/length)" for m in
                                                 (ZOO_OFF_GRID[:2] if quick else ZOO_OFF_GRID)],
        "mape": {k: statistics.fmean(v) for k, v in errors.items()},
    }
    for k, vals in rows.items():
        result[f"probes_{k}"] = {
            "regret": _summary([v["regret"] for v in vals]),
            "mean_saving_vs_maxn": statistics.fmean(v["saving"] for v in vals),
            "oracle_mean_saving_vs_maxn": statistics.fmean(v["oracle_saving"] for v in vals),
            "within_2pct": sum(v["regret"] <= 0.02 for v in vals) / len(vals),
            "worst_workload": max(vals, key=lambda v: v["regret"])["workload"],
        }
    result["wall_s"] = round(time.perf_counter() - t0, 1)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--selector", help="selector file (default: yours, else the shipped one)")
    parser.add_argument("--quick", action="store_true", help="fewer held-out workloads")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    print(json.dumps(run(args.selector, args.quick), indent=2, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
