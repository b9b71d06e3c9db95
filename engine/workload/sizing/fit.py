"""Whether a workload's estimated peak fits the board, and what would make it fit (no torch).

`memory_fit(estimate)` sets an `engine.workload.sizing.memory` estimate against the budget (the
memory Linux sees on the board less OS_RESERVE_BYTES) and, when it does not fit, lists the
changes a user would try, in that order, each only if it fits by the same estimate: the
largest smaller batch, gradient checkpointing, 16-bit autocast (on CUDA), LoRA at the default
rank, a shorter length, a smaller zoo model; when no single change fits, all of the first ones
together. `check_memory` raises the refusal (a ConfigError with the estimate and the remedies).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from engine.core.errors import ConfigError, ProfileError
from engine.core.jsontypes import as_int
from engine.workload.sizing.memory import DEFAULT_BUDGET_BYTES, GIB, MIB, OS_RESERVE_BYTES, MemoryEstimate

MIN_SUGGESTED_LENGTH = 16  # a shorter length than this is no fine-tuning worth suggesting


def board_budget(mem_total_bytes: int | None = None, reserve_bytes: int = OS_RESERVE_BYTES) -> int:
    """Bytes a run may use: the board's MemTotal (/proc/meminfo; default the AGX Orin 64GB's)
    less the reserve for L4T and the desktop."""
    if mem_total_bytes is None:
        return DEFAULT_BUDGET_BYTES
    return max(0, int(mem_total_bytes) - int(reserve_bytes))


@dataclass(frozen=True)
class Remedy:
    """One change that makes the workload fit, with the estimate it would have."""

    flags: str  # as the CLI takes it, e.g. "--batch-size 6" or "--mode lora"
    estimate: MemoryEstimate
    note: str = ""  # what the flags imply, e.g. "LoRA rank 8"

    def describe(self) -> str:
        return f"{self.flags} ({self.note + ': ' if self.note else ''}{self.estimate.total / GIB:,.1f} GiB)"


@dataclass(frozen=True)
class MemoryFit:
    """An estimate against the board's budget; remedies when it does not fit."""

    estimate: MemoryEstimate
    budget: int
    name: str = "the model"
    remedies: tuple[Remedy, ...] = ()

    @property
    def fits(self) -> bool:
        return self.estimate.total <= self.budget

    def summary(self) -> str:
        """One line, e.g. "fits: 3.2 GiB of 58.4 GiB" or "does not fit: 71.3 GiB of 58.4 GiB; try --mode lora"."""
        figures = f"{self.estimate.total / GIB:,.1f} GiB of {self.budget / GIB:,.1f} GiB"
        if self.fits:
            return f"fits: {figures}"
        if self.remedies:
            return f"does not fit: {figures}; try {self.remedies[0].flags}"
        return f"does not fit: {figures}; use a smaller model"

    def refusal(self) -> ConfigError:
        est = self.estimate
        what = (f"{self.name} at batch {est.batch_size}, length {est.seq_len} ({est.precision}, mode {est.mode}"
                f"{', checkpointing' if est.checkpointing else ''}) needs an estimated {est.describe()} [predicted], more than "
                f"the {self.budget / GIB:,.1f} GiB the board leaves for training "
                f"({_budget_basis(self.budget)})")
        if self.remedies:
            remedy = "it fits with, in the order to try: " + "; ".join(r.describe() for r in self.remedies)
        elif est.weights > self.budget:
            remedy = "the model's weights alone exceed the board's memory: use a smaller model"
        else:
            remedy = "nothing short of another model fits: use a smaller model"
        return ConfigError(what, remedy)


def memory_fit(estimate: MemoryEstimate, name: str = "the model", memory_bytes: int | None = None, *,
               cuda: bool = True, zoo: bool = True) -> MemoryFit:
    """`estimate` against `memory_bytes` (the budget; default `board_budget()`), with remedies
    when it does not fit. `cuda`: 16-bit autocast is on offer; `zoo`: suggest a smaller zoo model."""
    budget = board_budget() if memory_bytes is None else int(memory_bytes)
    fit = MemoryFit(estimate, budget, name)
    if fit.fits:
        return fit
    return MemoryFit(estimate, budget, name, tuple(_remedies(estimate, budget, cuda, zoo)))


