"""`slm-dvfs runs | show | export | check | import-tegrastats`: the results store from the command line
(`sweeps`: sweeps_cmd; `compare`: compare_cmd)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Sequence

from engine.cli import numbers
from engine.cli.mode_args import describe_mode
from engine.core.constants import MODES
from engine.core.errors import ConfigError, ProfileError, SlmDvfsError
from engine.core.jsontypes import as_list
from engine.core.provenance import Source
from engine.device.baseline import AGX_MAXN, Baseline
from engine.results.compare import Side, mismatch
from engine.results.export import (
    csv_text,
    default_name,
    sweep_csv_text,
    sweep_table,
    write_export,
    write_sweep_export,
)
from engine.core.text import clean_text
from engine.results.format import (format_setting, format_when, saving_text, slowdown_text, sweep_point_lines,
                                    versus_text)
from engine.results.records import several_boards
from engine.results.totals import RunTotals
from engine.results.store import (ComparisonRecord, DeviceRecord, RunRecord, Store, SweepRecord, WorkloadRecord,
                                  default_db_path)

if TYPE_CHECKING:
    from engine.device.tegra_parse import LogSummary
    from engine.results.compare import SweepSaving
    from engine.results.sweeps import PointSummary

IMPORTED_POLICY = "imported"


def add_db_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", metavar="PATH",
                        help="results database (default $SLM_DVFS_DB, else DATA_DIR/results.sqlite)")


def _db_path(args: argparse.Namespace) -> Path:
    return Path(args.db) if args.db else default_db_path()


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("runs", help="list stored runs, newest first")
    add_db_arg(p)
    p.add_argument("--model", type=numbers.model, help="only runs of this model")
    p.add_argument("--task", help="only runs of this task")
    p.add_argument("--policy", help="only runs of this policy (maxn, static, oracle, online, ml, imported, ...)")
    p.add_argument("--source", choices=[s.value for s in Source], help="only figures of this source")
    p.add_argument("--status", choices=["running", "finished", "failed", "cancelled", "abandoned"], help="only runs in this state")
    p.add_argument("--limit", type=numbers.int_range(1, 10**9), default=50, help="at most N runs (default 50)")
    p.add_argument("--json", action="store_true", help="print a JSON list")
    p.set_defaults(func=cmd_runs)

    p = sub.add_parser("show", help="everything about one stored run (N) or sweep (sN)")
    add_db_arg(p)
    p.add_argument("id", type=numbers.run_or_sweep_id,
                   help="run id (`slm-dvfs runs` lists them), or a sweep id as sN (e.g. s3)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_show)

    what = ("a run's power samples (N), or a sweep's points (sN), with its summary, as CSV or Parquet: "
            "by default into run-N.csv or sweep-sN.csv in the current folder (--out names another file)")
    p = sub.add_parser("export", help=what, description=what[0].upper() + what[1:] + ".")
    add_db_arg(p)
    p.add_argument("id", type=numbers.run_or_sweep_id,
                   help="run id (`slm-dvfs runs` lists them), or a sweep id as sN (`slm-dvfs sweeps` lists them)")
    p.add_argument("--format", choices=["csv", "parquet"], default="csv", help="file format (default csv)")
    p.add_argument("--out", metavar="FILE", help="output file (default: run-N.csv or sweep-sN.csv, .parquet with "
                   "--format parquet, in the current folder; `-` = stdout, csv only)")
    p.set_defaults(func=cmd_export)

    what = ("check the results database whole: SQLite's integrity check over every page, record and index "
            "(opening a store checks it only after a writer died)")
    p = sub.add_parser("check", help=what, description=what[0].upper() + what[1:] + ".")
    add_db_arg(p)
    p.set_defaults(func=cmd_check)

    p = sub.add_parser("import-tegrastats", help="store an existing tegrastats log as a measured run")
    add_db_arg(p)
    p.add_argument("log", metavar="LOG", help="a file written by `tegrastats --logfile` (or its captured output)")
    p.add_argument("--label", required=True, help="free text naming the run")
    p.add_argument("--interval-ms", type=numbers.float_range(0.0, 3_600_000.0, low_open=True), help="the log's --interval, for lines without dates")
    p.add_argument("--rails", default="all", help="rails in the total: all | gpu+cpu | NAME,NAME (default all)")
    p.add_argument("--model", type=numbers.model, help="the model fine-tuned while the log ran (zoo name or any name)")
    p.add_argument("--task", help="its task (needed with --model)")
    p.add_argument("--batch-size", type=numbers.batch_size, help="default: the zoo entry's")
    p.add_argument("--seq-len", type=numbers.seq_len, help="default: the zoo entry's")
    p.add_argument("--precision", help="default: the zoo entry's")
    p.add_argument("--mode", choices=MODES, default="full", help="training mode (default full)")
    p.add_argument("--steps", type=numbers.steps, help="training steps the log covers")
    p.add_argument("--samples", type=numbers.samples, help="training samples the log covers (gives samples/s and J/sample)")
    p.add_argument("--board", default="unknown board (imported tegrastats log)", help="board name to record")
    p.add_argument("--module", default="unknown", help="module name to record")
    p.add_argument("--l4t", help="L4T release of the board, e.g. 36.3.0")
    p.add_argument("--serial", help="the board's serial-number (tells two boards of one module apart)")
    p.add_argument("--jetpack", help="JetPack release, e.g. 6.0")
    p.add_argument("--profile", help="device profile name, e.g. agx-orin-64gb: what the board can show (power "
                   "limit, memory; lines beyond it are skipped; default agx-orin-64gb's)")
    p.set_defaults(func=cmd_import_tegrastats)


# --- formatting -------------------------------------------------------------------------------
def _num(value: float | None, fmt: str = ".1f") -> str:
    return "-" if value is None else format(value, fmt)


def _metric(value: object) -> str:
    return format(value, ".4f") if isinstance(value, (int, float)) and not isinstance(value, bool) else str(value)


def format_runs(runs: Sequence[RunRecord]) -> str:
    header: tuple[str, ...] = ("id", "when", "model", "task", "policy", "setting", "energy J", "time s", "source",
                               "status")
    rows: list[tuple[str, ...]] = [
        (str(r.id), format_when(r.started_at), r.model or "-", r.task or "-", r.policy, format_setting(r.setting),
         _num(r.energy_j), _num(r.time_s), r.source.value, r.status)
        for r in runs
    ]
    # Which board, only where it matters: runs of one kind (boards, or twins) from more than one.
    if several_boards(r.device for r in runs):
        header += ("board",)
        rows = [row + (r.device.label() if r.device else "-",) for row, r in zip(rows, runs)]
    return "\n".join(table_lines(header, rows, right={0, 6, 7}))


def table_lines(header: Sequence[str], rows: Sequence[Sequence[str]], right: set[int]) -> list[str]:
    """A plain table's lines: columns as wide as their widest cell, those in `right` (numbers) right-aligned."""
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(header)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    return [line(header)] + [line(row) for row in rows]


