"""The twin keeps its state in memory (issue 24): a step renders no file, a reader of the tree
sees the state rendered as it reads (a clock change included), and twins' trees live on a tmpfs
by default, the state dir where there is none, $SLM_DVFS_TWIN_DIR when given."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from engine.cli import main
from engine.core import paths
from engine.device.base import ClockDomain
from engine.device.sysfs import SysfsTree
from engine.device.twin import files as twin_files
from engine.device.twin import orin as twin_orin

GPU = "sys/class/devfreq/17000000.gpu"  # a reader's path: through the devfreq class link
RUN = ["run", "--twin", "agx-orin-64gb", "--simulate", "--model", "bert-tiny", "--task", "sst2", "--policy", "maxn"]


@pytest.fixture
def renders(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every file the twin renders (its one writer of state files), with no coarse tick while a
    test runs: what is counted is what steps and reads render."""
    seen: list[str] = []
    real = twin_files.replace_at

    def counting(dir_fd: int, name: str, data: bytes, path: str, **kw: object) -> None:
        seen.append(str(path))
        real(dir_fd, name, data, path, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(twin_files, "replace_at", counting)
    monkeypatch.setattr(twin_orin, "RENDER_TICK_S", 3600.0, raising=False)
    monkeypatch.setattr(twin_orin, "QUIET_TICK_S", 3600.0, raising=False)
    return seen


@pytest.fixture
def at_each_step(monkeypatch: pytest.MonkeyPatch, renders: list[str]) -> list[int]:
    """How many files had been rendered as each step began."""
    counts: list[int] = []
    real = twin_orin.VirtualOrin.run_step

    def run_step(self: twin_orin.VirtualOrin, trace):  # type: ignore[no-untyped-def]
        counts.append(len(renders))
        return real(self, trace)

    monkeypatch.setattr(twin_orin.VirtualOrin, "run_step", run_step)
    return counts


@pytest.mark.slow  # traces bert-tiny first (~15 s on two cores)
def test_a_simulated_run_renders_no_file_per_step(isolated_env, at_each_step: list[int], capsys) -> None:
    """`run --twin --simulate` rewrote about 9 files a step (os.replace through the tree's writer);
    now no file is rendered from its first step to its last (its thermal guard reads the zones at
    every step, which render only when their text changed: never, without --thermal)."""
    assert main([*RUN, "--steps", "30"]) == 0
    assert "30/30" in capsys.readouterr().err
    assert len(at_each_step) == 30 and set(at_each_step) == {at_each_step[0]}


def test_simulated_steps_render_no_file(isolated_env, at_each_step: list[int]) -> None:
    """The same through the run harness the command uses, on a workload already traced."""
    from traces import bert_base_workload

    from engine.device.session import open_device
    from engine.run.harness import RunHarness

    with open_device(twin="agx-orin-64gb", realtime=False) as session:
        harness = RunHarness(session)
        with harness.monitored():
            harness.simulate(bert_base_workload(), steps=20)
    assert len(at_each_step) == 20 and set(at_each_step) == {at_each_step[0]}


def test_a_read_after_a_clock_change_sees_it(isolated_env) -> None:
    """No tick answers the pin here (the sync thread is stopped): the read that verifies it has the
    twin settle on the new limits and render the GPU's current clock first."""
    from engine.device.session import open_device

    with open_device(twin="agx-orin-64gb", realtime=False) as session:
        assert session.twin is not None
        session.twin.stop()
        state = session.device.pin(ClockDomain.GPU, 612_000_000)
        assert state.cur_hz == 612_000_000
        assert SysfsTree(session.twin.root).read_int(f"{GPU}/cur_freq") == 612_000_000


def test_a_step_is_rendered_when_read_and_only_what_is_read(renders: list[str], tmp_path: Path) -> None:
    from traces import BERT_BASE_LIKE

    with twin_orin.VirtualOrin(root=tmp_path / "twin") as twin, twin.driven():
        tree = SysfsTree(twin.root)
        renders.clear()
        twin.run_step(BERT_BASE_LIKE)
        assert renders == []  # the step is in memory
        assert tree.read_int(f"{GPU}/device/load") > 900  # the busy step's load, rendered as it is read
        assert [Path(p).name for p in renders] == ["load"]


def test_twins_live_on_a_tmpfs_by_default(isolated_env, monkeypatch: pytest.MonkeyPatch) -> None:
    shm = Path("/dev/shm")
    if not os.access(shm, os.W_OK | os.X_OK):
        pytest.skip("no /dev/shm here")
    monkeypatch.delenv("SLM_DVFS_TWIN_DIR")
    folder = paths.twin_dir()
    try:
        assert main(["pin", "--twin", "--gpu", "612"]) == 0
        assert folder.parent == shm and (folder / "agx-orin-64gb" / ".slm-dvfs-twin").is_file()
        assert f"{os.geteuid()}" in folder.name  # one user's, and one state dir's
        assert not (isolated_env.state_dir / "twin").exists()
        assert main(["restore", "--twin"]) == 0
        monkeypatch.setenv("SLM_DVFS_STATE_DIR", str(isolated_env.state_dir.parent / "other-state"))
        assert paths.twin_dir() != folder  # another state dir has twins of its own
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_twin_dir_override_and_the_state_dir_without_a_tmpfs(isolated_env, monkeypatch: pytest.MonkeyPatch,
                                                              tmp_path: Path) -> None:
    monkeypatch.setenv("SLM_DVFS_TWIN_DIR", str(tmp_path / "mine"))
    assert main(["pin", "--twin", "--gpu", "612"]) == 0
    assert (tmp_path / "mine" / "agx-orin-64gb" / GPU / "max_freq").read_text().strip() == "612000000"
    assert main(["restore", "--twin"]) == 0
    monkeypatch.delenv("SLM_DVFS_TWIN_DIR")
    monkeypatch.setattr(paths, "memory_dir", lambda: None)
    assert paths.twin_dir() == isolated_env.state_dir / "twin"


def test_the_sync_thread_slows_when_nobody_reads(tmp_path: Path) -> None:
    with twin_orin.VirtualOrin(root=tmp_path / "twin") as twin:
        twin.start(realtime=False)
        assert twin._loop_period() == twin_orin.QUIET_TICK_S  # nothing has read it
        SysfsTree(twin.root).read_int(f"{GPU}/cur_freq")
        assert twin._loop_period() == twin_orin.RENDER_TICK_S
