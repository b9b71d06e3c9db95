"""How a fleet's Ray starts and stops (engine.run.fleet.ray_init): a local fleet of twins sized to
this machine before anything starts, a start that fails part-way leaving no Ray behind, and a
local fleet listening on the loopback interface only (tests/test_fleet.py checks that one on its
module's fleet). The TUI's own start-up of a fleet: tests/test_tui_fleet_connect.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.cli import main
from engine.core.errors import ConfigError
from engine.run.fleet.ray_init import TWIN_MEMORY_BYTES, TwinRoom, check_twin_count

from conftest import fleet_isolation

ray = pytest.importorskip("ray")
psutil = pytest.importorskip("psutil")


def ray_processes() -> list[str]:
    """This process's children that belong to a Ray instance (its GCS, raylet, agents, workers)."""
    out = []
    for p in psutil.Process().children(recursive=True):
        try:
            name, cmdline = p.name(), " ".join(p.cmdline())
        except psutil.Error:
            continue
        if name in ("gcs_server", "raylet") or name.startswith("ray::") or "/site-packages/ray/" in cmdline:
            out.append(name)
    return sorted(out)


def test_room_is_the_fewer_of_cores_and_memory() -> None:
    gib = 2**30
    assert TwinRoom(cores=2, available_bytes=64 * gib).most == 8  # by cores: 2 x 4
    by_memory = TwinRoom(cores=16, available_bytes=3 * gib)
    assert by_memory.most == by_memory.by_memory == (3 * gib - int(0.5 * gib)) // TWIN_MEMORY_BYTES
    assert TwinRoom(cores=2, available_bytes=None).most == 8  # memory unknown: cores decide
    check_twin_count(8, TwinRoom(2, 64 * gib))
    with pytest.raises(ConfigError) as err:
        check_twin_count(9, TwinRoom(2, 64 * gib))
    assert "room for 8 twin(s)" in err.value.what and "--twins 8 or fewer" in err.value.remedy