def format_run(run: RunRecord, comparisons: Sequence[ComparisonRecord], n_samples: int,
               others: Mapping[int, RunRecord | None] | None = None) -> str:
    """`show N`; `others`: each run it was compared with (None: deleted since), whose other board of its
    module is said, and which is refused when it does not compare (a comparison stored before it was checked)."""
    src = run.source.value
    lines = [f"Run {run.id}  [{src}]  {run.status}" + (f"  {run.label}" if run.label else "")]
    lines.append(f"  started      {format_when(run.started_at)}" + (f"   finished {format_when(run.finished_at)}" if run.finished_at else ""))
    if run.device:
        d = run.device
        release = " ".join(x for x in (f"L4T {d.l4t}" if d.l4t else "", f"JetPack {d.jetpack}" if d.jetpack else "") if x)
        kind = f"digital twin ({d.profile})" if d.is_twin else (d.profile or "board")
        serial = f" #{d.serial}" if d.serial else ""
        lines.append(f"  device       {d.board}, {d.module}{serial} [{kind}] {release}".rstrip())
    if run.workload:
        w = run.workload
        mode = describe_mode(w.mode, w.lora, w.grad_checkpointing, w.family)
        lines.append(f"  workload     {w.model} / {w.task}  batch {w.batch_size}  seq {w.seq_len}  {w.precision}  {mode}"
                     + (f"  ({w.params:,} params)" if w.params else ""))
    lines.append(f"  policy       {run.policy}" + (f"  objective {run.objective}" if run.objective else ""))
    lines.append(f"  setting      {format_setting(run.setting)}")
    extra = [f"seed {run.seed}" if run.seed is not None else "", f"steps {run.steps}" if run.steps else "",
             f"samples {run.samples}" if run.samples else "", f"weights {run.weights}" if run.weights else "",
             "synthetic data" if run.synthetic else "", f"data {run.data_source}" if run.data_source not in (None, "synthetic") else ""]
    if any(extra):
        lines.append("  run          " + ", ".join(x for x in extra if x))
    lines.append(f"Figures [{src}]")
    lines.append(f"  time         {_num(run.time_s, '.2f')} s" + (f"   (host wall {run.wall_s:.2f} s)" if run.wall_s is not None else ""))
    rails = f" over {run.rails}" if run.rails else ""
    lines.append(f"  energy       {_num(run.energy_j, '.2f')} J{rails}")
    for rail, joules in sorted(run.rail_energy_j.items()):
        lines.append(f"    {rail:18} {joules:10.2f} J")
    lines.append(f"  avg power    {_num(run.avg_power_w, '.2f')} W")
    if run.samples_per_s is not None:
        lines.append(f"  throughput   {run.samples_per_s:.2f} samples/s, {_num(run.joules_per_sample, '.3f')} J/sample")
    metric_tag = run.metric_provenance.tag(run.source)  # meaningful only for pretrained weights on real data
    for name, value in sorted(run.metrics.items()):
        lines.append(f"  {name:12} {_metric(value)}  {metric_tag}")
    lines.append(f"  power trace  {n_samples} samples stored")
    for c in comparisons:
        other, role = (c.baseline_run_id, "vs baseline") if c.run_id == run.id else (c.run_id, "baseline of")
        rec = (others or {}).get(other)
        problem = None
        if rec is not None:
            compared, base = (run, rec) if c.run_id == run.id else (rec, run)
            problem = mismatch(Side.of(compared), Side.of(base))
        if problem is not None:
            lines.append(f"Comparison {role} run {other}: not comparable ({problem.what})")
            continue
        theirs = rec.device if rec is not None else None
        note = (f", other board (#{theirs.serial})" if run.device is not None and theirs is not None
                and run.device.other_board(theirs) else "")
        figures = f"{saving_text(c.saving_pct, than=None)}, {slowdown_text(c.slowdown_pct, than=None)}"
        if c.run_id != run.id:  # the figures are always the policy run's, against this (its baseline)
            figures = f"run {other} against this one: {figures}"
        lines.append(f"Comparison [{c.source.value}] {role} run {other}: {figures}"
                     + (f" ({c.rails}{note})" if c.rails else (f" ({note[2:]})" if note else "")))
    if run.notes:
        lines.append(f"Notes: {run.notes}")
    if run.error:
        lines.append(f"Error: {run.error}")
    return "\n".join(lines)


