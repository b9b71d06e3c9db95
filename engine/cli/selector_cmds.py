"""`slm-dvfs train-selector | select`: train the ML selector, and ask it for a setting.

The selector package (and scikit-learn) is imported inside the commands, not here, so
the CLI starts fast and merely listing the commands registers no policy.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

from engine.results.format import versus_text
from engine.core.text import clean_text, shown
from engine.cli import numbers
from engine.core.constants import MODES, PRECISIONS, parse_mode, parse_precision
from engine.workload.trace.loop import LOOPS, parse_loop
from engine.cli.mode_args import add_mode_args, workload_spec
from engine.core.errors import ConfigError, NoSweepPointsError
from engine.core.jsontypes import JsonObject
from engine.core.userinput import parse_int

if TYPE_CHECKING:  # the selector (and scikit-learn) are imported inside the commands
    from engine.core.measurement import Measurement
    from engine.device.setting import DvfsSetting
    from engine.device.twin.profile import TwinProfile
    from engine.dvfs.objectives import Objective
    from engine.selector.selection import CvTableRow
    from engine.selector.selector import Choice, Selector
    from engine.selector.uncertainty import ChoiceUncertainty

DEFAULT_PROFILE = "agx-orin-64gb"


def _csv(text: str | None) -> list[str] | None:
    return None if not text else [t.strip() for t in text.split(",") if t.strip()]


def _ints(text: str | None, what: str, high: int = numbers.MAX_BATCH) -> tuple[int, ...] | None:
    items = _csv(text)
    if items is None:
        return None
    try:
        out = tuple(parse_int(t, f"--{what}") for t in items)
    except ConfigError:
        raise ConfigError(f"--{what} {shown(text)!r} is not a comma-separated list of integers",
                          f"e.g. --{what} 16,32") from None
    if any(v <= 0 for v in out):
        raise ConfigError(f"--{what} {shown(text)!r} holds a value below 1", "give positive integers")
    if any(v > high for v in out):
        raise ConfigError(f"--{what} {shown(text)!r} holds a value above {high}", f"give integers from 1 to {high}")
    return out


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("train-selector", help="train the ML selector on sweeps (or the twin zoo) and save the winner")
    p.add_argument("--source", choices=["measured", "twin", "both"],
                   help="which sweeps to learn from (default measured; twin with --from-twin-zoo). "
                        "both: the source becomes a feature")
    p.add_argument("--db", metavar="PATH", help="results database (default $SLM_DVFS_DB, else DATA_DIR/results.sqlite)")
    p.add_argument("--out", metavar="FILE",
                   help="where to save (default DATA_DIR/selectors/default.joblib, which then takes precedence "
                        "over the shipped selector); a JSON sidecar is written beside it")
    p.add_argument("--rails", default="all", help="store: learn from sweeps whose energy is over this preset "
                                                  "(default all)")
    p.add_argument("--space", choices=["gpu", "gpu+emc"], default="gpu",
                   help="the settings it chooses among (default gpu: every GPU step, CPU and EMC on governors)")
    p.add_argument("--from-twin-zoo", action="store_true",
                   help="generate twin training data now (fast sweeps of zoo x GLUE tasks x batch sizes x lengths) "
                        "instead of reading the store")
    p.add_argument("--profile", default=DEFAULT_PROFILE, help=f"twin/device profile (default {DEFAULT_PROFILE})")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--twin", metavar="NAME[,NAME...]",
                       help="the board's profile(s) instead of --profile; --from-twin-zoo: the twin zoo of each, "
                            "learnt across their modules (e.g. agx-orin-64gb,orin-nano-8gb)")
    where.add_argument("--sysfs-root", metavar="PATH",
                       help="the board under PATH: its module's profile instead of --profile")
    p.add_argument("--models", help="--from-twin-zoo: comma-separated zoo models (default the whole zoo)")
    p.add_argument("--tasks", help="--from-twin-zoo: comma-separated GLUE tasks (default sst2: tasks change "
                                   "only the head, one per head is kept)")
    p.add_argument("--batch-sizes", help="--from-twin-zoo: e.g. 8,32 (the default; models of 300M parameters "
                                         "or more take --large-batch-sizes)")
    p.add_argument("--large-batch-sizes", help="--from-twin-zoo: batch sizes of models of 300M parameters or "
                                               "more (default 4,8)")
    p.add_argument("--seq-lens", help="--from-twin-zoo: e.g. 64,256 (the default)")
    p.add_argument("--precisions", help="--from-twin-zoo: e.g. fp32,fp16 (default fp32,fp16,bf16)")
    p.add_argument("--modes", help=f"--from-twin-zoo: training modes, of {', '.join(MODES)} (default all four)")
    p.add_argument("--loops", help=f"--from-twin-zoo: training loops, of {', '.join(LOOPS)} (default both: every "
                                   "shape is a workload of each)")
    p.add_argument("--candidates", help="only these candidates, e.g. ridge-poly,svr (default all)")
    p.add_argument("--splits", type=numbers.int_range(2, 50), default=5, help="cross-validation folds (default 5)")
    p.add_argument("--jobs", type=numbers.int_range(1, 256), help="worker processes the folds are fitted in "
                                                                  "(default: one per core; 1: none)")
    p.add_argument("--shortlist", type=numbers.int_range(0, 100),
                   help="candidates that go through every fold after a first pass ranks them all on one fold "
                        "(default 6; 0: every candidate through every fold)")
    p.add_argument("--objective", default="energy", help="what the CV regret is measured on (default energy)")
    p.add_argument("--quick", action="store_true", help="smaller candidate models (fast; for trying things out)")
    p.add_argument("--measured-weight", metavar="W", default="auto",
                   help="with measured and twin data (--source both): the weight of a measured point against a "
                        "twin point's 1 (default auto: the measured points weigh as much in total as the twin's)")
    p.add_argument("--transfer", action="store_true",
                   help="adapt a trained selector (--from) to the store's measured sweeps, a few are enough, "
                        "instead of training anew (docs/selector.md)")
    p.add_argument("--from", dest="base", metavar="SELECTOR",
                   help="--transfer: the selector to adapt (default the shipped profiles/selectors/default.joblib)")
    p.add_argument("--trust", action="store_true",
                   help="--transfer: load --from from outside the trusted folders (unpickling runs code)")
    p.add_argument("--module", metavar="M", help="store: learn from the sweeps of this module, e.g. "
                   "'P3701-0005 (AGX Orin 64GB)' (default: the store's only one, else the profile's)")
    p.add_argument("--across-modules", action="store_true",
                   help="store: learn across every module swept, the module a feature (`select --module`)")
    p.add_argument("--json", action="store_true", help="print the CV table and the saved file as JSON")
    p.set_defaults(func=cmd_train_selector)

    p = sub.add_parser("select", help="predict the best DVFS setting for a workload (no run, no board needed)")
    p.add_argument("--model", type=numbers.model, required=True, help="zoo name, hub id, checkpoint folder or config.json")
    p.add_argument("--task", required=True, help="GLUE task, e.g. sst2")
    p.add_argument("--batch-size", type=numbers.batch_size, help="default: the zoo entry's")
    p.add_argument("--max-seq-len", type=numbers.seq_len, help="default: the zoo entry's")
    p.add_argument("--precision", choices=PRECISIONS, help="default: the zoo entry's")
    add_mode_args(p)
    numbers.add_pad_argument(p)
    numbers.add_loop_argument(p)
    p.add_argument("--objective", default="energy", help="energy (default), energy@5%%, edp, eta:0.5")
    p.add_argument("--selector", metavar="FILE", help="a trained selector (default: yours, else the shipped one)")
    p.add_argument("--trust", action="store_true",
                   help="load --selector from outside the trusted folders (unpickling runs code; owner still checked)")
    p.add_argument("--probes", type=numbers.int_range(0, 1000), default=0, help="measure K (0-3) short windows first to correct the prediction")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--twin", metavar="PROFILE", nargs="?", const=DEFAULT_PROFILE,
                       help=f"choose for this twin's module (its figures, settings and memory), and take the probe "
                            f"windows on it (default profile {DEFAULT_PROFILE})")
    where.add_argument("--sysfs-root", metavar="PATH",
                       help="choose for the board under PATH (its module, settings and memory; no probes)")
    p.add_argument("--module", metavar="M", help="a selector trained across modules: predict for this module it "
                   "learnt (default: the board's, else the one it was trained on)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_select)


# --------------------------------------------------------------------------- train-selector
def _progress(enabled: bool) -> Callable[..., None]:
    """One reporter for both callers: the twin zoo's (i, n, what) and training's one line."""
    def report(*args: object) -> None:
        if not enabled:
            return
        if len(args) == 3:
            i, n, what = args
            if isinstance(i, int) and (i % 25 == 0 or i == n):
                print(f"  [{i}/{n}] {what}", file=sys.stderr, flush=True)
        else:
            print(f"  {args[0]}", file=sys.stderr, flush=True)
    return report


def cmd_train_selector(args: argparse.Namespace) -> int:
    from engine.dvfs.objectives import parse_objective
    from engine.selector.candidates import default_candidates
    from engine.selector.dataset import (DEFAULT_BATCH_SIZES, DEFAULT_LOOPS, DEFAULT_MODES, DEFAULT_PRECISIONS,
                                         DEFAULT_SEQ_LENS, LARGE_BATCH_SIZES, from_twin_zoos)
    from engine.selector.mixing import parse_weight
    from engine.selector.persistence import save_selector, sidecar_path
    from engine.selector.training import train_from_store, train_on

    import time

    started = time.perf_counter()
    if args.splits < 2:
        raise ConfigError(f"--splits {args.splits} is too few", "use 2 or more folds")
    objective = parse_objective(args.objective)
    progress = _progress(not args.json)
    candidates = default_candidates(small=args.quick, names=_csv(args.candidates))
    command = {k: v for k, v in vars(args).items() if k != "func"}  # how it was trained, for the sidecar
    measured_weight = parse_weight(args.measured_weight)
    profiles = _board_profiles(args)
    if len(profiles) > 1 and not args.from_twin_zoo:
        raise ConfigError(f"--twin {args.twin} names {len(profiles)} profiles; only --from-twin-zoo learns from "
                          "several twins", "add --from-twin-zoo, or give one --twin (the store's sweeps name their "
                          "own modules: --across-modules)")
    args.profile = profiles[0]
    if args.module and args.across_modules:
        raise ConfigError("--module picks one module's sweeps; --across-modules learns across all of them",
                          "give one of the two")
    if args.across_modules and (args.transfer or args.from_twin_zoo):
        raise ConfigError("--across-modules learns from the store's sweeps alone (the twin zoo's rows, and a "
                          "transferred selector's base, have no module)",
                          "drop --across-modules, or train from the store (no --from-twin-zoo, no --transfer)")
    if args.transfer:
        return _transfer(args, objective, command, started)
    if args.base:
        raise ConfigError("--from names the selector --transfer adapts", "add --transfer, or drop --from")
    if args.from_twin_zoo:
        if args.source not in (None, "twin", "both"):
            raise ConfigError(f"--from-twin-zoo makes twin data; --source {args.source} contradicts it",
                              "drop --source, add the store's measured sweeps with --source both, or train from "
                              "the store without --from-twin-zoo")
        if args.module and args.source != "both":
            raise ConfigError("--module picks the store's measured sweeps; --from-twin-zoo alone reads none",
                              "add --source both to add that module's measured sweeps, or drop --module")
        # An option not given keeps the zoo's default grid.
        batch_sizes = _ints(args.batch_sizes, "batch-sizes")
        large_batch_sizes = _ints(args.large_batch_sizes, "large-batch-sizes")
        seq_lens = _ints(args.seq_lens, "seq-lens", numbers.MAX_SEQ_LEN)
        precisions = tuple(parse_precision(t) for t in _csv(args.precisions) or ())
        modes = tuple(parse_mode(t) for t in _csv(args.modes) or ())
        loops = tuple(parse_loop(t) for t in _csv(args.loops) or ())
        progress("generating twin training data (fast sweeps)")
        if len(profiles) > 1 and args.source == "both":
            raise ConfigError("--source both weighs one module's measured sweeps over its twin zoo",
                              "give one --twin with --source both")
        ds = from_twin_zoos(profiles, models=_csv(args.models), tasks=_csv(args.tasks), space=args.space,
                           progress=progress, batch_sizes=batch_sizes or DEFAULT_BATCH_SIZES,
                           large_batch_sizes=large_batch_sizes or LARGE_BATCH_SIZES, seq_lens=seq_lens or DEFAULT_SEQ_LENS,
                           precisions=precisions or DEFAULT_PRECISIONS, modes=modes or DEFAULT_MODES,
                           loops=loops or DEFAULT_LOOPS)
        if args.source == "both":  # the zoo, and the store's measured sweeps weighted over it
            from engine.results.store import Store, default_db_path
            from engine.selector.training import with_measured

            with Store(Path(args.db) if args.db else default_db_path(), create=False) as store:
                ds = with_measured(ds, store, profile=args.profile, space=args.space, rails=args.rails,
                                   measured_weight=measured_weight, module=args.module)
        trained = train_on(ds, objective, candidates=candidates, n_splits=args.splits, progress=progress,
                           command=command, jobs=args.jobs, shortlist=args.shortlist)
    else:
        for flag in ("models", "tasks", "batch_sizes", "large_batch_sizes", "seq_lens", "precisions", "modes",
                     "loops"):
            if getattr(args, flag):
                raise ConfigError(f"--{flag.replace('_', '-')} only applies with --from-twin-zoo",
                                  "add --from-twin-zoo, or drop the option")
        from engine.results.store import Store, default_db_path

        db = Path(args.db) if args.db else default_db_path()
        with Store(db, create=False) as store:
            trained = train_from_store(store, objective, source=args.source or "measured", profile=args.profile,
                                       space=args.space, rails=args.rails, candidates=candidates,
                                       n_splits=args.splits, progress=progress, command=command,
                                       measured_weight=measured_weight, module=args.module,
                                       across_modules=args.across_modules, jobs=args.jobs,
                                       shortlist=args.shortlist)
    selector, report, ds = trained.selector, trained.report, trained.dataset
    path = save_selector(selector, args.out)
    took = time.perf_counter() - started
    if args.json:
        print(json.dumps({"saved": str(path), "sidecar": str(sidecar_path(path)), "winner": selector.winner,
                          "source": selector.source, "training": selector.training, "cv_table": report.table(),
                          "cv_graded_on": report.graded_on, "basis": selector.basis.to_json(),
                          "figures_source": "predicted (CV on held-out workloads)", "wall_s": round(took, 1),
                          "cv_cost": report.cost_json()},
                         indent=2, default=str))
        return 0
    print(format_cv_table(report.table(), ds.source, report.graded_on))
    print(f"\nWinner: {selector.winner}" + (f" (figures from {selector.model.spec.label})"
                                          if selector.chooser is not None else ""))
    print(f"Saved: {path}\n       {sidecar_path(path)}  ({selector.source}-trained, {len(ds)} rows)")
    print(f"Data basis: {selector.basis.line()}")
    print(f"Took {took:.0f} s ({ds.summary()['workloads']} workloads); cross-validation {report.cpu_s:.0f} s CPU "
          f"in {report.jobs} job{'s' if report.jobs > 1 else ''}"
          + (f", {len(report.shortlist)} of {len(report.rows)} candidates through every fold" if report.shortlist
             else ""))
    return 0


def _transfer(args: argparse.Namespace, objective: Objective, command: JsonObject, started: float) -> int:
    """`train-selector --transfer`: the base selector with a correction fitted on the store's measured sweeps."""
    import time

    from engine.results.store import Store, default_db_path
    from engine.selector.persistence import (DEFAULT_NAME, load_selector, resolve_selector_path, save_selector,
                                             shipped_selector_dir, sidecar_path, user_selector_dir)
    from engine.selector.training import store_dataset
    from engine.selector.transfer import HOW_TO_MEASURE, transfer_selector

    for flag in ("from_twin_zoo", "models", "tasks", "batch_sizes", "large_batch_sizes", "seq_lens", "precisions",
                 "modes", "loops", "candidates"):
        if getattr(args, flag):
            raise ConfigError(f"--{flag.replace('_', '-')} does not apply to --transfer (it adapts a trained "
                              "selector to the store's measured sweeps)", "drop the option")
    if args.source not in (None, "measured"):
        raise ConfigError(f"--transfer adapts to measured sweeps; --source {args.source} contradicts it",
                          "drop --source")
    base_path = resolve_selector_path(args.base or shipped_selector_dir() / "default.joblib", trust=args.trust)
    target = Path(args.out).expanduser() if args.out else user_selector_dir() / DEFAULT_NAME
    if target.suffix != ".joblib":
        target = target.with_suffix(".joblib")
    if target.resolve() == base_path.resolve() or target.resolve().parent == shipped_selector_dir().resolve():
        what = "the selector it adapts" if target.resolve() == base_path.resolve() else "the shipped folder"
        raise ConfigError(f"--transfer would overwrite {target} ({what})",
                          f"give another --out, e.g. --out {user_selector_dir() / 'transfer.joblib'}")
    base = load_selector(base_path, trust=args.trust)
    db = Path(args.db) if args.db else default_db_path()
    try:
        with Store(db, create=False) as store:
            ds = store_dataset(store, source="measured", profile=base.encoder.profile or args.profile,
                               space=_trained_space(base) or args.space, rails=args.rails,
                               module=args.module)
    except ConfigError as exc:
        # the store's own hint (another --rails) comes first when it has one
        rails = exc.other_rails if isinstance(exc, NoSweepPointsError) else ()
        hint = f"give --rails {rails[0]} to learn from those; or " if rails else ""
        raise ConfigError(f"--transfer needs measured sweeps: {exc.what}", hint + HOW_TO_MEASURE) from None
    selector, report = transfer_selector(base, ds, objective, base_path=base_path, command=command)
    path = save_selector(selector, target)
    took = time.perf_counter() - started
    if args.json:
        print(json.dumps({"saved": str(path), "sidecar": str(sidecar_path(path)), "winner": selector.winner,
                          "base": str(base_path), **report.to_json(), "basis": selector.basis.to_json(),
                          "figures_source": "predicted (graded against measured sweeps)", "wall_s": round(took, 1)},
                         indent=2, default=str))
        return 0
    print(format_cv_table(report.cv_table, "measured", report.graded_on))
    print(f"\nAdapted {base_path} with {report.measured_workloads} measured workload(s), "
          f"{report.measured_rows} points")
    if report.measured_workloads < 2:  # docs/selector.md, "Transfer": the c terms need two
        print("Note: one measured workload cannot tell the correction how compute-bound and host-bound "
              "workloads differ: it bends every workload as it bent this one; measure a second, unlike it")
    print(f"Saved: {path}\n       {sidecar_path(path)}")
    print(f"Data basis: {selector.basis.line()}")
    print(f"Took {took:.1f} s")
    return 0


