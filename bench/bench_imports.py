"""What an import costs as its file grows: `slm-dvfs import-tegrastats` at 20k and 200k lines, and
`slm-dvfs import-sweep` at 20k and 40k rows, each through the CLI in a fresh process, as a user runs it.

The files are generated (tests/import_files.py): tegrastats logs as `tegrastats --interval 10 --logfile`
writes them on an AGX Orin (r35 lines, dated in whole seconds, a torn line in about 1000 and one short of
a rail in 2000), and import-sweep CSVs of one setting repeated (the import numbers the repeats: the case
that was quadratic). Each child's peak RSS (ru_maxrss) and CPU time (user + sys) come from its own
rusage (os.wait4). Repetitions alternate the sizes, so drifting load on a shared host hits both alike;
a ratio is the median of the per-round ratios (CPU time; wall time alongside).

With `--baseline DIR` (a checkout of another commit, e.g. main), every command also runs with that
checkout's engine (PYTHONPATH=DIR), in the same rounds, side by side.

The aim (issue 24): a 200k-line log in under 300 MB and in at most 12x the time of 20k lines; import-sweep
linear (40k rows about 2x 20k). `parse_only_cpu_s` is reading and parsing the 200k lines once in a child
(no import): the floor an import's throughput is held against.

    .venv/bin/python bench/bench_imports.py [--reps 3] [--baseline /work/main] [--small 20000 --large 200000]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from import_files import write_sweep_csv, write_tegrastats_log  # noqa: E402

CLI = "import sys; from engine.cli import main; sys.exit(main(sys.argv[1:]))"
PARSE = ("import sys; from engine.device.tegra_parse import parse_line\n"
         "n = 0\n"
         "for line in open(sys.argv[1], encoding='utf-8', errors='replace'):\n"
         "    try:\n"
         "        parse_line(line); n += 1\n"
         "    except Exception:\n"
         "        pass\n")


def child(code: str, args: list[str], engine_root: Path, env: dict[str, str], log: Path) -> dict[str, float]:
    """Run `python -c code args` with `engine_root`'s engine; its wall time, CPU time and peak RSS."""
    env = {**env, "PYTHONPATH": str(engine_root), "PYTHONDONTWRITEBYTECODE": "1"}
    with log.open("w") as err:
        start = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-c", code, *args], env=env, stdout=subprocess.DEVNULL,
                                stderr=err, cwd=log.parent)
        _pid, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        sys.exit(f"{engine_root}: {' '.join(args[:2])} failed ({proc.returncode}): {log.read_text()[-2000:]}")
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "max_rss_mb": usage.ru_maxrss / 1024}


def summary(runs: list[dict[str, float]]) -> dict[str, float]:
    return {"wall_s": round(statistics.median(r["wall_s"] for r in runs), 3),
            "cpu_s": round(statistics.median(r["cpu_s"] for r in runs), 3),
            "max_rss_mb": round(max(r["max_rss_mb"] for r in runs), 1)}


def ratios(small: list[dict[str, float]], large: list[dict[str, float]]) -> dict[str, Any]:
    cpu = [b["cpu_s"] / a["cpu_s"] for a, b in zip(small, large)]
    wall = [b["wall_s"] / a["wall_s"] for a, b in zip(small, large)]
    return {"cpu_ratio": round(statistics.median(cpu), 2), "cpu_ratio_each": [round(r, 2) for r in cpu],
            "wall_ratio": round(statistics.median(wall), 2)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=3, help="rounds (each runs every size once)")
    ap.add_argument("--small", type=int, default=20_000, help="tegrastats lines of the small log")
    ap.add_argument("--large", type=int, default=200_000, help="tegrastats lines of the large log")
    ap.add_argument("--rows", type=int, default=20_000, help="import-sweep rows of the small CSV (the large: 2x)")
    ap.add_argument("--baseline", type=Path, help="a checkout to run side by side (its engine/), e.g. /work/main")
    ap.add_argument("--skip-sweep", action="store_true", help="time the tegrastats imports only")
    args = ap.parse_args()
    trees = {"this": ROOT} | ({"baseline": args.baseline.resolve()} if args.baseline else {})
    for name, tree in trees.items():
        if not (tree / "engine" / "cli" / "__init__.py").is_file():
            sys.exit(f"{tree} is not a checkout of slm-dvfs (no engine/cli)")
    with tempfile.TemporaryDirectory(prefix="bench-imports-") as tmp_name:
        tmp = Path(tmp_name)
        env = {**os.environ, "SLM_DVFS_STATE_DIR": str(tmp / "state"), "SLM_DVFS_DATA_DIR": str(tmp / "data"),
               "SLM_DVFS_CACHE_DIR": str(tmp / "cache"), "HF_HUB_OFFLINE": "1"}
        env.pop("SLM_DVFS_DB", None)
        logs = {n: write_tegrastats_log(tmp / f"tegrastats-{n}.log", n, interval_ms=10)
                for n in (args.small, args.large)}
        csvs = {} if args.skip_sweep else {n: write_sweep_csv(tmp / f"sweep-{n}.csv", n)
                                            for n in (args.rows, 2 * args.rows)}
        runs: dict[str, dict[str, list[dict[str, float]]]] = {t: {} for t in trees}
        for rep in range(args.reps):
            for tree_name, tree in trees.items():
                for n, log in logs.items():
                    db = tmp / f"t-{tree_name}-{n}-{rep}.sqlite"
                    runs[tree_name].setdefault(f"tegrastats_{n}", []).append(child(
                        CLI, ["import-tegrastats", str(log), "--db", str(db), "--label", "bench"], tree, env,
                        tmp / "child.err"))
                for n, csv in csvs.items():
                    db = tmp / f"s-{tree_name}-{n}-{rep}.sqlite"
                    runs[tree_name].setdefault(f"sweep_{n}", []).append(child(
                        CLI, ["import-sweep", str(csv), "--db", str(db)], tree, env, tmp / "child.err"))
            print(f"round {rep + 1}/{args.reps} done", file=sys.stderr)
        parse_only = child(PARSE, [str(logs[args.large])], ROOT, env, tmp / "child.err")
    out: dict[str, Any] = {"python": platform.python_version(), "reps": args.reps, "interval_ms": 10,
                           "tegrastats_lines": [args.small, args.large],
                           "parse_only_cpu_s": round(parse_only["cpu_s"], 3)}
    for tree_name in trees:
        r = runs[tree_name]
        small, large = r[f"tegrastats_{args.small}"], r[f"tegrastats_{args.large}"]
        entry: dict[str, Any] = {
            "tegrastats": {str(args.small): summary(small), str(args.large): summary(large),
                           f"time_ratio_{args.large // 1000}k_{args.small // 1000}k": ratios(small, large),
                           "import_over_parse_cpu": round(summary(large)["cpu_s"] / parse_only["cpu_s"], 2)},
        }
        if csvs:
            a, b = r[f"sweep_{args.rows}"], r[f"sweep_{2 * args.rows}"]
            entry["import_sweep"] = {str(args.rows): summary(a), str(2 * args.rows): summary(b),
                                     f"time_ratio_{2 * args.rows // 1000}k_{args.rows // 1000}k": ratios(a, b)}
        large_rss = summary(large)["max_rss_mb"]
        entry["done_when"] = {"large_log_under_300_mb": large_rss < 300,
                              "large_log_at_most_12x": ratios(small, large)["cpu_ratio"] <= 12}
        out[tree_name] = entry
    if args.baseline:
        out["baseline_tree"] = str(trees["baseline"])
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
