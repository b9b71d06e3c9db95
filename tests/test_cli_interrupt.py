"""Ctrl-C in the long-running commands: the first stops at a step boundary, the second aborts."""

from __future__ import annotations

import signal
import threading

import pytest

from engine.cli import experiment_cmds, finetune_cmd
from engine.cli.interrupt import cancel_on_sigint
from engine.workload.training.loop import TrainControl


def test_first_ctrl_c_cancels_the_second_interrupts_and_the_handler_is_restored(
        capsys: pytest.CaptureFixture[str]) -> None:
    before = signal.getsignal(signal.SIGINT)
    control = TrainControl()
    with cancel_on_sigint(control):
        handler = signal.getsignal(signal.SIGINT)
        assert handler is not before
        handler(signal.SIGINT, None)
        assert control.cancelled and "next step boundary" in capsys.readouterr().err
        with pytest.raises(KeyboardInterrupt):
            handler(signal.SIGINT, None)
    assert signal.getsignal(signal.SIGINT) is before


def test_off_the_main_thread_signals_are_left_alone() -> None:
    before = signal.getsignal(signal.SIGINT)
    seen: list[object] = []

    def body() -> None:
        with cancel_on_sigint(TrainControl()):
            seen.append(signal.getsignal(signal.SIGINT))

    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    assert seen == [before]


def test_both_commands_use_the_one_helper() -> None:
    assert finetune_cmd.cancel_on_sigint is cancel_on_sigint is experiment_cmds.cancel_on_sigint
    assert not hasattr(finetune_cmd, "_cancel_on_sigint") and not hasattr(experiment_cmds, "_cancel_on_sigint")
