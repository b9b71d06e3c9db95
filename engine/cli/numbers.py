"""Numeric and name command-line arguments, checked where they are parsed.

Every numeric flag of every sub-command takes one of these as its argparse `type`, so a
value out of range is refused with argparse's usage line and a message that says the
range (exit 2, no traceback), before anything opens a board or allocates. Numbers are read
strictly (engine.core.userinput: no `2_5`, no Unicode digits, no 5000-digit text), and
their bounds are engine.core.plausible's. `--model` and other names are one printable line
of bounded length (`name`). `--pad` (the padding vocabulary of run, sweep, select and
finetune) and `--loop` (the training loop a workload runs in) are parsed here too.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Callable

from engine.core.errors import SlmDvfsError
from engine.core.plausible import (MAX_BATCH, MAX_EPOCHS, MAX_LORA_RANK, MAX_POINT_STEPS, MAX_SAMPLES, MAX_SEQ_LEN,
                                   MAX_STEPS, MAX_SWEEP_REPEATS, MAX_WARMUP_STEPS)
from engine.core.text import shown
from engine.core.userinput import MAX_NAME_CHARS, check_name, parse_float, parse_int

if TYPE_CHECKING:
    from engine.core.constants import Padding
    from engine.workload.trace.loop import Loop

__all__ = ["MAX_BATCH", "MAX_SAMPLES", "MAX_SEQ_LEN", "MAX_STEPS", "SEED_MAX", "MAX_ID"]

SEED_MAX = 2**32 - 1  # NumPy's legacy seeding takes 0..2**32-1; torch and Python take more
MAX_ID = 2**63 - 1  # SQLite's INTEGER


def int_range(low: int, high: int) -> Callable[[str], int]:
    """An argparse type: a whole number in [low, high]."""

    def parse(text: str) -> int:
        try:
            value = parse_int(text, "")
        except SlmDvfsError:
            raise argparse.ArgumentTypeError(f"{shown(text)!r} is not a whole number (give one from {low} to {high}"
                                             f"{_hint(text)})") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is out of range: give a whole number from {low} to {high}")
        return value

    parse.__name__ = "whole number"  # what argparse names the type in its messages
    return parse


def float_range(low: float, high: float, *, low_open: bool = False) -> Callable[[str], float]:
    """An argparse type: a finite number in [low, high] (or (low, high] with `low_open`)."""
    opening = "(" if low_open else "["
    interval = f"{opening}{low:g}, {high:g}]"

    def parse(text: str) -> float:
        if text.strip().lower().lstrip("+-") in ("nan", "inf", "infinity"):
            raise argparse.ArgumentTypeError(f"{shown(text)!r} is not a finite number (give one in {interval})")
        try:
            value = parse_float(text, "")
        except SlmDvfsError:
            raise argparse.ArgumentTypeError(f"{shown(text)!r} is not a number (give one in {interval}"
                                             f"{_hint(text)})") from None
        if value < low or value > high or (low_open and value == low):
            raise argparse.ArgumentTypeError(f"{value:g} is out of range: give a number in {interval}")
        return value

    parse.__name__ = "number"
    return parse


def _hint(text: str) -> str:
    """Why a number-like text is not read, where it says more than "not a number"."""
    if "_" in text or "," in text:
        return "; write it without separators: `2_5` is not read as 25"
    if any(c.isdigit() and not c.isascii() for c in text):
        return "; write it in ASCII digits 0-9"
    return ""


def name(what: str, limit: int = MAX_NAME_CHARS) -> Callable[[str], str]:
    """An argparse type: a name or path (a model, a profile) on one printable line of at most
    `limit` characters; a longer or multi-line one is a usage error that quotes it short."""

    def parse(text: str) -> str:
        try:
            return check_name(text, what, limit=limit)
        except SlmDvfsError as exc:
            raise argparse.ArgumentTypeError(f"{exc.what} ({exc.remedy})") from None

    parse.__name__ = what
    parse.is_name = True  # type: ignore[attr-defined]  # a name, not a number (the tests' sweep tells them apart)
    return parse


model = name("model")  # zoo name, hub id, folder or config.json


# The shared ones, named for what they count.
seed = int_range(0, SEED_MAX)
steps = int_range(1, MAX_STEPS)
interval_steps = int_range(0, MAX_STEPS)  # every N steps; 0: off
batch_size = int_range(1, MAX_BATCH)
seq_len = int_range(1, MAX_SEQ_LEN)
samples = int_range(1, MAX_SAMPLES)
row_id = int_range(1, MAX_ID)
lora_rank = int_range(1, MAX_LORA_RANK)
warmup_steps = int_range(0, MAX_WARMUP_STEPS)  # a sweep point's unmeasured steps
point_steps = int_range(1, MAX_POINT_STEPS)  # a sweep point's measured steps
sweep_repeats = int_range(1, MAX_SWEEP_REPEATS)
class SweepId(int):
    """A sweep's id, written `sN`: an int told apart from a run's id by its type."""


def run_or_sweep_id(text: str) -> int:
    """`12` or `r12`: run 12 (an int); `s3`: sweep 3 (a SweepId). An argparse type."""
    raw = text.strip()
    if raw[:1] in ("s", "S"):
        return SweepId(row_id(raw[1:]))
    return row_id(raw[1:] if raw[:1] in ("r", "R") else raw)


run_or_sweep_id.__name__ = "run id (N) or sweep id (sN)"
epochs = float_range(0.0, MAX_EPOCHS, low_open=True)
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


def padding_of(args: argparse.Namespace) -> Padding:
    """The padding (engine.core.constants.PADDINGS) that --pad (or the deprecated --padding) asks for."""
    import logging

    from engine.core.constants import DEFAULT_PADDING, PAD_FLAGS, parse_padding
    from engine.core.errors import ConfigError

    pad = getattr(args, "pad", None)
    old = getattr(args, "padding", None)
    if old is not None:
        logging.getLogger(__name__).warning("--padding is deprecated: use --pad %s",
                                            "max" if old == "max_length" else old)
        if pad is not None and PAD_FLAGS[pad] != old:
            raise ConfigError(f"--pad {pad} and --padding {old} disagree", "give --pad alone")
        return parse_padding(old)
    return parse_padding(pad) if pad is not None else DEFAULT_PADDING


LOOP_HELP = ("the training loop the workload runs in: lean = slm-dvfs's own loop (batches pre-padded, the loss read "
             "only when logged), the only one a run that trains can run, and its default; hf = a Hugging Face "
             "Trainer-style loop, as the published Orin runs used, modelled by the twin only: the default where "
             "the twin alone computes the steps (run --simulate, sweep --fast, select)")


def add_loop_argument(p: argparse.ArgumentParser) -> None:
    """--loop hf|lean (default: the command's, engine.workload.trace.loop.default_loop)."""
    from engine.workload.trace.loop import LOOPS

    p.add_argument("--loop", choices=LOOPS, default=None, help=LOOP_HELP)


def asked_loop(args: argparse.Namespace) -> Loop | None:
    """The training loop --loop names, or None where it was not given."""
    from engine.workload.trace.loop import parse_loop

    loop = getattr(args, "loop", None)
    return parse_loop(loop) if loop is not None else None


def loop_of(args: argparse.Namespace, *, trains: bool) -> Loop:
    """The training loop a command runs: --loop's, refused where the command trains and it is not lean
    (ConfigError), else the command's default (engine.workload.trace.loop.loop_for: the one rule)."""
    from engine.workload.trace.loop import loop_for

    return loop_for(trains, asked_loop(args))