# --- commands ---------------------------------------------------------------------------------
def cmd_runs(args: argparse.Namespace) -> int:
    path = _db_path(args)
    if not path.exists():
        print(f"no runs stored yet ({path} does not exist)")
        return 0
    from engine.device.guard.notes import pinned_boards

    for note in pinned_boards():  # a board left pinned would bias every run measured on it
        print(f"note: {note}", file=sys.stderr)
    with Store(path) as store:  # opening it marks runs whose process died `abandoned`
        runs = store.list_runs(model=args.model, task=args.task, policy=args.policy, source=args.source,
                               status=args.status, limit=args.limit)
    if args.json:
        print(json.dumps([r.to_json() for r in runs], indent=2))
    elif not runs:
        print(f"no runs match in {path}")
    else:
        print(clean_text(format_runs(runs)))
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    """The store whole, or a CorruptStoreError naming what is damaged (exit 2, main says it)."""
    with Store(_db_path(args), create=False) as store:
        found = store.check()
    died = (f"; {found.writers_died} writer(s) had stopped without closing it, nothing of theirs is damaged"
            if found.writers_died else "")
    print(f"{found.path}: whole (every page, record and index checked), {found.size_bytes / 1e6:.1f} MB: "
          f"{found.runs} runs, {found.power_samples} power samples, {found.sweeps} sweeps, "
          f"{found.sweep_points} sweep points{died}")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    if isinstance(args.id, numbers.SweepId):
        return show_sweep(args, int(args.id))
    with Store(_db_path(args), create=False) as store:
        run = store.get_run(args.id)
        comparisons = store.comparisons_for(run.id)
        n_samples = len(store.power_samples(run.id))
        others: dict[int, RunRecord | None] = {}
        for c in comparisons:
            other = c.baseline_run_id if c.run_id == run.id else c.run_id
            try:
                others[other] = store.get_run(other)
            except SlmDvfsError:  # deleted since
                others[other] = None
    if run.status_warning:
        print(run.status_warning, file=sys.stderr)
    if args.json:
        out = run.to_json()
        out["comparisons"] = [c.to_json() for c in comparisons]
        out["power_samples"] = n_samples
        print(json.dumps(out, indent=2))
    else:
        print(clean_text(format_run(run, comparisons, n_samples, others)))
    return 0


