"""`slm-dvfs fleet status | sweep | run`: boards (or local twins) over a Ray cluster; see docs/fleet.md.

Ray is imported only when a fleet command runs (the `fleet` extra). `--twins N[:profile]` starts
a local fleet of N twins for trying it; `--address` (or $RAY_ADDRESS) joins a cluster of boards.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import threading
from typing import TYPE_CHECKING, Callable, Protocol, Sequence, TypeVar

from engine.cli import numbers
from engine.cli.fleet_run_cmd import add_run_args, format_run_event, format_run_summary, run_specs
from engine.cli.interrupt import cancel_on_sigint
from engine.cli.mode_args import add_mode_args, workload_spec
from engine.cli.store_cmds import add_db_arg
from engine.core.errors import ConfigError
from engine.core.jsontypes import JsonObject, as_list
from engine.core.text import clean_text
from engine.results.format import versus_text

if TYPE_CHECKING:  # Ray and the fleet are imported only when a fleet command runs
    from engine.results.compare import SweepSaving
    from engine.results.store import Store
    from engine.results.sweeps import PointSummary
    from engine.run.fleet import BoardInfo, Fleet, FleetEvent, FleetSweepResult, SweepOutcome, SweepPlan


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("fleet", help="boards (or local twins) over a Ray cluster: status, sweeps, experiments",
                       description="A lab's boards joined in a Ray cluster (docs/fleet.md): list them; spread "
                       "sweeps over them, each sweep's points shared out among the boards, every point stored here "
                       "as it comes; spread experiments over them, each whole on one board.")
    fsub = p.add_subparsers(dest="fleet_command", metavar="COMMAND", required=True)

    s = fsub.add_parser("status", help="the boards: identity, module, L4T, temperatures, power, what they run")
    _fleet_args(s)
    s.add_argument("--json", action="store_true", help="print the boards as JSON")
    s.set_defaults(func=cmd_status)

    w = fsub.add_parser("sweep", help="sweeps of every model x task x batch size x space, spread over the boards",
                        description="The cross product of --model, --task, --batch-size and --space, each one sweep "
                        "whose points are spread in shares over the free boards of one module (a board runs one "
                        "share at a time); points stream back and are stored here as they come, each naming the "
                        "board that measured it. A board lost mid-share: its unmeasured points go to another board "
                        "of the module. Ctrl-C stops every board at a step boundary (clocks restored); run the "
                        "same command again to resume.")
    _fleet_args(w)
    w.add_argument("--model", type=numbers.model, nargs="+", required=True, metavar="NAME", help="zoo names, hub ids or folders")
    w.add_argument("--task", nargs="+", required=True, metavar="TASK", help="GLUE tasks, e.g. sst2 mrpc")
    w.add_argument("--batch-size", nargs="+", type=numbers.batch_size, metavar="B", help="default: each zoo entry's")
    w.add_argument("--max-seq-len", type=numbers.seq_len, metavar="L", help="default: the zoo entry's")
    w.add_argument("--space", nargs="+", choices=("gpu", "gpu+emc", "full", "modes"), default=["gpu"],
                   help="setting spaces, each its own sweep (default gpu)")
    w.add_argument("--warmup-steps", type=numbers.warmup_steps, default=1, metavar="W")
    w.add_argument("--steps", type=numbers.point_steps, default=5, metavar="S",
                   help="measured steps per point (default 5)")
    w.add_argument("--repeats", type=numbers.sweep_repeats, default=1, metavar="R")
    w.add_argument("--cpu-stride", type=numbers.int_range(1, 1000), default=4, metavar="K")
    w.add_argument("--fast", action="store_true", help="twins only: compute points from the step trace")
    w.add_argument("--rails", default="all", help="rails the energy total is over: all | gpu+cpu (default all)")
    w.add_argument("--seed", type=numbers.seed, default=0, metavar="S")
    w.add_argument("--data", default="synthetic", metavar="synthetic|hub|DIR")
    w.add_argument("--train-samples", type=numbers.samples, metavar="N")
    w.add_argument("--eval-samples", type=numbers.samples, metavar="N")
    w.add_argument("--objective", default="energy", help="how each sweep's optimum is chosen (default energy)")
    add_mode_args(w)
    numbers.add_pad_argument(w)
    numbers.add_loop_argument(w)
    w.add_argument("--pace", type=numbers.float_range(0.0, 1000.0), default=0.0, metavar="X",
                   help="twins: each point also takes its twin time x X in wall time, as on a board (default 0)")
    w.add_argument("--json", action="store_true", help="print the result as one JSON object")
    add_db_arg(w)
    w.set_defaults(func=cmd_sweep)

    r = fsub.add_parser("run", help="experiments (policy runs vs MAXN) of every model x task x batch x policy, "
                        "spread over the boards",
                        description="The cross product of --model, --task, --batch-size, --policy and --objective, "
                        "each one experiment run whole on one board: the policy run, then the board's baseline (MAXN, "
                        "or MAXN_SUPER on an Orin Nano / NX) on the same "
                        "board (--compare maxn), so each saving is within one board. Progress streams back; each "
                        "experiment's runs are stored here when it ends. The oracle needs a stored sweep of the "
                        "workload on the board's module (`fleet sweep`), ml a selector. A board lost mid-experiment: "
                        "it starts again on another board of the same module. Ctrl-C stops every board at a step "
                        "boundary (clocks restored); the runs are stored as cancelled.")
    _fleet_args(r)
    add_run_args(r)
    add_db_arg(r)
    r.set_defaults(func=cmd_run)


def _fleet_args(p: argparse.ArgumentParser) -> None:
    where = p.add_mutually_exclusive_group()
    where.add_argument("--address", metavar="HOST:PORT", help="the Ray head (default $RAY_ADDRESS)")
    where.add_argument("--twins", metavar="N[:PROFILE]", help="a local fleet of N twins (default profile agx-orin-64gb)")
    p.add_argument("--thermal", action="store_true", help="--twins: the twins run their thermal model (temperatures "
                   "rise under load and the thermal guard acts, as on a board)")


def _connect(args: argparse.Namespace) -> Fleet:
    from engine.run.fleet import connect, parse_twins

    if args.twins:
        n, profile = parse_twins(args.twins)
        return connect(twins=n, profile=profile, pace=getattr(args, "pace", 0.0), thermal=args.thermal)
    if args.thermal:
        raise ConfigError("--thermal is for a fleet of twins: boards have real temperatures", "drop --thermal")
    return connect(args.address)


# --- status ------------------------------------------------------------------------------------
def cmd_status(args: argparse.Namespace) -> int:
    with _connect(args) as fleet:
        boards = fleet.boards()
    if args.json:
        json.dump([b.to_json() for b in boards], sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    sys.stdout.write(clean_text(format_status(boards)))
    return 0


def format_status(boards: Sequence[BoardInfo]) -> str:
    if not boards:
        return "no boards answer\n"
    lines = [f"{len(boards)} board{'s' if len(boards) != 1 else ''}",
             f"{'serial':<18}{'module':<28}{'L4T':<9}{'power':>9}{'hottest':>10}  state"]
    for b in sorted(boards, key=lambda b: b.serial):
        power = "-" if b.power_w is None else f"{b.power_w:.1f} W"
        hottest = f"{max(b.temps_c.values()):.1f} C" if b.temps_c else "-"
        kind = f" [twin {b.profile}]" if b.is_twin else " [measured]"  # the row's power and temperature
        state = f"busy: {b.running}" if b.busy else "free"
        lines.append(f"{b.serial:<18}{b.module[:27]:<28}{(b.l4t or '-'):<9}{power:>9}{hottest:>10}  {state}{kind}")
    return "\n".join(lines) + "\n"


# --- sweep -------------------------------------------------------------------------------------
class _Cancel:
    """What cancel_on_sigint drives: the fleet's cancel event."""

    def __init__(self) -> None:
        self.event = threading.Event()

    def cancel(self, reason: str = "cancelled") -> None:
        self.event.set()

    @property
    def cancelled(self) -> bool:
        return self.event.is_set()


