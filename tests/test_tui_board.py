"""The header and the Device page's Board pane (issue 23): the module, its memory and its power
mode by name and id, and jtop's details (per-core CPU load and clock, GPU and EMC load, fan,
throttling), read by the device layer from the board's files, on the twin and on board trees
with and without a fan; a part a board lacks reads `none` / `n/a`, never a crash."""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from pathlib import Path

from engine.core.units import format_bytes
from engine.device.jetson import JetsonDevice
from engine.device.session import DeviceSession
from engine.device.snapshot import take_snapshot
from engine.device.treegen import FanSpec, default_orin_spec, render_tree
from engine.device.twin.orin import VirtualOrin
from tui.app import SlmDvfsApp
from tui.messages import SnapshotTaken
from tui.widgets.device_panes import ActivityPane, IdentityBar
from traces import BERT_BASE_LIKE
from tui_helpers import drive, make_app, plain

MEM_KB = 7_620_000  # an 8 GB module's MemTotal, about what L4T leaves Linux (a test value)


def board_tree(root: Path, **changes: object) -> Path:
    """A board's tree (no twin marker), as treegen renders the AGX Orin, with `changes` to its spec."""
    render_tree(root, dataclasses.replace(default_orin_spec("r36"), **changes))  # type: ignore[arg-type]
    return root


def put(root: Path, rel: str, text: str) -> None:
    path = root / rel
    tmp = path.with_name(path.name + ".new")
    tmp.write_text(text)
    os.replace(tmp, path)


def loads_read(app: SlmDvfsApp) -> bool:
    """The latest reading gives every online core a share (the second /proc/stat the device layer
    saw differed from the first: the twin rewrites it 4 times a second)."""
    snap = app.last_snapshot
    return snap is not None and snap.activity is not None and all(
        c.load is not None for c in snap.activity.cores if c.online)


async def board_text(session: DeviceSession, ready: Callable[[SlmDvfsApp], bool] = loads_read) -> tuple[str, str]:
    """(the header, the Board pane) once the page has drawn a reading that is `ready`."""
    app = make_app(session)
    async with drive(app, size=(100, 30)) as ui:
        await ui.wait_for(SnapshotTaken)
        await ui.wait_for(SnapshotTaken, until=lambda: ready(app))
        header = plain(app.screen.query_one(IdentityBar).content, width=200)
        board = plain(app.screen.query_one(ActivityPane).content, width=200)
        await ui.press("q")
    return header, board


async def test_the_twin_names_its_module_memory_and_mode(twin_session: DeviceSession) -> None:
    ident = twin_session.device.identity()
    header, board = await board_text(twin_session)
    total = format_bytes(62841 * 1024 * 1024)  # the profile's MemTotal (agx-orin-64gb.toml)
    assert "MAXN (mode 0)" in header and "nvpmodel 0 MAXN" not in header
    assert ident.module in header and f"RAM {total}" in header
    lines = board.splitlines()
    assert lines[0] == f"{ident.module} · RAM {total} · MAXN (mode 0)"
    # every core with its load and clock: the idle twin's 12 cores at one clock, 0% each
    assert lines[1].startswith("CPU 0-11 @") and lines[1].endswith(" ".join(["0"] * 12) + "%")
    assert "GPU 0% · EMC 0% · fan none · throttling none" in board


async def test_a_board_with_a_fan_that_throttles(tmp_path: Path) -> None:
    """A board's fan (pwm-fan and its tachometer), memory in use, per-core loads from /proc/stat,
    a zone past its passive trip and the GPU's max below the mode's: each on the Board pane."""
    root = board_tree(tmp_path / "board", fan=FanSpec(pwm=115, rpm=2300), mem_total_kb=MEM_KB,
                      mem_available_kb=MEM_KB - 2 * 1024 * 1024,
                      trip_points=(("active", 50.0), ("passive", 99.0), ("critical", 104.5)))
    put(root, "sys/devices/virtual/thermal/thermal_zone8/temp", "100500\n")  # tj-thermal
    put(root, "sys/devices/platform/bus@0/17000000.gpu/devfreq/17000000.gpu/max_freq", "612000000\n")
    put(root, "sys/kernel/actmon_avg_activity/mc_all", str(25 * 3_199_000) + "\n")  # 25% at 3199 MHz
    device = JetsonDevice(root)
    first = take_snapshot(device)  # the first /proc/stat counters: no share yet
    assert first.activity is not None and all(c.load is None for c in first.activity.cores)
    cores = [(50 if cpu == 0 else 0, 50 if cpu == 0 else 100) for cpu in range(12)]
    put(root, "proc/stat", "".join(f"cpu{n} {b} 0 0 {i} 0 0 0 0 0 0\n" for n, (b, i) in enumerate(cores)))
    session = DeviceSession(device)
    _header, board = await board_text(session)
    assert "RAM 2/7.27 GiB" in board
    assert "CPU 0-11 @115.2 50 0 0 0 0 0 0 0 0 0 0 0%" in board  # core 0 busy half the time since the first reading
    assert "EMC 25%" in board and "fan 45% 2300 rpm" in board  # 115/255 of full speed
    assert "throttling tj-thermal 100.5°C ≥ passive trip 99°C" in board  # the passive trip, not the active one
    assert "throttling GPU max 612 MHz, below its table top 1300.5 MHz" in board


async def test_a_board_without_fan_memory_or_cpu_counters_says_so(tmp_path: Path) -> None:
    root = board_tree(tmp_path / "board")  # no fan
    (root / "proc/meminfo").unlink()
    (root / "proc/stat").unlink()
    (root / "sys/kernel/actmon_avg_activity/mc_all").unlink()
    header, board = await board_text(DeviceSession(JetsonDevice(root)), ready=lambda app: app.last_snapshot is not None)
    assert "memory n/a" in header
    assert "CPU n/a" in board and "EMC n/a" in board and "fan none" in board and "throttling none" in board


def test_the_twin_shows_a_step_on_its_cores(tmp_path: Path) -> None:
    """While the twin runs a step, its /proc/stat shows the training loop's core busy (the device
    layer reads it as a board's); idle, every core reads 0."""
    with VirtualOrin(root=tmp_path / "twin") as twin:
        device = twin.device()
        twin.run_step(BERT_BASE_LIKE)  # undriven: the files keep showing the step
        device.activity()  # the first counters
        deadline = time.monotonic() + 30.0  # a bound on a hang, not a threshold: the file is rewritten 4x a second
        cores = device.activity().cores
        while not any(c.load for c in cores) and time.monotonic() < deadline:
            time.sleep(0.1)
            cores = device.activity().cores
        assert cores[0].load is not None and cores[0].load > 0.0
        assert all(c.online and c.cur_hz for c in cores)
