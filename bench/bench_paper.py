"""The seed paper's experiments on the twin: oracle and ml against MAXN Mode 0 (arXiv 2607.05933).

    .venv/bin/python bench/bench_paper.py [--quick] [--tasks sst2,cola,...] [--selector FILE]

The paper fine-tuned BERT (tiny, mini, small, medium, base-uncased) and Pythia (14m, 31m, 70m,
160m, 410m) on GLUE tasks on an AGX Orin in a Hugging Face Trainer-style loop, measured energy
over VDD_GPU_SOC + VDD_CPU_CV, found the energy-optimal GPU clock between 612 and 1020 MHz in all
77 experiments, and saved 13.11% on average, up to 26.73%, against MAXN Mode 0 by choosing it
with ML. Here each of those models on each task (sst2, cola, mrpc, qnli, rte, mnli, qqp;
--quick: sst2, rte) is a WorkloadSpec with the defaults: the zoo entry's batch size, length and
precision (profiles/models.toml; the paper's own batch sizes are not in shared/spec, so the zoo's
stand in), dynamic padding over the task's published length distribution and the hf loop
(engine/workload/trace/loop.py). For each workload:

- the twin's fast sweep (engine.device.twin.fast.fast_points) over the profile's gpu space
  (engine.selector.dataset.profile_settings: MAXN and every pinned GPU clock), energy over the
  paper's rails and over every rail;
- oracle: the sweep's minimum-energy pinned setting (per rail set);
- ml: the shipped (or --selector) selector's choice for the workload (Selector.choose on the
  workload's features, no probes, as bench/bench_selector.py calls it), costed by the sweep.

Per policy: mean and max saving and mean and max slowdown against MAXN; the oracle's optimum
GPU clock per model (min and max over its tasks); ml's mean and worst regret against the oracle;
beside the paper's figures. `done_when` holds issue 22's checks as booleans; two of them need
shapes of their own: BERT-tiny at batch 32, length 128, fp32, max_length padding (time per
sample from 306 to 1300.5 MHz) and a RoBERTa-large shape (24 x 1024, batch 16, length 256,
fp32): MAXN against the 1300.5 MHz pin. Note: ml here is the shipped selector, which was trained
on the zoo (these models included); its leave-one-family-out regret is bench/bench_selector.py's.
The selector chooses for the energy of every rail (the zoo it learns from is costed so), so the regret
checks of `done_when` use every rail; the paper's-rails regret is reported beside it.

Sweeps are `twin`, ml's choices `predicted` (costed by the twin), the paper's figures `published`.

    saving = 1 - E / E_maxn     slowdown = T / T_maxn - 1     regret = E_ml / E_oracle - 1
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Sequence

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.core.provenance import Source
from engine.device.setting import MAXN, DvfsSetting
from engine.device.twin.fast import FastPoint, fast_points
from engine.device.twin.profile import TwinProfile, load_profile
from engine.dvfs.objectives import Objective
from engine.selector.dataset import profile_settings
from engine.selector.features import features_of
from engine.selector.persistence import load_selector
from engine.workload.resolve import resolve_workload
from engine.workload.spec import WorkloadSpec
from engine.workload.trace.loop import TWIN_LOOP  # the twin computes: the published runs' loop

MODELS = ("bert-tiny", "bert-mini", "bert-small", "bert-medium", "bert-base-uncased",
          "pythia-14m", "pythia-31m", "pythia-70m", "pythia-160m", "pythia-410m")
TASKS = ("sst2", "cola", "mrpc", "qnli", "rte", "mnli", "qqp")
QUICK_TASKS = ("sst2", "rte")
PAPER_RAILS = ("VDD_GPU_SOC", "VDD_CPU_CV")  # what the paper measured (the `gpu+cpu` preset)
PAPER = {"source": "published", "ref": "arXiv 2607.05933",
         "ml_mean_saving_pct": 13.11, "ml_max_saving_pct": 26.73, "optimum_gpu_mhz": [612.0, 1020.0],
         "experiments": 77}
OPTIMUM_RANGE_HZ = (612_000_000, 1_020_000_000)
ROBERTA_LARGE = {"model_type": "roberta", "vocab_size": 50265, "hidden_size": 1024, "num_hidden_layers": 24,
                 "num_attention_heads": 16, "intermediate_size": 4096, "max_position_embeddings": 514,
                 "type_vocab_size": 1, "hidden_act": "gelu", "layer_norm_eps": 1e-5, "pad_token_id": 1,
                 "bos_token_id": 0, "eos_token_id": 2}


def _energy(p: FastPoint, rails: Sequence[str] | None) -> float:
    """Joules per sample over `rails` (None: every rail)."""
    names = p.rail_energy_j if rails is None else rails
    return sum(p.rail_energy_j[r] for r in names) / p.measurement.samples


def _policies(points: list[FastPoint], ml: DvfsSetting, rails: Sequence[str] | None) -> dict[str, Any]:
    by = {p.setting: p for p in points}
    maxn = by[MAXN]
    pinned = [p for p in points if p.setting != MAXN]
    oracle = min(pinned, key=lambda p: _energy(p, rails))
    e_maxn, t_maxn = _energy(maxn, rails), maxn.measurement.seconds_per_sample

    def row(p: FastPoint) -> dict[str, Any]:
        return {"setting": p.setting.label(), "gpu_mhz": p.gpu_hz / 1e6,
                "saving": 1 - _energy(p, rails) / e_maxn,
                "slowdown": p.measurement.seconds_per_sample / t_maxn - 1}

    return {"maxn": {"j_per_sample": e_maxn, "s_per_sample": t_maxn, "gpu_mhz": maxn.gpu_hz / 1e6},
            "oracle": row(oracle), "ml": row(by[ml]),
            "ml_regret": _energy(by[ml], rails) / _energy(oracle, rails) - 1,
            "top_pin_saving": 1 - _energy(max(pinned, key=lambda p: p.gpu_hz), rails) / e_maxn}


def curve_checks(points: list[FastPoint], rails: Sequence[str] | None) -> dict[str, Any]:
    """One energy minimum over the pinned GPU clocks, and a time per sample that never rises with the clock."""
    pinned = sorted((p for p in points if p.setting != MAXN), key=lambda p: p.gpu_hz)
    e = [_energy(p, rails) for p in pinned]
    t = [p.measurement.seconds_per_sample for p in pinned]
    minima = sum(1 for i in range(len(e)) if (i == 0 or e[i] < e[i - 1]) and (i == len(e) - 1 or e[i] < e[i + 1]))
    return {"minima": minima, "time_monotone": all(b <= a for a, b in zip(t, t[1:]))}


def workload_row(model: str, task: str, profile: TwinProfile, settings: Sequence[DvfsSetting],
                 selector: Any) -> dict[str, Any]:
    workload = resolve_workload(WorkloadSpec(model, task, loop=TWIN_LOOP))
    points = fast_points(workload.steps, profile, settings)
    choice = selector.choose(features_of(workload), Objective(), as_source=Source.TWIN)
    return {"model": workload.model, "task": workload.task, "batch_size": workload.batch_size,
            "seq_len": workload.seq_len, "precision": workload.precision, "padding": workload.padding,
            "loop": workload.spec.loop, "ml_setting": choice.setting.label(),
            "paper_rails": _policies(points, choice.setting, PAPER_RAILS),
            "all_rails": _policies(points, choice.setting, None),
            "curve": curve_checks(points, PAPER_RAILS)}


def summarise(rows: list[dict[str, Any]], rails: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for policy in ("oracle", "ml"):
        s = [100 * r[rails][policy]["saving"] for r in rows]
        d = [100 * r[rails][policy]["slowdown"] for r in rows]
        out[policy] = {"mean_saving_pct": statistics.fmean(s), "max_saving_pct": max(s),
                       "min_saving_pct": min(s), "mean_slowdown_pct": statistics.fmean(d),
                       "max_slowdown_pct": max(d)}
    regret = [100 * r[rails]["ml_regret"] for r in rows]
    worst = max(rows, key=lambda r: r[rails]["ml_regret"])
    out["ml_regret_pct"] = {"mean": statistics.fmean(regret), "worst": max(regret),
                            "worst_workload": f"{worst['model']}/{worst['task']}"}
    out["maxn_below_top_pin"] = sum(r[rails]["top_pin_saving"] < 0 for r in rows)
    return out


def optima(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """The oracle's optimum GPU clock per model (paper rails), over its tasks."""
    out: dict[str, dict[str, float]] = {}
    for r in rows:
        mhz = r["paper_rails"]["oracle"]["gpu_mhz"]
        o = out.setdefault(r["model"], {"min_mhz": mhz, "max_mhz": mhz})
        o["min_mhz"], o["max_mhz"] = min(o["min_mhz"], mhz), max(o["max_mhz"], mhz)
    return out


