"""`slm-dvfs sweeps`: the store's sweeps listed, a killed one `abandoned` and resumable (`show sN`:
store_cmds)."""

from __future__ import annotations

import argparse
import json
from typing import Mapping, Sequence

from engine.cli import numbers
from engine.cli.store_cmds import _db_path, add_db_arg, table_lines
from engine.core.provenance import Source
from engine.core.text import clean_text
from engine.results.format import describe_space, format_when, sweep_progress, sweep_state
from engine.results.records import ABANDONED, RUN_STATUSES
from engine.results.store import Store, SweepRecord, WorkloadRecord

SWEEP_STATUSES = (*RUN_STATUSES, ABANDONED)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("sweeps", help="list stored sweeps, newest first (their ids are sN: `show sN`, `export sN`)")
    add_db_arg(p)
    p.add_argument("--model", type=numbers.model, help="only sweeps of this model")
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
        rows.append((f"s{sw.id}", format_when(sw.created_at), w.label if w else "-", describe_space(sw.space),
                     sweep_progress(sw, done.get(sw.id, 0)), sweep_state(sw), f"[{sw.source.value}]"))
    lines = table_lines(header, rows, right={4})
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


__all__ = ["register", "cmd_sweeps", "format_sweeps"]
