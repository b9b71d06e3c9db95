"""Numeric command-line arguments, checked where they are parsed.

Every numeric flag of every sub-command takes one of these as its argparse `type`, so a
value out of range is refused with argparse's usage line and a message that says the
range (exit 2, no traceback), before anything opens a board or allocates. `--pad` (the
padding vocabulary of run, sweep, select and finetune) is parsed here too.
"""

from __future__ import annotations

import argparse
import math
from typing import Callable

SEED_MAX = 2**32 - 1  # NumPy's legacy seeding takes 0..2**32-1; torch and Python take more
MAX_STEPS = 10_000_000
MAX_BATCH = 2**31 - 1  # the memory estimate refuses what the board cannot hold, with the figure
MAX_SEQ_LEN = 2**20
MAX_SAMPLES = 10**9
MAX_ID = 2**63 - 1  # SQLite's INTEGER


def int_range(low: int, high: int) -> Callable[[str], int]:
    """An argparse type: a whole number in [low, high]."""

    def parse(text: str) -> int:
        try:
            value = int(text.strip(), 10)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number (give one from {low} to {high})") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is out of range: give a whole number from {low} to {high}")
        return value

    parse.__name__ = "whole number"  # what argparse names the type in its messages
    return parse


def float_range(low: float, high: float, *, low_open: bool = False) -> Callable[[str], float]:
    """An argparse type: a finite number in [low, high] (or (low, high] with `low_open`)."""
    opening = "(" if low_open else "["
    shown = f"{opening}{low:g}, {high:g}]"

    def parse(text: str) -> float:
        try:
            value = float(text.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number (give one in {shown})") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{text!r} is not a finite number (give one in {shown})")
        if value < low or value > high or (low_open and value == low):
            raise argparse.ArgumentTypeError(f"{value:g} is out of range: give a number in {shown}")
        return value

    parse.__name__ = "number"
    return parse


# The shared ones, named for what they count.
seed = int_range(0, SEED_MAX)
steps = int_range(1, MAX_STEPS)
interval_steps = int_range(0, MAX_STEPS)  # every N steps; 0: off
batch_size = int_range(1, MAX_BATCH)
seq_len = int_range(1, MAX_SEQ_LEN)
samples = int_range(1, MAX_SAMPLES)
row_id = int_range(1, MAX_ID)
class SweepId(int):
    """A sweep's id, written `sN`: an int told apart from a run's id by its type."""


def run_or_sweep_id(text: str) -> int:
    """`12` or `r12`: run 12 (an int); `s3`: sweep 3 (a SweepId). An argparse type."""
    raw = text.strip()
    if raw[:1] in ("s", "S"):
        return SweepId(row_id(raw[1:]))
    return row_id(raw[1:] if raw[:1] in ("r", "R") else raw)


run_or_sweep_id.__name__ = "run id (N) or sweep id (sN)"
epochs = float_range(0.0, 10_000.0, low_open=True)
learning_rate = float_range(0.0, 10.0, low_open=True)
celsius = float_range(-40.0, 150.0)
seconds = float_range(0.0, 7 * 24 * 3600.0, low_open=True)


def add_pad_argument(p: argparse.ArgumentParser, *, deprecated_padding: bool = False) -> None:
    """--pad dynamic|max (default dynamic); `finetune` also keeps --padding, its old spelling."""
    from engine.core.constants import PAD_FLAGS

    p.add_argument("--pad", choices=tuple(PAD_FLAGS), default=None,
                   help="dynamic: pad each batch to its longest example (default, as Hugging Face's "
                        "examples do); max: pad every sample to --max-seq-len")
    if deprecated_padding:
        from engine.core.constants import PADDINGS

        p.add_argument("--padding", choices=PADDINGS, default=None,
                       help="deprecated spelling of --pad (max_length = --pad max)")


def padding_of(args: argparse.Namespace) -> str:
    """The padding (engine.core.constants.PADDINGS) that --pad (or the deprecated --padding) asks for."""
    import logging

    from engine.core.constants import DEFAULT_PADDING, PAD_FLAGS
    from engine.core.errors import ConfigError

    pad = getattr(args, "pad", None)
    old = getattr(args, "padding", None)
    if old is not None:
        logging.getLogger(__name__).warning("--padding is deprecated: use --pad %s",
                                            "max" if old == "max_length" else old)
        if pad is not None and PAD_FLAGS[pad] != old:
            raise ConfigError(f"--pad {pad} and --padding {old} disagree", "give --pad alone")
        return str(old)
    return PAD_FLAGS[pad] if pad is not None else DEFAULT_PADDING