def _board_profiles(args: argparse.Namespace) -> list[str]:
    """The device profile(s) a command works for: --twin's (a comma-separated list where the command
    takes several), the module profile of the board under --sysfs-root, else --profile (or the default)."""
    if getattr(args, "twin", None):
        names = _csv(args.twin) or []
        for name in names:
            _load_profile(name)  # an unknown name is refused now, naming the profiles there are
        return names
    if getattr(args, "sysfs_root", None):
        return [_board(args.sysfs_root)[0].name]
    return [getattr(args, "profile", None) or DEFAULT_PROFILE]


def _board(root: str) -> tuple[TwinProfile, int | None]:
    """The module profile of the board under `root` (its identity: engine.device.jetson.identity) and its
    MemTotal in bytes (engine.device.meminfo; None where the tree has none)."""
    from engine.core import paths
    from engine.core.errors import DeviceError
    from engine.device.jetson.identity import read_identity
    from engine.device.meminfo import read_meminfo
    from engine.device.sysfs import SysfsTree

    path = paths.sysfs_root(root)
    if not path.is_dir():
        raise DeviceError(f"--sysfs-root {shown(str(root))}: no such folder",
                          "give the root of the board's tree (its proc/device-tree and sys folders), or --twin NAME")
    identity = read_identity(SysfsTree(path))
    mem = read_meminfo(path)
    return _load_profile(identity.module_profile or DEFAULT_PROFILE), (None if mem is None else mem.total_bytes)


