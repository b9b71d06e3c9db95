"""Does the TUI slow down the training it watches? And how soon does it draw?

Fine-tunes bert-tiny on the digital twin (real training on this host, synthetic SST-2)
two ways, alternating, a few repetitions each:
- headless: `run_experiment` with no listener but a stopwatch;
- TUI: the same spec started from `SlmDvfsApp` running headless (`App.run_test`, 80x24,
  the Run page showing, the device polled at the app's 2 Hz), the stopwatch added.
Throughput is training samples per second of host time over the steps after the first
`--warmup`, from the trainer's own StepEnd timings: of the median step (robust to load
spikes from neighbours on a shared host), and over the whole span; median over
repetitions. `tui_slowdown_pct` = how much lower the TUI's is (aim: under 3). On a small
shared host run-to-run noise can exceed that, so `ui_thread_cpu_share` also gives what the
UI thread itself burns (CPU seconds per second) while the timed steps run.

The whole-run cost (`whole_run`, the figure the TUI is held to: under 3%): the same two
runs, alternating, with every core kept busy by `os.cpu_count()` busy-loop processes (so the
UI's work cannot hide on an idle core), each run timed from its start to its RunFinished:
the whole process's CPU time (every thread: training, the power sampler, the twin's sync, the
UI; `resource.getrusage`) and the wall time. `tui_cpu_cost_pct` = how much more CPU the run
with the app took, median over the pairs; `tui_wall_cost_pct` likewise for wall time. These
runs are `--busy-steps` long (480, about 30 CPU s here): the app's fixed costs (composing the
Run page, the switch to it and to Compare, about 0.5 CPU s) are part of the figure, and on a
120-step run they alone are several percent; while a run steps the app redraws once a second.

It also times the first frame: from before importing the app to the device page drawn with
its first reading (`first_frame_s`; `import_s` is the import part), in this process before
anything else is imported.

    .venv/bin/python bench/bench_tui.py [--steps 120] [--warmup 10] [--reps 5] [--busy-reps 3] [--busy-steps 480]
        [--batch-size 8] [--seq-len 64] [--threads 1]
"""

from __future__ import annotations

import time

T_START = time.perf_counter()  # before the app's imports: the first-frame clock starts here

import argparse
from dataclasses import replace
import asyncio
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

TWIN = "agx-orin-64gb"


def process_cpu_s() -> float:
    """CPU seconds of this whole process so far (every thread), user and system."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


class Stopwatch:
    """A run listener: host time and samples of the steps after the warm-up; and the whole
    run's wall and process CPU time, from `begin()` to the run's RunFinished."""

    def __init__(self, warmup: int) -> None:
        self.warmup = warmup
        self.t0: float | None = None
        self.t1 = 0.0
        self.samples = 0
        self.step_s: list[float] = []
        self.batch = 0
        self.start: tuple[float, float] | None = None
        self.whole: tuple[float, float] | None = None  # (wall s, process CPU s)

    def begin(self) -> None:
        self.start = (time.perf_counter(), process_cpu_s())

    def __call__(self, event: Any) -> None:
        if type(event).__name__ == "RunFinished" and self.start is not None and self.whole is None:
            self.whole = (time.perf_counter() - self.start[0], process_cpu_s() - self.start[1])
        if type(event).__name__ != "StepEnd":
            return
        if event.step == self.warmup:
            self.t0 = event.elapsed_s
        elif event.step > self.warmup:
            self.t1 = event.elapsed_s
            self.samples += event.samples
            self.step_s.append(event.wall_s)
            self.batch = event.samples

    @property
    def samples_per_s(self) -> float:
        """Over the timed steps' whole span (what a user waits)."""
        if self.t0 is None or self.t1 <= self.t0:
            raise RuntimeError("the run ended before the timed steps")
        return self.samples / (self.t1 - self.t0)

    @property
    def median_step_samples_per_s(self) -> float:
        """From the median step: robust to a neighbour's load spike on a shared host."""
        return self.batch / statistics.median(self.step_s)


async def first_frame(session: Any, store: Any, t_imported: float) -> dict[str, float]:
    from tui.app import SlmDvfsApp

    app = SlmDvfsApp(session, store=store)
    async with app.run_test(size=(80, 24)) as pilot:
        while app.last_snapshot is None:
            await asyncio.sleep(0.005)
        await pilot.pause()  # the frame that shows it
        t = time.perf_counter()
        await pilot.press("q")
    return {"import_s": t_imported - T_START, "first_frame_s": t - T_START}