def show_sweep(args: argparse.Namespace, sweep_id: int) -> int:
    """`show sN`."""
    from engine.results.compare import optimum_vs_maxn
    from engine.results.baseline import device_baseline
    from engine.results.sweeps import maxn_of, optimum, summarize_points

    with Store(_db_path(args), create=False) as store:
        sweep = store.get_sweep(sweep_id)
        device, workload = store.get_device(sweep.device_id), store.get_workload(sweep.workload_id)
        stored = store.sweep_points(sweep_id)
        points = summarize_points(stored)
        boards = store.sweep_boards(sweep_id)
    base = device_baseline(device, sweep.space)  # its module's uncapped mode: MAXN_SUPER (mode 2) on an Orin Nano
    best, maxn = optimum(points), maxn_of(points, base.setting)
    vs_maxn = optimum_vs_maxn(best, maxn)
    note = sweep.status_note(len(stored))
    if args.json:
        print(json.dumps({
            "id": sweep.id, "status": sweep.status, "resumable": sweep.resumable, "status_note": note,
            "points_done": len(stored), "points_planned": sweep.planned,
            "source": sweep.source.value, "label": sweep.label,
            "created_at": sweep.created_at, "space": dict(sweep.space), "warmup_steps": sweep.warmup_steps,
            "steps": sweep.steps, "repeats": sweep.repeats, "device": device.to_json(),
            "workload": workload.to_json(definition=True),
            "boards": [b.to_json() for b in boards],
            "points": [p.to_json() for p in points], "optimum": None if best is None else best.to_json(),
            "maxn": None if maxn is None else maxn.to_json(),
            "baseline": {"setting": base.setting.to_json(), "mode_name": base.name, "label": base.label},
            "optimum_saving_vs_maxn_pct": None if vs_maxn is None else vs_maxn.saving_pct,
            "optimum_slowdown_vs_maxn_pct": None if vs_maxn is None else vs_maxn.slowdown_pct,
        }, indent=2))
        return 0
    if note:
        print(note, file=sys.stderr)
    print(clean_text(format_sweep_record(sweep, device, workload, points, best, maxn, vs_maxn, boards, base)))
    return 0


