"""Ctrl-C for the long-running commands (finetune, run, sweep): stop cleanly, then abort."""

from __future__ import annotations

import signal
import sys
from contextlib import contextmanager
from types import FrameType
from typing import Iterator, Protocol


class Cancellable(Protocol):
    """What Ctrl-C stops: a run's TrainControl, or the fleet's cancel."""

    @property
    def cancelled(self) -> bool: ...

    def cancel(self, reason: str = ...) -> None: ...


@contextmanager
def cancel_on_sigint(control: Cancellable) -> Iterator[None]:
    """First Ctrl-C: `control.cancel(...)`, so the run stops at the next step (or sweep
    point) boundary. Second: the usual KeyboardInterrupt. Off the main thread signals
    cannot be set, so they are left alone. Inside the clock guard, the guard chains to
    this handler and restores when the run has stopped."""
    try:
        previous = signal.getsignal(signal.SIGINT)
    except ValueError:
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        if control.cancelled:
            raise KeyboardInterrupt
        control.cancel("interrupted (Ctrl-C)")
        sys.stderr.write("\nstopping at the next step boundary (Ctrl-C again to abort)\n")

    try:
        signal.signal(signal.SIGINT, handler)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
