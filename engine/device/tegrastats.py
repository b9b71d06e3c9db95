"""tegrastats, live: run `tegrastats --interval N` and serve its latest line as a power source.

Parsing its lines and importing saved logs is `engine/device/tegra_parse.py`.
"""

from __future__ import annotations

import logging
import shlex
import shutil
import subprocess
import tempfile
import threading
import time
from typing import IO, Callable, Sequence

from engine.core.errors import ConfigError, DeviceError
from engine.core.plausible import BoardLimits
from engine.core.provenance import Source
from engine.device.power import PowerSample
from engine.device.tegra_parse import WARN_LINES, TegrastatsFormatError, TegrastatsSample, parse_line, sample_problem

log = logging.getLogger(__name__)



class TegrastatsSource:
    """Runs `tegrastats --interval N` and serves its latest line as a PowerSource (measured).

    The child is ours: `close()` terminates it (no `tegrastats --stop` needed). Sample
    times are when each line arrived (`clock`, monotonic by default). A line with a value the
    board cannot show (`limits`; None: the default profile's) is skipped like a torn one.
    """

    source = Source.MEASURED

    def __init__(
        self,
        interval_ms: int = 100,
        command: str | Sequence[str] = "tegrastats",
        clock: Callable[[], float] = time.monotonic,
        first_sample_timeout_s: float = 5.0,
        limits: BoardLimits | None = None,
    ) -> None:
        if interval_ms <= 0:
            raise ConfigError(f"tegrastats interval must be positive, got {interval_ms} ms", "use e.g. 100")
        self.interval_ms = int(interval_ms)
        self.command = shlex.split(command) if isinstance(command, str) else list(command)
        self.min_interval_s = self.interval_ms / 1000.0
        self._clock = clock
        self._first_timeout_s = first_sample_timeout_s
        if limits is None:
            from engine.device.twin.profile import limits_for

            limits = limits_for(None)
        self.limits = limits
        self._cond = threading.Condition()
        self._latest: tuple[float, TegrastatsSample] | None = None
        self._proc: subprocess.Popen[str] | None = None
        self._stderr: IO[bytes] | None = None
        self._reader: threading.Thread | None = None
        self._ended = False
        self._closing = False
        self.skipped = 0

    # -- lifecycle
    def start(self) -> None:
        if self._proc is not None:
            return
        exe = shutil.which(self.command[0]) if self.command else None
        if exe is None:
            raise DeviceError(
                f"cannot run {self.command[0] if self.command else '(empty command)'!r}: not found or not executable",
                "tegrastats ships with L4T (/usr/bin/tegrastats) on a Jetson; pass its path, "
                "or off-board use the sysfs rails or the twin (--twin)",
            )
        argv = [exe, *self.command[1:], "--interval", str(self.interval_ms)]
        self._latest, self._ended, self._closing, self.skipped = None, False, False, 0
        self._stderr = tempfile.TemporaryFile()
        try:
            self._proc = subprocess.Popen(
                argv, stdout=subprocess.PIPE, stderr=self._stderr, stdin=subprocess.DEVNULL, text=True, bufsize=1
            )
        except OSError as exc:
            self._stderr.close()
            raise DeviceError(f"cannot start {exe}: {exc.strerror}", "check that it is a working tegrastats") from None
        log.info("started %s (pid %d)", " ".join(argv), self._proc.pid)
        self._reader = threading.Thread(target=self._read_loop, name="tegrastats-reader", daemon=True)
        self._reader.start()

    def close(self) -> None:
        proc = self._proc
        if proc is None:
            return
        self._closing = True
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=2.0)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=2.0)
        if self._reader is not None:
            self._reader.join(timeout=2.0)
        if proc.stdout is not None:
            proc.stdout.close()
        if self._stderr is not None:
            self._stderr.close()
        self._proc = None
        log.info("stopped tegrastats (%d malformed lines skipped)", self.skipped)

    def __enter__(self) -> "TegrastatsSource":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- PowerSource
    def now(self) -> float:
        return self._clock()

    def read(self) -> PowerSample:
        """The latest line's instant rail powers, stamped with when it arrived."""
        self.start()
        latest = self.latest_sample(timeout_s=self._first_timeout_s)
        t, sample = latest
        return PowerSample(t, sample.rails_mw())

    def energy_counter(self) -> None:
        return None

    def latest_sample(self, timeout_s: float = 0.0) -> tuple[float, TegrastatsSample]:
        """(arrival time, sample) of the newest line; waits up to `timeout_s` for the first one."""
        with self._cond:
            if self._latest is None and not self._ended:
                self._cond.wait_for(lambda: self._latest is not None or self._ended, timeout=timeout_s)
            if self._ended and not self._closing:
                raise self._exit_error()
            if self._latest is None:
                raise DeviceError(
                    f"tegrastats printed no readable line within {timeout_s:g} s",
                    "run `tegrastats` by hand to see its output; a long --interval delays the first line",
                )
            return self._latest

    def _read_loop(self) -> None:
        proc = self._proc
        assert proc is not None and proc.stdout is not None
        try:
            for line in proc.stdout:
                if not line.strip():
                    continue
                try:
                    sample = parse_line(line)
                    problem = sample_problem(sample, self.limits)
                    if problem:
                        raise TegrastatsFormatError(f"implausible: {problem}", "the line is skipped")
                except TegrastatsFormatError as exc:
                    self.skipped += 1
                    if self.skipped <= WARN_LINES:
                        log.warning("tegrastats: skipped a line: %s", exc.what)
                    continue
                arrived = self._clock()
                with self._cond:
                    self._latest = (arrived, sample)
                    self._cond.notify_all()
        except (ValueError, OSError):
            pass  # stdout closed under us by close()
        finally:
            with self._cond:
                self._ended = True
                self._cond.notify_all()

    def _exit_error(self) -> DeviceError:
        code = self._proc.wait(timeout=2.0) if self._proc is not None else None
        err = ""
        if self._stderr is not None:
            try:
                self._stderr.seek(0)
                err = self._stderr.read()[-400:].decode(errors="replace").strip()
            except (OSError, ValueError):
                pass
        detail = f": {err}" if err else ""
        return DeviceError(
            f"tegrastats exited (code {code}){detail}",
            "run `tegrastats --interval 100` by hand to see why; some fields need sudo",
        )