def format_sweep_record(sweep: SweepRecord, device: DeviceRecord, w: WorkloadRecord, points: Sequence[PointSummary],
                        best: PointSummary | None, maxn: PointSummary | None, vs_maxn: SweepSaving | None,
                        boards: Sequence[DeviceRecord] = (), baseline: Baseline = AGX_MAXN) -> str:
    """A stored sweep (run here or imported) for `show sN`, against `baseline` (its device's:
    engine.results.baseline.device_baseline): `—` where a time was not recorded."""
    src = sweep.source.value
    space = sweep.space
    lines = [f"Sweep s{sweep.id}  [{src}]  {sweep.status}" + (f"  {sweep.label}" if sweep.label else "")]
    kind = f"digital twin ({device.profile})" if device.is_twin else (device.profile or "board")
    serial = f" #{device.serial}" if device.serial else ""
    release = f" L4T {device.l4t}" if device.l4t else ""
    lines.append(f"  device       {device.board}, {device.module}{serial} [{kind}]{release}")
    if len(boards) > 1:  # a fleet sweep: its points were measured on several boards of the module
        lines.append(f"  boards       {len(boards)} of the module measured its points: "
                     + ", ".join(f"#{b.serial}" if b.serial else "(no serial)" for b in boards))
    mode = describe_mode(w.mode, w.lora, w.grad_checkpointing, w.family)
    lines.append(f"  workload     {w.model} / {w.task}  batch {w.batch_size}  seq {w.seq_len}  {w.precision}  {mode}  "
                 f"pad {w.padding}  loop {w.loop}")
    if space.get("method") == "import":
        lines.append(f"  method       imported from {space.get('file', '?')} (sha256 {str(space.get('sha256', ''))[:12]})")
    else:
        lines.append(f"  method       {space.get('method', 'run')} sweep of {space.get('space') or 'explicit settings'}, "
                     f"{sweep.steps} steps per point after {sweep.warmup_steps} warm-up")
    rails = space.get("rails", "all")
    summed = [str(r) for r in as_list(space.get("rails_summed") or [])]  # the rails a stored sweep summed
    lines.append(f"  energy over  {rails}" + (f" = {' + '.join(summed)}" if summed else ""))
    untimed = sum(1 for p in points if p.energy_only)
    planned = f" of {sweep.planned} planned" if sweep.planned and sweep.status != "finished" else ""
    lines.append(f"  points       {sum(p.n for p in points)}{planned} over {len(points)} settings, up to {sweep.repeats} "
                 f"repeat(s)" + (f"; {untimed} setting(s) energy-only (time not recorded: —)" if untimed else ""))
    lines += ["  " + line for line in sweep_point_lines(points, best, maxn, src, baseline.name)]
    if best is not None:
        lines.append(f"optimum (energy per sample): {best.setting.label()}  [{src}]")
    if vs_maxn is not None:
        lines.append(f"  {versus_text(vs_maxn.saving_pct, vs_maxn.slowdown_pct, than=baseline.label)} "
                     f"per sample  [{src}]")
    lines.append(f"report: slm-dvfs report s{sweep.id}")
    return "\n".join(lines)


def cmd_export(args: argparse.Namespace) -> int:
    sweep = isinstance(args.id, numbers.SweepId)
    out = args.out or default_name("sweep" if sweep else "run", int(args.id), args.format)
    if args.format == "parquet" and out == "-":
        raise ConfigError("parquet cannot go to stdout", "pass --out FILE.parquet")
    with Store(_db_path(args), create=False) as store:
        if sweep:
            table = sweep_table(store, int(args.id))
            note = store.get_sweep(int(args.id)).status_note(len(table.rows))
        else:
            run = store.get_run(args.id)
            samples = store.power_samples(run.id)
            note = run.status_warning
    if note:
        print(note, file=sys.stderr)
    if out == "-":
        sys.stdout.write(sweep_csv_text(table) if sweep else csv_text(run, samples))
        return 0
    path = _writable(Path(out))
    try:
        if sweep:
            write_sweep_export(path, table, args.format)
        else:
            write_export(path, run, samples, args.format)
    except OSError as exc:
        raise ConfigError(f"cannot write {path}: {exc.strerror or exc}",
                          "pass --out a file in a folder you can write to") from None
    what = (f"sweep s{int(args.id)} ({len(table.rows)} points, {table.source})" if sweep
            else f"run {run.id} ({len(samples)} power samples, {run.source.value})")
    print(f"wrote {what} to {path.resolve()}")
    return 0


def _writable(path: Path) -> Path:
    """Refuse, before anything is written, an --out whose folder is missing or is a folder itself."""
    if path.is_dir():
        raise ConfigError(f"--out {path} is a folder", f"name a file in it, e.g. --out {path / 'run.csv'}")
    if not path.parent.is_dir():
        raise ConfigError(f"--out {path}: the folder {path.parent} does not exist",
                          "create it first, or pass --out a file in an existing folder")
    return path