def shape_checks(profile: TwinProfile, settings: Sequence[DvfsSetting]) -> dict[str, Any]:
    """BERT-tiny's flatness and the RoBERTa-large shape's MAXN against the top pin (their own shapes)."""
    tiny = resolve_workload(WorkloadSpec("bert-tiny", "sst2", batch_size=32, seq_len=128, precision="fp32",
                                         padding="max_length", loop=TWIN_LOOP))
    pts = sorted((p for p in fast_points(tiny.steps, profile, settings) if p.setting != MAXN), key=lambda p: p.gpu_hz)
    flat = pts[0].measurement.seconds_per_sample / pts[-1].measurement.seconds_per_sample
    large = resolve_workload(WorkloadSpec("roberta-large-shape", "sst2", batch_size=16, seq_len=256,
                                          precision="fp32", config=ROBERTA_LARGE, loop=TWIN_LOOP))
    by = {p.setting: p for p in fast_points(large.steps, profile, settings)}
    top = max((p for p in by.values() if p.setting != MAXN), key=lambda p: p.gpu_hz)
    return {"bert_tiny_time_ratio_306_to_top": flat,
            "roberta_large_maxn_over_top_pin": {
                "paper_rails": _energy(by[MAXN], PAPER_RAILS) / _energy(top, PAPER_RAILS),
                "all_rails": _energy(by[MAXN], None) / _energy(top, None)},
            "roberta_large_maxn_gpu_mhz": by[MAXN].gpu_hz / 1e6}