def _trained_space(selector: Selector) -> str | None:
    """The setting space the selector was trained over, as its training record says."""
    space = selector.training.get("space")
    return space if isinstance(space, str) else None


def _load_profile(name: str) -> TwinProfile:
    from engine.device.twin.profile import load_profile

    return load_profile(name)


def _pct(v: float | None, digits: int = 2) -> str:
    return "-" if v is None else f"{100 * v:.{digits}f}%"


def format_cv_table(rows: Sequence[CvTableRow], source: str, graded_on: str | None = None) -> str:
    head = ["#", "candidate", "mean regret", "worst regret", "MAPE time", "MAPE power", "MAPE energy", "fit s"]
    # the CV's cost per candidate and its folds, where the table has them (tables written before do not)
    costed = all("cpu_s" in r and "folds" in r for r in rows)
    head += ["CPU s", "folds"] if costed else []
    body = [[str(i + 1), r["label"], _pct(r["mean_regret"]), _pct(r["worst_regret"]), _pct(r["mape_time"], 1),
             _pct(r["mape_power"], 1), _pct(r["mape_energy"], 1), f"{r['fit_s']:.1f}"]
            + ([f"{r['cpu_s']:.1f}", str(r["folds"])] if costed else []) for i, r in enumerate(rows)]
    widths = [max(len(x[i]) for x in [head] + body) for i in range(len(head))]

    def line(cells: list[str]) -> str:
        return "  ".join(c.ljust(w) if i == 1 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))

    title = (f"Leave-workloads-out cross-validation on {source} data "
             f"(regret of each candidate's choice against the oracle; figures predicted)")
    graded = [f"Graded on: {graded_on}"] if graded_on else []
    return "\n".join([title, line(head)] + [line(b) for b in body] + graded)


