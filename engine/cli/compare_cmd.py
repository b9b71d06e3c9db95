"""`slm-dvfs compare N [BASELINE]`: a stored run against its baseline (the board's uncapped mode, MAXN or
MAXN_SUPER), through the results
API's one check of comparability (engine.results.compare.compare_pair), as the TUI's Compare page."""

from __future__ import annotations

import argparse
import json

from engine.cli import numbers
from engine.cli.store_cmds import _db_path, _num, add_db_arg
from engine.core.errors import ConfigError
from engine.core.text import clean_text
from engine.results.baseline import mode_text
from engine.results.compare import SIGN_CONVENTION, PairComparison
from engine.results.format import rail_savings_text, versus_text
from engine.results.store import RunRecord, Store


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("compare", help="a stored run against its baseline, the board's uncapped mode (MAXN or MAXN_SUPER; found, or "
                       "the run given): "
                       "saving and slowdown, refused for runs that do not compare (two workloads, board vs twin, ...)")
    add_db_arg(p)
    p.add_argument("id", type=numbers.row_id, help="the run (`slm-dvfs runs` lists them)")
    p.add_argument("baseline", type=numbers.row_id, nargs="?",
                   help="the MAXN run to compare it with (default: the one it was compared with, else the newest "
                        "MAXN run of its workload on its board, as the TUI's Compare page finds it)")
    p.add_argument("--json", action="store_true", help=f"print one JSON object (its percentages signed: {SIGN_CONVENTION})")
    p.set_defaults(func=cmd_compare)


def cmd_compare(args: argparse.Namespace) -> int:
    from engine.results.baseline import BASELINE_POLICY, find_baseline, maxn_command
    from engine.results.compare import compare_stored

    with Store(_db_path(args), create=False) as store:
        run = store.get_run(args.id)
        base = store.get_run(args.baseline) if args.baseline is not None else find_baseline(store, run)
        if base is None:
            what = run.workload.label if run.workload is not None else "its workload"
            if run.policy == BASELINE_POLICY:
                raise ConfigError(f"run {run.id} is a {mode_text(run.setting)} run itself: it is the baseline",
                                  "compare another run of its workload with it: slm-dvfs compare N " + str(run.id))
            raise ConfigError(f"no baseline run (policy maxn: the board's MAXN or MAXN_SUPER) of {what} on run "
                              f"{run.id}'s board, of its kind and rails, in "
                              "the store", f"make one with `{maxn_command(run)}` (or run the policy with "
                              "`--compare maxn`), or name the baseline: slm-dvfs compare N BASELINE")
        if run.id == base.id:
            raise ConfigError(f"run {run.id} cannot be compared with itself", "name another run as the baseline")
        # refused when the two do not compare (a baseline that is not MAXN, two workloads, ...), naming the
        # MAXN runs that would fit
        pair = compare_stored(store, run, base)
    if args.json:
        print(json.dumps(pair.to_json(), indent=2))
    else:
        print(clean_text(format_pair(pair)))
    return 0


def format_pair(pair: PairComparison) -> str:
    """`slm-dvfs compare`: each run's workload and figures, then the saving and slowdown against MAXN, in
    words as `run` and `show` say them (engine.results.format); signed numbers only in --json."""
    run, base, c = pair.run, pair.base, pair.comparison

    def head(r: RunRecord, role: str) -> str:
        what = r.workload.label if r.workload is not None else "unknown workload"
        return f"{role:9} run {r.id:<5} [{r.source.value}] {r.policy:12} {what}"

    than = mode_text(base.setting)  # by its mode's real name and id: MAXN_SUPER (mode 2)
    lines = [head(run, "run"), head(base, "baseline") + f"  {than}"]
    unit = " per sample" if pair.per_sample else ""
    lines.append(f"{versus_text(c.saving_pct, c.slowdown_pct, than=than)}{unit}  [{c.source.value}]")
    for name, key, fmt in (("energy J", "energy_j", ".2f"), ("time s", "time_s", ".2f"),
                           ("J/sample", "joules_per_sample", ".4f")):
        lines.append(f"  {name:10} {_num(getattr(run, key), fmt):>12}  vs {_num(getattr(base, key), fmt):>12}")
    if c.rail_saving_pct:
        lines.append(f"  energy per rail vs {than}{unit}: {rail_savings_text(c.rail_saving_pct)}")
    lines += [f"note: {n}" for n in pair.notes]
    return "\n".join(lines)


__all__ = ["register", "cmd_compare", "format_pair"]
