"""Transfer on synthetic truth: does adapting the shipped selector with k measured sweeps choose
better on a board whose twin is off?

    .venv/bin/python bench/bench_transfer.py [--selector FILE] [--quick] [--draws N]

The "board" is the shipped twin profile with parameters moved within their bounds
(engine.device.twin.params.with_params; PERTURBATION below): its fast sweeps are the truth,
labelled **synthetic measured** (no board was measured). For each family of FAMILIES, k = 1, 2
and 4 of its workloads (drawn at random, `--draws` times) are the "measured sweeps" the selector
is adapted with (`engine.selector.transfer.transfer_selector`); the family's other workloads are
held out, and both the shipped selector and the transferred one choose for them (and for every
workload of the other families, which no measured sweep was of):

    regret = energy_truth(chosen) / energy_truth(oracle of the truth) - 1
    saving error = predicted saving vs MAXN - true saving vs MAXN of the chosen setting

Figures: truth synthetic measured (a perturbed twin), choices and savings predicted. One JSON
object on stdout. The traces come from the trace cache (the shipped selector's training traced
every zoo workload); --quick takes one family and one draw.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.core.measurement import Measurement
from engine.core.provenance import Source
from engine.device.twin.fast import fast_sweep
from engine.device.twin.params import get_param, with_params
from engine.device.twin.profile import load_profile
from engine.dvfs.objectives import Objective
from engine.selector.dataset import from_points, profile_settings
from engine.selector.features import SettingEncoder, describe_workload
from engine.selector.persistence import load_selector
from engine.selector.selection import outcome
from engine.workload.trace.loop import TWIN_LOOP
from engine.selector.transfer import transfer_selector

# The synthetic board: each parameter moved by this factor of its shipped value (clamped to its bounds).
PERTURBATION = {"gpu.capacitance_f": 1.3, "gpu.vf.max_v": 1.06, "cpu.launch_cycles": 1.6, "gpu.podgov_load_seen": 0.75}
FAMILIES = {"bert": ("bert-tiny", "bert-mini", "bert-small", "bert-medium", "bert-base-uncased"),
            "pythia": ("pythia-14m", "pythia-31m", "pythia-70m", "pythia-160m")}
GRID = dict(batch_sizes=(8, 32), seq_lens=(64, 256), precisions=("fp32", "fp16"), modes=("full", "bitfit"))
KS = (1, 2, 4)


def perturbed(profile: Any) -> tuple[Any, dict[str, float]]:
    spreads = {sp.path: sp for sp in profile.uncertainty}
    values = {}
    for path, factor in PERTURBATION.items():
        v = get_param(profile, path) * factor
        if path in spreads:
            v = min(max(v, spreads[path].lower), spreads[path].upper)
        values[path] = v
    return with_params(profile, values), values


def workloads(models: tuple[str, ...], quick: bool) -> list[tuple[Any, Any]]:
    out = []
    for m in models:
        for b in GRID["batch_sizes"]:
            for length in GRID["seq_lens"][:1] if quick else GRID["seq_lens"]:
                for p in GRID["precisions"]:
                    for mode in GRID["modes"]:
                        try:
                            out.append(describe_workload(m, "sst2", batch_size=b, seq_len=length, precision=p,
                                                         mode=mode, loop=TWIN_LOOP))
                        except Exception:  # noqa: BLE001 - a shape the board cannot hold: not in the grid
                            continue
    return out


def truth_dataset(wls: list[tuple[Any, Any]], truth: Any, settings: Any, encoder: SettingEncoder) -> Any:
    """Fast sweeps of the perturbed profile, labelled measured (synthetic)."""
    points = []
    for w, trace in wls:
        for s, m in fast_sweep(trace, truth, list(settings)):
            points.append((w, s, Measurement(m.time_s, m.energy_j, m.samples, None, Source.MEASURED)))
    return from_points(points, encoder)


def grade(selector: Any, ds: Any, keys: list[str], objective: Objective) -> dict[str, Any]:
    by_wl = ds.by_workload()
    regrets, saving_err, worst = [], [], ("", -1.0)
    for key in keys:
        rows = by_wl[key]
        present = [ds.settings[i] for i in rows]
        choice = selector.choose(ds.workloads[rows[0]], objective, settings=present, as_source=Source.MEASURED)
        o = outcome(ds, key, rows, choice.setting, objective)
        regrets.append(o.regret)
        if o.regret > worst[1]:
            worst = (f"{key} (chose {choice.setting.label()}, oracle {o.oracle.label()})", o.regret)
        if o.saving is not None:
            saving_err.append(choice.saving - o.saving)
    return {"workloads": len(keys), "mean_regret": statistics.fmean(regrets), "worst_regret": max(regrets),
            "within_2pct": sum(r <= 0.02 for r in regrets) / len(regrets), "worst_workload": worst[0],
            "mean_abs_saving_error": statistics.fmean(abs(e) for e in saving_err) if saving_err else None}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--selector", help="the base selector (default: the shipped one)")
    ap.add_argument("--draws", type=int, default=3, help="random draws of the measured workloads per k")
    ap.add_argument("--quick", action="store_true", help="one family, one draw, length 64 only")
    ap.add_argument("--ridge", type=float, default=None, help="the correction's ridge penalty (default the library's)")
    args = ap.parse_args(argv)
    started = time.perf_counter()
    objective = Objective()
    profile = load_profile("agx-orin-64gb")
    truth, values = perturbed(profile)
    base = load_selector(args.selector, trust=True) if args.selector else load_selector()
    settings = profile_settings(profile, "gpu")
    encoder = SettingEncoder.from_profile(profile)
    kw = {} if args.ridge is None else {"ridge": args.ridge}
    draws = 1 if args.quick else args.draws
    families = dict(list(FAMILIES.items())[:1]) if args.quick else FAMILIES
    report: dict[str, Any] = {
        "truth": "synthetic measured: fast sweeps of the agx-orin-64gb twin with parameters moved "
                 f"(no board measured): {json.dumps(values)}",
        "choices": "predicted", "base_selector": str(base.path), "base_basis": base.basis.line(),
        "objective": objective.spec, "families": {},
    }
    data = {}
    for family, models in families.items():
        wls = workloads(models, args.quick)
        twin_ds = from_points([(w, s, m) for w, trace in wls for s, m in fast_sweep(trace, profile, list(settings))],
                              encoder)
        data[family] = (truth_dataset(wls, truth, settings, encoder), twin_ds)
    for family, (ds, twin_ds) in data.items():
        keys = list(ds.by_workload())
        others = {f: d for f, (d, _t) in data.items() if f != family}
        fam: dict[str, Any] = {"workloads": len(keys),
                               "shipped_on_its_twin": grade(base, twin_ds, keys, objective),
                               "shipped_on_truth": grade(base, ds, keys, objective)}
        for k in KS:
            runs = []
            for d in range(draws):
                rng = random.Random(1000 * k + d)
                measured = rng.sample(keys, k)
                held = [key for key in keys if key not in measured]
                rows = [i for key in measured for i in ds.by_workload()[key]]
                adapted, _rep = transfer_selector(base, ds.subset(rows), objective, **kw)
                run = {"measured": measured, "shipped": grade(base, ds, held, objective),
                       "transferred": grade(adapted, ds, held, objective)}
                for other, ods in others.items():  # a family none of the measured sweeps was of
                    okeys = list(ods.by_workload())
                    run[f"other_family_{other}"] = {"shipped": grade(base, ods, okeys, objective),
                                                    "transferred": grade(adapted, ods, okeys, objective)}
                runs.append(run)
            summary: dict[str, Any] = {"draws": len(runs), "held_out_workloads": runs[0]["shipped"]["workloads"]}
            for scope in ["same_family"] + [f"other_family_{o}" for o in others]:
                pick = (lambda r, who: r[who]) if scope == "same_family" else (lambda r, who, s=scope: r[s][who])
                summary[scope] = {
                    f"{who}_{what}": (max if what == "worst_regret" else statistics.fmean)(
                        pick(r, who)[what] for r in runs)
                    for who in ("shipped", "transferred")
                    for what in ("mean_regret", "worst_regret", "mean_abs_saving_error")}
            summary["runs"] = runs
            fam[f"k{k}"] = summary
            same = summary["same_family"]
            print(f"{family} k={k}: held-out regret shipped {same['shipped_mean_regret']:.2%} -> transferred "
                  f"{same['transferred_mean_regret']:.2%}", file=sys.stderr, flush=True)
        report["families"][family] = fam
    report["wall_s"] = round(time.perf_counter() - started, 1)
    print(json.dumps(report, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