# --------------------------------------------------------------------------- select
def cmd_select(args: argparse.Namespace) -> int:
    from engine.dvfs.objectives import parse_objective
    from engine.selector.features import features_of
    from engine.selector.persistence import load_selector
    from engine.selector.probes import MAX_PROBES

    if not 0 <= args.probes <= MAX_PROBES:
        raise ConfigError(f"--probes {args.probes} is out of range", f"use 0 to {MAX_PROBES}")
    if args.probes and not args.twin:
        raise ConfigError("--probes needs somewhere to measure",
                          "add --twin [PROFILE]; on a board, run with `slm-dvfs run --policy ml` and the probes option")
    # The board it chooses for: --twin's profile, or the module profile and memory of the tree under --sysfs-root
    board, mem_total = (None, None)
    if args.twin:
        board = _load_profile(args.twin)
        mem_total = int(board.memory_total_mb * 1024 * 1024) if board.memory_total_mb else None
    elif args.sysfs_root:
        board, mem_total = _board(args.sysfs_root)
    selector = load_selector(args.selector, trust=args.trust)
    if args.module is not None and board is not None and args.module != board.identity.module:
        raise ConfigError(f"--module {args.module!r} is not the board's module ({board.identity.module})",
                          "drop --module: the board names its module")
    if board is not None:
        selector.for_profile(board)  # its module's figures and setting space, learnt or not (the confidence says)
    else:
        selector.use_module(args.module)
    objective = parse_objective(args.objective)
    from engine.workload.resolve import resolve_workload

    # once: its features, and its steps as a run takes them; refused if the board's memory cannot hold a step
    resolved = resolve_workload(workload_spec(args, trains=False), mem_total_bytes=mem_total)
    workload = features_of(resolved)
    # With dynamic padding, the mix of its batch lengths: what the probes run and the twin ensemble costs for
    # the interval, as the Setup and Run pages and the ml policy do.
    steps = resolved.steps
    measure = None
    from engine.device.baseline import AGX_MAXN, profile_baseline

    # The board's baseline, its uncapped mode by name (MAXN_SUPER, mode 2, on an Orin Nano): the choice is stated
    # in it. The board is --twin's or --sysfs-root's; --module alone names a module the selector learnt.
    if board is None and args.module is not None:
        from engine.device.jetson.identity import profile_of_module

        named = profile_of_module(args.module)
        board = _load_profile(named) if named else None
    base = profile_baseline(board) if board is not None else AGX_MAXN
    if args.probes:
        from engine.device.twin.fast import fast_sweep

        profile = _load_profile(args.twin)

        def measure(setting: DvfsSetting) -> Measurement:
            return fast_sweep(steps, profile, [base.in_its_mode(setting)], warmup_steps=1, steps=2)[0][1]

    from engine.core.provenance import Source

    from engine.selector.uncertainty import with_uncertainty

    choice = selector.choose(workload, objective, probes=args.probes, measure=measure,
                             as_source=Source.TWIN if args.twin else Source.MEASURED)
    # in the board's mode; the interval from the ensemble of the board's profile, else the selector's
    choice = with_uncertainty(choice.on_board(base), selector, steps, board)
    if args.json:
        from engine.selector.uncertainty import maxn_about_optimal

        out = choice.to_json()
        about = maxn_about_optimal(choice)
        out["maxn_about_optimal"] = {"value": about is not None, "why": about,
                                     "says": about_optimal_text(choice) if about is not None else None}
        if not choice.probes:
            n, why = _probes_advice(choice)
            out["probes_it_calls_for"] = {"probes": n, "why": why}
        described = {k: v for k, v in selector.describe().items() if k != "cv_table"}
        out["selector"] = {"path": str(getattr(selector, "path", "")), **described}
        out["basis"] = selector.basis.line()
        out["module"] = {"name": selector.module, "profile": selector.encoder.profile,
                         "trained_on": selector.module_trained, "learnt_from": list(selector.modules)}
        print(json.dumps(out, indent=2, default=str))
        return 0
    print(clean_text(format_choice(choice, selector)))
    return 0