def check_memory(estimate: MemoryEstimate, name: str, batch_size: int, seq_len: int,
                 memory_bytes: int | None = None, *, cuda: bool = True) -> MemoryFit:
    """Refuse a step that would not fit (ConfigError with the estimate and what would fit);
    the fit when it does. `batch_size` and `seq_len` are the estimate's (kept for callers)."""
    fit = memory_fit(estimate, name, memory_bytes, cuda=cuda)
    if not fit.fits:
        raise fit.refusal()
    return fit


def _budget_basis(budget: int) -> str:
    if budget == DEFAULT_BUDGET_BYTES:
        return (f"AGX Orin 64GB: {(budget + OS_RESERVE_BYTES) // MIB:,} MiB seen by Linux, less "
                f"{OS_RESERVE_BYTES / GIB:g} GiB for L4T and the desktop")
    return "the budget given"


def _largest(low: int, high: int, fits: Callable[[int], bool]) -> int | None:
    """The largest n in [low, high] with fits(n), fits being monotone (true up to some n)."""
    if high < low or not fits(low):
        return None
    while low < high:
        mid = (low + high + 1) // 2
        if fits(mid):
            low = mid
        else:
            high = mid - 1
    return low


def _remedies(est: MemoryEstimate, budget: int, cuda: bool, zoo: bool) -> list[Remedy]:
    out: list[Remedy] = []

    def ok(candidate: MemoryEstimate) -> bool:
        return candidate.total <= budget

    batch = _largest(1, est.batch_size - 1, lambda b: ok(est.with_changes(batch_size=b)))
    if batch is not None:
        out.append(Remedy(f"--batch-size {batch}", est.with_changes(batch_size=batch)))
    singles: list[tuple[str, dict]] = []
    if not est.checkpointing and est.mode != "head":
        singles.append(("--grad-checkpointing", dict(checkpointing=True)))
    if cuda and est.precision == "fp32":
        singles.append(("--precision bf16", dict(precision="bf16")))
    if est.mode in ("full", "bitfit"):
        singles.append(("--mode lora", dict(mode="lora", lora=None)))
    for flags, change in singles:
        candidate = est.with_changes(**change)
        if ok(candidate):
            out.append(Remedy(flags, candidate, f"LoRA rank {candidate.lora_rank}" if "lora" in flags else ""))
    length = _largest(MIN_SUGGESTED_LENGTH, est.seq_len - 1, lambda n: ok(est.with_changes(seq_len=n)))
    if length is not None:
        length = max(MIN_SUGGESTED_LENGTH, length // 8 * 8)  # a multiple of 8 suits the tensor cores
        out.append(Remedy(f"--max-seq-len {length}", est.with_changes(seq_len=length)))
    if not out and singles:  # no single change: all of them, at the largest batch that then fits
        together: dict = {k: v for _, change in singles for k, v in change.items()}
        batch = _largest(1, est.batch_size, lambda b: ok(est.with_changes(batch_size=b, **together)))
        if batch is not None:
            flags = " ".join(f for f, _ in singles) + (f" --batch-size {batch}" if batch != est.batch_size else "")
            out.append(Remedy(flags, est.with_changes(batch_size=batch, **together)))
    if zoo:
        smaller = _smaller_model(est, budget)
        if smaller is not None:
            out.append(smaller)
    return out


def _smaller_model(est: MemoryEstimate, budget: int) -> Remedy | None:
    """The largest zoo model with fewer parameters that fits at the same settings (its own
    family first)."""
    from engine.workload.sizing.memory import estimate_memory
    from engine.workload.zoo import MODEL_TYPE_FAMILY, load_zoo

    try:
        entries = load_zoo().values()
    except ProfileError:
        return None
    family = MODEL_TYPE_FAMILY.get(str(est.config.get("model_type")))
    found: list[tuple[bool, int, str, MemoryEstimate]] = []
    for entry in entries:
        if entry.params >= est.params or est.seq_len > as_int(entry.config.get("max_position_embeddings", est.seq_len)):
            continue
        try:  # LoRA targets named for this model may name nothing in another family
            candidate = estimate_memory(entry.config, est.batch_size, est.seq_len, est.precision, est.mode,
                                        lora=est.lora, checkpointing=est.checkpointing, params=entry.params)
        except ConfigError:
            continue
        if candidate.total <= budget:
            found.append((entry.family == family, entry.params, entry.name, candidate))
    if not found:
        return None
    _, _, name, candidate = max(found, key=lambda x: (x[0], x[1]))
    return Remedy(f"--model {name}", candidate, "a smaller model")
