"""`slm-dvfs sweeps` and `show sN`: the store's sweeps from the command line, a killed one `abandoned`
and resumable."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Mapping, Sequence

from engine.cli import numbers
from engine.cli.mode_args import describe_mode
from engine.cli.store_cmds import _db_path, add_db_arg
from engine.core.provenance import Source
from engine.core.text import clean_text
from engine.results.format import describe_space, format_pct, format_when, sweep_point_lines
from engine.results.records import ABANDONED, RUN_STATUSES
from engine.results.store import DeviceRecord, Store, SweepRecord, WorkloadRecord

SWEEP_STATUSES = (*RUN_STATUSES, ABANDONED)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sweeps", help="list stored sweeps, newest first (their ids are sN: `show sN`, `export sN`)")
    add_db_arg(p)
    p.add_argument("--model", help="only sweeps of this model")
    p.add_argument("--task", help="only sweeps of this task")
    p.add_argument("--source", choices=[s.value for s in Source], help="only figures of this source")
    p.add_argument("--status", choices=SWEEP_STATUSES, help="only sweeps in this state")
    p.add_argument("--limit", type=numbers.int_range(1, 10**9), default=50, help="at most N sweeps (default 50)")
    p.add_argument("--json", action="store_true", help="print a JSON list")
    p.set_defaults(func=cmd_sweeps)


def format_sweeps(sweeps: Sequence[SweepRecord], workloads: Mapping[int, WorkloadRecord],
                  done: Mapping[int, int]) -> str:
    """`slm-dvfs sweeps`: one line a sweep, then how an unfinished one resumes."""
    header = ("id", "when", "workload", "space", "points", "status", "source")
    rows = []
    for sw in sweeps:
        w = workloads.get(sw.workload_id)
        n = done.get(sw.id, 0)
        total = sw.planned if sw.planned is not None else (n if sw.status == "finished" else None)
        rows.append((f"s{sw.id}", format_when(sw.created_at), w.label if w else "-", describe_space(sw.space),
                     f"{n}/{'?' if total is None else total}",
                     sw.status + (", resumable" if sw.resumable else ""), f"[{sw.source.value}]"))
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(header)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.rjust(w) if i == 4 else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    lines = [line(header)] + [line(row) for row in rows]
    if any(sw.resumable for sw in sweeps):
        lines.append("resumable: running the same `slm-dvfs sweep` command again (same workload, space, steps and "
                     "repeats) carries on from the stored points; `slm-dvfs show sN` says more")
    return "\n".join(lines)


def cmd_sweeps(args: argparse.Namespace) -> int:
    path = _db_path(args)
    if not path.exists():
        print(f"no sweeps stored yet ({path} does not exist)")
        return 0
    with Store(path) as store:  # opening it marks sweeps whose process died `abandoned`
        sweeps = [sw for sw in store.list_sweeps(status=args.status)
                  if args.source is None or sw.source.value == args.source]
        workloads = {i: store.get_workload(i) for i in {sw.workload_id for sw in sweeps}}
        done = store.stored_point_counts()
    sweeps = [sw for sw in sweeps if (args.model is None or workloads[sw.workload_id].model == args.model)
              and (args.task is None or workloads[sw.workload_id].task == args.task)][:args.limit]
    if args.json:
        print(json.dumps([{"id": f"s{sw.id}", "created_at": sw.created_at, "finished_at": sw.finished_at,
                           "workload": workloads[sw.workload_id].to_json(), "space": dict(sw.space),
                           "points_done": done.get(sw.id, 0), "points_planned": sw.planned, "status": sw.status,
                           "resumable": sw.resumable, "source": sw.source.value, "label": sw.label}
                          for sw in sweeps], indent=2))
    elif not sweeps:
        print(f"no sweeps match in {path}")
    else:
        print(clean_text(format_sweeps(sweeps, workloads, done)))
    return 0


def show_sweep(args: argparse.Namespace, sweep_id: int) -> int:
    """`show sN`."""
    from engine.results.compare import optimum_vs_maxn
    from engine.results.sweeps import maxn_of, optimum, summarize_points

    with Store(_db_path(args), create=False) as store:
        sweep = store.get_sweep(sweep_id)
        device, workload = store.get_device(sweep.device_id), store.get_workload(sweep.workload_id)
        stored = store.sweep_points(sweep_id)
        points = summarize_points(stored)
        boards = store.sweep_boards(sweep_id)
    best, maxn = optimum(points), maxn_of(points)
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
            "optimum_saving_vs_maxn_pct": None if vs_maxn is None else vs_maxn.saving_pct,
            "optimum_slowdown_vs_maxn_pct": None if vs_maxn is None else vs_maxn.slowdown_pct,
        }, indent=2))
        return 0
    if note:
        print(note, file=sys.stderr)
    print(clean_text(format_sweep_record(sweep, device, workload, points, best, maxn, vs_maxn, boards)))
    return 0


def format_sweep_record(sweep: Any, device: DeviceRecord, w: WorkloadRecord, points: Sequence[Any], best: Any,
                        maxn: Any, vs_maxn: Any, boards: Sequence[DeviceRecord] = ()) -> str:
    """A stored sweep (run here or imported) for `show sN`: `—` where a time was not recorded."""
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
                 f"pad {w.padding}")
    if space.get("method") == "import":
        lines.append(f"  method       imported from {space.get('file', '?')} (sha256 {str(space.get('sha256', ''))[:12]})")
    else:
        lines.append(f"  method       {space.get('method', 'run')} sweep of {space.get('space') or 'explicit settings'}, "
                     f"{sweep.steps} steps per point after {sweep.warmup_steps} warm-up")
    rails = space.get("rails", "all")
    summed = space.get("rails_summed")
    lines.append(f"  energy over  {rails}" + (f" = {' + '.join(summed)}" if summed else ""))
    untimed = sum(1 for p in points if p.energy_only)
    planned = f" of {sweep.planned} planned" if sweep.planned and sweep.status != "finished" else ""
    lines.append(f"  points       {sum(p.n for p in points)}{planned} over {len(points)} settings, up to {sweep.repeats} "
                 f"repeat(s)" + (f"; {untimed} setting(s) energy-only (time not recorded: —)" if untimed else ""))
    lines += ["  " + line for line in sweep_point_lines(points, best, maxn, src)]
    if best is not None:
        lines.append(f"optimum (energy per sample): {best.setting.label()}  [{src}]")
    if vs_maxn is not None:
        lines.append(f"  vs MAXN Mode 0: energy saving {vs_maxn.saving_pct:+.1f}%, "
                     f"slowdown {format_pct(vs_maxn.slowdown_pct)} per sample  [{src}]")
    lines.append(f"report: slm-dvfs report s{sweep.id}")
    return "\n".join(lines)



__all__ = ["register", "cmd_sweeps", "format_sweeps", "format_sweep_record", "show_sweep"]
