"""What one training step costs, independent of the clocks it runs at.

The twin turns a StepTrace into time and energy at a DVFS setting; the selector
uses its totals as workload features. Capturing a trace lives in `tracer.py`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from engine.core.constants import Precision, parse_precision
from engine.core.errors import UnknownChoiceError
from engine.core.jsontypes import JsonObject, as_float, as_int, as_list, as_object

# Operation kinds the twin distinguishes: matrix work may use tensor cores,
# the rest is bound by memory bandwidth or launch overhead.
OP_KINDS = ("matmul", "attention", "elementwise", "reduction", "embedding", "optimizer", "other")


@dataclass(frozen=True)
class OpCost:
    """An aggregated group of GPU operations of one kind within a step."""

    kind: str  # one of OP_KINDS
    flops: float  # floating-point operations, all kernels of the group together
    bytes: float  # bytes read + written from/to DRAM
    kernels: int  # kernel launches

    def to_json(self) -> JsonObject:
        return {"kind": self.kind, "flops": self.flops, "bytes": self.bytes, "kernels": self.kernels}

    @classmethod
    def from_json(cls, data: object) -> "OpCost":
        data = as_object(data)
        return cls(str(data["kind"]), as_float(data["flops"]), as_float(data["bytes"]), as_int(data["kernels"]))


@dataclass(frozen=True)
class StepTrace:
    """FLOPs, bytes, kernels and host work of one full training step
    (forward, backward, optimizer) for one workload shape."""

    model: str
    batch_size: int
    seq_len: int
    precision: Precision
    ops: tuple[OpCost, ...]
    host_cycles: float  # CPU cycles of host work not tied to kernel launches (data, Python)
    params: int = 0  # trainable parameters (the optimizer's work scales with these)
    # CPU cycles of the training loop's own work that the GPU waits for: a loop that syncs every step
    # (Hugging Face's Trainer reads the loss back) collates the next batch while the GPU idles.
    # 0: the lean loop, whose per-step host work is part of host_cycles. See engine/workload/trace/loop.py.
    serial_cycles: float = 0.0

    @property
    def flops(self) -> float:
        return sum(op.flops for op in self.ops)

    @property
    def bytes(self) -> float:
        return sum(op.bytes for op in self.ops)

    @property
    def kernels(self) -> int:
        return sum(op.kernels for op in self.ops)

    @property
    def arithmetic_intensity(self) -> float:
        """FLOPs per byte of DRAM traffic."""
        return self.flops / self.bytes if self.bytes else 0.0

    @property
    def samples(self) -> int:
        return self.batch_size

    @property
    def tokens(self) -> int:
        return self.batch_size * self.seq_len

    def to_json(self) -> JsonObject:
        return {
            "model": self.model,
            "batch_size": self.batch_size,
            "seq_len": self.seq_len,
            "precision": self.precision,
            "ops": [op.to_json() for op in self.ops],
            "host_cycles": self.host_cycles,
            "params": self.params,
            "serial_cycles": self.serial_cycles,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> "StepTrace":
        try:  # a cached file's: one outside the set reads as unreadable (its callers trace again)
            precision = parse_precision(data["precision"])
        except UnknownChoiceError as exc:
            raise ValueError(exc.what) from None
        return cls(
            model=str(data["model"]),
            batch_size=as_int(data["batch_size"]),
            seq_len=as_int(data["seq_len"]),
            precision=precision,
            ops=tuple(OpCost.from_json(o) for o in as_list(data["ops"])),
            host_cycles=as_float(data["host_cycles"]),
            params=as_int(data.get("params", 0)),
            serial_cycles=as_float(data.get("serial_cycles", 0.0)),
        )


@dataclass(frozen=True)
class StepMix:
    """The steps of a run whose batches differ in length (dynamic padding): each part is
    (weight, the step trace at one padded length), weights summing to 1. A run's time and
    energy per step are the weighted mean of the parts' (the twin is nonlinear in a trace,
    so the twin of `mean_trace()` is not the same figure)."""

    parts: tuple[tuple[float, StepTrace], ...]

    def __post_init__(self) -> None:
        if not self.parts:
            raise ValueError("a step mix needs at least one trace")
        total = sum(w for w, _t in self.parts)
        if any(w < 0 for w, _t in self.parts) or abs(total - 1.0) > 1e-9:
            raise ValueError(f"step-mix weights must be non-negative and sum to 1, not {total}")

    @classmethod
    def single(cls, trace: StepTrace) -> "StepMix":
        return cls(((1.0, trace),))

    @property
    def is_single(self) -> bool:
        return len(self.parts) == 1

    @property
    def longest(self) -> StepTrace:
        return max((t for _w, t in self.parts), key=lambda t: t.seq_len)

    @property
    def batch_size(self) -> int:
        return self.parts[0][1].batch_size

    @property
    def expected_seq_len(self) -> float:
        """The mean padded length of a step."""
        return sum(w * t.seq_len for w, t in self.parts)

    def mean_trace(self, seq_len: int | None = None) -> StepTrace:
        """One StepTrace whose ops are the weighted sums of the parts' (per kind), its host
        cycles the weighted mean: what an average step costs, for features and reports.
        `seq_len` (default: the longest part's) is the shape it is filed under."""
        if self.is_single:
            return self.parts[0][1]
        longest = self.longest
        kinds: dict[str, list[float]] = {}
        for w, t in self.parts:
            for op in t.ops:
                acc = kinds.setdefault(op.kind, [0.0, 0.0, 0.0])
                acc[0] += w * op.flops
                acc[1] += w * op.bytes
                acc[2] += w * op.kernels
        ops = tuple(OpCost(kind, f, b, int(round(k))) for kind, (f, b, k) in kinds.items())
        return StepTrace(model=longest.model, batch_size=longest.batch_size,
                         seq_len=longest.seq_len if seq_len is None else int(seq_len),
                         precision=longest.precision, ops=ops,
                         host_cycles=sum(w * t.host_cycles for w, t in self.parts), params=longest.params,
                         serial_cycles=sum(w * t.serial_cycles for w, t in self.parts))


def as_mix(trace: "StepTrace | StepMix") -> StepMix:
    """A trace as a one-part mix; a mix as it is."""
    return trace if isinstance(trace, StepMix) else StepMix.single(trace)
