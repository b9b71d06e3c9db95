"""A TUI whose terminal goes away must not live on: `slm-dvfs` run for real in a pseudo-terminal
of its own (its controlling terminal, as an SSH session or a tmux pane gives it), then the
terminal closed (the master side, as sshd or tmux close it) or SIGHUP sent, at every stage:
starting, idle, with a dialog open, mid-run. The process must exit, the clocks of its twin's
tree be as they were, and a run it had started be stored `cancelled`.

Closing the terminal with SIGHUP blocked in the child is the case of a TUI the hang-up signal
does not reach (not in the terminal's session, or masked): it must notice the terminal itself.
Quitting mid-run with `q` or ctrl+c says on the terminal, after the app exits, how the run
ended and that the clocks are restored.

Only the idle case is in the default set (a few seconds: one start of slm-dvfs); the others
start a run (torch is imported to trace the workload) and are slow.
"""

from __future__ import annotations

import fcntl
import os
import select
import shutil
import signal
import struct
import subprocess
import sys
import termios
from collections.abc import Callable
from pathlib import Path

import pytest

from engine.device.session import DEFAULT_TWIN

GPU = "sys/class/devfreq/17000000.gpu"
CLOCK_FILES = (f"{GPU}/min_freq", f"{GPU}/max_freq", f"{GPU}/governor",
               "sys/devices/system/cpu/cpufreq/policy0/scaling_min_freq",
               "sys/devices/system/cpu/cpufreq/policy0/scaling_max_freq",
               "sys/devices/system/cpu/cpufreq/policy0/scaling_governor")
WAIT_S = 90.0  # the bound on one wait, so that a hang fails the test; not a timing threshold
# Setup (2): tab to the length field, a million steps, tab to simulate and tick it, escape, start.
# Typed in one burst, as a terminal delivers keys typed faster than the app reads them.
START_LONG_RUN = b"2" + b"\t" * 14 + b"1000000" + b"\t\t" + b" " + b"\x1b" + b"s"


def slm_dvfs() -> list[str]:
    """The `slm-dvfs` command of this environment (its console script)."""
    script = shutil.which("slm-dvfs", path=str(Path(sys.executable).parent))
    return [script] if script else [sys.executable, "-c", "import sys; from engine.cli import main; sys.exit(main())"]


class PtyTui:
    """`slm-dvfs` (the TUI) on a pseudo-terminal that is its controlling terminal."""

    def __init__(self, env: dict[str, str], *, sighup: bool = True, size: tuple[int, int] = (100, 30)) -> None:
        master, slave = os.openpty()
        cols, rows = size
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

        def child() -> None:  # in the child, before exec: a session whose terminal this is
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)
            # A login shell starts it with SIGHUP's default action; an ignored SIGHUP would be inherited
            # across exec from this test process (whatever an earlier test or library left it as).
            signal.signal(signal.SIGHUP, signal.SIG_DFL)
            if not sighup:  # the hang-up's SIGHUP never reaches it
                signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGHUP})

        self.proc = subprocess.Popen(slm_dvfs(), stdin=slave, stdout=slave, stderr=slave, env=env,
                                     start_new_session=True, preexec_fn=child)
        os.close(slave)
        self.master: int | None = master
        self.out = bytearray()

    def pump(self, until: Callable[[], bool], what: str, timeout: float = WAIT_S) -> None:
        """Read what the app draws until `until()` holds (checked after each read)."""
        import time

        end = time.monotonic() + timeout
        while not until():
            if time.monotonic() > end:
                self.kill()
                raise AssertionError(f"not within {timeout:g} s: {what}; the app wrote: {self.tail()}")
            if self.master is None or self.proc.poll() is not None and not self._readable():
                if until():
                    return
                raise AssertionError(f"slm-dvfs exited (rc {self.proc.returncode}) before: {what}; "
                                     f"it wrote: {self.tail()}")
            self._read(0.05)

    def _readable(self) -> bool:
        return self.master is not None and bool(select.select([self.master], [], [], 0)[0])

    def _read(self, timeout: float) -> None:
        if self.master is None:
            return
        if select.select([self.master], [], [], timeout)[0]:
            try:
                data = os.read(self.master, 65536)
            except OSError:  # EIO: the child's side is closed
                data = b""
            if data:
                self.out += data

    def drawn(self) -> None:
        self.pump(lambda: b"Quit" in self.out, "the UI drew its footer")

    def keys(self, data: bytes) -> None:
        assert self.master is not None
        os.write(self.master, data)

    def hang_up(self, how: str) -> None:
        if how == "sighup":
            os.killpg(self.proc.pid, signal.SIGHUP)  # the terminal stays, and is read
        else:
            assert self.master is not None
            os.close(self.master)  # as sshd or tmux close it: the kernel hangs the terminal up
            self.master = None

    def wait_exit(self) -> int:
        """The exit status, reading the terminal meanwhile (if it is still there)."""
        import time

        end = time.monotonic() + WAIT_S
        while self.proc.poll() is None:
            if time.monotonic() > end:
                self.kill()
                raise AssertionError(f"slm-dvfs still running {WAIT_S:g} s after its terminal went away")
            if self.master is not None:
                self._read(0.05)
            else:
                time.sleep(0.05)  # the terminal is gone: nothing to read, only the process to watch
        while self._readable():
            before = len(self.out)
            self._read(0)
            if len(self.out) == before:
                break
        return self.proc.returncode

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def close(self) -> None:
        self.kill()
        if self.master is not None:
            os.close(self.master)
            self.master = None

    def tail(self) -> str:
        return bytes(self.out[-600:]).decode(errors="replace")


