"""`slm-dvfs import-sweep FILE`: a sweep measured elsewhere (CSV or JSON) stored as a measured sweep.

The file is read and checked whole against the board's tables before anything is stored; then all
of it is stored in one transaction. docs/experiments.md ("Importing measured sweeps") gives the formats.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from engine.cli import numbers
from engine.cli.mode_args import add_mode_args, lora_settings
from engine.cli.store_cmds import _db_path, add_db_arg
from engine.core.constants import PRECISIONS
from engine.core.errors import ConfigError
from engine.core.text import clean_text

DEFAULT_PROFILE = "agx-orin-64gb"


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "import-sweep", help="store a sweep measured elsewhere (CSV or JSON) as a measured sweep",
        description="Read one row per measured point (GPU clock, optionally CPU, EMC and nvpmodel mode, or "
        "setting=maxn; energy_j or power_w with time_s; time_s when known: energy-only rows are kept as such), "
        "check every value against the board's tables, and store it as a measured sweep of its workload "
        "(one sweep per workload and rail set), all in one transaction. The workload comes from the flags or "
        "from columns. See docs/experiments.md, 'Importing measured sweeps'.",
    )
    add_db_arg(p)
    p.add_argument("file", metavar="FILE", help="the measurements: .csv (header row) or .json")
    p.add_argument("--model", type=numbers.model, metavar="NAME", help="the model fine-tuned (zoo name or hub id); or a model column")
    p.add_argument("--task", metavar="TASK", help="its GLUE task, e.g. sst2; or a task column")
    p.add_argument("--batch-size", type=numbers.batch_size, metavar="B", help="default: the zoo entry's")
    p.add_argument("--max-seq-len", type=numbers.seq_len, metavar="L", help="default: the zoo entry's")
    p.add_argument("--precision", choices=PRECISIONS, help="default: the zoo entry's")
    add_mode_args(p)
    p.set_defaults(mode=None)  # not given: a column may say it (else full)
    numbers.add_pad_argument(p)
    numbers.add_loop_argument(p)
    p.add_argument("--samples", type=numbers.samples, metavar="N",
                   help="training samples each point's energy covers (or a samples column)")
    p.add_argument("--rails", metavar="RAILS",
                   help="the rails every energy sums: all | gpu+cpu | NAME+NAME (e.g. VDD_GPU_SOC+VDD_CPU_CV); "
                        "or a rails column")
    p.add_argument("--profile", "--twin", dest="profile", default=DEFAULT_PROFILE, metavar="NAME",
                   help=f"the device profile whose clock tables, modes and rails the file is checked against "
                        f"(default {DEFAULT_PROFILE})")
    p.add_argument("--board", help="board name to record (default: the profile's, as the board reports it)")
    p.add_argument("--module", help="module name to record (default: the profile's)")
    p.add_argument("--l4t", help="L4T release of the board that measured, e.g. 36.3.0 (`slm-dvfs device` shows it)")
    p.add_argument("--serial", help="the board's serial-number (`slm-dvfs device` shows it): tells two boards of one "
                   "module apart")
    p.add_argument("--jetpack", help="its JetPack release, e.g. 6.0")
    p.add_argument("--label", help="free text naming the sweep (default: imported from FILE)")
    p.add_argument("--replace", action="store_true",
                   help="the file was imported before: replace those sweeps (e.g. after fixing a flag)")
    p.add_argument("--dry-run", action="store_true", help="read and check the file, store nothing")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_import_sweep)


def _flags(args: argparse.Namespace) -> Any:
    from engine.results.imports.sweep_file import WorkloadFlags

    return WorkloadFlags(
        model=args.model, task=args.task, batch_size=args.batch_size, seq_len=args.max_seq_len,
        precision=args.precision, mode=args.mode,
        padding=numbers.padding_of(args) if args.pad is not None else None,
        loop=numbers.asked_loop(args), samples=args.samples,  # the file says what ran: either loop
        rails=args.rails, lora=lora_settings(args), grad_checkpointing=bool(args.grad_checkpointing),
    )


def cmd_import_sweep(args: argparse.Namespace) -> int:
    from engine.device.baseline import profile_baseline
    from engine.device.twin.profile import load_profile
    from engine.results.imports.fields import BoardTables
    from engine.results.store import DeviceRecord, Store
    from engine.results.imports.sweep_file import read_sweep_file

    profile = load_profile(args.profile)
    tables = BoardTables.from_profile(profile)
    # rows naming no mode pin clocks in the profile's uncapped mode, as its sweeps do (MAXN_SUPER, mode 2, on an
    # Orin Nano 8GB)
    mode = profile_baseline(profile).setting.nvpmodel or 0
    imported = read_sweep_file(args.file, tables, _flags(args), default_mode=mode)
    device = DeviceRecord(board=args.board or tables.board, module=args.module or tables.module, l4t=args.l4t,
                          jetpack=args.jetpack, profile=None, is_twin=False, serial=args.serial or None)
    path = _db_path(args)
    ids: list[int] = []
    earlier: list[int] = []
    if path.exists() or not args.dry_run:
        with Store(path) as store:
            earlier = [s.id for s in store.sweeps_with("sha256", imported.sha256)]
            if earlier and not args.replace:
                listed = ", ".join(f"s{i}" for i in earlier)
                raise ConfigError(
                    f"{imported.path} was imported before (the same content) as sweep {listed} in {store.path}",
                    f"nothing was stored; see it with `slm-dvfs show s{earlier[0]}`, or add --replace to store "
                    f"it again in place of {listed} (e.g. after fixing a flag)")
            if not args.dry_run:
                ids = store.add_finished_sweeps(device, imported.finished_sweeps(args.label, profile=tables.profile),
                                                replace=earlier if args.replace else ())
    if args.json:
        print(json.dumps(_as_json(imported, ids, earlier, device, args), indent=2))
    else:
        print(clean_text(_summary(imported, ids, earlier, device, args)))
    return 0


def _as_json(imported: Any, ids: list[int], replaced: list[int], device: Any, args: argparse.Namespace) -> Any:
    return {
        "file": str(imported.path), "sha256": imported.sha256, "format": imported.kind, "rows": imported.rows,
        "dry_run": bool(args.dry_run), "replaced": replaced if args.replace else [], "device": device.to_json(),
        "ignored_columns": list(imported.ignored_columns), "warnings": list(imported.warnings),
        "sweeps": [{"sweep_id": ids[i] if ids else None, "workload": sw.workload.key, "rails": sw.rails,
                    "rails_summed": list(sw.rail_names), "points": len(sw.points), "settings": sw.settings,
                    "repeats": sw.repeats, "energy_only": sw.energy_only}
                   for i, sw in enumerate(imported.sweeps)],
    }


def _summary(imported: Any, ids: list[int], replaced: list[int], device: Any, args: argparse.Namespace) -> str:
    lines = [f"{imported.path.name}: {imported.rows} rows ({imported.kind}), {len(imported.sweeps)} sweep(s) "
             f"[measured] on {device.board}, {device.module}"]
    for i, sw in enumerate(imported.sweeps):
        name = f"sweep s{ids[i]}" if ids else "sweep (not stored)"
        only = f", {sw.energy_only} energy-only (no time)" if sw.energy_only else ""
        lines.append(f"  {name}: {sw.workload.key}  {len(sw.points)} points over {sw.settings} settings, up to "
                     f"{sw.repeats} repeat(s){only}; energy over {sw.rails} = {' + '.join(sw.rail_names)}")
    if imported.ignored_columns:
        lines.append(f"  ignored columns (not ones import-sweep reads): {', '.join(imported.ignored_columns)}")
    lines += [f"  warning: {w}" for w in imported.warnings]
    if args.dry_run:
        lines.append("dry run: nothing was stored" + (f" (the file was imported before as "
                                                       f"{', '.join(f's{i}' for i in replaced)})" if replaced else ""))
        return "\n".join(lines)
    if replaced:
        lines.append(f"replaced the earlier import: {', '.join(f's{i}' for i in replaced)}")
    sweeps = ",".join(f"s{i}" for i in ids)
    lines.append(f"next: slm-dvfs show s{ids[0]}   |   slm-dvfs report s{ids[0]}   |   "
                 f"slm-dvfs calibrate --sweeps {sweeps}")
    if any(sw.energy_only for sw in imported.sweeps):
        lines.append("note: energy-only points rank by energy alone; objectives that weigh time "
                     "(energy@N%, edp, eta) need the times")
    return "\n".join(lines)


__all__ = ["register", "cmd_import_sweep"]
