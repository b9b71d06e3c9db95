"""What does the twin's tree cost on a disk, against the same tree on a tmpfs (issue 24)?

`slm-dvfs run --twin agx-orin-64gb --simulate --model bert-tiny --task sst2 --policy maxn --steps 500`
runs in a fresh interpreter with its twins' folder ($SLM_DVFS_TWIN_DIR) on a disk folder and
on /dev/shm, side by side: every round runs both, in a rotated order, so drifting load on a
shared host hits both alike. The figure is each process's CPU time (user + sys, from wait4);
the trace is cached by an untimed run first, so the rounds time the run, not the tracing.
Printed as JSON: each side's median, the median of the per-round ratios (disk / tmpfs,
`cpu_ratio`) and its spread (min, max). The aim (issue 24): `cpu_ratio` at most 1.15.

Also `idle_twin_cpu_ms_per_s`: the CPU a twin costs its process per second while it idles on
the wall clock with nobody reading it (the sync thread alone), median over rounds.

    .venv/bin/python bench/bench_twin_io.py [--reps 7] [--steps 500] [--disk-dir DIR]
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
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
AIM = 1.15
CLI = "import sys\nfrom engine.cli import main\nsys.exit(main())"
IDLE = """
import sys, time
from engine.device.session import open_device
with open_device(twin="agx-orin-64gb", realtime=True, twin_dir=sys.argv[1]) as session:
    time.sleep(0.5)  # past its start
    t0, c0 = time.monotonic(), time.process_time()
    time.sleep(float(sys.argv[2]))
    print((time.process_time() - c0) / (time.monotonic() - t0) * 1000.0)
"""


def fs_type(path: Path) -> str:
    """The file system holding `path` (the longest mount point above it in /proc/mounts)."""
    best, kind = "", "unknown"
    real = os.path.realpath(path)
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return kind
    for line in mounts:
        parts = line.split()
        if len(parts) > 2 and (real == parts[1] or real.startswith(parts[1].rstrip("/") + "/")) \
                and len(parts[1]) > len(best):
            best, kind = parts[1], parts[2]
    return kind


def child_cpu_s(argv: list[str], env: dict[str, str]) -> float:
    """Run a command to its end; its user + sys CPU seconds (its own and its children's)."""
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _pid, status, usage = os.wait4(proc.pid, 0)
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv[3:])} failed ({proc.returncode}): {err[-2000:]}")
    return usage.ru_utime + usage.ru_stime


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=7, help="rounds (each runs both sides once)")
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--idle-s", type=float, default=3.0, help="seconds of idle twin per round")
    ap.add_argument("--disk-dir", type=Path, default=None,
                    help="a folder on a disk (default: a new folder under ~/.cache, which must not be a tmpfs)")
    args = ap.parse_args(argv)
    shm = Path("/dev/shm")
    if not os.access(shm, os.W_OK | os.X_OK):
        raise SystemExit("no writable /dev/shm here: nothing to compare against")
    disk_base = args.disk_dir or Path.home() / ".cache"
    disk_base.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="bench-twin-io-", dir=disk_base))
    fast = Path(tempfile.mkdtemp(prefix="bench-twin-io-", dir=shm))
    try:
        env = dict(os.environ)
        env.update(SLM_DVFS_STATE_DIR=str(work / "state"), SLM_DVFS_DATA_DIR=str(work / "data"),
                   SLM_DVFS_CACHE_DIR=str(work / "cache"), HF_HUB_OFFLINE="1", TRANSFORMERS_VERBOSITY="error",
                   PYTHONPATH=str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else ""))
        env.pop("SLM_DVFS_DB", None)
        sides = {"disk": work / "twins", "tmpfs": fast / "twins"}
        run = [sys.executable, "-c", CLI, "run", "--twin", "agx-orin-64gb", "--simulate", "--model", "bert-tiny",
               "--task", "sst2", "--policy", "maxn", "--steps", str(args.steps)]
        child_cpu_s(run, {**env, "SLM_DVFS_TWIN_DIR": str(sides["tmpfs"])})  # trace once, untimed
        cpu: dict[str, list[float]] = {name: [] for name in sides}
        idle: list[float] = []
        order = list(sides)
        for r in range(args.reps):
            for name in order[r % 2:] + order[:r % 2]:
                cpu[name].append(child_cpu_s(run, {**env, "SLM_DVFS_TWIN_DIR": str(sides[name])}))
            out = subprocess.run([sys.executable, "-c", IDLE, str(fast / "idle"), str(args.idle_s)], env=env,
                                 capture_output=True, text=True, check=True)
            idle.append(float(out.stdout.strip().splitlines()[-1]))
        ratios = [d / t for d, t in zip(cpu["disk"], cpu["tmpfs"])]
        result = {
            "bench": "twin_io", "python": platform.python_version(), "cpus": os.cpu_count(),
            "command": "slm-dvfs " + " ".join(run[3:]), "reps": args.reps,
            "disk": {"fs": fs_type(work), "cpu_s_median": statistics.median(cpu["disk"])},
            "tmpfs": {"fs": fs_type(fast), "cpu_s_median": statistics.median(cpu["tmpfs"])},
            "cpu_ratio": statistics.median(ratios), "cpu_ratio_min": min(ratios), "cpu_ratio_max": max(ratios),
            "aim_cpu_ratio": AIM, "idle_twin_cpu_ms_per_s": statistics.median(idle),
        }
        print(json.dumps(result, indent=2))
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(fast, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