def clock_files(root: Path) -> dict[str, str]:
    return {rel: (root / rel).read_text() for rel in CLOCK_FILES}


@pytest.fixture
def twin(isolated_env) -> Path:
    """The persistent tree of the twin slm-dvfs opens (no board here), rendered first so that
    its clocks can be read before the app starts."""
    from engine.device.session import open_device, twin_root

    with open_device(twin=DEFAULT_TWIN, realtime=False):
        pass
    return twin_root(DEFAULT_TWIN)


@pytest.fixture
def child_env(twin: Path, tmp_path: Path) -> dict[str, str]:
    """The test's isolated state, data and cache folders (conftest's isolated_env), no board."""
    no_board = tmp_path / "no-board"
    no_board.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TEXTUAL")}
    env.update(SLM_DVFS_SYSFS_ROOT=str(no_board), TERM="xterm-256color", HF_HUB_OFFLINE="1")
    return env


@pytest.fixture
def tui(child_env: dict[str, str]):
    opened: list[PtyTui] = []

    def start(*, sighup: bool = True) -> PtyTui:
        opened.append(PtyTui(child_env, sighup=sighup))
        return opened[-1]

    yield start
    for t in opened:
        t.close()


def stored_runs() -> list[str]:
    from engine.results.store import Store

    with Store() as store:
        return [r.status for r in store.list_runs()]


def journals() -> list[Path]:
    from engine.device.guard.journal import journal_dir

    return sorted(journal_dir().glob("*.json")) if journal_dir().is_dir() else []


def start_long_run(t: PtyTui, twin: Path) -> None:
    t.keys(START_LONG_RUN)
    t.pump(lambda: (twin / GPU / "max_freq").read_text().strip() == "816000000",
           "the run pinned the GPU at 816 MHz (its policy)")


def assert_left_as_it_was(t: PtyTui, twin: Path, before: dict[str, str], runs: list[str]) -> None:
    rc = t.wait_exit()
    assert rc in (0, -signal.SIGHUP), f"slm-dvfs exited with {rc}: {t.tail()}"
    assert clock_files(twin) == before
    assert stored_runs() == runs
    assert journals() == []  # restored by its guard, not left for the next start to find


# --------------------------------------------------------------------------- idle (default set)
def test_an_idle_tui_exits_when_its_terminal_closes_without_a_sighup(tui, twin: Path) -> None:
    before = clock_files(twin)
    t = tui(sighup=False)
    t.drawn()
    t.hang_up("close")
    assert_left_as_it_was(t, twin, before, [])
    assert t.proc.returncode == 0  # it quit; nothing killed it


# --------------------------------------------------------------------------- every stage (slow)
@pytest.mark.slow
@pytest.mark.parametrize("how,sighup", [("close", True), ("close", False), ("sighup", True)])
@pytest.mark.parametrize("stage", ["starting", "idle", "help open", "mid-run", "cancel dialog mid-run"])
def test_a_tui_whose_terminal_goes_away_restores_the_clocks_and_exits(tui, twin: Path, stage: str, how: str,
                                                                     sighup: bool) -> None:
    before = clock_files(twin)
    t = tui(sighup=sighup)
    runs: list[str] = []
    if stage != "starting":
        t.drawn()
    if stage == "help open":
        t.keys(b"?")
        t.pump(lambda: b"Keys on every page" in t.out, "the help dialog opened")
    if "mid-run" in stage:
        start_long_run(t, twin)
        assert clock_files(twin) != before
        runs = ["cancelled"]
    if stage == "cancel dialog mid-run":
        t.keys(b"x")
        t.pump(lambda: b"Cancel the experiment?" in t.out, "the cancel dialog opened")
    t.hang_up(how)
    assert_left_as_it_was(t, twin, before, runs)


@pytest.mark.slow
@pytest.mark.parametrize("key", [b"q", b"\x03"], ids=["q", "ctrl+c"])
def test_quitting_mid_run_says_the_run_was_cancelled_and_the_clocks_restored(tui, twin: Path, key: bytes) -> None:
    before = clock_files(twin)
    t = tui()
    t.drawn()
    start_long_run(t, twin)
    t.keys(key)
    assert t.wait_exit() == 0
    assert clock_files(twin) == before
    assert stored_runs() == ["cancelled"]
    said = bytes(t.out).decode(errors="replace")
    assert "Quitting" in said  # on the page while it waited for the step boundary
    # and on the terminal once the app has gone
    after = said.rsplit("\x1b[?1049l", 1)[-1]  # what follows the app's leaving the alternate screen
    assert "slm-dvfs: experiment cancelled at step" in after
    assert "run 1 is stored as cancelled; the clocks are restored" in after
