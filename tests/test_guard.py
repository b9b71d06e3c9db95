"""The clock guard: snapshot, journal, restore on every way of stopping, recovery after SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from engine.device.base import ClockDomain
from engine.device.twin.orin import VirtualOrin
from engine.guard import PINNED, ClockGuard, list_journals, recover_stale, restore_all

GPU_DEVFREQ = "sys/devices/platform/bus@0/17000000.gpu/devfreq/17000000.gpu"
CPU0 = "sys/devices/system/cpu/cpu0/cpufreq"


@pytest.fixture
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "state"
    monkeypatch.setenv("SLM_DVFS_STATE_DIR", str(d))
    return d


@pytest.fixture
def orin(tmp_path: Path):
    twin = VirtualOrin("agx-orin-64gb", root=tmp_path / "twin")
    twin.start(tick_s=0.01, realtime=False)
    yield twin
    twin.close()


def _files(root: Path) -> dict[str, str]:
    """The control files the guard must put back, as text."""
    names = [
        f"{GPU_DEVFREQ}/min_freq",
        f"{GPU_DEVFREQ}/max_freq",
        f"{GPU_DEVFREQ}/governor",
        f"{CPU0}/scaling_min_freq",
        f"{CPU0}/scaling_max_freq",
        f"{CPU0}/scaling_governor",
        "sys/kernel/debug/bpmp/debug/clk/emc/mrq_rate_locked",
    ]
    return {n: (root / n).read_text().strip() for n in names}


def test_restores_on_normal_exit(orin: VirtualOrin, state_dir: Path) -> None:
    dev = orin.device()
    before = _files(orin.root)
    with ClockGuard(dev, handle_signals=False) as guard:
        assert len(list_journals()) == 1  # journalled before the first change
        dev.pin(ClockDomain.GPU, 612_000_000)
        dev.pin(ClockDomain.CPU, 1_497_600_000)
        dev.pin(ClockDomain.EMC, 2_133_000_000)
        assert _files(orin.root) != before
        assert guard.active
    assert _files(orin.root) == before
    assert list_journals() == []


def test_restores_on_exception(orin: VirtualOrin, state_dir: Path) -> None:
    dev = orin.device()
    before = _files(orin.root)
    with pytest.raises(RuntimeError):
        with ClockGuard(dev, handle_signals=False):
            dev.pin(ClockDomain.GPU, 408_000_000)
            raise RuntimeError("training blew up")
    assert _files(orin.root) == before


def test_keep_leaves_a_pin_that_restore_undoes(orin: VirtualOrin, state_dir: Path) -> None:
    dev = orin.device()
    before = _files(orin.root)
    with ClockGuard(dev, handle_signals=False) as guard:
        dev.pin(ClockDomain.GPU, 816_000_000)
        guard.keep()
    assert (orin.root / GPU_DEVFREQ / "max_freq").read_text().strip() == "816000000"
    journals = list_journals()
    assert [j.kind for j in journals] == [PINNED]
    # A pin is not a crash: the next start leaves it alone.
    assert recover_stale() == []
    assert (orin.root / GPU_DEVFREQ / "max_freq").read_text().strip() == "816000000"
    restored = restore_all()
    assert len(restored) == 1
    assert _files(orin.root) == before
    assert list_journals() == []


def test_second_pin_keeps_the_original_snapshot(orin: VirtualOrin, state_dir: Path) -> None:
    dev = orin.device()
    before = _files(orin.root)
    for mhz in (816, 408):
        with ClockGuard(dev, handle_signals=False) as guard:
            dev.pin(ClockDomain.GPU, mhz * 1_000_000)
            guard.keep()
    restore_all()
    assert _files(orin.root) == before


_CHILD = textwrap.dedent(
    """
    import signal, sys, time
    from engine.device.base import ClockDomain
    from engine.device.twin.orin import VirtualOrin
    from engine.guard import ClockGuard

    orin = VirtualOrin("agx-orin-64gb", root=sys.argv[1])
    orin.start(tick_s=0.01, realtime=False)
    dev = orin.device()
    guard = ClockGuard(dev)
    guard.start()
    dev.pin(ClockDomain.GPU, 612000000)
    dev.pin(ClockDomain.CPU, 1497600000)
    dev.pin(ClockDomain.EMC, 2133000000)
    print("pinned", flush=True)
    time.sleep(60)
    """
)


def _start_child(root: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(root)], stdout=subprocess.PIPE, text=True, env=env
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.strip() == "pinned", f"child did not pin (rc={proc.poll()})"
    return proc


def _prepare_root(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    root = tmp_path / "twin"
    VirtualOrin("agx-orin-64gb", root=root).close()  # render the tree once, persistently
    return root, dict(os.environ)


def test_sigkilled_child_is_restored_on_next_start(tmp_path: Path, state_dir: Path) -> None:
    root, env = _prepare_root(tmp_path)
    before = _files(root)
    proc = _start_child(root, env)
    assert _files(root) != before
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    assert _files(root) != before  # nothing could run in the child
    journals = list_journals()
    assert len(journals) == 1 and not journals[0].owner_alive()
    restored = recover_stale()
    assert [j.pid for j in restored] == [proc.pid]
    assert _files(root) == before
    assert list_journals() == []


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_signals_restore_in_the_child(tmp_path: Path, state_dir: Path, sig: signal.Signals) -> None:
    root, env = _prepare_root(tmp_path)
    before = _files(root)
    proc = _start_child(root, env)
    proc.send_signal(sig)
    rc = proc.wait(timeout=10)
    assert rc != 0
    assert _files(root) == before
    assert list_journals() == []


def test_live_session_is_not_stolen(orin: VirtualOrin, state_dir: Path) -> None:
    dev = orin.device()
    with ClockGuard(dev, handle_signals=False):
        dev.pin(ClockDomain.GPU, 612_000_000)
        assert recover_stale() == []  # our own process is alive
        assert restore_all() == []
        assert (orin.root / GPU_DEVFREQ / "max_freq").read_text().strip() == "612000000"


def test_corrupt_journal_is_a_clear_error(state_dir: Path) -> None:
    d = state_dir / "journals"
    d.mkdir(parents=True)
    (d / "bad.json").write_text("{not json")
    with pytest.raises(Exception) as info:
        list_journals()
    assert "bad.json" in str(info.value) and "What to do" in str(info.value)


def test_restore_command(tmp_path: Path, state_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from engine.cli import main

    root, env = _prepare_root(tmp_path)
    before = _files(root)
    proc = _start_child(root, env)
    proc.kill()
    proc.wait(timeout=10)
    assert main(["restore"]) == 0
    assert _files(root) == before
    assert f"pid {proc.pid}" in capsys.readouterr().out
    assert main(["restore"]) == 0  # nothing left: says so, still succeeds
    assert "nothing to restore" in capsys.readouterr().out