def sweep_plans(args: argparse.Namespace) -> list[SweepPlan]:
    from engine.run.fleet import SweepPlan

    sizes = args.batch_size or [None]
    return [SweepPlan(workload=workload_spec(args, trains=not args.fast, model=m, task=t, batch_size=b), space=space,
                      warmup_steps=args.warmup_steps, steps=args.steps, repeats=args.repeats, fast=args.fast,
                      train_samples=args.train_samples,
                      eval_samples=args.eval_samples if args.eval_samples is not None else 8, rails=args.rails,
                      cpu_stride=args.cpu_stride, objective=args.objective)
            for m, t, b, space in itertools.product(args.model, args.task, sizes, dict.fromkeys(args.space))]


def cmd_sweep(args: argparse.Namespace) -> int:
    plans = sweep_plans(args)
    return _drive(args, lambda fleet, store, show, cancel: fleet.sweep(plans, store=store, on_event=show, cancel=cancel),
                  format_event, lambda result, store: format_summary(result, store, args.objective),
                  lambda result, store: sweep_json(result, store, args.objective))


def cmd_run(args: argparse.Namespace) -> int:
    specs = run_specs(args)
    return _drive(args, lambda fleet, store, show, cancel: fleet.run(specs, store=store, on_event=show, cancel=cancel),
                  format_run_event, lambda result, store: format_run_summary(result))


class _Result(Protocol):
    """What _drive reads of a fleet's result (a FleetSweepResult, a FleetRunResult)."""

    @property
    def status(self) -> str: ...

    def to_json(self) -> JsonObject: ...


E = TypeVar("E")  # an event of the fleet's work
R = TypeVar("R", bound=_Result)


