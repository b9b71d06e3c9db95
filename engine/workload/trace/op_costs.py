"""How one training step's aten operators are costed, as the step tracer counts them.

Documented estimates, not measurements:
- FLOPs: torch.utils.flop_counter's formulas where it has one (matmuls, attention);
  otherwise one FLOP per element written (these operators are memory bound: their
  bytes matter far more than their FLOPs).
- Bytes: every tensor read and written, at its element size; a broadcast (stride-0)
  tensor counts once; an embedding lookup reads only the rows it gathers.
- Kernels: one per aten operator, as eager PyTorch launches on CUDA; views and
  metadata operators launch none.
- Attention runs as CUDA would run it (the fused memory-efficient SDPA kernel);
  meta tensors would otherwise take the unfused math path.
- 16-bit precision is applied analytically to the fp32 capture (see
  `apply_precision`): autocast keeps fp32 weights and casts them per step.
- host_cycles: an estimate of the CPU work of a step (framework dispatch per aten
  operator, per-sample data handling, the Python loop), from the constants below.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Callable

from engine.core.constants import Precision

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from engine.core.trace import OP_KINDS, OpCost

# Host work estimates, in CPU cycles of an Orin Cortex-A78AE core (about 2.2 GHz).
# Eager PyTorch spends roughly 5-10 us of Python and dispatcher work per operator
# it launches; collating a pre-tokenised, fixed-length sample is a copy of a few
# hundred integers; the loop itself (callbacks, scheduler, bookkeeping) is a
# fixed cost per step. These are estimates, to be replaced by measurements.
HOST_CYCLES_PER_OP = 15_000
HOST_CYCLES_PER_SAMPLE = 40_000
HOST_CYCLES_PER_STEP = 2_000_000

_aten = torch.ops.aten

# Operators that launch no kernel although torch does not flag them as views.
_NO_KERNEL = {
    "_unsafe_view", "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided",
    "_local_scalar_dense", "lift_fresh", "detach", "alias", "set_", "resize_",
    "sym_size", "sym_stride", "sym_numel", "sym_storage_offset", "is_same_size",
    "_record_function_enter_new", "_record_function_exit", "_has_compatible_shallow_copy_type",
}
_MATMUL = {"mm", "addmm", "matmul", "linear", "addmv", "mv", "dot", "_scaled_mm", "addbmm"}
# Batched matmuls in these models multiply activation by activation: Q·Kᵀ and P·V.
_ATTENTION = {"bmm", "baddbmm", "_softmax", "_safe_softmax", "_softmax_backward_data"}
_EMBEDDING = {"embedding", "embedding_dense_backward", "_embedding_bag", "_embedding_bag_backward",
              "embedding_backward", "_embedding_bag_dense_backward"}
_REDUCTION = {"native_layer_norm", "native_layer_norm_backward", "_log_softmax",
              "_log_softmax_backward_data", "nll_loss_forward", "nll_loss_backward",
              "mse_loss", "mse_loss_backward", "linalg_vector_norm", "norm", "_fused_rms_norm",
              "_fused_rms_norm_backward", "cumsum", "argmax", "max", "min"}
_ELEMENTWISE_EXTRA = {"bernoulli_", "bernoulli", "native_dropout", "native_dropout_backward",
                      "fill_", "zero_", "zeros_like", "ones_like", "full_like", "copy_",
                      "_to_copy", "clone", "normal_", "uniform_", "zeros", "ones", "full",
                      "arange", "masked_fill", "masked_fill_"}


class Tally:
    """Per-kind sums of FLOPs, bytes and kernels."""

    def __init__(self) -> None:
        self.flops: dict[str, float] = defaultdict(float)
        self.bytes: dict[str, float] = defaultdict(float)
        self.kernels: dict[str, int] = defaultdict(int)
        self.ops_dispatched = 0  # every aten op, launched or not: host work

    def add(self, kind: str, flops: float, nbytes: float, kernels: int) -> None:
        self.flops[kind] += flops
        self.bytes[kind] += nbytes
        self.kernels[kind] += kernels

    def op_costs(self) -> tuple[OpCost, ...]:
        return tuple(
            OpCost(kind, self.flops[kind], self.bytes[kind], self.kernels[kind])
            for kind in OP_KINDS
            if self.kernels[kind] or self.flops[kind] or self.bytes[kind]
        )


def _tensor_bytes(t: torch.Tensor) -> float:
    """Bytes a kernel touches in `t`: broadcast (stride-0) dimensions count once."""
    if t.dim() == 0:
        return float(t.element_size())
    elems = 1
    for size, stride in zip(t.shape, t.stride()):
        if stride != 0:
            elems *= size
    return float(elems * t.element_size())


def _tensors(obj: object) -> list[torch.Tensor]:
    flat, _ = tree_flatten(obj)
    return [x for x in flat if isinstance(x, torch.Tensor)]


def classify(name: str, func: object, phase: str) -> str:
    """The OpCost kind of an aten operator (base name, e.g. "addmm")."""
    if phase == "optimizer":
        return "optimizer"
    if name.startswith("_scaled_dot_product") or name.startswith(("_flash_attention", "_efficient_attention")):
        return "attention"
    if name in _ATTENTION:
        return "attention"
    if name in _MATMUL:
        return "matmul"
    if name in _EMBEDDING:
        return "embedding"
    tags = getattr(func, "tags", ())
    reduction_tag = getattr(torch.Tag, "reduction", None)
    if name in _REDUCTION or (reduction_tag is not None and reduction_tag in tags):
        return "reduction"
    if torch.Tag.pointwise in tags or name in _ELEMENTWISE_EXTRA or name.startswith("_foreach_"):
        return "elementwise"
    return "other"


def _flop_formula(func: torch._ops.OpOverload) -> Callable[..., int] | None:
    from torch.utils.flop_counter import flop_registry

    return flop_registry.get(func._overloadpacket)


class CountingMode(TorchDispatchMode):
    """Counts every aten operator dispatched under it into a Tally."""

    def __init__(self, tally: Tally, notes: list[str]) -> None:
        super().__init__()
        self.tally = tally
        self.notes = notes
        self.phase = "forward"
        self.assumed_scalars = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func._overloadpacket.__name__ if hasattr(func, "_overloadpacket") else str(func)
        if func is _aten._local_scalar_dense.default and args and args[0].is_meta:
            # A data-dependent branch (e.g. "is any position padded?"): meta tensors
            # have no values, so assume the common case (no padding) and say so.
            if args[0].dtype is torch.bool:
                self.assumed_scalars += 1
                return True
            raise DataDependent(f"{name} on a {args[0].dtype} meta tensor")
        out = func(*args, **kwargs)
        if func.namespace != "aten":
            return out  # profiler markers and the like
        self.tally.ops_dispatched += 1
        if getattr(func, "is_view", False) or name in _NO_KERNEL:
            return out
        ins, outs = _tensors((args, kwargs)), _tensors(out)
        if name == "embedding":
            # The lookup reads the rows it gathers, not the whole table.
            nbytes = sum(_tensor_bytes(t) for t in ins[1:]) + 2 * sum(_tensor_bytes(t) for t in outs)
        else:
            nbytes = sum(_tensor_bytes(t) for t in ins) + sum(_tensor_bytes(t) for t in outs)
        formula = _flop_formula(func)
        if formula is not None:
            flops = float(formula(*args, **kwargs, out_val=out))
        else:
            written = ins if name.startswith("_foreach_") else (outs or ins[:1])
            flops = float(sum(t.numel() for t in written))
        self.tally.add(classify(name, func, self.phase), flops, nbytes, 1)
        return out


class DataDependent(RuntimeError):
    """A meta capture needed a value that meta tensors do not have."""


class FusedAttention(TorchFunctionMode):
    """Routes scaled_dot_product_attention to the memory-efficient kernel CUDA uses.

    On meta (and CPU) tensors torch picks the unfused math path, which would count
    the L×L score matrix as DRAM traffic that the fused CUDA kernel never writes.
    """

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.nn.functional.scaled_dot_product_attention:
            return _efficient_sdpa(*args, **kwargs)
        return func(*args, **kwargs)


def _efficient_sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                    enable_gqa=False):
    if enable_gqa and key.shape[-3] != query.shape[-3]:
        reps = query.shape[-3] // key.shape[-3]
        key = key.repeat_interleave(reps, dim=-3)
        value = value.repeat_interleave(reps, dim=-3)
    if attn_mask is not None and attn_mask.dtype is torch.bool:
        bias = torch.zeros(attn_mask.shape, dtype=query.dtype, device=query.device)
        attn_mask = bias.masked_fill(attn_mask.logical_not(), float("-inf"))
    if attn_mask is not None:
        attn_mask = attn_mask.expand(query.shape[0], query.shape[1], query.shape[2], key.shape[2])
    if attn_mask is not None and is_causal:
        is_causal = False  # the mask already carries the causal structure
    need_grad = query.requires_grad or key.requires_grad or value.requires_grad
    out = torch.ops.aten._scaled_dot_product_efficient_attention(
        query, key, value, attn_mask, need_grad, dropout_p, is_causal, scale=scale
    )
    return out[0]


def _math_sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
               enable_gqa=False):
    """Unfused attention through bmm/softmax (classified as attention), for CPU fallback runs."""
    if enable_gqa and key.shape[-3] != query.shape[-3]:
        reps = query.shape[-3] // key.shape[-3]
        key = key.repeat_interleave(reps, dim=-3)
        value = value.repeat_interleave(reps, dim=-3)
    scale = scale if scale is not None else 1.0 / math.sqrt(query.shape[-1])
    scores = torch.matmul(query, key.transpose(-2, -1)) * scale
    if is_causal:
        L, S = query.shape[-2], key.shape[-2]
        causal = torch.ones(L, S, dtype=torch.bool, device=query.device).tril()
        scores = scores.masked_fill(causal.logical_not(), float("-inf"))
    if attn_mask is not None:
        scores = scores.masked_fill(attn_mask.logical_not(), float("-inf")) if attn_mask.dtype is torch.bool \
            else scores + attn_mask
    probs = torch.softmax(scores, dim=-1)
    if dropout_p:
        probs = torch.nn.functional.dropout(probs, dropout_p)
    return torch.matmul(probs, value)


class MathAttention(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.nn.functional.scaled_dot_product_attention:
            return _math_sdpa(*args, **kwargs)
        return func(*args, **kwargs)



def apply_precision(tally: Tally, precision: Precision, model: torch.nn.Module, notes: list[str]) -> None:
    """Autocast in 16 bits, applied to an fp32 capture (an estimate).

    Activations and their gradients move in 16 bits (half the bytes of the forward and
    backward passes); fp32 weights are cast once per step for the matmuls and their
    gradients cast back (6 + 6 bytes per weight element, one kernel each way per weight
    tensor; autocast casts Linear weights, not embeddings); fp16 adds GradScaler's unscale
    and inf check (read + write every gradient).
    """
    if precision == "fp32":
        return
    for kind in OP_KINDS:
        if kind != "optimizer":
            tally.bytes[kind] *= 0.5
    weights = [m.weight for m in model.modules() if isinstance(m, torch.nn.Linear)]
    elems = sum(p.numel() for p in weights)
    tally.add("elementwise", 2.0 * elems, 12.0 * elems, 2 * len(weights))
    if precision == "fp16":
        grads = [p for p in model.parameters() if p.requires_grad]
        g_elems = sum(p.numel() for p in grads)
        tally.add("optimizer", 2.0 * g_elems, 8.0 * g_elems, 3)
    notes.append(f"{precision}: applied analytically to an fp32 capture (halved activation bytes, "
                 "weight casts" + (", GradScaler" if precision == "fp16" else "") + ")")


def host_cycles(tally: Tally, batch_size: int) -> float:
    return float(HOST_CYCLES_PER_OP * tally.ops_dispatched + HOST_CYCLES_PER_SAMPLE * batch_size
                 + HOST_CYCLES_PER_STEP)

