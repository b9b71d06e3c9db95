"""Generated files to import, of any length: tegrastats logs and import-sweep CSVs.

Shared by the import tests and bench/bench_imports.py. The tegrastats lines are in the format of
tests/data/tegrastats_r35.log (JetPack 5.1, AGX Orin 64GB: dated lines, `NC` rails, GR3D per GPC),
written line by line with varying rail powers from a seeded generator; no file is downloaded.
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from pathlib import Path

START = datetime(2023, 11, 21, 10, 15, 1)
_CPUS = ",".join(["{c}%@2201"] * 12)
_LINE = ("{date} RAM {ram}/62841MB (lfb 14273x4MB) SWAP 0/31421MB (cached 0MB) CPU [" + _CPUS + "] "
         "EMC_FREQ {emc}%@3199 GR3D_FREQ {gr3d}%@[1300,1300] VIC_FREQ 729 APE 174 CV0@-256C CPU@{temp}C Tboard@32C "
         "SOC2@41.437C Tdiode@34.75C SOC0@42.062C CV1@-256C GPU@{temp}C tj@{temp}C SOC1@41.281C CV2@-256C "
         "VDD_GPU_SOC {gpu}mW/{gpu_avg}mW VDD_CPU_CV {cpu}mW/{cpu_avg}mW VIN_SYS_5V0 {sys}mW/{sys_avg}mW NC 0mW/0mW "
         "VDDQ_VDD2_1V8AO {ddr}mW/{ddr_avg}mW NC 0mW/0mW")


def tegrastats_line(rng: random.Random, when: datetime | None) -> str:
    """One r35 line at `when` (None: undated, as `tegrastats` prints to a terminal)."""
    gpu, cpu = rng.randrange(2000, 16000), rng.randrange(400, 2000)
    sys_mw, ddr = rng.randrange(4000, 6500), rng.randrange(300, 1300)
    date = "" if when is None else when.strftime("%m-%d-%Y %H:%M:%S")
    line = _LINE.format(date=date, ram=rng.randrange(3000, 9000), c=rng.randrange(0, 100), emc=rng.randrange(0, 60),
                        gr3d=rng.randrange(0, 100), temp=f"{rng.uniform(40, 60):.3f}", gpu=gpu, gpu_avg=gpu - 100,
                        cpu=cpu, cpu_avg=cpu, sys=sys_mw, sys_avg=sys_mw, ddr=ddr, ddr_avg=ddr)
    return line.lstrip()


def write_tegrastats_log(path: Path, lines: int, *, interval_ms: int = 10, seed: int = 0, dated: bool = True,
                         faults: bool = True) -> Path:
    """A log of `lines` lines as `tegrastats --interval interval_ms --logfile path` writes it (dates in whole
    seconds), written line by line. With `faults`, about one line in 997 is torn (cut mid-write) and one in
    1999 lacks a rail, as a killed or hot-plugged tegrastats leaves them: the import skips them."""
    rng = random.Random(seed)
    with path.open("w") as fh:
        for i in range(lines):
            when = START + timedelta(milliseconds=i * interval_ms) if dated else None
            line = tegrastats_line(rng, when)
            if faults and i % 997 == 500:
                line = line[: len(line) // 2]
            elif faults and i % 1999 == 1000:
                line = line.replace(" VDD_CPU_CV", " X").split(" X")[0]  # stops before its CPU rail
            fh.write(line + "\n")
    return path


SWEEP_HEADER = "model,task,batch_size,max_seq_len,pad,rails,samples,gpu_mhz,emc_mhz,repeat,time_s,energy_j"
_GPU_MHZ = (306, 408, 510, 612, 714, 816, 918, 1020, 1122, 1224, 1300.5)
_EMC_MHZ = (2133, 3199)


def write_sweep_csv(path: Path, rows: int, *, settings: int = 1, seed: int = 0, numbered_every: int = 0) -> Path:
    """An import-sweep CSV of `rows` measured points of bert-tiny on sst2 over the first `settings` GPU x EMC
    settings of the AGX Orin, in turn (one setting: every row a repeat of it, as a long stability run writes).
    With `numbered_every` N, every Nth row gives its repeat number (counting down from the end, so the
    unnumbered rows fill the gaps); the others leave it to the import."""
    rng = random.Random(seed)
    grid = [(g, e) for e in _EMC_MHZ for g in _GPU_MHZ][:max(1, settings)]
    lines = [SWEEP_HEADER]
    for i in range(rows):
        gpu, emc = grid[i % len(grid)]
        repeat = ""
        if numbered_every and i % numbered_every == 0:
            repeat = str(rows // len(grid) - i // len(grid) + 3)
        time_s = 10 + rng.random() * 5
        lines.append(f"bert-tiny,sst2,32,128,max,gpu+cpu,320,{gpu:g},{emc},{repeat},{time_s:.6f},"
                     f"{time_s * (8 + rng.random() * 4):.6f}")
    path.write_text("\n".join(lines) + "\n")
    return path


# --------------------------------------------------------------------------- what an import stored
# The cases whose stored figures and rows tests/data/imports_main.json holds, as main stored them before imports
# streamed (issue 24): the same files must still store exactly these, bit for bit.
TEGRASTATS_CASES = {
    "spread-10ms": dict(lines=5000, interval_ms=10, args=()),  # dated whole seconds: spread over each second
    "interval-10ms": dict(lines=5000, interval_ms=10, args=("--interval-ms", "10")),
    "dated-1s": dict(lines=1500, interval_ms=1000, args=("--rails", "gpu+cpu")),  # 1 s apart: kept as they are
    "undated-10ms": dict(lines=3000, interval_ms=10, args=("--interval-ms", "10"), dated=False),
}
SWEEP_CASES = {
    "numbered-7-settings": dict(rows=3000, settings=7, numbered_every=5),
    "one-setting": dict(rows=600, settings=1),
}


def stored_run(db: Path, run_id: int, dated: bool = True) -> dict[str, object]:
    """A run's figures and power samples as the store holds them (floats by repr: bit for bit); the
    log's own path is left out of its notes, and an undated log's start and end (the import's clock)."""
    import sqlite3

    with sqlite3.connect(db) as conn:
        run = conn.execute("SELECT status, time_s, wall_s, energy_j, rail_energy_j, rails, avg_power_w, started_at, "
                           "finished_at, notes FROM runs WHERE id = ?", (run_id,)).fetchone()
        rows = conn.execute("SELECT t, total_mw, rails_mw, source FROM power_samples WHERE run_id = ? ORDER BY id",
                            (run_id,)).fetchall()
    figures = [repr(v) if isinstance(v, float) else v for v in run]
    figures[-1] = str(figures[-1]).split(": ", 1)[1]
    if not dated:
        figures[7] = figures[8] = None
    return {"run": figures, "samples": len(rows), "rows": _digest([[repr(t), repr(total), rails, source]
                                                                  for t, total, rails, source in rows])}


def stored_sweeps(db: Path) -> dict[str, object]:
    """Every stored sweep's points as the store holds them (floats by repr), in order."""
    import sqlite3

    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT sweep_id, setting, gpu_hz, cpu_hz, emc_hz, nvpmodel, repeat, time_s, energy_j, "
                            "rail_energy_j, avg_power_w, samples, source FROM sweep_points ORDER BY id").fetchall()
        sweeps = conn.execute("SELECT id, repeats, planned, status, source, label FROM sweeps ORDER BY id").fetchall()
    return {"sweeps": [list(s) for s in sweeps], "points": len(rows),
            "rows": _digest([[repr(v) if isinstance(v, float) else v for v in r] for r in rows])}


def _digest(rows: list[list[object]]) -> str:
    import hashlib
    import json

    return hashlib.sha256(json.dumps(rows).encode()).hexdigest()