def _drive(args: argparse.Namespace, start: Callable[[Fleet, Store, Callable[[E], None], threading.Event], R],
           line: Callable[[E], str], summary: Callable[[R, Store], str],
           as_json: Callable[[R, Store], JsonObject] = lambda result, store: result.to_json()) -> int:
    """Connect, start the fleet's work with a line per event (stderr with --json), print its summary
    (or its JSON); exit 0 finished, 130 cancelled (Ctrl-C: every board restores its clocks), 1 failed."""
    from engine.results.store import Store

    cancel = _Cancel()
    out = sys.stderr if args.json else sys.stdout

    def show(event: E) -> None:
        out.write(clean_text(line(event)) + "\n")
        out.flush()

    with _connect(args) as fleet, Store(args.db) as store, cancel_on_sigint(cancel):
        result = start(fleet, store, show, cancel.event)
        text = summary(result, store)
        out_json = as_json(result, store) if args.json else None
    if out_json is not None:
        json.dump(out_json, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(clean_text(text))
    return {"finished": 0, "cancelled": 130}.get(result.status, 1)


def format_event(e: FleetEvent) -> str:
    where = f"[{e.board}]" if e.board else "[fleet]"
    sweep = f" s{e.sweep_id}" if e.sweep_id is not None else ""
    if e.kind == "point":
        src = e.source.value if e.source is not None else "?"
        return (f"{where}{sweep} {e.done}/{e.total} {e.text}: {e.energy_j:.4g} J in {e.time_s:.4g} s, "
                f"{(e.avg_power_w or 0.0):.3g} W [{src}]")
    return f"{where}{sweep} {e.kind}: {e.text}"


def sweep_optimum(store: Store, outcome: SweepOutcome, objective: str) -> tuple[PointSummary, SweepSaving | None, str] | None:
    """A fleet sweep's optimum by `objective`, its saving and slowdown against MAXN (None without
    MAXN), and its source: None before any point is stored."""
    from engine.dvfs.objectives import parse_objective
    from engine.results.compare import optimum_vs_maxn
    from engine.results.baseline import device_baseline
    from engine.results.sweeps import maxn_of, optimum, summarize_points

    if outcome.sweep_id is None or not outcome.points:
        return None
    sweep = store.get_sweep(outcome.sweep_id)
    base = device_baseline(store.get_device(sweep.device_id), sweep.space)  # its module's uncapped mode, whatever its id
    points = summarize_points(store.sweep_points(outcome.sweep_id))
    best = optimum(points, parse_objective(objective), baseline=base.setting)
    if best is None:
        return None
    return best, optimum_vs_maxn(best, maxn_of(points, base.setting)), sweep.source.value


def format_summary(result: FleetSweepResult, store: Store, objective: str) -> str:
    lines = [f"fleet sweep {result.status} in {result.wall_s:.1f} s"]
    for s in result.sweeps:
        where = ", ".join(dict.fromkeys(s.boards)) or "-"
        line = (f"  {'s' + str(s.sweep_id) if s.sweep_id is not None else '-':<5} {s.name}: {s.status}, "
                f"{s.points}/{s.total} points, on {where}" + (f", {s.retries} share(s) retried" if s.retries else ""))
        found = sweep_optimum(store, s, objective)
        if found is not None:
            best, vs, src = found
            line += f"; optimum {best.setting.label()}"
            if vs is not None:  # the same figures as `slm-dvfs show sN`: per sample, against MAXN
                line += f": {versus_text(vs.saving_pct, vs.slowdown_pct)} per sample [{src}]"
            else:
                line += f" [{src}] (no MAXN point to compare with)"
        lines.append(line + (f" ({s.error})" if s.error else ""))
    lines.append("points per board: " + ", ".join(f"{k} {v}" for k, v in sorted(result.per_board.items())))
    if result.status != "finished":
        lines.append("not every sweep finished: " + ("fix what each failed one's error says, then " if any(
            s.status == "failed" for s in result.sweeps) else "") + "run the same command again to resume them "
                     "(stored points are kept)")
    return "\n".join(lines) + "\n"


def sweep_json(result: FleetSweepResult, store: Store, objective: str) -> JsonObject:
    """The result's JSON, each sweep with its optimum and the optimum's saving and slowdown vs MAXN."""
    out = result.to_json()
    for s, row in zip(result.sweeps, as_list(out["sweeps"])):
        if not isinstance(row, dict):  # FleetSweepResult.to_json writes each sweep as a dict
            raise TypeError(f"a sweep's JSON is a {type(row).__name__}")
        found = sweep_optimum(store, s, objective)
        best, vs, src = found if found is not None else (None, None, None)
        row.update(optimum=None if best is None else best.setting.label(), source=src,
                   saving_vs_maxn_pct=None if vs is None else vs.saving_pct,
                   slowdown_vs_maxn_pct=None if vs is None else vs.slowdown_pct)
    return out


__all__ = ["register", "format_status", "format_event", "format_summary", "sweep_json"]
