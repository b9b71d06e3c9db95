"""What one step's energy window costs the training thread, before and after cheap sampling.

On a rendered AGX Orin tree (treegen's r36 layout, on /dev/shm where there is one), with
the sensor's update interval taken as 0 so that every window edge may read a new value
(the case where the old monitor read the sensor at both edges of every step):
- `rails_read_us`: one read of the four rails (eight files) through paths (open, read,
  close each time: the old `JetsonDevice.rails()`), with `pread` on files kept open (the
  new one, with its check that a rendered tree did not replace the file), and with `pread`
  alone (what `/` on a board does: sysfs files are never replaced);
- `window_us`: `begin_window` + `end_window` in the calling thread, median over many: the
  edges reading the sensor synchronously (the old behaviour, through paths and through
  pread), and the edges taking the sampler thread's latest sample (the new behaviour, the
  sampler running at 20 Hz meanwhile); `window_thread_cpu_us` is the calling thread's CPU
  time per window (mean), which neighbours on a shared host disturb less than the wall clock;
  `twin_exact_counter` is the twin's exact window (its energy counter), for comparison;
- `peak_lookup_us`: the step meter's old peak (the samples of the window taken from the
  ring buffer) against reading the window's kept peak.

All figures are measured on this host (a rendered tree of regular files, not a board's
sysfs: a board's INA3221 attributes cost more per read, which only widens the gap).

    .venv/bin/python bench/bench_sampling.py [--windows 3000] [--reads 3000]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from engine.device.base import RailReading  # noqa: E402
from engine.device.jetson import JetsonDevice  # noqa: E402
from engine.device.monitor import PowerMonitor  # noqa: E402
from engine.device.power import DeviceRailSource  # noqa: E402
from engine.device.treegen import default_orin_spec, render_tree  # noqa: E402


class PathRailDevice(JetsonDevice):
    """The rails read as before: each file opened, read and closed through its path."""

    def rails(self) -> tuple[RailReading, ...]:
        return tuple(RailReading(r.name, float(self.tree.read_int(r.voltage)), float(self.tree.read_int(r.current)))
                     for r in self.nodes.rails)


def per_call_us(fn: Callable[[], Any], n: int) -> float:
    """Median of 5 batches of n calls, in microseconds per call."""
    fn()
    batches = []
    for _ in range(5):
        t = time.perf_counter_ns()
        for _ in range(n):
            fn()
        batches.append((time.perf_counter_ns() - t) / n / 1000.0)
    return statistics.median(batches)


def window_cost(mon: PowerMonitor, n: int) -> tuple[float, float]:
    """(median wall us, mean thread-CPU us) of begin_window + end_window in this thread."""
    walls = []
    cpu0 = time.thread_time_ns()
    for _ in range(n):
        t = time.perf_counter_ns()
        mon.begin_window("step")
        mon.end_window("step")
        walls.append(time.perf_counter_ns() - t)
    cpu = (time.thread_time_ns() - cpu0) / n / 1000.0
    return statistics.median(walls) / 1000.0, cpu


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--windows", type=int, default=3000)
    p.add_argument("--reads", type=int, default=3000)
    args = p.parse_args()

    shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    work = Path(tempfile.mkdtemp(prefix="bench-sampling-", dir=shm))
    try:
        root = work / "orin"
        render_tree(root, default_orin_spec("r36"))
        by_path, by_pread, by_pread_only = PathRailDevice(root), JetsonDevice(root), JetsonDevice(root)
        by_pread_only._rail_files._check_replaced = False  # what `/` does on a board
        assert [r.power_mw for r in by_path.rails()] == [r.power_mw for r in by_pread.rails()]
        rails_us = {
            "paths": per_call_us(by_path.rails, args.reads),
            "pread": per_call_us(by_pread.rails, args.reads),
            "pread_no_replace_check": per_call_us(by_pread_only.rails, args.reads),
        }

        windows: dict[str, dict[str, float]] = {}
        for name, device, threaded in (("sync_edges_paths", by_path, False), ("sync_edges_pread", by_pread, False),
                                       ("sampler_latest_pread", by_pread, True)):
            source = DeviceRailSource(device)
            source.min_interval_s = 0.0  # every edge may see a new value (windows here are microseconds apart)
            mon = PowerMonitor(source, rate_hz=20)
            if threaded:
                mon.start()
            else:
                mon.sample_once()
            try:
                wall, cpu = window_cost(mon, args.windows)
                samples = mon.sample_count
            finally:
                mon.stop()
            windows[name] = {"wall_us": round(wall, 2), "thread_cpu_us": round(cpu, 2), "sensor_samples": samples}

        # The twin's exact windows (its energy counter; an in-memory sample at each edge, so a
        # run's trace has one per step): unchanged by cheap sampling, for comparison.
        from engine.device.power import TwinSource
        from engine.device.twin.orin import VirtualOrin

        with VirtualOrin(root=work / "twin") as orin:
            orin.start(realtime=False)
            mon = PowerMonitor(TwinSource(orin), rate_hz=20).start()
            try:
                wall, cpu = window_cost(mon, args.windows)
            finally:
                mon.stop()
        windows["twin_exact_counter"] = {"wall_us": round(wall, 2), "thread_cpu_us": round(cpu, 2)}

        # The step meter's old peak: the window's samples from the ring buffer (a 120 s buffer,
        # full, at 20 Hz; a step window of 200 ms holds 4 samples).
        mon = PowerMonitor(DeviceRailSource(by_pread), rate_hz=20)
        for _ in range(2400):
            mon.sample_once()
        mon.begin_window("step")
        for _ in range(4):
            mon.sample_once()
        w = mon.end_window("step")

        def old_peak() -> Any:
            inside = [s for s in mon.since(w.start) if s.t <= w.end]
            return max((sum(s.rails_mw.get(r, 0.0) for r in w.rails) for s in inside), default=None)

        peak_us = {"from_buffer": per_call_us(old_peak, args.reads),
                   "kept_by_window": per_call_us(lambda: w.peak_power_w, args.reads)}
        by_path.close()
        by_pread.close()
        by_pread_only.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)

    before = windows["sync_edges_paths"]["wall_us"]
    after = windows["sampler_latest_pread"]["wall_us"]
    out = {
        "bench": "sampling",
        "source": "measured (this host's clock; a rendered r36 tree of regular files"
                  + (" on /dev/shm" if shm else "") + ", not a board)",
        "rails_read_us": {k: round(v, 2) for k, v in rails_us.items()},
        "window_us": windows,
        "window_speedup": round(before / after, 1) if after > 0 else None,
        "peak_lookup_us": {k: round(v, 3) for k, v in peak_us.items()},
        "host": {"python": platform.python_version(), "cpus": os.cpu_count(),
                 "load_avg_1m": round(os.getloadavg()[0], 2)},
    }
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
