"""The training-mode options every workload command shares (run, sweep, select, finetune):
`--mode`, the LoRA settings and gradient checkpointing, parsed into engine values; and the one
WorkloadSpec a command's workload flags make."""

from __future__ import annotations

import argparse
from typing import TypedDict

from engine.cli import numbers
from engine.core.constants import MODES, Mode
from engine.core.errors import ConfigError
from engine.workload.lora import LoraSettings
from engine.workload.spec import WorkloadSpec

MODE_HELP = ("what trains: full (every weight, the default), bitfit (biases and the task head), "
             "head (the task head on a frozen backbone), lora (low-rank adapters and the task head, through peft)")


def add_mode_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--mode", choices=MODES, default="full", help=MODE_HELP)
    p.add_argument("--lora-rank", type=numbers.lora_rank, metavar="R",
                   help="--mode lora: the adapters' rank (default 8)")
    p.add_argument("--lora-alpha", type=numbers.float_range(0.0, 1e6, low_open=True), metavar="A",
                   help="--mode lora: the adapters' scale alpha (default 16; the update is scaled by alpha/rank)")
    p.add_argument("--lora-dropout", type=numbers.float_range(0.0, 0.99), metavar="P",
                   help="--mode lora: dropout on the adapters' input (default 0.05)")
    p.add_argument("--lora-targets", metavar="A,B",
                   help="--mode lora: the linear modules to adapt, by name (default: the family's "
                        "query and value projections, e.g. q_proj,v_proj)")
    p.add_argument("--grad-checkpointing", action="store_true",
                   help="recompute activations in the backward pass: less memory, about one more forward per step")


def _targets(text: str) -> tuple[str, ...]:
    names = tuple(t.strip() for t in text.split(",") if t.strip())
    if not names:
        raise ConfigError(f"--lora-targets {text!r} names no module", "give module names, e.g. --lora-targets q_proj,v_proj")
    return names


def lora_settings(args: argparse.Namespace) -> LoraSettings | None:
    """The LoRA settings the options give: None unless a --lora-* option was given (the spec then
    uses the defaults for --mode lora, and refuses --lora-* options for another mode)."""
    rank, alpha, dropout = (getattr(args, flag, None) for flag in ("lora_rank", "lora_alpha", "lora_dropout"))
    text = getattr(args, "lora_targets", None)
    targets = None if text is None else _targets(text)
    if rank is None and alpha is None and dropout is None and targets is None:
        return None
    default = LoraSettings()  # an option not given keeps its default
    return LoraSettings(rank=default.rank if rank is None else rank, alpha=default.alpha if alpha is None else alpha,
                        dropout=default.dropout if dropout is None else dropout,
                        targets=default.targets if targets is None else targets)


class ModeOptions(TypedDict):
    """The spec keywords of the mode options."""

    mode: Mode
    lora: LoraSettings | None
    grad_checkpointing: bool


def mode_options(args: argparse.Namespace) -> ModeOptions:
    """The spec keywords of the mode options: mode, lora, grad_checkpointing."""
    return {"mode": args.mode, "lora": lora_settings(args), "grad_checkpointing": bool(args.grad_checkpointing)}


def workload_spec(args: argparse.Namespace, *, trains: bool, model: str | None = None, task: str | None = None,
                  batch_size: int | None = None) -> WorkloadSpec:
    """The workload a command's flags ask for (--model, --task, --batch-size, --max-seq-len, --precision,
    the mode options, --pad, --loop, --data, --seed, --download where the command has them); `trains`:
    whether the command trains (its loop is then lean: numbers.loop_of); `model`, `task` and `batch_size`:
    one of a list (`fleet` takes several)."""
    return WorkloadSpec(
        model=args.model if model is None else model, task=args.task if task is None else task,
        batch_size=getattr(args, "batch_size", None) if batch_size is None else batch_size,
        seq_len=getattr(args, "max_seq_len", None), precision=getattr(args, "precision", None),
        padding=numbers.padding_of(args), loop=numbers.loop_of(args, trains=trains), data=getattr(args, "data", None) or "synthetic",
        seed=getattr(args, "seed", None) or 0, allow_download=bool(getattr(args, "download", False)),
        **mode_options(args))


def describe_mode(mode: str, lora: LoraSettings | None = None, grad_checkpointing: bool = False,
                  family: str | None = None) -> str:
    """A mode as one short phrase: `lora r8 a16 (q_proj,v_proj)`, `full, checkpointed`."""
    text = mode
    if mode == "lora":
        settings = lora or LoraSettings()
        targets = settings.shown_targets(family)
        text = f"lora r{settings.rank} a{settings.alpha:g}" + (f" ({','.join(targets)})" if targets else "")
    return text + (", checkpointed" if grad_checkpointing else "")
