"""`slm-dvfs fleet run`'s experiments and printing (the sub-parser and the command are in fleet_cmd).

One line per event, each figure labelled by its source ([twin] or [measured]); a summary with,
per experiment, its board, run ids, energy and time of the policy run and of MAXN on the same
board, the saving and slowdown, and its status."""

from __future__ import annotations

import argparse
import itertools
from typing import TYPE_CHECKING

from engine.cli import numbers
from engine.cli.mode_args import add_mode_args, workload_spec
from engine.core.constants import PRECISIONS
from engine.results.format import versus_text

if TYPE_CHECKING:
    from engine.core.provenance import Source
    from engine.run.experiment import ExperimentSpec
    from engine.run.fleet.model import ExperimentEvent, FleetRunResult


def add_run_args(r: argparse.ArgumentParser) -> None:
    """Everything `fleet run` takes besides where the fleet is (--address / --twins) and --db."""
    r.add_argument("--model", type=numbers.model, nargs="+", required=True, metavar="NAME", help="zoo names, hub ids or folders")
    r.add_argument("--task", nargs="+", required=True, metavar="TASK", help="GLUE tasks, e.g. sst2 mrpc")
    r.add_argument("--batch-size", nargs="+", type=numbers.batch_size, metavar="B", help="default: each zoo entry's")
    r.add_argument("--policy", nargs="+", required=True, metavar="POLICY",
                   help="maxn | maxn-pinned | mode:N | static:gpu=MHz[,..] | oracle | online | ml[:...] (several: "
                        "one experiment each)")
    r.add_argument("--objective", nargs="+", default=["energy"], metavar="O",
                   help="energy | energy@5%% | edp | eta:0.5 (several: one experiment each; default energy)")
    r.add_argument("--compare", choices=("maxn", "none"), default="maxn",
                   help="maxn (default): also run the board's baseline, its uncapped mode (MAXN or MAXN_SUPER), on "
                        "the same board and report the saving")
    r.add_argument("--steps", type=numbers.steps, default=100, metavar="N", help="training steps per run (default 100)")
    r.add_argument("--simulate", action="store_true",
                   help="twins only: no training, each step just advances the twin (fast; no eval metric)")
    r.add_argument("--max-seq-len", type=numbers.seq_len, metavar="L", help="default: the zoo entry's")
    r.add_argument("--precision", choices=PRECISIONS, help="default: the zoo entry's")
    add_mode_args(r)
    numbers.add_pad_argument(r)
    numbers.add_loop_argument(r)
    r.add_argument("--seed", type=numbers.seed, default=0, metavar="S", help="seed of weights, data and order")
    r.add_argument("--data", default="synthetic", metavar="synthetic|hub|DIR",
                   help="where the text comes from (hub or DIR: on each board)")
    r.add_argument("--train-samples", type=numbers.samples, metavar="N", help="training examples to use")
    r.add_argument("--eval-samples", type=numbers.samples, metavar="N", help="evaluation examples per split")
    r.add_argument("--rails", default="all", help="rails the energy total is over: all | gpu+cpu (default all)")
    r.add_argument("--label", help="free text stored with the runs")
    r.add_argument("--trust", action="store_true",
                   help="--policy ml:PATH: load a selector from outside the trusted folders (unpickling runs code)")
    r.add_argument("--pace", type=numbers.float_range(0.0, 1000.0), default=0.0, metavar="X",
                   help="twins: each step also takes its twin time x X in wall time, as on a board (default 0)")
    r.add_argument("--json", action="store_true", help="print the result as one JSON object")


def run_specs(args: argparse.Namespace) -> list[ExperimentSpec]:
    """One ExperimentSpec per model x task x batch size x policy x objective, in that order."""
    from engine.run.experiment import ExperimentSpec

    sizes = args.batch_size or [None]
    return [ExperimentSpec(workload=workload_spec(args, trains=not args.simulate, model=m, task=t, batch_size=b), policy=p, objective=o,
                           compare=None if args.compare == "none" else args.compare, steps=args.steps,
                           simulate=args.simulate, train_samples=args.train_samples, eval_samples=args.eval_samples,
                           rails=args.rails, label=args.label)
            for m, t, b, p, o in itertools.product(args.model, args.task, sizes, args.policy, args.objective)]


def _src(source: Source | None) -> str:
    return f"[{source.value}]" if source is not None else "[?]"


def format_run_event(e: ExperimentEvent) -> str:
    where = f"[{e.board}]" if e.board else "[fleet]"
    head = f"{where} #{e.index + 1} {e.label}"
    if e.kind == "progress":
        return f"{head}: {e.text}: {e.energy_j:.4g} J in {e.time_s:.4g} s {_src(e.source)}"
    if e.kind == "phase":
        return f"{head}: {e.text}"
    return f"{where} #{e.index + 1} {e.kind}: {e.text}"


def _figures(energy_j: float | None, time_s: float | None) -> str:
    if energy_j is None or time_s is None:
        return "-"
    return f"{energy_j:.4g} J in {time_s:.4g} s"


def format_run_summary(result: FleetRunResult) -> str:
    lines = [f"fleet run {result.status} in {result.wall_s:.1f} s"]
    for o in result.experiments:
        where = o.board or (", ".join(o.boards) if o.boards else "-")
        line = f"  #{o.index + 1} {o.label} on {where}: {o.status}"
        if o.retries:
            line += f" ({o.retries} retried, first on {o.boards[0]})"
        if o.run_id is not None:
            src = _src(o.source)
            line += f"; run {o.run_id} {_figures(o.energy_j, o.time_s)} {src}"
            if o.baseline_run_id is not None:
                line += f", MAXN run {o.baseline_run_id} {_figures(o.baseline_energy_j, o.baseline_time_s)} {src}"
            if o.saving_pct is not None and o.slowdown_pct is not None:
                line += f"; {versus_text(o.saving_pct, o.slowdown_pct)} {src}"
        lines.append(line + (f" ({o.error})" if o.error else ""))
    lines.append("experiments per board: " + ", ".join(f"{k} {v}" for k, v in sorted(result.per_board.items())))
    if result.status == "cancelled":
        lines.append("cancelled: the runs that began are stored as cancelled; run the command again to redo them")
    elif result.status != "finished":
        lines.append("not every experiment finished: see each one's error")
    return "\n".join(lines) + "\n"


__all__ = ["add_run_args", "format_run_event", "format_run_summary", "run_specs"]
