"""Capture what one training step costs: FLOPs, bytes, kernels and host work.

A trace is taken once per (model, batch size, sequence length, precision, mode: what
trains, LoRA adapters and gradient checkpointing included) and
cached as JSON under `cache_dir()/traces/`. Capture runs the step on *meta* tensors
(shapes only, no data, no arithmetic), so even a model that would not fit on this
host is traced in about a second: forward, backward, gradient clipping and an AdamW
step, each aten operator counted as it is dispatched. How each operator is costed:
`op_costs.py`.

Where meta tensors fail (a model that branches on data), the tracer runs one real
step on a tiny batch on the CPU and scales it to the requested batch size, and says
so in the record's notes.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import hashlib
import inspect
import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

import torch

from engine.core.cachefile import store_cache_json
from engine.core.constants import Precision
from engine.core.errors import ConfigError
from engine.core.jsontypes import JsonObject
from engine.core.paths import cache_dir
from engine.core.trace import OP_KINDS, StepTrace
from engine.workload.lora import is_peft_model
from engine.workload.training.optim import is_checkpointing
from engine.workload.trace.trace_cache import TRACER_VERSION
from engine.workload.trace.op_costs import (
    HOST_CYCLES_PER_OP,
    HOST_CYCLES_PER_SAMPLE,
    HOST_CYCLES_PER_STEP,
    CountingMode,
    FusedAttention,
    MathAttention,
    Tally,
    apply_precision,
    host_cycles,
)

log = logging.getLogger(__name__)

MAX_GRAD_NORM = 1.0  # the trainer's clipping, traced as part of the optimizer phase


@dataclass(frozen=True)
class TraceRecord:
    """A step trace with how it was obtained."""

    trace: StepTrace
    method: str  # "meta" | "real-step-scaled"
    notes: tuple[str, ...]
    cached: bool  # read from the cache rather than captured now
    path: Path | None = None  # the cache file, when cached or saved

    def to_json(self) -> JsonObject:
        return {
            "trace": self.trace.to_json(),
            "method": self.method,
            "notes": list(self.notes),
            "tracer_version": TRACER_VERSION,
            "torch": torch.__version__,
        }


# ---------------------------------------------------------------- model inputs

def _forward_params(model: torch.nn.Module) -> set[str]:
    if is_peft_model(model):  # a peft wrapper passes its base model's inputs on
        model = model.get_base_model()
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
    if "token_type_ids" in params and getattr(config, "type_vocab_size", None):
        batch["token_type_ids"] = torch.zeros_like(ids)
    num_labels = int(getattr(config, "num_labels", 2))
    if num_labels == 1 or getattr(config, "problem_type", None) == "regression":
        batch["labels"] = torch.zeros(batch_size, dtype=torch.float32, device=device)
    else:
        batch["labels"] = torch.zeros(batch_size, dtype=torch.long, device=device)
    return batch


def _loss_of(output: object) -> torch.Tensor:
    if isinstance(output, torch.Tensor):
        return output
    loss = output["loss"] if isinstance(output, Mapping) and "loss" in output else getattr(output, "loss", None)
    if loss is None and isinstance(output, (tuple, list)) and output:
        loss = output[0]
    if not isinstance(loss, torch.Tensor):
        raise ConfigError("the model returned no loss", "give the batch a 'labels' entry")
    return loss


def _meta_copy(model: torch.nn.Module) -> torch.nn.Module:
    """A copy of `model` whose parameters and buffers live on meta: no data is copied."""
    memo: dict[int, object] = {}
    for p in model.parameters():
        memo[id(p)] = torch.nn.Parameter(torch.empty_like(p, device="meta"), requires_grad=p.requires_grad)
    for b in model.buffers():
        memo[id(b)] = torch.empty_like(b, device="meta")
    return copy.deepcopy(model, memo)


def _host_copy(model: torch.nn.Module) -> torch.nn.Module:
    clone = copy.deepcopy(model).to("cpu")
    return clone


# ---------------------------------------------------------------- capture

def _run_step(model: torch.nn.Module, batch: Mapping[str, torch.Tensor], mode: CountingMode) -> None:
    """Forward, backward, clipping and two AdamW steps; the first (state set-up) is not counted."""
    trainable = [p for p in model.parameters() if p.requires_grad]
    if not trainable:
        raise ConfigError("the model has no trainable parameters", "train in mode 'full', 'lora' or 'head'")
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
                  make_batch: Callable[..., Mapping[str, torch.Tensor]], notes: list[str]) -> Tally:
    meta_model = _meta_copy(model)
    _recompute_under(meta_model, FusedAttention)
    batch = make_batch(meta_model, batch_size, seq_len, "meta")
    tally = Tally()
    mode = CountingMode(tally, notes)
    with FusedAttention():
        _run_step(meta_model, batch, mode)
    if mode.assumed_scalars:
        notes.append(f"meta capture: {mode.assumed_scalars} data-dependent check(s) assumed true "
                     "(e.g. 'no padding in the batch')")
    return tally


def _recompute_under(model: torch.nn.Module, attention: type) -> None:
    """Gradient checkpointing recomputes each layer's forward inside the backward pass, where
    the autograd engine does not carry torch-function modes: give the recompute the capture's
    attention routing too, so it replays the operators the forward ran (and they are counted:
    the recompute is the cost of checkpointing)."""
    if not is_checkpointing(model):
        return
    from torch.utils.checkpoint import checkpoint

    func = functools.partial(checkpoint, use_reentrant=False,
                             context_fn=lambda: (contextlib.nullcontext(), attention()))
    for module in model.modules():
        if getattr(module, "gradient_checkpointing", False) is True:
            # transformers' hook for the checkpoint function, an attribute Module does not declare
            setattr(module, "_gradient_checkpointing_func", func)


def _capture_real_scaled(model: torch.nn.Module, batch_size: int, seq_len: int,
                         make_batch: Callable[..., Mapping[str, torch.Tensor]], notes: list[str]) -> Tally:
    """One real CPU step on a one-sample batch, forward/backward scaled to `batch_size`.

    Per-sample work scales linearly with the batch (attention is quadratic in the
    sequence, which is kept); kernel counts and the optimizer do not depend on it.
    """
    small = 1
    host = _host_copy(model)
    _recompute_under(host, MathAttention)
    batch = make_batch(host, small, seq_len, "cpu")
    tally = Tally()
    mode = CountingMode(tally, notes)
    with MathAttention():
        _run_step(host, batch, mode)
    factor = batch_size / small
    for kind in OP_KINDS:
        if kind != "optimizer":
            tally.flops[kind] *= factor
            tally.bytes[kind] *= factor
    notes.append(f"fallback: one real CPU step at batch {small}, scaled x{factor:g} to batch {batch_size}")
    return tally



def capture_step_trace(
    model: torch.nn.Module,
    *,
    name: str,
    batch_size: int,
    seq_len: int,
    precision: Precision = "fp32",
    make_batch: Callable[..., Mapping[str, torch.Tensor]] | None = None,
    force_fallback: bool = False,
) -> TraceRecord:
    """Trace one training step of `model` (its current requires_grad flags decide what trains).

    `make_batch(model, batch_size, seq_len, device)` builds the inputs (labels included);
    the default builds a sequence-classification batch from the model's config.
    """
    _check_shape(batch_size, seq_len)
    make_batch = make_batch or default_batch
    notes: list[str] = []
    method = "meta"
    tally: Tally | None = None
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
    apply_precision(tally, precision, model, notes)
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
        host_cycles=host_cycles(tally, batch_size),
        params=trainable,
    )
    for note in notes:
        log.debug("trace %s b=%d L=%d: %s", name, batch_size, seq_len, note)
    return TraceRecord(trace=trace, method=method, notes=tuple(notes), cached=False)


def _check_shape(batch_size: int, seq_len: int) -> None:
    if batch_size < 1 or seq_len < 1:
        raise ConfigError(f"cannot trace batch {batch_size} x length {seq_len}",
                          "use a batch size and sequence length of at least 1")


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
    # only when used, so that the traces of models without them keep their fingerprints
    if is_checkpointing(model):
        h.update(b"checkpointing;")
    if is_peft_model(model):  # LoRA's dropout adds operators its shapes do not show
        for adapter, cfg in sorted(model.peft_config.items()):
            h.update(f"lora:{adapter}:{getattr(cfg, 'lora_dropout', None)};".encode())
    h.update(f"v{TRACER_VERSION}".encode())
    return h.hexdigest()[:12]


def trace_path(name: str, batch_size: int, seq_len: int, precision: Precision, fingerprint: str,
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
    precision: Precision = "fp32",
    make_batch: Callable[..., Mapping[str, torch.Tensor]] | None = None,
    use_cache: bool = True,
    cache_root: Path | None = None,
) -> TraceRecord:
    """The trace of one training step, from the cache or captured now and cached."""
    _check_shape(batch_size, seq_len)
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
    # the cache is an optimisation: never fail a run on it
    if use_cache and store_cache_json(path, record.to_json(), "step trace", indent=1):
        record = TraceRecord(record.trace, record.method, record.notes, cached=False, path=path)
    return record
