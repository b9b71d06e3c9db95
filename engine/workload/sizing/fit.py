"""Whether a workload's estimated peak fits the board, and what would make it fit (no torch).

`memory_fit(estimate, mem_total_bytes=...)` sets an `engine.workload.sizing.memory` estimate
against the board's budget: its MemTotal (/proc/meminfo, read by engine.device.meminfo; the
AGX Orin 64GB's when unknown) less what L4T and a desktop hold (`os_reserve_bytes`). The CUDA
context and the Python process are the estimate's own `workspace` part. When it does not fit,
it lists the changes a user would try, in that order, each only if it fits by the same
estimate: the largest smaller batch, gradient checkpointing, 16-bit autocast (on CUDA), LoRA at
the default rank, a shorter length, a smaller zoo model; when no single change fits, all of the
first ones together. The first changes that still do not fit (batch 1, bf16, LoRA, all
together) are kept too (`near`), with their estimates, so a refusal says how far each falls
short. `check_memory` raises the refusal (a MemoryFitError with the estimate and the remedies).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from engine.core.errors import ConfigError, ProfileError
from engine.core.jsontypes import as_int
from engine.workload.sizing.memory import (DEFAULT_BUDGET_BYTES, GIB, MIB, ORIN_MEMTOTAL_BYTES, OS_RESERVE_BYTES,
                                           OS_RESERVE_MIN_BYTES, OS_RESERVE_SHARE, MemoryEstimate)

MIN_SUGGESTED_LENGTH = 16  # a shorter length than this is no fine-tuning worth suggesting


def os_reserve_bytes(mem_total_bytes: int) -> int:
    """What L4T and a desktop hold of a board with `mem_total_bytes` (an estimate, see
    engine.workload.sizing.memory): OS_RESERVE_SHARE of it, between OS_RESERVE_MIN_BYTES and
    OS_RESERVE_BYTES (3 GiB on every board of 16 GB or more, the AGX Orin's included)."""
    return int(min(OS_RESERVE_BYTES, max(OS_RESERVE_MIN_BYTES, OS_RESERVE_SHARE * int(mem_total_bytes))))


def board_budget(mem_total_bytes: int | None = None, reserve_bytes: int | None = None) -> int:
    """Bytes a run may use: the board's MemTotal (/proc/meminfo; None: the AGX Orin 64GB's)
    less the reserve for L4T and the desktop (`reserve_bytes`; default `os_reserve_bytes`)."""
    total = ORIN_MEMTOTAL_BYTES if mem_total_bytes is None else int(mem_total_bytes)
    reserve = os_reserve_bytes(total) if reserve_bytes is None else int(reserve_bytes)
    return max(0, total - reserve)


class MemoryFitError(ConfigError):
    """A step that does not fit the board's memory: `fit` holds the estimate, the budget and
    the remedies (a client reads them here, never from the text)."""

    def __init__(self, what: str, remedy: str, fit: "MemoryFit") -> None:
        super().__init__(what, remedy)
        self.fit = fit


@dataclass(frozen=True)
class Remedy:
    """One change that makes the workload fit, with the estimate it would have."""

    flags: str  # as the CLI takes it, e.g. "--batch-size 6" or "--mode lora"
    estimate: MemoryEstimate
    note: str = ""  # what the flags imply, e.g. "LoRA rank 8"

    def describe(self) -> str:
        return f"{self.flags} ({self.note + ': ' if self.note else ''}{self.estimate.total / GIB:,.1f} GiB)"

    def describe_over(self, budget: int) -> str:
        """As `describe`, with how far it stays over `budget`."""
        over = (self.estimate.total - budget) / GIB
        return f"{self.flags} ({self.note + ': ' if self.note else ''}{self.estimate.total / GIB:,.1f} GiB, {over:,.1f} GiB over)"


@dataclass(frozen=True)
class MemoryFit:
    """An estimate against the board's budget; remedies when it does not fit."""

    estimate: MemoryEstimate
    budget: int
    name: str = "the model"
    remedies: tuple[Remedy, ...] = ()  # changes that fit, in the order to try
    near: tuple[Remedy, ...] = ()  # the first changes to try that still do not fit, with their estimates
    mem_total: int | None = None  # the board's MemTotal the budget came from; None: given, or the AGX's

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

    def refusal(self) -> MemoryFitError:
        est = self.estimate
        what = (f"{self.name} at batch {est.batch_size}, length {est.seq_len} ({est.precision}, mode {est.mode}"
                f"{', checkpointing' if est.checkpointing else ''}) needs an estimated {est.describe()} [predicted], more than "
                f"the {self.budget / GIB:,.1f} GiB the board leaves for training "
                f"({_budget_basis(self.budget, self.mem_total)})")
        heavy = est.weights > self.budget
        if self.remedies:
            remedy = ((f"its fp32 weights alone ({est.weights / GIB:,.1f} GiB) are over the budget; " if heavy else "")
                      + "it fits with, in the order to try: " + "; ".join(r.describe() for r in self.remedies))
        elif heavy:
            remedy = (f"the model's fp32 weights alone ({est.weights / GIB:,.1f} GiB) exceed what the board leaves "
                      "for training: use a smaller model")
        else:
            remedy = "nothing short of another model fits: use a smaller model"
        if self.near:
            remedy += ("; estimated and still over the budget: "
                       + "; ".join(r.describe_over(self.budget) for r in self.near))
        return MemoryFitError(what, remedy, self)


def memory_fit(estimate: MemoryEstimate, name: str = "the model", memory_bytes: int | None = None, *,
               cuda: bool = True, zoo: bool = True, mem_total_bytes: int | None = None) -> MemoryFit:
    """`estimate` against the budget, with remedies when it does not fit: `memory_bytes` (a budget
    given as it is), else `board_budget(mem_total_bytes)` (the board's MemTotal; None: the AGX
    Orin 64GB's). `cuda`: 16-bit autocast is on offer; `zoo`: suggest a smaller zoo model."""
    budget = board_budget(mem_total_bytes) if memory_bytes is None else int(memory_bytes)
    total = mem_total_bytes if memory_bytes is None else None
    fit = MemoryFit(estimate, budget, name, mem_total=total)
    if fit.fits:
        return fit
    remedies = tuple(_remedies(estimate, budget, cuda, zoo))
    return MemoryFit(estimate, budget, name, remedies, tuple(_near(estimate, budget, cuda, remedies)), total)


def check_memory(estimate: MemoryEstimate, name: str, batch_size: int, seq_len: int,
                 memory_bytes: int | None = None, *, cuda: bool = True, mem_total_bytes: int | None = None) -> MemoryFit:
    """Refuse a step that would not fit (MemoryFitError with the estimate and what would fit);
    the fit when it does. `batch_size` and `seq_len` are the estimate's (kept for callers);
    the budget as `memory_fit` takes it."""
    fit = memory_fit(estimate, name, memory_bytes, cuda=cuda, mem_total_bytes=mem_total_bytes)
    if not fit.fits:
        raise fit.refusal()
    return fit


def _budget_basis(budget: int, mem_total: int | None) -> str:
    if mem_total is not None:
        return (f"the board's MemTotal {mem_total // MIB:,} MiB, less {(mem_total - budget) / GIB:,.1f} GiB "
                "for L4T and the desktop; CPU and GPU share it")
    if budget == DEFAULT_BUDGET_BYTES:
        return (f"MemTotal unknown, taken as the AGX Orin 64GB's: {ORIN_MEMTOTAL_BYTES // MIB:,} MiB seen by "
                f"Linux, less {OS_RESERVE_BYTES / GIB:g} GiB for L4T and the desktop")
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


def _singles(est: MemoryEstimate, cuda: bool) -> list[tuple[str, dict]]:
    """The single changes to try, in order: (flags, with_changes' arguments)."""
    singles: list[tuple[str, dict]] = []
    if not est.checkpointing and est.mode != "head":
        singles.append(("--grad-checkpointing", dict(checkpointing=True)))
    if cuda and est.precision == "fp32":
        singles.append(("--precision bf16", dict(precision="bf16")))
    if est.mode in ("full", "bitfit"):
        singles.append(("--mode lora", dict(mode="lora", lora=None)))
    return singles


def _single(est: MemoryEstimate, flags: str, change: dict) -> Remedy:
    candidate = est.with_changes(**change)
    return Remedy(flags, candidate, f"LoRA rank {candidate.lora_rank}" if "lora" in flags else "")


def _near(est: MemoryEstimate, budget: int, cuda: bool, remedies: tuple[Remedy, ...]) -> list[Remedy]:
    """The first remedies (batch 1, each single change, all of them at batch 1) that do not fit,
    with their estimates: what the user would try, and by how much each falls short."""
    offered = {r.flags for r in remedies}
    tries = [_single(est, flags, change) for flags, change in _singles(est, cuda)]
    if est.batch_size > 1:
        tries.insert(0, Remedy("--batch-size 1", est.with_changes(batch_size=1)))
    together: dict = {k: v for _, change in _singles(est, cuda) for k, v in change.items()}
    if together:
        flags = " ".join(f for f, _ in _singles(est, cuda)) + (" --batch-size 1" if est.batch_size > 1 else "")
        tries.append(Remedy(flags, est.with_changes(batch_size=1, **together), "all together"))
    return [r for r in tries if r.flags not in offered and r.estimate.total > budget]


def _remedies(est: MemoryEstimate, budget: int, cuda: bool, zoo: bool) -> list[Remedy]:
    out: list[Remedy] = []

    def ok(candidate: MemoryEstimate) -> bool:
        return candidate.total <= budget

    batch = _largest(1, est.batch_size - 1, lambda b: ok(est.with_changes(batch_size=b)))
    if batch is not None:
        out.append(Remedy(f"--batch-size {batch}", est.with_changes(batch_size=batch)))
    singles = _singles(est, cuda)
    for flags, change in singles:
        remedy = _single(est, flags, change)
        if ok(remedy.estimate):
            out.append(remedy)
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
