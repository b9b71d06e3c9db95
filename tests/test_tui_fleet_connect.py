"""The TUI's own fleet, started as `slm-dvfs --fleet-twins 2` starts it: through engine.cli.main and
its TUI launch, in a fresh interpreter (faulthandler off, as in a user's shell: pytest turns it on,
which hid that Ray's start failed inside the app), where Textual has replaced sys.stdout/stderr.
The local fleet connects; disconnecting on page 7 stops its Ray, connecting again from the page
starts one, and leaving the app, by `q` or by losing the terminal (SIGHUP), stops it too."""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

pytest.importorskip("ray")
psutil = pytest.importorskip("psutil")
pytestmark = pytest.mark.slow  # a local Ray instance starts in a fresh interpreter, twice: ~30-60 s on two cores

ROOT = Path(__file__).resolve().parents[1]
RAY_WAIT_S = 240.0  # bounds on waits for Ray on a loaded machine: a hang fails, not a stopwatch

# The launch's own path (engine.cli.main -> launch_tui -> SlmDvfsApp(..., fleet_twins=2) -> run, then
# close_fleet), with the app's run driven by a run_test pilot instead of a terminal.
SCRIPT = r"""
import asyncio, json, sys
import psutil
import tui.app
from tui_helpers import drive
from tui import messages
from tui.messages import FleetConnected, FleetConnectFailed, FleetPolled

WAIT = float(sys.argv[1])
seen = {}


def ray_processes():
    names = []
    for p in psutil.Process().children(recursive=True):
        try:
            name = p.name()
        except psutil.Error:
            continue
        if name in ("gcs_server", "raylet") or name.startswith("ray::"):
            names.append(name)
    return sorted(names)


async def connected(ui, app, what):
    message = await ui.wait_for(FleetConnected, FleetConnectFailed, timeout=WAIT)
    seen[what] = getattr(message, "error", "connected")
    if isinstance(message, FleetConnectFailed):
        seen[what + " then Ray"] = ray_processes()
        return False
    await ui.wait_for(FleetPolled, until=lambda: len(app.fleet_tracker.view().boards) == 2, timeout=WAIT)
    seen[what + " boards"] = [b.name for b in app.fleet_tracker.view().boards]
    seen[what + " Ray"] = ray_processes()
    return True


async def scenario(app):
    async with drive(app, size=(120, 30)) as ui:
        await ui.press("7")
        if await connected(ui, app, "at start"):
            await ui.press("d")
            await ui.wait_for(messages.FleetClosed, timeout=WAIT)
            seen["disconnected"] = app.fleet_tracker.view().status
            seen["disconnected Ray"] = ray_processes()
            await ui.type_into("fleet-target", "twins:2")
            await ui.press("enter")
            await connected(ui, app, "from the page")
        await ui.press("q")
        await ui.log.exiting.wait()


tui.app.SlmDvfsApp.run = lambda app: asyncio.run(scenario(app))
from engine.cli import main

seen["exit"] = main(["--fleet-twins", "2"])
seen["after exit Ray"] = ray_processes()
print(json.dumps(seen))
"""


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONFAULTHANDLER", "RAY_ADDRESS", "SLM_DVFS_DB")}
    env.update(SLM_DVFS_STATE_DIR=str(tmp_path / "state"), SLM_DVFS_TWIN_DIR=str(tmp_path / "state" / "twin"),
               SLM_DVFS_DATA_DIR=str(tmp_path / "data"),
               SLM_DVFS_CACHE_DIR=str(tmp_path / "cache"), HF_HUB_OFFLINE="1",
               RAY_AUTH_MODE="disabled",  # a local instance only: nothing written under ~/.ray
               PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]))
    return env


def test_fleet_twins_2_connects_in_the_app_and_its_ray_stops_on_disconnect_and_at_exit(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(RAY_WAIT_S)], cwd=tmp_path, env=_env(tmp_path),
                         capture_output=True, text=True, timeout=3 * RAY_WAIT_S)
    assert out.returncode == 0, out.stderr[-3000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["at start"] == "connected", seen  # was: RuntimeError: file.fileno() is not a valid file descriptor
    assert seen["at start boards"] == ["twin-0", "twin-1"]
    assert {"gcs_server", "raylet"} <= set(seen["at start Ray"]) and seen["at start Ray"].count("ray::BoardWorker") == 2
    assert seen["disconnected"] == "unconnected" and seen["disconnected Ray"] == []  # `d` stopped its Ray
    assert seen["from the page"] == "connected" and seen["from the page boards"] == ["twin-0", "twin-1"]
    assert seen["exit"] == 0 and seen["after exit Ray"] == []  # and leaving the app stopped the second one


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def _alive(procs: list[psutil.Process]) -> list[str]:
    out = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(f"{p.pid} {p.name()}")
        except psutil.Error:
            continue
    return out


def _until(condition: Callable[[], bool], bound_s: float) -> bool:
    end = time.monotonic() + bound_s
    while not condition():
        if time.monotonic() > end:
            return False
        time.sleep(0.2)
    return True


def test_losing_the_terminal_stops_the_local_fleets_ray(tmp_path: Path) -> None:
    """`slm-dvfs --fleet-twins 2` in a terminal (a pty): once its two twins' workers run, the terminal
    goes away (SIGHUP); the app quits and no process of its Ray is left."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: the command as a user types it
        os.chdir(tmp_path)
        os.execve(sys.executable, [sys.executable, "-c", "import sys; from engine.cli import main; sys.exit(main())",
                                   "--fleet-twins", "2"], {**_env(tmp_path), "TERM": "xterm-256color"})
    screen = bytearray()
    stop = threading.Event()

    def drain() -> None:  # the terminal's side: read what the app draws, so it never blocks writing
        while not stop.is_set():
            if select.select([fd], [], [], 0.2)[0]:
                try:
                    chunk = os.read(fd, 65536)
                except OSError:
                    return
                if not chunk:
                    return
                screen.extend(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    ray_procs: list[psutil.Process] = []
    try:
        def workers_run() -> bool:
            procs = _descendants(pid)
            ray_procs[:] = procs
            return sum(1 for p in procs if _title(p).startswith("ray::BoardWorker")) == 2

        assert _until(workers_run, RAY_WAIT_S), (
            "the app's fleet never started its two twins' workers; the screen's end: "
            + screen[-2000:].decode(errors="replace"))
        os.kill(pid, signal.SIGHUP)
        assert _until(lambda: os.waitpid(pid, os.WNOHANG)[0] == pid, RAY_WAIT_S), "the app did not quit on SIGHUP"
        pid = 0
        assert _until(lambda: not _alive(ray_procs), RAY_WAIT_S), f"Ray left running: {_alive(ray_procs)}"
    finally:
        stop.set()
        if pid:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        for p in ray_procs:  # whatever a failure left behind
            try:
                p.kill()
            except psutil.Error:
                pass
        reader.join(timeout=5)
        os.close(fd)


def _title(p: psutil.Process) -> str:
    """A Ray worker's process title (`ray::BoardWorker`, `ray::BoardWorker.info()` while it answers)."""
    try:
        return " ".join(p.cmdline())
    except psutil.Error:
        return ""
