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

Where the CPU goes, by thread (`threads`, the figure that resolves): every run above is also
split by OS thread (psutil's per-thread times; roles from Python's thread names): the engine's
thread that trains, the twin's loop, the power sampler, native pools, and in the app's runs its
own threads (the UI loop and the device poll). `app_threads.share_pct` is the app's own threads'
CPU over the whole run against the paired headless run's whole-process CPU: a direct reading, not
a difference of two noisy totals, so its spread over the pairs (median, IQR, min, max) tells it
apart from zero and from ten times its size. `engine_cpu_more_pct` is how much more CPU the
training thread itself took with the app (cache and scheduler effects), with its spread.

At rest (`idle`): the app on its Device page, idle, in this process (roles per thread) twice: with
the twin's background loop running, as `slm-dvfs` has it, and with that loop stopped (the TUI
alone); and `slm-dvfs` itself in a pseudo-terminal (`idle_pty`: what a user's session costs,
terminal output included; the process's CPU time over wall time). Each after `--idle-warmup` s
(the graphs fill a column a poll: before that each reading changes them), over `--idle-windows`
windows of `--idle-window` s: percent of one core, median and min/max over the windows.

It also times the first frame: from before importing the app to the device page drawn with
its first reading (`first_frame_s`; `import_s` is the import part), in this process before
anything else is imported.

    .venv/bin/python bench/bench_tui.py [--steps 120] [--warmup 10] [--reps 5] [--busy-reps 3] [--busy-steps 480]
        [--batch-size 8] [--seq-len 64] [--threads 1] [--idle-warmup 60] [--idle-window 20] [--idle-windows 3]
        [--idle-size 80x24] [--no-idle] [--no-pty]
"""

from __future__ import annotations

import time

T_START = time.perf_counter()  # before the app's imports: the first-frame clock starts here

import argparse
from dataclasses import replace
import asyncio
import contextlib
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
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


ROLE_NAMES = {"slm-dvfs-twin": "twin", "power-monitor": "sampler"}
APP_ROLES = ("ui", "app")  # the app's own threads: its UI loop, its poll and other workers


def thread_cpu_s() -> dict[int, float]:
    """CPU seconds (user + system) of each OS thread of this process, by native id."""
    import psutil

    return {t.id: t.user_time + t.system_time for t in psutil.Process().threads()}


def by_role(before: dict[int, float], after: dict[int, float], process_s: float, engine_tid: int | None,
            names: dict[int, str]) -> dict[str, float]:
    """CPU seconds between two readings, by what each thread does: `engine` (the thread the run's events
    came from: it trains), `twin`, `sampler`, `ui` (the main thread, where it is not the engine), `app`
    (the app's other Python threads: the device poll...), `native` (threads Python did not start: torch's
    or the tokenizer's pools) and `ended` (threads gone by the second reading: the process's total less
    the rest)."""
    main = threading.main_thread().native_id
    out = dict.fromkeys(("engine", "twin", "sampler", "ui", "app", "native", "ended"), 0.0)
    for tid, cpu in after.items():
        name = names.get(tid)
        role = ("engine" if tid == engine_tid else ROLE_NAMES.get(name or "", "")
                or ("ui" if tid == main else "app" if name is not None else "native"))
        out[role] += cpu - before.get(tid, 0.0)
    out["ended"] = max(0.0, process_s - sum(out.values()))
    return out


def thread_names() -> dict[int, str]:
    return {t.native_id: t.name for t in threading.enumerate() if t.native_id is not None}


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
        self.engine_tid: int | None = None  # the thread the run's events come from
        self.threads_at_start: dict[int, float] = {}
        self.roles: dict[str, float] = {}  # CPU s by thread role over the whole run (by_role)
        self._names: dict[int, str] = {}

    def begin(self) -> None:
        self.threads_at_start = thread_cpu_s()
        self._names = thread_names()
        self.start = (time.perf_counter(), process_cpu_s())

    def __call__(self, event: Any) -> None:
        if self.engine_tid is None:
            self.engine_tid = threading.get_native_id()
            self._names.update(thread_names())  # the sampler and workers started after begin()
        if type(event).__name__ == "RunFinished" and self.start is not None and self.whole is None:
            self.whole = (time.perf_counter() - self.start[0], process_cpu_s() - self.start[1])
            self._names.update(thread_names())
            self.roles = by_role(self.threads_at_start, thread_cpu_s(), self.whole[1], self.engine_tid, self._names)
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


async def idle_page(session: Any, store: Any, warmup_s: float, window_s: float, windows: int,
                    size: tuple[int, int]) -> list[dict[str, float]]:
    """The app idle on its Device page: per window, percent of one core, the process's and by role."""
    from tui.app import SlmDvfsApp

    app = SlmDvfsApp(session, store=store)
    out: list[dict[str, float]] = []
    async with app.run_test(size=size) as pilot:
        while app.last_snapshot is None:
            await asyncio.sleep(0.05)
        await asyncio.sleep(warmup_s)  # this loop only waits: the main thread's CPU is the app's
        for _ in range(windows):
            names, before, cpu0, wall0 = thread_names(), thread_cpu_s(), process_cpu_s(), time.perf_counter()
            await asyncio.sleep(window_s)
            wall, cpu = time.perf_counter() - wall0, process_cpu_s() - cpu0
            names.update(thread_names())
            roles = by_role(before, thread_cpu_s(), cpu, None, names)
            out.append({"process": 100.0 * cpu / wall, **{k: 100.0 * v / wall for k, v in roles.items() if v}})
        await pilot.press("q")
    return out


def idle_pty(warmup_s: float, window_s: float, windows: int, size: tuple[int, int]) -> list[dict[str, Any]]:
    """`slm-dvfs` (its default twin) in a pseudo-terminal of `size`, idle on its Device page, its
    output read as a terminal would: per window, percent of one core of the whole process and of its
    main thread, and the bytes it wrote per second."""
    import fcntl
    import pty
    import select
    import signal
    import struct
    import termios

    import psutil

    cols, rows = size
    pid, fd = pty.fork()
    if pid == 0:  # the child: the terminal's size, then the app
        fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        exe = str(Path(sys.executable).parent / "slm-dvfs")
        os.execve(exe, [exe], dict(os.environ, TERM="xterm-256color", COLORTERM="truecolor"))
    written = 0

    def drain(seconds: float) -> bool:
        nonlocal written
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            if select.select([fd], [], [], min(left, 0.2))[0]:
                try:
                    written += len(os.read(fd, 65536))
                except OSError:
                    return False  # the app has exited
        return True

    out: list[dict[str, Any]] = []
    proc = psutil.Process(pid)
    try:
        drain(warmup_s)
        for _ in range(windows):
            cpu0, main0, w0, b0 = sum(proc.cpu_times()[:2]), _tid_cpu(proc, pid), time.monotonic(), written
            drain(window_s)
            wall = time.monotonic() - w0
            out.append({"process": 100.0 * (sum(proc.cpu_times()[:2]) - cpu0) / wall,
                        "main_thread": 100.0 * (_tid_cpu(proc, pid) - main0) / wall,
                        "bytes_per_s": (written - b0) / wall})
        os.write(fd, b"q")
        drain(5.0)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        os.waitpid(pid, 0)
        os.close(fd)
    return out


def _tid_cpu(proc: Any, tid: int) -> float:
    return next((t.user_time + t.system_time for t in proc.threads() if t.id == tid), 0.0)


def spread(values: list[float], digits: int = 2) -> dict[str, Any]:
    """Median, interquartile range, min and max of `values` (and each, in order)."""
    q = statistics.quantiles(values, n=4, method="inclusive") if len(values) > 1 else [values[0]] * 3
    r = lambda v: round(v, digits)  # noqa: E731
    return {"median": r(statistics.median(values)), "iqr": [r(q[0]), r(q[2])], "min": r(min(values)),
            "max": r(max(values)), "n": len(values), "each": [r(v) for v in values]}


def threads_json(pairs: list[tuple[Stopwatch, Stopwatch]]) -> dict[str, Any]:
    """The app's own threads' CPU over each run with the app, against the paired headless run."""
    pairs = [(h, t) for h, t in pairs if h.whole and t.whole and h.roles and t.roles]
    if not pairs:
        return {}
    share = [100.0 * sum(t.roles[r] for r in APP_ROLES) / h.whole[1] for h, t in pairs]  # type: ignore[index]
    engine = [pct_more(h.roles["engine"], t.roles["engine"]) for h, t in pairs]
    roles = {side: {role: round(statistics.median(run.roles[role] for run in runs), 3) for role in runs[0].roles}
             for side, runs in (("headless", [h for h, _ in pairs]), ("tui", [t for _, t in pairs]))}
    return {
        "statistic": "CPU s by OS thread (psutil) from a run's start to its RunFinished; share_pct: the app's "
                     "own threads (ui, app) over the paired headless run's whole-process CPU, per pair",
        "app_threads_share_pct": spread(share),
        "app_threads_cpu_s": spread([sum(t.roles[r] for r in APP_ROLES) for _, t in pairs], 3),
        "engine_cpu_more_pct": spread(engine),
        "cpu_s_by_role_median": roles,
    }


def idle_json(windows: list[dict[str, float]]) -> dict[str, Any]:
    keys = sorted({k for w in windows for k in w}, key=lambda k: (k != "process", k))
    return {k: spread([w.get(k, 0.0) for w in windows]) for k in keys}


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
    p.add_argument("--idle-warmup", type=float, default=60.0,
                   help="seconds on the Device page before the idle windows (the graphs fill a column a poll)")
    p.add_argument("--idle-window", type=float, default=20.0, help="seconds of one idle window")
    p.add_argument("--idle-windows", type=int, default=3, help="idle windows, one after another")
    p.add_argument("--idle-size", default="80x24", help="the terminal's COLSxROWS for the idle measures")
    p.add_argument("--no-idle", action="store_true", help="skip the idle measures")
    p.add_argument("--no-pty", action="store_true", help="skip `slm-dvfs` idle in a pseudo-terminal")
    args = p.parse_args()
    try:
        idle_size = tuple(int(v) for v in args.idle_size.lower().split("x"))
        assert len(idle_size) == 2 and min(idle_size) > 0
    except (ValueError, AssertionError):
        p.error(f"--idle-size {args.idle_size!r}: write COLSxROWS, for instance 80x24")
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
        if args.reps or args.busy_reps:
            headless(spec, session, store, args.warmup)  # warm-up: tokenizer, trace and torch caches
            # and the app's: its first run imports and builds what later ones reuse
            asyncio.run(with_tui(spec, session, store, args.warmup))
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
        busy_watches: list[tuple[Stopwatch, Stopwatch]] = []
        busy_spec = replace(spec, steps=args.busy_steps)
        load_busy = 0.0
        loops = busy_loops(os.cpu_count() or 1) if args.busy_reps else []
        try:
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
                busy_watches.append((runs[False], runs[True]))
                load_busy = max(load_busy, os.getloadavg()[0])
        finally:
            for proc in loops:
                proc.terminate()
            for proc in loops:
                proc.wait()
    # At rest, once this session's twin is closed: its loop would otherwise count as the idle twin's.
    idle = measure_idle(args, work, idle_size) if not args.no_idle else {}
    threads = {"idle_process": threads_json(list(zip(plain, tui_runs))), "busy": threads_json(busy_watches)}
    if not (plain and tui_runs):
        print(json.dumps({"bench": "tui", "whole_run": whole_run_json(pairs, args, load_busy), "threads": threads,
                          **idle}, indent=1))
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
        "threads": threads,
        **idle,
        "ui_thread_cpu_share": round(statistics.median(ui_share), 4),  # CPU s of the UI thread per s
        **{k: round(v, 3) for k, v in frame.items()},
        "host": {"python": platform.python_version(), "cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(),
                 "load_avg_1m": round(os.getloadavg()[0], 2)},
    }
    print(json.dumps(out, indent=1))
    return 0


