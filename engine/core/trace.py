"""What one training step costs, independent of the clocks it runs at.

The twin turns a StepTrace into time and energy at a DVFS setting; the selector
uses its totals as workload features. Capturing a trace lives in `tracer.py`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

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

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "flops": self.flops, "bytes": self.bytes, "kernels": self.kernels}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "OpCost":
        return cls(str(data["kind"]), float(data["flops"]), float(data["bytes"]), int(data["kernels"]))


@dataclass(frozen=True)
class StepTrace:
    """FLOPs, bytes, kernels and host work of one full training step
    (forward, backward, optimizer) for one workload shape."""

    model: str
    batch_size: int
    seq_len: int
    precision: str  # "fp32" | "fp16" | "bf16"
    ops: tuple[OpCost, ...]
    host_cycles: float  # CPU cycles of host work not tied to kernel launches (data, Python)
    params: int = 0  # trainable parameters (the optimizer's work scales with these)

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

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "batch_size": self.batch_size,
            "seq_len": self.seq_len,
            "precision": self.precision,
            "ops": [op.to_json() for op in self.ops],
            "host_cycles": self.host_cycles,
            "params": self.params,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "StepTrace":
        return cls(
            model=str(data["model"]),
            batch_size=int(data["batch_size"]),
            seq_len=int(data["seq_len"]),
            precision=str(data["precision"]),
            ops=tuple(OpCost.from_json(o) for o in data["ops"]),
            host_cycles=float(data["host_cycles"]),
            params=int(data.get("params", 0)),
        )