# What select says when another setting is not worth its while (engine.selector.uncertainty.maxn_about_optimal).
MAXN_ABOUT_OPTIMAL = "{baseline} is already about optimal for this workload: another setting saves little or nothing"


def about_optimal_text(choice: Choice) -> str:
    """MAXN_ABOUT_OPTIMAL naming the choice's baseline by its mode's name and id."""
    return MAXN_ABOUT_OPTIMAL.format(baseline=choice.baseline_label)


def format_choice(choice: Choice, selector: Selector) -> str:
    from engine.core.provenance import Source

    w = choice.workload
    conf = choice.confidence
    lines = [
        f"Selector:  {getattr(selector, 'path', '')} ({selector.source}-trained, {choice.chooser})",
        f"Rests on:  {selector.basis.line()}",
        *([f"Module:    {selector.module} ({module_note(selector)})"] if selector.module else []),
        f"Workload:  {w.model} / {w.task}, batch {w.batch_size}, length {w.seq_len}, {w.precision}, {w.mode}"
        + f", {w.loop} loop",  # always: which loop is the default depends on the command
        f"Objective: {choice.objective}",
        f"Chosen:    {choice.setting.label()}",
        "",
        f"  {'':<8}{'time/sample':>13}{'power':>10}{'energy/sample':>15}",
    ]
    unc = getattr(choice, "uncertainty", None)
    named = max(8, len(choice.baseline_name) + 1)
    lines[-1] = f"  {'':<{named}}{'time/sample':>13}{'power':>10}{'energy/sample':>15}"
    for name, p, iv in (("chosen", choice.predicted, unc and unc.energy),
                        (choice.baseline_name, choice.maxn, unc and unc.maxn_energy)):
        span = "" if iv is None or p.source != Source.PREDICTED else f" ({iv.low:.4f}–{iv.high:.4f})"
        lines.append(f"  {name:<{named}}{1000 * p.time_per_sample:>10.2f} ms{p.power_w:>8.1f} W"
                     f"{p.energy_per_sample:>13.4f} J{span}  [{p.source}]")
    lines.append("")
    expected = versus_text(100.0 * choice.saving, 100.0 * choice.slowdown, than=choice.baseline_label,
                           interval=unc and unc.saving)
    lines.append(f"Expected:  {expected}"
                 f" per sample [predicted]")
    from engine.selector.uncertainty import maxn_about_optimal

    about = maxn_about_optimal(choice)
    if about is not None:
        lines += [f"Verdict:   {about_optimal_text(choice)}", f"           because {about}"]
    lines += uncertainty_lines(unc)
    if not choice.probes:
        n, why = _probes_advice(choice)
        lines.append(f"  probes it calls for: {n} ({why}); the ml policy takes them unless told a number")
    lines.append(f"Confidence: {conf.level} ({conf.reason}); runner-up {conf.runner_up_margin:.2%} behind, "
                 f"top-3 spread {conf.top_spread:.2%} [predicted]")
    if choice.probes:
        lines.append("Probes:")
        for s, m in choice.probes:
            lines.append(f"  {s.label():<40} {1000 * m.seconds_per_sample:8.2f} ms/sample  {m.avg_power_w:6.1f} W  "
                         f"{m.joules_per_sample:.4f} J/sample  [{m.source}]")
    return "\n".join(lines)