def test_a_twin_fleet_too_big_for_this_machine_is_refused_before_ray_starts(
        isolated_env, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    started: list[object] = []

    def no_ray(*args: object, **kwargs: object) -> None:  # what --twins 100000 must never reach
        started.append(kwargs)
        raise RuntimeError("ray.init was called")

    monkeypatch.setattr(ray, "init", no_ray)
    assert main(["fleet", "sweep", "--twins", "100000", "--model", "bert-tiny", "--task", "sst2", "--fast"]) == 2
    err = capsys.readouterr().err
    assert "--twins 100000: this machine has room for" in err and "What to do: give --twins" in err
    assert started == [] and not ray.is_initialized()


OTHER_RAY = """
import sys
import ray
ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
print(ray.get_runtime_context().gcs_address, flush=True)
sys.stdin.read()  # up until the test closes our stdin
ray.shutdown()
"""


@pytest.mark.slow  # two local Ray instances start (and are stopped): ~20-40 s on two cores
def test_a_twin_fleet_starts_its_own_ray_beside_one_already_running(tmp_path: Path) -> None:
    """A Ray instance already running on the machine (`ray start`, another session's fleet, named by
    $RAY_ADDRESS or found in /tmp/ray) is not joined by `--twins`: the fleet starts its own (was:
    ray.init without an address joined it and failed, "When connecting to an existing cluster,
    num_cpus and num_gpus must not be provided")."""
    import subprocess
    import sys

    from engine.run.fleet import connect

    other = subprocess.Popen([sys.executable, "-c", OTHER_RAY], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True)
    try:
        assert other.stdout is not None
        address = other.stdout.readline().strip()
        assert address, "the other Ray instance did not start"
        with fleet_isolation(tmp_path), pytest.MonkeyPatch.context() as mp:
            mp.setenv("RAY_ADDRESS", address)  # as a user who ran `ray start` has it
            with connect(twins=1, folder=tmp_path / "twins") as fleet:
                assert [b.serial for b in fleet.boards()] and len(fleet.boards()) == 1
                assert ray.get_runtime_context().gcs_address != address  # its own instance
        assert not ray.is_initialized()
    finally:
        assert other.stdin is not None
        other.stdin.close()
        other.wait(timeout=60)


@pytest.mark.slow  # a local Ray instance starts (and is stopped): ~10-20 s on two cores
def test_a_fleet_whose_worker_cannot_start_says_why_and_leaves_no_ray(tmp_path: Path) -> None:
    from engine.run.fleet import connect

    twins = tmp_path / "twins"
    twins.mkdir()
    (twins / "twin-1").write_text("not a folder")  # twin-1's worker cannot render its tree there
    with fleet_isolation(tmp_path), pytest.raises(ConfigError) as err:
        connect(twins=2, folder=twins)
    what = err.value.what
    assert what.startswith("a board's worker could not start: cannot write the twin's tree at ") and "twin-1" in what
    assert "ENOTDIR" in what and "give the twin an empty or new folder" in what and "engine.core" not in what
    assert "\n" not in err.value.what and "Traceback" not in err.value.what  # one line, not Ray's traceback
    assert not ray.is_initialized() and ray_processes() == []  # the Ray it had started is stopped


@pytest.mark.slow  # a local Ray instance with token auth on, in a fresh interpreter: ~10-20 s on two cores
def test_rays_own_log_lines_are_labelled_as_rays_at_the_commands_level(tmp_path: Path) -> None:
    """Ray's token notice used to reach the user in Ray's own format (`2026-... WARNING
    authentication_token_setup.py:85 -- Token authentication is enabled ...`), as if it were ours."""
    import os
    import re
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_AUTH_MODE", "RAY_ADDRESS", "RAY_AUTH_TOKEN")}
    env.update(HOME=str(tmp_path / "home"),  # Ray's token auth (its default) writes its token under ~/.ray
               SLM_DVFS_STATE_DIR=str(tmp_path / "state"), SLM_DVFS_TWIN_DIR=str(tmp_path / "state" / "twin"),
               SLM_DVFS_DATA_DIR=str(tmp_path / "data"),
               SLM_DVFS_CACHE_DIR=str(tmp_path / "cache"), HF_HUB_OFFLINE="1", PYTHONPATH=str(root))
    out = subprocess.run([sys.executable, "-c", "import sys; from engine.cli import main; sys.exit(main())",
                          "fleet", "status", "--twins", "1"], env=env, cwd=tmp_path, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "twin-0" in out.stdout and "ray:" not in out.stdout  # stdout is ours alone
    lines = out.stderr.splitlines()
    assert any(line.startswith("WARNING ray: Token authentication is enabled") for line in lines), out.stderr
    ray_format = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+\s+[A-Z]+ \S+\.py:\d+ -- ")
    assert not [line for line in lines if ray_format.match(line)], out.stderr
    assert not any("Started a local Ray instance" in line for line in lines)  # Ray's INFO: shown with -v only


@pytest.mark.slow  # a local fleet of two paced twins, one of whose workers is killed: ~20-40 s on two cores
def test_a_killed_boards_ray_notice_stays_off_stdout_which_is_the_commands_own(tmp_path: Path) -> None:
    """Ray's driver printed the raylet's `A worker died or was killed ...` on stdout, among the
    command's event lines (and into --json); the fleet's own `board_lost` event says it."""
    import os
    import signal
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS",)}
    env.update(SLM_DVFS_STATE_DIR=str(tmp_path / "state"), SLM_DVFS_TWIN_DIR=str(tmp_path / "state" / "twin"),
               SLM_DVFS_DATA_DIR=str(tmp_path / "data"),
               SLM_DVFS_CACHE_DIR=str(tmp_path / "cache"), HF_HUB_OFFLINE="1", RAY_AUTH_MODE="disabled",
               PYTHONPATH=str(root))
    proc = subprocess.Popen([sys.executable, "-c", "import sys; from engine.cli import main; sys.exit(main())",
                             "fleet", "sweep", "--twins", "2", "--model", "bert-tiny", "--task", "sst2", "--fast",
                             "--steps", "2", "--pace", "20", "--db", str(tmp_path / "f.sqlite")],
                            env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = []
        for line in proc.stdout:  # until a board has measured a point: both workers run
            first.append(line)
            if "[twin]" in line:
                break
        workers = [p for p in psutil.Process(proc.pid).children(recursive=True)
                   if " ".join(p.cmdline()).startswith("ray::BoardWorker")]  # ray::BoardWorker.measure() when busy
        assert len(workers) == 2, first
        workers[0].send_signal(signal.SIGKILL)
        rest, err = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    out = "".join(first) + rest
    assert proc.returncode == 0, err[-3000:]  # the lost board's share was measured by the other
    assert " board_lost: " in out and "fleet sweep finished" in out
    assert "A worker died" not in out and "(raylet)" not in out, out  # stdout is the command's own
