"""The clock guard: snapshot, journal, restore on every way of stopping, recovery after SIGKILL."""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from engine.device.base import ClockDomain
from engine.device.twin.orin import VirtualOrin
from engine.core.errors import DeviceError
from engine.device.guard.guard import ClockGuard, recover_stale, restore_all
from engine.device.guard.journal import PINNED, SESSION, Journal, device_key, list_journals
from engine.device.guard.lock import DeviceBusyError

GPU_DEVFREQ = "sys/devices/platform/bus@0/17000000.gpu/devfreq/17000000.gpu"
CPU0 = "sys/devices/system/cpu/cpu0/cpufreq"


@pytest.fixture
def state_dir(isolated_env) -> Path:
    return isolated_env.state_dir


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
        with ClockGuard(dev, handle_signals=False, over_pin=True) as guard:  # `slm-dvfs pin` twice
            dev.pin(ClockDomain.GPU, mhz * 1_000_000)
            guard.keep()
    restore_all()
    assert _files(orin.root) == before


_CHILD = textwrap.dedent(
    """
    import signal, sys, time
    from engine.device.base import ClockDomain
    from engine.device.twin.orin import VirtualOrin
    from engine.device.guard.guard import ClockGuard

    # A terminal's default for SIGHUP, or ignored as under nohup (whatever ran the tests).
    signal.signal(signal.SIGHUP, signal.SIG_IGN if "nohup" in sys.argv else signal.SIG_DFL)
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


def _start_child(root: Path, env: dict[str, str], *flags: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(root), *flags], stdout=subprocess.PIPE, text=True, env=env
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


def test_a_run_under_nohup_outlives_the_hang_up(tmp_path: Path, state_dir: Path) -> None:
    # SIGHUP ignored (nohup) means "keep running when the terminal goes": the guard leaves it
    # ignored, and still restores on SIGTERM.
    root, env = _prepare_root(tmp_path)
    before = _files(root)
    proc = _start_child(root, env, "nohup")
    proc.send_signal(signal.SIGHUP)
    with pytest.raises(subprocess.TimeoutExpired):
        proc.wait(timeout=1.0)
    assert _files(root) != before  # still running, still pinned
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) != 0
    assert _files(root) == before


def test_live_session_is_not_stolen(orin: VirtualOrin, state_dir: Path) -> None:
    dev = orin.device()
    with ClockGuard(dev, handle_signals=False):
        dev.pin(ClockDomain.GPU, 612_000_000)
        assert recover_stale() == []  # our own process is alive
        assert restore_all() == []  # nothing to restore: the live session's journal is its own
        assert (orin.root / GPU_DEVFREQ / "max_freq").read_text().strip() == "612000000"


def test_restore_refuses_a_device_with_a_live_session(
    orin: VirtualOrin, state_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from engine.cli import main

    dev = orin.device()
    before = _files(orin.root)
    with ClockGuard(dev, handle_signals=False) as guard:  # `slm-dvfs pin --gpu 816`
        dev.pin(ClockDomain.GPU, 816_000_000)
        guard.keep()
    with ClockGuard(dev, handle_signals=False, over_pin=True):  # a session that may start on the pinned board
        dev.pin(ClockDomain.GPU, 612_000_000)
        with pytest.raises(DeviceError, match=f"pid {os.getpid()}"):
            restore_all()
        assert main(["restore"]) == 1
        err = capsys.readouterr().err
        assert f"pid {os.getpid()}" in err and "What to do" in err
        assert (orin.root / GPU_DEVFREQ / "max_freq").read_text().strip() == "612000000"  # nothing touched
    # The session put its snapshot (the pin) back, and the pin's journal is still there to undo it.
    assert (orin.root / GPU_DEVFREQ / "max_freq").read_text().strip() == "816000000"
    assert [j.kind for j in list_journals()] == [PINNED]
    assert len(restore_all()) == 1
    assert _files(orin.root) == before


def test_a_run_over_a_pin_is_refused(orin: VirtualOrin, state_dir: Path) -> None:
    from engine.device.guard.guard import BoardPinnedError

    dev = orin.device()
    before = _files(orin.root)
    with ClockGuard(dev, handle_signals=False) as guard:
        dev.pin(ClockDomain.GPU, 816_000_000)
        pinned = guard.keep()
    with pytest.raises(BoardPinnedError) as err:
        ClockGuard(dev, handle_signals=False).start()
    assert str(pinned) in str(err.value) and "slm-dvfs restore" in err.value.remedy
    assert (orin.root / GPU_DEVFREQ / "max_freq").read_text().strip() == "816000000"  # the pin stands
    assert len(restore_all()) == 1 and _files(orin.root) == before
    with ClockGuard(dev, handle_signals=False):  # restored: runs may start again
        pass


def test_a_second_session_on_the_same_device_is_refused(orin: VirtualOrin, state_dir: Path) -> None:
    dev = orin.device()
    before = _files(orin.root)
    with ClockGuard(dev, handle_signals=False):
        dev.pin(ClockDomain.GPU, 612_000_000)
        other = ClockGuard(orin.device(), handle_signals=False)
        with pytest.raises(DeviceBusyError) as err:
            other.start()
        assert err.value.pid == os.getpid() and f"pid {os.getpid()}" in str(err.value)
        assert "What to do" in str(err.value) and str(orin.root) in str(err.value)
        assert len(list_journals()) == 1 and not other.active
        other.close()  # harmless: it never started
        assert (orin.root / GPU_DEVFREQ / "max_freq").read_text().strip() == "612000000"
    assert _files(orin.root) == before
    with ClockGuard(dev, handle_signals=False):  # released on exit: the next session may start
        dev.pin(ClockDomain.GPU, 816_000_000)
    assert _files(orin.root) == before


def test_a_pin_releases_the_lock_when_it_exits(orin: VirtualOrin, state_dir: Path) -> None:
    dev = orin.device()
    with ClockGuard(dev, handle_signals=False) as guard:
        dev.pin(ClockDomain.GPU, 816_000_000)
        guard.keep()
    with ClockGuard(dev, handle_signals=False, over_pin=True) as guard:  # another pin: not refused
        assert guard.snapshot is not None and guard.snapshot.domain(ClockDomain.GPU).max_hz == 816_000_000
    assert [j.kind for j in list_journals()] == [PINNED]


def test_another_process_holding_the_device_is_named_until_it_dies(tmp_path: Path, state_dir: Path) -> None:
    from engine.device.jetson import JetsonDevice

    root, env = _prepare_root(tmp_path)
    before = _files(root)
    proc = _start_child(root, env)
    with pytest.raises(DeviceBusyError, match=f"pid {proc.pid}"):
        ClockGuard(JetsonDevice(root), handle_signals=False).start()
    proc.kill()
    proc.wait(timeout=10)
    with ClockGuard(JetsonDevice(root), handle_signals=False) as guard:  # the kernel dropped its lock
        assert [j.pid for j in guard.recovered] == [proc.pid]
    assert _files(root) == before


def test_ctrl_c_with_a_callers_handler_stops_gracefully(orin: VirtualOrin, state_dir: Path) -> None:
    calls: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: calls.append(signum))  # like `run`'s
    try:
        dev = orin.device()
        before = _files(orin.root)
        with ClockGuard(dev) as guard:
            dev.pin(ClockDomain.GPU, 612_000_000)
            signal.raise_signal(signal.SIGINT)  # no KeyboardInterrupt: the run stops at a step boundary
            assert calls == [signal.SIGINT]
            assert guard.active and (orin.root / GPU_DEVFREQ / "max_freq").read_text().strip() == "612000000"
        assert _files(orin.root) == before  # restored as the guard exits
    finally:
        signal.signal(signal.SIGINT, previous)


def _write_dead_journal(directory: Path, root: Path, settings_from: VirtualOrin) -> Path:
    """A session journal of a process that is gone, naming `root`."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    directory.mkdir(parents=True, exist_ok=True)
    description = {**settings_from.device().describe(), "root": str(root)}
    path = directory / f"{device_key(description)}-session-{dead.pid}-1.json"
    journal = Journal(SESSION, dead.pid, "1", socket.gethostname(), 1.0, description,
                      settings_from.device().read_settings(), path)
    path.write_text(json.dumps(journal.to_json()))
    return path


def test_a_journal_whose_root_has_gone_blocks_nothing(
    orin: VirtualOrin, state_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from engine.cli import main

    gone = tmp_path / "deleted-twin"
    stale = _write_dead_journal(state_dir / "journals", gone, orin)
    dev = orin.device()
    before = _files(orin.root)
    with caplog.at_level(logging.WARNING, logger="engine.device.guard.guard"):
        with ClockGuard(dev, handle_signals=False) as guard:  # another device's bad journal: not our problem
            dev.pin(ClockDomain.GPU, 612_000_000)
            assert guard.recovered == []
    assert _files(orin.root) == before
    assert any(stale.name in r.getMessage() and str(gone) in r.getMessage() for r in caplog.records)
    assert stale.exists()  # kept
    assert main(["restore"]) == 1
    err = capsys.readouterr().err
    assert str(stale) in err and str(gone) in err and "no longer exists" in err and "delete" in err
    assert stale.exists()


def test_corrupt_journal_is_moved_aside_and_reported(
    orin: VirtualOrin, state_dir: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    from engine.cli import main

    d = state_dir / "journals"
    d.mkdir(parents=True)
    (d / "bad.json").write_text("{not json")
    with caplog.at_level(logging.WARNING, logger="engine.device.guard.journal"):
        assert list_journals() == []
    assert any("bad.json" in r.getMessage() for r in caplog.records)
    dev = orin.device()
    before = _files(orin.root)
    with ClockGuard(dev, handle_signals=False):  # pin, run, sweep are not blocked by it
        dev.pin(ClockDomain.GPU, 408_000_000)
    assert _files(orin.root) == before
    with ClockGuard(dev, handle_signals=False) as guard:  # and restore still does the rest
        dev.pin(ClockDomain.GPU, 816_000_000)
        guard.keep()
    assert main(["restore"]) == 1
    captured = capsys.readouterr()
    assert "restored: pinned journal" in captured.out
    assert "bad.json" in captured.err and "What to do" in captured.err
    moved = list(d.glob("bad.json.corrupt-*"))
    assert _files(orin.root) == before and not (d / "bad.json").exists() and len(moved) == 1  # never reused
    assert str(moved[0]) in captured.err


_JC_CHILD = textwrap.dedent(
    """
    import os, sys, time
    from engine.core import paths
    from engine.device.twin.orin import VirtualOrin
    from engine.device.guard.guard import ClockGuard

    orin = VirtualOrin("agx-orin-64gb", root=sys.argv[1])
    orin.start(tick_s=0.01, realtime=False)
    dev = orin.device()
    guard = ClockGuard(dev)
    guard.start()
    store = paths.state_dir() / f"jetson_clocks-{os.getpid()}.store"
    guard.note_jetson_clocks_store(store)
    dev.jetson_clocks(store=store)
    print("pinned", flush=True)
    time.sleep(60)
    """
)


def test_jetson_clocks_store_is_restored_after_sigkill(
    tmp_path: Path, state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from engine.device.jetson import JetsonDevice

    root, env = _prepare_root(tmp_path)
    before = _files(root)
    proc = subprocess.Popen([sys.executable, "-c", _JC_CHILD, str(root)], stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "pinned"
    proc.kill()
    proc.wait(timeout=10)
    store = state_dir / f"jetson_clocks-{proc.pid}.store"
    assert store.is_file() and _files(root) != before
    assert list_journals()[0].jetson_clocks_store == str(store)
    calls: list[Path] = []
    real = JetsonDevice.jetson_clocks_restore

    def recording(self: JetsonDevice, path: Path) -> None:
        calls.append(Path(path))
        real(self, path)

    monkeypatch.setattr(JetsonDevice, "jetson_clocks_restore", recording)
    assert [j.pid for j in recover_stale()] == [proc.pid]
    assert calls == [store] and not store.exists()
    assert _files(root) == before and list_journals() == []


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