def run(tasks: Sequence[str], selector_path: str | None, twin: str) -> dict[str, Any]:
    t0 = time.perf_counter()
    selector = load_selector(selector_path)
    profile = load_profile(twin)
    settings = list(dict.fromkeys([*profile_settings(profile, "gpu"), *selector.candidates]))
    rows = []
    for model in MODELS:
        for task in tasks:
            rows.append(workload_row(model, task, profile, settings, selector))
            p = rows[-1]["paper_rails"]
            print(f"  {model}/{task}: oracle {p['oracle']['gpu_mhz']:.0f} MHz {100 * p['oracle']['saving']:+.1f}%,"
                  f" ml {p['ml']['gpu_mhz']:.0f} MHz {100 * p['ml']['saving']:+.1f}%", file=sys.stderr, flush=True)
    paper, every = summarise(rows, "paper_rails"), summarise(rows, "all_rails")
    opt = optima(rows)
    above_tiny = {m: o for m, o in opt.items() if m != "bert-tiny"}
    lo, hi = OPTIMUM_RANGE_HZ[0] / 1e6, OPTIMUM_RANGE_HZ[1] / 1e6
    shapes = shape_checks(profile, settings)
    win = next((r for r in selector.cv_table if r["label"] == selector.winner), {})
    result: dict[str, Any] = {
        "bench": "paper",
        "source": {"sweeps": Source.TWIN.value, "ml": Source.PREDICTED.value, "paper": "published"},
        "twin": profile.name,
        "selector": {"path": str(getattr(selector, "path", "")), "winner": selector.winner,
                     "cv_mean_regret": win.get("mean_regret"), "cv_worst_regret": win.get("worst_regret")},
        "workloads": len(rows), "models": list(MODELS), "tasks": list(tasks),
        "paper": PAPER,
        "paper_rails": {"rails": list(PAPER_RAILS), **paper},
        "all_rails": every,
        "oracle_optimum_gpu_mhz": opt,
        "optima_above_bert_tiny_in_612_1020": all(lo <= o["min_mhz"] and o["max_mhz"] <= hi
                                                  for o in above_tiny.values()),
        "shapes": shapes,
        "curves": {"one_minimum": all(r["curve"]["minima"] == 1 for r in rows),
                   "time_never_rises": all(r["curve"]["time_monotone"] for r in rows)},
    }
    result["done_when"] = {
        "ml_mean_saving_within_3_points": abs(paper["ml"]["mean_saving_pct"] - PAPER["ml_mean_saving_pct"]) <= 3,
        "ml_max_saving_within_5_points": abs(paper["ml"]["max_saving_pct"] - PAPER["ml_max_saving_pct"]) <= 5,
        "oracle_optima_in_612_1020_above_bert_tiny": result["optima_above_bert_tiny_in_612_1020"],
        # Regret on the energy the selector chooses for (every rail: what train-selector's zoo learns);
        # graded on the paper's two rails its choice is a compromise between objectives, not a miss.
        "ml_mean_regret_below_1pct": every["ml_regret_pct"]["mean"] < 1,
        "ml_worst_regret_below_3pct": every["ml_regret_pct"]["worst"] < 3,
        "one_energy_minimum_per_curve": result["curves"]["one_minimum"],
        "time_never_rises_with_gpu_clock": result["curves"]["time_never_rises"],
        "bert_tiny_below_1_3x": shapes["bert_tiny_time_ratio_306_to_top"] < 1.3,
        "roberta_large_maxn_below_top_pin": shapes["roberta_large_maxn_over_top_pin"]["paper_rails"] < 1,
    }
    result["per_workload"] = rows
    result["wall_s"] = round(time.perf_counter() - t0, 1)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=f"tasks {','.join(QUICK_TASKS)} only")
    parser.add_argument("--tasks", help=f"comma list of GLUE tasks (default {','.join(TASKS)})")
    parser.add_argument("--selector", help="selector file (default: yours, else the shipped one)")
    parser.add_argument("--twin", default="agx-orin-64gb", help="twin profile (default agx-orin-64gb)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    tasks = args.tasks.split(",") if args.tasks else QUICK_TASKS if args.quick else TASKS
    print(json.dumps(run(tasks, args.selector, args.twin), indent=1, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
