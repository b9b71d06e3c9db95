"""How fast does slm-dvfs start, against the time `python -c "import torch"` takes here?

Each command runs in a fresh interpreter, as a user starts it; the reference, a bare
`import torch`, runs side by side in the same loop. Repetitions alternate (every round runs
each command once, in a rotated order), so drifting load on a shared host hits all alike;
the figure is the median wall time over rounds, and the ratio is that median over the
reference's median. Timed:

- `help`: `slm-dvfs --help` (process start to exit);
- `device_twin`: `slm-dvfs device --twin` (process start to exit);
- `tui_first_screen`: what `slm-dvfs` does up to its first screen (parse, the TUI module,
  the twin session, the app mounted headless at 80x24), from process start until the device
  page shows its first reading: the child reports that instant, on the same clock;
- `select_cached`: `slm-dvfs select` for a workload whose step trace and interval are cached (both
  computed once, untimed, before the rounds) with the shipped selector (process start to exit);
- `select_cold`: the same `select` with an empty cache (a fresh cache folder each run): it traces
  the workload (importing torch and transformers) and computes its interval's ensemble;
- `select_cold_deep`: a cold `select` of a 30-layer model (`--deep-model`, smollm2-135m), whose
  trace is derived from its one- and two-layer copies (engine/workload/trace/derive.py).

Besides the wall time, each run's CPU time (user + system) and peak resident memory are read from
the kernel's accounting of the child (os.wait4): medians are reported beside the wall-time medians.

The aim (issue 11): `help`, `device_twin` and `tui_first_screen` under 0.5x the reference.
Everything runs with throw-away state, data and cache folders, offline.

    .venv/bin/python bench/bench_start.py [--reps 7] [--model bert-tiny] [--task sst2] [--deep-model M]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TWIN = "agx-orin-64gb"
AIM = 0.5  # the bound on the ratio, for the commands it names
AIMED = ("help", "device_twin", "tui_first_screen")

# The `slm-dvfs` console script: engine.cli:main.
CLI = "import sys\nfrom engine.cli import main\nsys.exit(main())"

# `slm-dvfs` with no sub-command, as engine.cli.main and tui_launch run it, but headless: it
# prints the wall-clock instant the device page has drawn its first snapshot, then quits.
TUI = f"""
import asyncio, sys, time
from engine.cli import build_parser
from engine.selector import policy_factory
policy_factory()
build_parser(commands=False).parse_args([])  # as main() does for `slm-dvfs`
import importlib
app_module = importlib.import_module("tui.app")
from engine.device.session import open_device

async def first_screen(session):
    app = app_module.SlmDvfsApp(session)
    async with app.run_test(size=(80, 24)) as pilot:
        while app.last_snapshot is None or getattr(app.screen, "PAGE", "") != "device":
            await asyncio.sleep(0.002)
        await pilot.pause()  # the frame that shows it
        print("FIRST_SCREEN", time.time(), flush=True)
        await pilot.press("q")

with open_device(twin={TWIN!r}, realtime=True, twin_dir=sys.argv[1]) as session:
    asyncio.run(first_screen(session))
