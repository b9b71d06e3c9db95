"""How well the selector chooses for workloads, and whole architectures, it was not trained on (twin).

    .venv/bin/python bench/bench_selector.py [--selector FILE] [--candidate LABEL] [--quick]
                                             [--blocks lofo,lomo,held_out] [--lofo-profile PROFILE]
    .venv/bin/python bench/bench_selector.py --training-scale [--reps N]

Three reports, one JSON object (or, with --training-scale, the fourth alone):

- `lofo` (leave one family out): the training grid of `train-selector --from-twin-zoo`
  (engine.selector.dataset defaults) over the zoo, plus architectures of the families the
  zoo has no model of (ELECTRA, GPT-2, OPT, Phi-3; shapes after their hub configs, no
  weights). For each family F, the selector's winning candidate (or --candidate) is fitted
  on every other family's workloads and chooses for F's: regret against the twin's fast
  sweep of each (engine.selector.lofo), with 0, 1 and 3 probes, mean and worst per family
  and overall, and the saving against MAXN. `--lofo-profile` grades on another module's twin zoo
  (a fresh grid for a candidate compared on the default one).
- `lomo` (leave one module out): the twin zoos of LOMO_PROFILES (a subset of the grid per module,
  LOMO_GRID; the JSON's notes say which), and for each module the same regressor fitted on the
  other modules' rows chooses for its workloads with its own module columns and settings: regret
  with 0, 1 and 3 probes, mean and worst per module and overall.
- `held_out`: the shipped (or --selector) selector itself, on workloads off its training
  grid: shapes outside the zoo and zoo models at batch sizes and lengths between the
  grid's, with 0, 1 and 3 probes, and the MAPE of its predictions.

- `training_scale`: what `train-selector --from-twin-zoo` costs from 10 sweeps and from 100
  (TRAINING_SCALE_GRIDS: five small zoo models, one shape each for 10, ten for 100, both loops),
  each a whole command in its own process (its CPU time with its fold workers', and its wall time),
  the two sizes run alternately `--reps` times, medians and the 100/10 ratios; once with the
  default search (a first pass shortlists candidates) and once with `--shortlist 0` (every
  candidate through every fold). The traces are made once before, so the figures are training.

The truth is the twin's fast sweep (`twin`); choices and MAPE are `predicted`; probe
windows are `twin`.

    regret = energy(chosen) / energy(oracle) - 1         saving = 1 - energy / energy(MAXN)
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

from engine.core.errors import ConfigError, SlmDvfsError
from engine.core.jsontypes import as_list
from engine.core.provenance import Source
from engine.device.setting import MAXN
from engine.device.twin.fast import fast_sweep
from engine.device.twin.profile import load_profile
from engine.dvfs.objectives import Objective
from engine.selector.features import describe_workload
from engine.selector.persistence import load_selector
from engine.workload.trace.loop import TWIN_LOOP

# Shapes outside the zoo of families the zoo has: held out of the shipped selector's training.
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
# Families the zoo has no model of, so no selector trained on the zoo saw them: shapes after the hub's
# google/electra-{small,base}-discriminator, openai-community/gpt2, facebook/opt-{125m,350m} and
# microsoft/Phi-3-mini-4k-instruct (architectures only, no weights).
OTHER_FAMILIES = {
    "electra-small": {"model_type": "electra", "vocab_size": 30522, "embedding_size": 128, "hidden_size": 256,
                      "num_hidden_layers": 12, "num_attention_heads": 4, "intermediate_size": 1024,
                      "max_position_embeddings": 512, "type_vocab_size": 2, "hidden_act": "gelu"},
    "electra-base": {"model_type": "electra", "vocab_size": 30522, "embedding_size": 768, "hidden_size": 768,
                     "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072,
                     "max_position_embeddings": 512, "type_vocab_size": 2, "hidden_act": "gelu"},
    "gpt2": {"model_type": "gpt2", "vocab_size": 50257, "n_positions": 1024, "n_embd": 768, "n_layer": 12,
             "n_head": 12, "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5,
             "bos_token_id": 50256, "eos_token_id": 50256},
    "opt-125m": {"model_type": "opt", "vocab_size": 50272, "hidden_size": 768, "num_hidden_layers": 12,
                 "num_attention_heads": 12, "ffn_dim": 3072, "max_position_embeddings": 2048,
                 "word_embed_proj_dim": 768, "do_layer_norm_before": True, "activation_function": "relu",
                 "pad_token_id": 1, "bos_token_id": 2, "eos_token_id": 2},
    "opt-350m": {"model_type": "opt", "vocab_size": 50272, "hidden_size": 1024, "num_hidden_layers": 24,
                 "num_attention_heads": 16, "ffn_dim": 4096, "max_position_embeddings": 2048,
                 "word_embed_proj_dim": 512, "do_layer_norm_before": False, "activation_function": "relu",
                 "pad_token_id": 1, "bos_token_id": 2, "eos_token_id": 2},
    "phi-3-mini": {"model_type": "phi3", "vocab_size": 32064, "hidden_size": 3072, "intermediate_size": 8192,
                   "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32,
                   "max_position_embeddings": 4096, "hidden_act": "silu", "rms_norm_eps": 1e-5,
                   "rope_theta": 10000.0, "pad_token_id": 32000, "bos_token_id": 1, "eos_token_id": 32000,
                   "tie_word_embeddings": False},
}
# The smallest zoo model of each family, and small shapes of the other families: the --quick grid.
QUICK_MODELS = ("bert-tiny", "pythia-14m", "distilbert-base-uncased", "roberta-base", "deberta-v3-small",
                "smollm2-135m", "qwen2.5-0.5b", "gemma-2b")
QUICK_OTHERS = ("electra-small", "gpt2", "opt-125m")
ZOO_OFF_GRID = ("bert-mini", "bert-medium", "bert-base-uncased", "pythia-31m", "pythia-160m", "distilbert-base-uncased",
                "roberta-base", "deberta-v3-small", "smollm2-135m", "qwen2.5-0.5b", "llama-3.2-1b")
OFF_GRID_SHAPES = ((16, 128), (24, 96), (48, 192))  # between the grid's batches (8, 32) and lengths (64, 256)
LARGE_OFF_GRID_SHAPES = ((6, 128),)  # between the large models' batches (4, 8)


def _summary(vals: list[float]) -> dict[str, float]:
    return {"mean": statistics.fmean(vals), "worst": max(vals)}


def _progress(i: int, n: int, what: str) -> None:
    if i % 50 == 0 or i == n:
        print(f"  [{i}/{n}] {what}", file=sys.stderr, flush=True)


def lofo(selector: Any, candidate: str | None, quick: bool, profile: str | None = None) -> dict[str, Any]:
    """Leave-one-family-out regret on the training grid (plus the families outside the zoo), on the twin zoo
    of `profile` (default: the selector's module)."""
    from engine.selector.candidates import default_candidates
    from engine.selector.dataset import (DEFAULT_BATCH_SIZES, DEFAULT_MODES, DEFAULT_PRECISIONS, DEFAULT_SEQ_LENS,
                                         LARGE_BATCH_SIZES, from_twin_zoo)
    from engine.selector.lofo import leave_one_family_out, summarise
    from engine.workload.zoo import load_zoo

    label = candidate or selector.model.spec.label  # the regressor that gives the shipped selector's figures
    specs = default_candidates(small=quick, names=[label])
    if len(specs) != 1 or specs[0].kind != "regressor":
        raise ConfigError(f"--candidate {label!r} names no single regressor", "e.g. --candidate hist-gb/time+energy")
    if quick:
        grid: dict[str, Any] = dict(models=list(QUICK_MODELS), configs={k: OTHER_FAMILIES[k] for k in QUICK_OTHERS},
                                    batch_sizes=(8,), large_batch_sizes=(4,), seq_lens=(64,),
                                    precisions=("fp16",), modes=("full",))
    else:
        grid = dict(models=list(load_zoo()), configs=OTHER_FAMILIES, batch_sizes=DEFAULT_BATCH_SIZES,
                    large_batch_sizes=LARGE_BATCH_SIZES, seq_lens=DEFAULT_SEQ_LENS, precisions=DEFAULT_PRECISIONS,
                    modes=DEFAULT_MODES)
    print("lofo: tracing and sweeping the grid on the twin", file=sys.stderr, flush=True)
    profile = profile or selector.encoder.profile or "agx-orin-64gb"
    ds = from_twin_zoo(profile=profile, space=selector.training.get("space", "gpu"), progress=_progress, **grid)
    results = leave_one_family_out(ds, specs[0], Objective(), probes=(0, 1, 3),
                                   progress=lambda msg: print(f"  {msg}", file=sys.stderr, flush=True))
    summary = ds.summary()
    return {
        "candidate": specs[0].label + (" (small)" if quick else ""),
        "profile": profile,
        "grid": {k: (sorted(v) if isinstance(v, dict) else list(v)) for k, v in grid.items()},
        "workloads": summary["workloads"],
        "rows": summary["rows"],
        "families": sorted({w.family for w in ds.workloads}),
        "outside_the_zoo": sorted(grid["configs"]),
        "notes": summary["notes"],
        **summarise(results),
    }


# Leave one module out: a large, a middle and a small module (the shipped selector learns from the first and
# the last; each is left out in turn here), over a subset of the zoo grid per module, so the run stays minutes.
LOMO_PROFILES = ("agx-orin-64gb", "orin-nx-16gb", "orin-nano-8gb")
LOMO_GRID: dict[str, Any] = dict(batch_sizes=(8,), large_batch_sizes=(4,), seq_lens=(64, 256),
                                 precisions=("fp32", "fp16"), modes=("full", "lora"))


def lomo(selector: Any, candidate: str | None, quick: bool) -> dict[str, Any]:
    """Leave-one-module-out regret on the twin zoos of LOMO_PROFILES."""
    from engine.selector.candidates import default_candidates
    from engine.selector.dataset import from_twin_zoos
    from engine.selector.lofo import leave_one_module_out, summarise
    from engine.workload.zoo import load_zoo

    label = candidate or selector.model.spec.label
    specs = default_candidates(small=quick, names=[label])
    if len(specs) != 1 or specs[0].kind != "regressor":
        raise ConfigError(f"--candidate {label!r} names no single regressor", "e.g. --candidate hist-gb/time+energy")
    grid = dict(LOMO_GRID, models=list(QUICK_MODELS) if quick else list(load_zoo()))
    if quick:
        grid.update(seq_lens=(64,), precisions=("fp16",), modes=("full",))
    print("lomo: tracing and sweeping the grid on each module's twin", file=sys.stderr, flush=True)
    ds = from_twin_zoos(LOMO_PROFILES, space=selector.training.get("space", "gpu"), progress=_progress, **grid)
    results = leave_one_module_out(ds, specs[0], Objective(), probes=(0, 1, 3),
                                   progress=lambda msg: print(f"  {msg}", file=sys.stderr, flush=True))
    summary = ds.summary()
    out: dict[str, Any] = {
        "candidate": specs[0].label + (" (small)" if quick else ""),
        "profiles": list(LOMO_PROFILES),
        "grid": {k: list(v) for k, v in grid.items()},
        "workloads": summary["workloads"],
        "rows": summary["rows"],
        "notes": ["a subset of the zoo grid per module (batch 8, 4 for models of 300M parameters or more; "
                  "the grid above), not the shipped training grid; each module left out in turn, the regressor "
                  "fitted on the others' rows", *as_list(summary["notes"])],
    }
    for key, block in summarise(results).items():  # summarise groups by `family`: here the held-out module
        out[key] = {"overall": block["overall"], "mean_of_module_means": block["mean_of_family_means"],
                    "modules": block["families"]}
    return out


def held_out_workloads(quick: bool) -> list[tuple[str, dict[str, Any] | None, int, int, str]]:
    from engine.selector.dataset import LARGE_MODEL_PARAMS, model_params

    out = []
    for name, cfg in OUT_OF_ZOO.items():
        for b in ((16, 48) if quick else (16, 24, 48)):
            for seq in ((96,) if quick else (96, 128, 192)):
                for p in ("fp32",) if quick else ("fp32", "fp16"):
                    out.append((name, cfg, b, seq, p))
    for name in ZOO_OFF_GRID[:2] if quick else ZOO_OFF_GRID:
        large = model_params(name, None) >= LARGE_MODEL_PARAMS
        for b, seq in LARGE_OFF_GRID_SHAPES if large else OFF_GRID_SHAPES[1:] if quick else OFF_GRID_SHAPES:
            for p in ("fp32", "fp16"):
                out.append((name, None, b, seq, p))
    return out


def held_out(selector: Any, quick: bool) -> dict[str, Any]:
    """The selector itself on workloads off its training grid."""
    profile = load_profile(selector.encoder.profile or "agx-orin-64gb")
    objective = Objective()
    rows: dict[int, list[dict[str, Any]]] = {0: [], 1: [], 3: []}
    errors: dict[str, list[float]] = {"time": [], "power": [], "energy": []}
    skipped = []
    cases = held_out_workloads(quick)
    print(f"held_out: {len(cases)} workloads", file=sys.stderr, flush=True)
    for name, cfg, b, seq, prec in cases:
        try:
            w, trace = describe_workload(name, "sst2", batch_size=b, seq_len=seq, precision=prec, config=cfg,
                                         loop=TWIN_LOOP)
        except ConfigError as exc:  # a shape the board cannot hold
            skipped.append(f"{name} b{b} L{seq} {prec}: {exc.what}")
            continue
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
            rows[k].append({"regret": e / oracle_e - 1, "saving": 1 - e / maxn_e,
                            "oracle_saving": 1 - oracle_e / maxn_e,
                            "workload": f"{w.key} (chose {choice.setting.label()})"})
    result: dict[str, Any] = {
        "workloads": len(rows[0]),
        "models": sorted(OUT_OF_ZOO) + [f"{m} (off-grid batch/length)" for m in
                                        (ZOO_OFF_GRID[:2] if quick else ZOO_OFF_GRID)],
        "skipped": skipped,
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
    return result


# 10 and 100 sweeps (workloads) of five small zoo models: 5 shapes x 2 loops, 50 shapes x 2 loops.
SCALE_MODELS = "bert-tiny,bert-mini,pythia-14m,pythia-31m,pythia-70m"
TRAINING_SCALE_GRIDS = {
    10: ["--batch-sizes", "8", "--seq-lens", "64"],
    100: ["--batch-sizes", "8,32", "--seq-lens", "32,64,128,256,512"],
}


def _train_command(sweeps: int, out: Path, extra: list[str]) -> list[str]:
    return [sys.executable, "-c", "import sys; from engine.cli import main; sys.exit(main())", "train-selector", "--from-twin-zoo", "--models", SCALE_MODELS,
            "--precisions", "fp16", "--modes", "full", *TRAINING_SCALE_GRIDS[sweeps], "--out", str(out), "--json",
            *extra]


def _timed(cmd: list[str], env: dict[str, str], cwd: Path) -> dict[str, Any]:
    """One command in its own process: its CPU seconds (with its children's, the fold workers it waited
    for), its wall seconds, and its JSON."""
    import resource
    import subprocess

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=cwd)  # `engine` imported from cwd
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed: {done.stderr[-2000:]}")
    out = json.loads(done.stdout)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"cpu_s": cpu, "wall_s": wall, "rows": out["training"]["rows"], "workloads": out["training"]["workloads"],
            "winner": out["winner"], "cv_cost": out.get("cv_cost")}