def headless(spec: Any, session: Any, store: Any, warmup: int) -> Stopwatch:
    from engine.run.experiment import run_experiment

    watch = Stopwatch(warmup)
    watch.begin()
    result = run_experiment(spec, store=store, callbacks=[watch], session=session)
    assert not result.cancelled
    return watch


async def with_tui(spec: Any, session: Any, store: Any, warmup: int) -> tuple[Stopwatch, int, float]:
    """The run from the app; also the UI thread's CPU seconds per second while the timed steps ran."""
    from tui.app import SlmDvfsApp

    watch = Stopwatch(warmup)
    app = SlmDvfsApp(session, store=store)
    ui_cpu = wall = 0.0
    async with app.run_test(size=(80, 24)) as pilot:
        watch.begin()
        app.start_experiment(spec, callbacks=[watch])
        mark: tuple[float, float] | None = None
        while app.engine_busy is not None:
            if mark is None and watch.t0 is not None:
                mark = (time.thread_time(), time.perf_counter())
            await asyncio.sleep(0.5)  # seldom: this loop is the bench's, not the app's, and shares its thread
        if mark is not None:
            ui_cpu, wall = time.thread_time() - mark[0], time.perf_counter() - mark[1]
        await pilot.pause()
        assert app.last_result is not None and not app.last_result.cancelled, app.run_view.log[-3:]
        posted = app.run_bridge.posted if app.run_bridge else 0
        await pilot.press("q")
    return watch, posted, ui_cpu / wall if wall else 0.0