def _workload_from_args(args: argparse.Namespace) -> WorkloadRecord | None:
    if not args.model:
        if args.task:
            raise ConfigError("--task was given without --model", "give both, or neither")
        return None
    if not args.task:
        raise ConfigError("--model needs --task", "add --task, e.g. --task sst2")
    entry = None
    try:
        from engine.workload.zoo import get_entry

        entry = get_entry(args.model)
    except (ConfigError, ProfileError, ImportError):
        entry = None  # a model outside the zoo: its shape must be given
    batch = args.batch_size or (entry.batch_size if entry else None)
    seq = args.seq_len or (entry.seq_len if entry else None)
    precision = args.precision or (entry.precision if entry else None)
    if batch is None or seq is None or precision is None:
        raise ConfigError(f"{args.model!r} is not in the model zoo, so its shape is unknown",
                          "add --batch-size, --seq-len and --precision")
    return WorkloadRecord(
        model=entry.name if entry else args.model, task=args.task, batch_size=batch, seq_len=seq,
        precision=precision, mode=args.mode, family=entry.family if entry else None,
        params=entry.params if entry else None,
    )


def cmd_import_tegrastats(args: argparse.Namespace) -> int:
    from engine.device.tegra_parse import scan_log
    from engine.device.monitor import resolve_rails
    from engine.results.traces import DEFAULT_MAX_SAMPLES, TraceDownsampler

    from engine.device.twin.profile import limits_for

    workload = _workload_from_args(args)
    # What the board can show (its profile's power limit and memory; the default profile's when
    # --profile is not given): lines beyond it are skipped, saying why. The log is read line by line, twice (its
    # rail set and timing, then its samples), its trace down-sampled as it is read to what the store keeps
    # (DEFAULT_MAX_SAMPLES): memory does not grow with the log, and nothing is stored before it is all read.
    scan = scan_log(args.log, interval_ms=args.interval_ms, limits=limits_for(args.profile))
    rails = resolve_rails(args.rails, scan.rails)
    trace = TraceDownsampler(0.0, scan.duration_s, DEFAULT_MAX_SAMPLES)
    tlog = scan.read(on_sample=trace.add)
    power_samples = tuple(trace.result())
    energy = sum(tlog.energy_j[r] for r in rails)
    duration = tlog.duration_s
    if duration <= 0:
        raise ConfigError(f"{args.log} covers no time (one sample, or every line at one instant)",
                          "import a longer log, or pass --interval-ms")
    device = DeviceRecord(board=args.board, module=args.module, l4t=args.l4t, jetpack=args.jetpack,
                          profile=args.profile, is_twin=False, serial=args.serial or None)
    notes = (f"imported from {Path(args.log).resolve()}: {tlog.count} samples, {tlog.skipped} lines skipped, "
             f"times from {tlog.timing}")
    with Store(_db_path(args)) as store:
        run_id = store.start_run(
            policy=IMPORTED_POLICY, source=tlog.source, device=device, workload=workload, steps=args.steps,
            rails=args.rails, label=args.label, notes=notes,
            started_at=tlog.started_at.isoformat(timespec="seconds") if tlog.started_at else None,
        )
        try:
            totals = RunTotals(time_s=duration, rail_energy_j=dict(tlog.energy_j),
                               samples=args.samples, power_samples=power_samples, energy_j=energy)
            # with its trace, in one transaction: never finished without it
            store.finish_run(run_id, totals, wall_s=duration, finished_at=_finished_at(tlog))
        except BaseException as exc:
            store.fail_run(run_id, exc)
            raise
    print(f"[{tlog.source.value}] {duration:.1f} s, {energy:.1f} J over {'+'.join(rails)}, "
          f"average {energy / duration:.2f} W: stored as run {run_id} in {store.path}", file=sys.stderr)
    print(run_id)
    return 0


def _finished_at(tlog: LogSummary) -> str | None:
    if tlog.started_at is None:
        return None
    from datetime import timedelta

    return (tlog.started_at + timedelta(seconds=tlog.duration_s)).isoformat(timespec="seconds")