def training_scale(reps: int, baseline: str | None = None) -> dict[str, Any]:
    """train-selector's cost from 10 sweeps and from 100, paired and repeated (medians, ratios); with
    `baseline` (another checkout of the project, e.g. `git archive main`), its train-selector too."""
    import os
    import tempfile

    from engine.selector.dataset import from_twin_zoo

    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, SLM_DVFS_DATA_DIR=str(Path(tmp) / "data"),
                   SLM_DVFS_CACHE_DIR=os.environ.get("SLM_DVFS_CACHE_DIR", str(Path(tmp) / "cache")))
        os.environ["SLM_DVFS_CACHE_DIR"] = env["SLM_DVFS_CACHE_DIR"]
        print("training_scale: tracing the grids once", file=sys.stderr, flush=True)
        for grid in TRAINING_SCALE_GRIDS.values():  # the traces, cached for the timed commands
            opts = dict(zip(grid[::2], grid[1::2]))
            from_twin_zoo(models=SCALE_MODELS.split(","), precisions=("fp16",), modes=("full",),
                          batch_sizes=tuple(map(int, opts["--batch-sizes"].split(","))),
                          seq_lens=tuple(map(int, opts["--seq-lens"].split(","))))
        result: dict[str, Any] = {"models": SCALE_MODELS.split(","), "grids": TRAINING_SCALE_GRIDS, "reps": reps,
                                  "cores": os.cpu_count(), "source": "measured (this machine's CPU time)"}
        here = Path(__file__).resolve().parent.parent
        variants: list[tuple[str, list[str], Path]] = [("default", [], here), ("full_search", ["--shortlist", "0"], here)]
        if baseline:
            variants.insert(0, ("baseline", [], Path(baseline).resolve()))
            result["baseline"] = {"checkout": str(Path(baseline).resolve())}
        for name, extra, cwd in variants:
            runs: dict[int, list[dict[str, Any]]] = {10: [], 100: []}
            for rep in range(reps):
                for sweeps in (10, 100) if rep % 2 == 0 else (100, 10):  # alternate which goes first
                    r = _timed(_train_command(sweeps, Path(tmp) / f"s{sweeps}.joblib", extra), env, cwd)
                    print(f"  {name} {sweeps} sweeps: {r['cpu_s']:.1f} s CPU, {r['wall_s']:.1f} s wall",
                          file=sys.stderr, flush=True)
                    runs[sweeps].append(r)
            med = {n: {k: statistics.median(r[k] for r in rs) for k in ("cpu_s", "wall_s")} for n, rs in runs.items()}
            result.setdefault(name, {}).update({
                **{f"sweeps_{n}": {"median": med[n], "rows": rs[0]["rows"], "workloads": rs[0]["workloads"],
                                   "winner": rs[0]["winner"], "cv_cost": rs[-1]["cv_cost"],
                                   "cpu_s": [round(r["cpu_s"], 2) for r in rs],
                                   "wall_s": [round(r["wall_s"], 2) for r in rs]} for n, rs in runs.items()},
                "cpu_ratio": med[100]["cpu_s"] / med[10]["cpu_s"],
                "wall_ratio": med[100]["wall_s"] / med[10]["wall_s"],
                "cpu_ratios_paired": [round(b["cpu_s"] / a["cpu_s"], 2) for a, b in zip(runs[10], runs[100])],
            })
    return result


