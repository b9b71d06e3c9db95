"""The vocabulary every layer and client shares, in one torch-free place (the TUI's forms and
the CLI's flags import it without pulling in torch).

Each fixed set is one `Literal` type; its tuple of values (argparse's `choices`, the messages) is
derived from it, and one `parse_*` function takes a text into it at the edge (a flag, a form, a
profile, an imported file), raising `UnknownChoiceError` that lists the values. Inner code takes
the typed value and does not check it again.
"""

from __future__ import annotations

from typing import Literal, TypeVar, get_args

from engine.core.errors import UnknownChoiceError

Precision = Literal["fp32", "fp16", "bf16"]  # what a run asks for; 16-bit needs CUDA on the host
PRECISIONS: tuple[Precision, ...] = get_args(Precision)
# training modes: every weight; biases and the task head (BitFit); the task head alone on a frozen
# backbone; low-rank adapters (LoRA, through peft) and the task head
Mode = Literal["full", "bitfit", "head", "lora"]
MODES: tuple[Mode, ...] = get_args(Mode)
Padding = Literal["max_length", "dynamic"]  # fixed-length batches, or each batch padded to its longest
PADDINGS: tuple[Padding, ...] = get_args(Padding)
DEFAULT_PADDING: Padding = "dynamic"  # as Hugging Face's examples do (DataCollatorWithPadding)
PAD_FLAGS: dict[str, Padding] = {"dynamic": "dynamic", "max": "max_length"}  # --pad CHOICE -> padding
SYNTHETIC_TRAIN_MAX = 2000  # synthetic train size when none is asked for (or the real size, if smaller)
SYNTHETIC_EVAL_MAX = 500  # likewise per evaluation split
DEFAULT_BATCH_SIZE = 32  # for models outside the zoo
DEFAULT_SEQ_LEN = 128

T = TypeVar("T", bound=str)


def parse_choice(value: object, choices: tuple[T, ...], what: str, hint: str = "") -> T:
    """`value` as the member of `choices` it equals (exactly: stored and written spellings are these);
    else UnknownChoiceError naming `what` and listing the choices (`hint`: how to give one, e.g. a flag)."""
    for choice in choices:
        if value == choice:
            return choice
    raise UnknownChoiceError(what, value, choices, hint)


def parse_precision(value: object) -> Precision:
    return parse_choice(value, PRECISIONS, "precision", "--precision")


def parse_mode(value: object) -> Mode:
    return parse_choice(value, MODES, "training mode", "--mode")


def parse_padding(value: object) -> Padding:
    """A padding as stored (max_length, dynamic) or as --pad spells it (max, dynamic)."""
    if isinstance(value, str) and value in PAD_FLAGS:
        return PAD_FLAGS[value]
    return parse_choice(value, PADDINGS, "padding", "--pad dynamic or --pad max")