def module_note(selector: Selector) -> str:
    """Whether the selector learnt from the module it chooses for, and from which modules."""
    learnt = ", ".join(selector.modules) or "no named module"
    if not selector.module_trained:
        return f"not trained on it: predicted from its figures; learnt from {learnt}"
    return "trained on it" + (f"; learnt across {len(selector.modules)}: {learnt}" if len(selector.modules) > 1 else "")


def _probes_advice(choice: Choice) -> tuple[int, str]:
    """How many probes the ml policy would take for this choice, and why (uncertainty.probes_for)."""
    from engine.selector.probes import MAX_PROBES
    from engine.selector.uncertainty import probes_for

    return probes_for(choice, MAX_PROBES)


def uncertainty_lines(unc: ChoiceUncertainty | None) -> list[str]:
    """The basis of the saving's interval, the energies' intervals, the optimum's spread, what is left out."""
    if unc is None:
        return ["Interval: none (no step trace and no CV record to give one)"]
    out = [f"  interval: {unc.saving.level:.0%}, from the {unc.basis}"]
    if unc.optimum_gpu_hz is not None:
        out.append(f"  the ensemble's optimum: GPU {unc.optimum_gpu_hz.low / 1e6:.0f}-{unc.optimum_gpu_hz.high / 1e6:.0f} "
                   f"MHz ({unc.optimum_steps} step(s) apart)")
    if unc.note:
        out.append(f"  note: {unc.note}")
    return out