BLOCKS = ("lofo", "lomo", "held_out")


def run(selector_path: str | None, quick: bool, candidate: str | None = None, *,
        blocks: tuple[str, ...] = BLOCKS, lofo_profile: str | None = None) -> dict[str, Any]:
    t0 = time.perf_counter()
    selector = load_selector(selector_path)
    win = next((r for r in selector.cv_table if r["label"] == selector.winner), {})
    result: dict[str, Any] = {
        "bench": "selector",
        "quick": quick,
        "source": {"truth": Source.TWIN.value, "choices": Source.PREDICTED.value, "probes": Source.TWIN.value},
        "selector": {"path": str(getattr(selector, "path", "")), "winner": selector.winner,
                     "trained_on": selector.source, "training_rows": selector.training.get("rows"),
                     "training_workloads": selector.training.get("workloads"),
                     "cv_mean_regret": win.get("mean_regret"), "cv_worst_regret": win.get("worst_regret")},
        "objective": Objective().spec,
    }
    if "lofo" in blocks:
        result["lofo"] = lofo(selector, candidate, quick, lofo_profile)
    if "lomo" in blocks:
        result["lomo"] = lomo(selector, candidate, quick)
    if "held_out" in blocks:
        result["held_out"] = held_out(selector, quick)
    result["wall_s"] = round(time.perf_counter() - t0, 1)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--selector", help="selector file (default: yours, else the shipped one)")
    parser.add_argument("--candidate", help="the regressor fitted for each left-out family "
                                            "(default: the selector's, e.g. hist-gb/time+energy)")
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run: one small shape per family, small models, fewer held-out workloads")
    parser.add_argument("--blocks", default=",".join(BLOCKS),
                        help=f"the reports to run, comma-separated (default: {','.join(BLOCKS)})")
    parser.add_argument("--lofo-profile", metavar="PROFILE",
                        help="the module whose twin zoo lofo leaves families out of (default: the selector's, "
                             "agx-orin-64gb; e.g. orin-nano-8gb for a grid the candidates were not compared on)")
    parser.add_argument("--training-scale", action="store_true",
                        help="only train-selector's cost from 10 and 100 sweeps (training_scale)")
    parser.add_argument("--reps", type=int, default=3, help="--training-scale: runs of each size (default 3)")
    parser.add_argument("--baseline", metavar="DIR", help="--training-scale: also time the train-selector of the "
                                                          "checkout in DIR (e.g. main, by `git archive`)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    if args.training_scale:
        print(json.dumps({"bench": "selector", "training_scale": training_scale(args.reps, args.baseline)}, indent=2))
        return 0
    blocks = tuple(b.strip() for b in args.blocks.split(",") if b.strip())
    unknown = [b for b in blocks if b not in BLOCKS]
    if unknown or not blocks:
        parser.error(f"--blocks {args.blocks!r}: pick from {', '.join(BLOCKS)}")
    try:
        if args.lofo_profile:
            load_profile(args.lofo_profile)  # a wrong name is said before minutes of tracing, not after
        result = run(args.selector, args.quick, args.candidate, blocks=blocks, lofo_profile=args.lofo_profile)
    except SlmDvfsError as exc:  # a wrong --selector, --candidate or --lofo-profile: said, not a traceback
        print(f"bench_selector.py: error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(result, indent=2, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