"""


def _env(work: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(SLM_DVFS_STATE_DIR=str(work / "state"), SLM_DVFS_DATA_DIR=str(work / "data"),
               SLM_DVFS_CACHE_DIR=str(work / "cache"), HF_HUB_OFFLINE="1", TRANSFORMERS_VERBOSITY="error",
               PYTHONPATH=str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else ""))
    env.pop("SLM_DVFS_DB", None)
    env.pop("SLM_DVFS_SYSFS_ROOT", None)
    return env


@dataclass(frozen=True)
class Run:
    wall_s: float  # process start to exit, or to the instant it printed after a marker
    cpu_s: float  # user + system, the child's own (the kernel's accounting)
    rss_mb: float  # its peak resident memory


def timed(argv: list[str], env: dict[str, str], marker: str | None = None, *, cold: bool = False) -> Run:
    """One run of `argv` in a fresh interpreter (`cold`: with a fresh, empty cache folder)."""
    cache = None
    if cold:
        cache = tempfile.mkdtemp(prefix="bench-start-cold-")
        env = {**env, "SLM_DVFS_CACHE_DIR": cache}
    try:
        with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
            t0 = time.time()
            proc = subprocess.Popen(argv, env=env, cwd=ROOT, stdout=out, stderr=err, text=True)
            _pid, status, usage = os.wait4(proc.pid, 0)  # the child's own CPU time and peak RSS
            t1 = time.time()
            proc.returncode = os.waitstatus_to_exitcode(status)
            out.seek(0)
            err.seek(0)
            stdout, stderr = out.read(), err.read()
    finally:
        if cache is not None:
            shutil.rmtree(cache, ignore_errors=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{argv[2:]} failed ({proc.returncode}): {stderr[-2000:]}")
    cpu, rss = usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024.0  # ru_maxrss: KiB on Linux
    if marker is None:
        return Run(t1 - t0, cpu, rss)
    for line in stdout.splitlines():
        if line.startswith(marker):
            return Run(float(line.split()[1]) - t0, cpu, rss)
    raise RuntimeError(f"{marker} was never printed: {stdout[-1000:]} {stderr[-2000:]}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--reps", type=int, default=7, help="rounds (each runs every command once)")
    p.add_argument("--model", default="bert-tiny", help="select's workload (default bert-tiny)")
    p.add_argument("--task", default="sst2")
    p.add_argument("--deep-model", default="smollm2-135m", help="select_cold_deep's workload (default smollm2-135m)")
    args = p.parse_args()

    work = Path(tempfile.mkdtemp(prefix="bench-start-"))
    env = _env(work)
    py = sys.executable
    select = [py, "-c", CLI, "select", "--model", args.model, "--task", args.task]
    deep = [py, "-c", CLI, "select", "--model", args.deep_model, "--task", args.task]
    commands: dict[str, tuple[list[str], str | None, bool]] = {  # argv, marker, cold
        "import_torch": ([py, "-c", "import torch"], None, False),
        "help": ([py, "-c", CLI, "--help"], None, False),
        "device_twin": ([py, "-c", CLI, "device", "--twin"], None, False),
        "tui_first_screen": ([py, "-c", TUI, str(work / "tui-twin")], "FIRST_SCREEN", False),
        "select_cached": (select, None, False),
        "select_cold": (select, None, True),
        "select_cold_deep": (deep, None, True),
    }
    timed(select, env)  # traces the workload once: the rounds find it cached
    for argv, marker, cold in commands.values():  # warm the OS file cache: every round reads the same files
        timed(argv, env, marker, cold=cold)
    runs: dict[str, list[Run]] = {name: [] for name in commands}
    names = list(commands)
    for r in range(args.reps):
        for name in names[r % len(names):] + names[:r % len(names)]:
            argv, marker, cold = commands[name]
            runs[name].append(timed(argv, env, marker, cold=cold))
    ref = statistics.median(r.wall_s for r in runs["import_torch"])
    ref_cpu = statistics.median(r.cpu_s for r in runs["import_torch"])
    out = {
        "bench": "start",
        "source": "measured (host wall clock, fresh interpreter per run)",
        "statistic": f"median wall time, CPU time and peak RSS of {args.reps} alternating rounds; ratio = median / median of import torch (cpu_ratio: of CPU times)",
        "reference": {"command": 'python -c "import torch"', "median_s": round(ref, 3),
                      "runs_s": [round(v.wall_s, 3) for v in runs["import_torch"]],
                      "median_cpu_s": round(ref_cpu, 3),
                      "median_rss_mb": round(statistics.median(v.rss_mb for v in runs["import_torch"]), 1)},
        "commands": {},
        "aim": f"help, device_twin and tui_first_screen < {AIM}x import torch",
        "host": {"python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count(),
                 "load_avg_1m": round(os.getloadavg()[0], 2)},
    }
    for name in names[1:]:
        med = statistics.median(v.wall_s for v in runs[name])
        cpu = statistics.median(v.cpu_s for v in runs[name])
        entry: dict[str, object] = {
            "median_s": round(med, 3), "ratio_to_import_torch": round(med / ref, 3),
            "runs_s": [round(v.wall_s, 3) for v in runs[name]], "median_cpu_s": round(cpu, 3),
            # CPU time is what a loaded, shared host disturbs least
            "cpu_ratio_to_import_torch": round(cpu / ref_cpu, 3),
            "median_rss_mb": round(statistics.median(v.rss_mb for v in runs[name]), 1)}
        if name in AIMED:
            entry["under_aim"] = med / ref < AIM
        out["commands"][name] = entry
    out["aim_met"] = all(out["commands"][n]["under_aim"] for n in AIMED)
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