def measure_idle(args: argparse.Namespace, work: Path, size: tuple[int, ...]) -> dict[str, Any]:
    """The Device page at rest, with the twin's loop and without it (in this process), and `slm-dvfs` in a
    pseudo-terminal; on a twin session of its own, as `slm-dvfs` opens it (real time, thermal model)."""
    from engine.device.session import open_device
    from engine.results.store import Store

    shape = (size[0], size[1])
    out: dict[str, Any] = {}
    with open_device(twin=TWIN, realtime=True, twin_dir=work / "twin-idle", thermal=True) as session, \
            Store(work / "idle.sqlite") as store:
        with_twin = asyncio.run(idle_page(session, store, args.idle_warmup, args.idle_window, args.idle_windows,
                                          shape))
        session.twin.stop()  # the twin's files stay as last written: the app alone
        alone = asyncio.run(idle_page(session, store, args.idle_warmup, args.idle_window, args.idle_windows, shape))
    out["idle"] = {
        "statistic": f"percent of one core over {args.idle_window:g} s windows after {args.idle_warmup:g} s on the "
                     "Device page (process CPU s / wall s; by OS thread: ui = the app's loop, app = its poll "
                     "worker, twin = the twin's background loop); median, IQR, min, max over the windows",
        "size": list(shape),
        "with_twin_loop": idle_json(with_twin),
        "twin_loop_stopped": idle_json(alone),
        "target_pct": 3.0,
    }
    if not args.no_pty:
        out["idle_pty"] = {
            "statistic": "`slm-dvfs` in a pseudo-terminal, idle on its Device page: percent of one core of the "
                         "whole process (app and twin) and its main thread; bytes written to the terminal per s",
            "size": list(shape),
            **idle_json(idle_pty(args.idle_warmup, args.idle_window, args.idle_windows, shape)),
        }
    return out


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
