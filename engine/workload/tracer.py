"""Capture what one training step costs: FLOPs, bytes, kernels and host work.

A trace is taken once per (model, batch size, sequence length, precision, mode) and
cached as JSON under `cache_dir()/traces/`. Capture runs the step on *meta* tensors
(shapes only, no data, no arithmetic), so even a model that would not fit on this
host is traced in about a second: forward, backward, gradient clipping and an AdamW
step, each aten operator counted as it is dispatched.

How each operator is costed (documented estimates, not measurements):
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
  `_apply_precision`): autocast keeps fp32 weights and casts them per step.
- host_cycles: an estimate of the CPU work of a step (framework dispatch per aten
  operator, per-sample data handling, the Python loop), from the constants below.

Where meta tensors fail (a model that branches on data), the tracer runs one real
step on a tiny batch on the CPU and scales it to the requested batch size, and says
so in the record's notes.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import inspect
import json
import logging
import math
import os
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten

from engine.core.constants import PRECISIONS
from engine.core.errors import ConfigError
from engine.core.paths import cache_dir
from engine.core.trace import OP_KINDS, OpCost, StepTrace

log = logging.getLogger(__name__)

# Bump when the costing rules change: cached traces of older rules are ignored.
TRACER_VERSION = 1

# Host work estimates, in CPU cycles of an Orin Cortex-A78AE core (about 2.2 GHz).
# Eager PyTorch spends roughly 5-10 us of Python and dispatcher work per operator
# it launches; collating a pre-tokenised, fixed-length sample is a copy of a few
# hundred integers; the loop itself (callbacks, scheduler, bookkeeping) is a
# fixed cost per step. These are estimates, to be replaced by measurements.
HOST_CYCLES_PER_OP = 15_000
HOST_CYCLES_PER_SAMPLE = 40_000
HOST_CYCLES_PER_STEP = 2_000_000

MAX_GRAD_NORM = 1.0  # the trainer's clipping, traced as part of the optimizer phase

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



@dataclass(frozen=True)
class TraceRecord:
    """A step trace with how it was obtained."""

    trace: StepTrace
    method: str  # "meta" | "real-step-scaled"
    notes: tuple[str, ...]
    cached: bool  # read from the cache rather than captured now
    path: Path | None = None  # the cache file, when cached or saved

    def to_json(self) -> dict[str, Any]:
        return {
            "trace": self.trace.to_json(),
            "method": self.method,
            "notes": list(self.notes),
            "tracer_version": TRACER_VERSION,
            "torch": torch.__version__,
        }


class _Tally:
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


def _tensors(obj: Any) -> list[torch.Tensor]:
    flat, _ = tree_flatten(obj)
    return [x for x in flat if isinstance(x, torch.Tensor)]


def classify(name: str, func: Any, phase: str) -> str:
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


def _flop_formula(func: Any) -> Callable[..., int] | None:
    from torch.utils.flop_counter import flop_registry

    return flop_registry.get(func._overloadpacket)


class _CountingMode(TorchDispatchMode):
    """Counts every aten operator dispatched under it into a _Tally."""

    def __init__(self, tally: _Tally, notes: list[str]) -> None:
        super().__init__()
        self.tally = tally
        self.notes = notes
        self.phase = "forward"
        self.assumed_scalars = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[override]
        kwargs = kwargs or {}
        name = func._overloadpacket.__name__ if hasattr(func, "_overloadpacket") else str(func)
        if func is _aten._local_scalar_dense.default and args and args[0].is_meta:
            # A data-dependent branch (e.g. "is any position padded?"): meta tensors
            # have no values, so assume the common case (no padding) and say so.
            if args[0].dtype is torch.bool:
                self.assumed_scalars += 1
                return True
            raise _DataDependent(f"{name} on a {args[0].dtype} meta tensor")
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


class _DataDependent(RuntimeError):
    """A meta capture needed a value that meta tensors do not have."""


class _FusedAttention(TorchFunctionMode):
    """Routes scaled_dot_product_attention to the memory-efficient kernel CUDA uses.

    On meta (and CPU) tensors torch picks the unfused math path, which would count
    the L×L score matrix as DRAM traffic that the fused CUDA kernel never writes.
    """

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[override]
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


class _MathAttention(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[override]
        kwargs = kwargs or {}
        if func is torch.nn.functional.scaled_dot_product_attention:
            return _math_sdpa(*args, **kwargs)
        return func(*args, **kwargs)


# ---------------------------------------------------------------- model inputs

def _forward_params(model: torch.nn.Module) -> set[str]:
    try:
        return {p for p in inspect.signature(model.forward).parameters}
    except (TypeError, ValueError):
        return set()


def default_batch(model: torch.nn.Module, batch_size: int, seq_len: int,
                  device: torch.device | str) -> dict[str, torch.Tensor]:
    """Inputs of one classification batch for a transformers-style model."""
    config = getattr(model, "config", None)
    if config is None:
        raise ConfigError(
            f"cannot tell what inputs {type(model).__name__} takes",
            "pass make_batch=... to the tracer, or use a transformers model with a config",
        )
    params = _forward_params(model)
    ids = torch.zeros(batch_size, seq_len, dtype=torch.long, device=device)
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    if "token_type_ids" in params and getattr(config, "type_vocab_size", 0):
        batch["token_type_ids"] = torch.zeros_like(ids)
    num_labels = int(getattr(config, "num_labels", 2))
    if num_labels == 1 or getattr(config, "problem_type", None) == "regression":
        batch["labels"] = torch.zeros(batch_size, dtype=torch.float32, device=device)
    else:
        batch["labels"] = torch.zeros(batch_size, dtype=torch.long, device=device)
    return batch


def _loss_of(output: Any) -> torch.Tensor:
    if isinstance(output, torch.Tensor):
        return output
    if isinstance(output, Mapping) and "loss" in output:
        return output["loss"]
    loss = getattr(output, "loss", None)
    if loss is None and isinstance(output, (tuple, list)) and output:
        loss = output[0]
    if not isinstance(loss, torch.Tensor):
        raise ConfigError("the model returned no loss", "give the batch a 'labels' entry")
    return loss


def _meta_copy(model: torch.nn.Module) -> torch.nn.Module:
    """A copy of `model` whose parameters and buffers live on meta: no data is copied."""
    memo: dict[int, Any] = {}
    for p in model.parameters():
        memo[id(p)] = torch.nn.Parameter(torch.empty_like(p, device="meta"), requires_grad=p.requires_grad)
    for b in model.buffers():
        memo[id(b)] = torch.empty_like(b, device="meta")
    return copy.deepcopy(model, memo)


def _host_copy(model: torch.nn.Module) -> torch.nn.Module:
    clone = copy.deepcopy(model).to("cpu")
    return clone


# ---------------------------------------------------------------- capture

def _run_step(model: torch.nn.Module, batch: Mapping[str, torch.Tensor], mode: _CountingMode) -> None:
    """Forward, backward, clipping and two AdamW steps; the first (state set-up) is not counted."""
    trainable = [p for p in model.parameters() if p.requires_grad]
    if not trainable:
        raise ConfigError("the model has no trainable parameters", "train in mode 'full' or 'bitfit'")
    model.train()
    keys = _forward_params(model)
    inputs = {k: v for k, v in batch.items() if not keys or k in keys}
    # AdamW as eager CUDA runs it by default (foreach); the first step allocates state.
    opt = torch.optim.AdamW(trainable, lr=1e-3, weight_decay=0.01, foreach=True)
    for p in trainable:
        p.grad = torch.zeros_like(p)
    opt.step()
    for p in trainable:
        p.grad = None
    with mode:
        mode.phase = "forward"
        loss = _loss_of(model(**inputs))
        mode.phase = "backward"
        loss.backward()
        mode.phase = "optimizer"
        _clip_foreach([p.grad for p in trainable if p.grad is not None], MAX_GRAD_NORM)
        opt.step()
        opt.zero_grad(set_to_none=True)


def _clip_foreach(grads: list[torch.Tensor], max_norm: float) -> None:
    """clip_grad_norm_ as it runs on CUDA (foreach kernels); torch refuses foreach on meta."""
    norms = torch._foreach_norm(grads, 2.0)
    total = torch.linalg.vector_norm(torch.stack(norms), 2.0)
    coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    torch._foreach_mul_(grads, coef)


def _capture_meta(model: torch.nn.Module, batch_size: int, seq_len: int,
                  make_batch: Callable[..., Mapping[str, torch.Tensor]], notes: list[str]) -> _Tally:
    meta_model = _meta_copy(model)
    batch = make_batch(meta_model, batch_size, seq_len, "meta")
    tally = _Tally()
    mode = _CountingMode(tally, notes)
    with _FusedAttention():
        _run_step(meta_model, batch, mode)
    if mode.assumed_scalars:
        notes.append(f"meta capture: {mode.assumed_scalars} data-dependent check(s) assumed true "
                     "(e.g. 'no padding in the batch')")
    return tally


def _capture_real_scaled(model: torch.nn.Module, batch_size: int, seq_len: int,
                         make_batch: Callable[..., Mapping[str, torch.Tensor]], notes: list[str]) -> _Tally:
    """One real CPU step on a one-sample batch, forward/backward scaled to `batch_size`.

    Per-sample work scales linearly with the batch (attention is quadratic in the
    sequence, which is kept); kernel counts and the optimizer do not depend on it.
    """
    small = 1
    host = _host_copy(model)
    batch = make_batch(host, small, seq_len, "cpu")
    tally = _Tally()
    mode = _CountingMode(tally, notes)
    with _MathAttention():
        _run_step(host, batch, mode)
    factor = batch_size / small
    for kind in OP_KINDS:
        if kind != "optimizer":
            tally.flops[kind] *= factor
            tally.bytes[kind] *= factor
    notes.append(f"fallback: one real CPU step at batch {small}, scaled x{factor:g} to batch {batch_size}")
    return tally


def _apply_precision(tally: _Tally, precision: str, model: torch.nn.Module, notes: list[str]) -> None:
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


def _host_cycles(tally: _Tally, batch_size: int) -> float:
    return float(HOST_CYCLES_PER_OP * tally.ops_dispatched + HOST_CYCLES_PER_SAMPLE * batch_size
                 + HOST_CYCLES_PER_STEP)


def capture_step_trace(
    model: torch.nn.Module,
    *,
    name: str,
    batch_size: int,
    seq_len: int,
    precision: str = "fp32",
    make_batch: Callable[..., Mapping[str, torch.Tensor]] | None = None,
    force_fallback: bool = False,
) -> TraceRecord:
    """Trace one training step of `model` (its current requires_grad flags decide what trains).

    `make_batch(model, batch_size, seq_len, device)` builds the inputs (labels included);
    the default builds a sequence-classification batch from the model's config.
    """
    _check_shape(batch_size, seq_len, precision)
    make_batch = make_batch or default_batch
    notes: list[str] = []
    method = "meta"
    tally: _Tally | None = None
    if not force_fallback:
        try:
            tally = _capture_meta(model, batch_size, seq_len, make_batch, notes)
        except ConfigError:
            raise
        except Exception as exc:  # noqa: BLE001 - any failure of meta execution
            notes.append(f"meta capture failed ({type(exc).__name__}: {exc}); using a real step")
            log.info("trace of %s: meta capture failed (%s); falling back to a real step", name, exc)
    if tally is None:
        method = "real-step-scaled"
        tally = _capture_real_scaled(model, batch_size, seq_len, make_batch, notes)
    _apply_precision(tally, precision, model, notes)
    notes.append("host_cycles is an estimate: "
                 f"{HOST_CYCLES_PER_OP} cycles x {tally.ops_dispatched} ops dispatched + "
                 f"{HOST_CYCLES_PER_SAMPLE} per sample + {HOST_CYCLES_PER_STEP} per step")
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    trace = StepTrace(
        model=name,
        batch_size=batch_size,
        seq_len=seq_len,
        precision=precision,
        ops=tally.op_costs(),
        host_cycles=_host_cycles(tally, batch_size),
        params=trainable,
    )
    for note in notes:
        log.debug("trace %s b=%d L=%d: %s", name, batch_size, seq_len, note)
    return TraceRecord(trace=trace, method=method, notes=tuple(notes), cached=False)


def _check_shape(batch_size: int, seq_len: int, precision: str) -> None:
    if batch_size < 1 or seq_len < 1:
        raise ConfigError(f"cannot trace batch {batch_size} x length {seq_len}",
                          "use a batch size and sequence length of at least 1")
    if precision not in PRECISIONS:
        raise ConfigError(f"unknown precision {precision!r}", f"use one of {', '.join(PRECISIONS)}")


# ---------------------------------------------------------------- cache

def model_fingerprint(model: torch.nn.Module) -> str:
    """A short hash of the architecture and of what trains: same fingerprint, same trace."""
    h = hashlib.sha256()
    h.update(type(model).__qualname__.encode())
    config = getattr(model, "config", None)
    attn = getattr(config, "_attn_implementation", None) if config is not None else None
    h.update(str(attn).encode())
    for pname, p in model.named_parameters():
        h.update(f"{pname}:{tuple(p.shape)}:{p.dtype}:{int(p.requires_grad)};".encode())
    h.update(f"v{TRACER_VERSION}".encode())
    return h.hexdigest()[:12]


def trace_path(name: str, batch_size: int, seq_len: int, precision: str, fingerprint: str,
               root: Path | None = None) -> Path:
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_") or "model"
    base = (root or cache_dir()) / "traces"
    return base / f"{safe}-b{batch_size}-l{seq_len}-{precision}-{fingerprint}.json"


def step_trace(
    model: torch.nn.Module,
    *,
    name: str,
    batch_size: int,
    seq_len: int,
    precision: str = "fp32",
    make_batch: Callable[..., Mapping[str, torch.Tensor]] | None = None,
    use_cache: bool = True,
    cache_root: Path | None = None,
) -> TraceRecord:
    """The trace of one training step, from the cache or captured now and cached."""
    _check_shape(batch_size, seq_len, precision)
    path = trace_path(name, batch_size, seq_len, precision, model_fingerprint(model), cache_root)
    if use_cache and path.is_file():
        try:
            data = json.loads(path.read_text())
            if int(data.get("tracer_version", -1)) == TRACER_VERSION:
                return TraceRecord(StepTrace.from_json(data["trace"]), str(data["method"]),
                                   tuple(data.get("notes", ())), cached=True, path=path)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("ignoring unreadable cached trace %s (%s); capturing again", path, exc)
    record = capture_step_trace(model, name=name, batch_size=batch_size, seq_len=seq_len,
                                precision=precision, make_batch=make_batch)
    if use_cache:
        with contextlib.suppress(OSError):  # the cache is an optimisation: never fail a run on it
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".tmp{os.getpid()}")
            tmp.write_text(json.dumps(record.to_json(), indent=1))
            tmp.replace(path)
            record = TraceRecord(record.trace, record.method, record.notes, cached=False, path=path)
    return record