def busy_loops(n: int) -> list[subprocess.Popen[bytes]]:
    """n processes that each keep a core busy until terminated."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def pct_more(a: float, b: float) -> float:
    """How much more b is than a, in percent."""
    return 100.0 * (b / a - 1.0)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=120)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--reps", type=int, default=5, help="pairs of runs on an otherwise idle process (0: none)")
    p.add_argument("--busy-reps", type=int, default=3, help="pairs of runs with every core busy (the whole-run cost)")
    p.add_argument("--busy-steps", type=int, default=480,
                   help="steps of the whole-run pairs (default 480, about 30 CPU s here: the app's fixed costs, "
                        "composing the Run page and the switch to it, weigh on a 120-step run about 0.5 CPU s)")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--threads", type=int, default=1,
                   help="torch threads (default 1: on a small shared host, OpenMP threads that outnumber free "
                        "cores make step times swing tenfold, which would drown what is measured here)")
    args = p.parse_args()
    for name in ("steps", "busy_steps"):
        if getattr(args, name) <= args.warmup:
            p.error(f"--{name.replace('_', '-')} must exceed --warmup ({args.warmup}): the timed steps come after it")

    work = Path(tempfile.mkdtemp(prefix="bench-tui-"))
    os.environ["SLM_DVFS_STATE_DIR"] = str(work / "state")
    os.environ["SLM_DVFS_DATA_DIR"] = str(work / "data")
    import tui.app  # noqa: F401 - timed: what `slm-dvfs` imports before its first frame
    from engine.device.session import open_device
    from engine.results.store import Store

    t_imported = time.perf_counter()
    with open_device(twin=TWIN, realtime=True, twin_dir=work / "twin") as session, \
            Store(work / "results.sqlite") as store:
        frame = asyncio.run(first_frame(session, store, t_imported))

        import torch

        from engine.run.experiment import ExperimentSpec
        from engine.workload.spec import WorkloadSpec

        torch.set_num_threads(args.threads)
        spec = ExperimentSpec(WorkloadSpec("bert-tiny", "sst2", batch_size=args.batch_size, seq_len=args.seq_len),
                              policy="maxn", steps=args.steps, train_samples=max(64, args.batch_size * 8),
                              eval_samples=8, twin=TWIN, label="bench-tui")
        headless(spec, session, store, args.warmup)  # warm-up: tokenizer, trace and torch caches
        plain: list[Stopwatch] = []
        tui_runs: list[Stopwatch] = []
        posts: list[int] = []
        ui_share: list[float] = []
        for _ in range(args.reps):  # alternating, so drifting load hits both alike
            plain.append(headless(spec, session, store, args.warmup))
            watch, posted, share = asyncio.run(with_tui(spec, session, store, args.warmup))
            tui_runs.append(watch)
            posts.append(posted)
            ui_share.append(share)
        # The whole-run cost with every core busy: the UI's work competes with the training.
        pairs: list[tuple[tuple[float, float], tuple[float, float]]] = []
        busy_spec = replace(spec, steps=args.busy_steps)
        loops = busy_loops(os.cpu_count() or 1)
        try:
            load_busy = 0.0
            for i in range(args.busy_reps):  # alternating, the order swapped every other pair
                first_tui = i % 2 == 1
                runs: dict[bool, Stopwatch] = {}
                for tui_run in ((True, False) if first_tui else (False, True)):
                    if tui_run:
                        runs[True] = asyncio.run(with_tui(busy_spec, session, store, args.warmup))[0]
                    else:
                        runs[False] = headless(busy_spec, session, store, args.warmup)
                assert runs[False].whole is not None and runs[True].whole is not None
                pairs.append((runs[False].whole, runs[True].whole))
                load_busy = max(load_busy, os.getloadavg()[0])
        finally:
            for proc in loops:
                proc.terminate()
            for proc in loops:
                proc.wait()
    if not (plain and tui_runs):
        print(json.dumps(whole_run_json(pairs, args, load_busy), indent=1))
        return 0
    h = statistics.median(w.median_step_samples_per_s for w in plain)
    t = statistics.median(w.median_step_samples_per_s for w in tui_runs)
    h_span = statistics.median(w.samples_per_s for w in plain)
    t_span = statistics.median(w.samples_per_s for w in tui_runs)
    out = {
        "bench": "tui",
        "workload": {"model": "bert-tiny", "task": "sst2", "batch_size": args.batch_size, "seq_len": args.seq_len,
                     "steps": args.steps, "timed_steps": args.steps - args.warmup, "data": "synthetic"},
        "throughput_source": "measured (host clock; training runs on this host, energy on the twin)",
        "statistic": "samples/s of the median step, median over repetitions",
        "headless_samples_per_s": round(h, 2),
        "tui_samples_per_s": round(t, 2),
        "tui_slowdown_pct": round(100.0 * (1.0 - t / h), 2),
        "headless_runs": [round(w.median_step_samples_per_s, 2) for w in plain],
        "tui_runs": [round(w.median_step_samples_per_s, 2) for w in tui_runs],
        "over_whole_span": {"headless_samples_per_s": round(h_span, 2), "tui_samples_per_s": round(t_span, 2),
                            "tui_slowdown_pct": round(100.0 * (1.0 - t_span / h_span), 2)},
        "ui_messages_per_run": posts,
        "whole_run": whole_run_json(pairs, args, load_busy),
        "ui_thread_cpu_share": round(statistics.median(ui_share), 4),  # CPU s of the UI thread per s
        **{k: round(v, 3) for k, v in frame.items()},
        "host": {"python": platform.python_version(), "cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(),
                 "load_avg_1m": round(os.getloadavg()[0], 2)},
    }
    print(json.dumps(out, indent=1))
    return 0


def whole_run_json(pairs: list[tuple[tuple[float, float], tuple[float, float]]], args: argparse.Namespace,
                   load: float) -> dict[str, Any]:
    if not pairs:
        return {}
    cpu = [pct_more(h[1], t[1]) for h, t in pairs]
    wall = [pct_more(h[0], t[0]) for h, t in pairs]
    return {
        "statistic": "whole process CPU s (all threads) and wall s from a run's start to its RunFinished, "
                     "median over alternating pairs",
        "busy_loops": os.cpu_count(),
        "steps": args.busy_steps,
        "pairs": len(pairs),
        "headless_cpu_s": round(statistics.median(h[1] for h, _t in pairs), 3),
        "tui_cpu_s": round(statistics.median(t[1] for _h, t in pairs), 3),
        "tui_cpu_cost_pct": round(statistics.median(cpu), 2),
        "headless_wall_s": round(statistics.median(h[0] for h, _t in pairs), 3),
        "tui_wall_s": round(statistics.median(t[0] for _h, t in pairs), 3),
        "tui_wall_cost_pct": round(statistics.median(wall), 2),
        "per_pair_cpu_cost_pct": [round(c, 2) for c in cpu],
        "per_pair_wall_cost_pct": [round(w, 2) for w in wall],
        "target_pct": 3.0,
        "load_avg_1m_max": round(load, 2),
    }


if __name__ == "__main__":
    sys.exit(main())
