"""The fine-tuning loop: AdamW, linear warm-up schedule, clipping, mixed precision,
deterministic data order, evaluation, checkpoints that resume bit-for-bit, and events.

Kept lean on purpose: it is also what the energy is measured on, so it avoids
needless host-device syncs (one `.tolist()` per step for the loss and gradient norm),
sets gradients to None, and indexes pre-stacked fixed-length tensors instead of
collating sample by sample.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import math
import random
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np
import torch

from engine.core.constants import MODES, PRECISIONS
from engine.core.errors import ConfigError
from engine.workload.events import (
    Callback,
    Checkpointed,
    EvalResult,
    Event,
    Paused,
    Resumed,
    RunCancelled,
    RunFinished,
    RunStarted,
    StepBegin,
    StepEnd,
    TwinCost,
)
from engine.core.trace import StepTrace

log = logging.getLogger(__name__)

# Modules that form the task head: trained in BitFit as well (transformers' names).
HEAD_NAMES = ("classifier", "score", "pre_classifier", "qa_outputs", "head")
CHECKPOINT_FILE = "state.pt"
LATEST_FILE = "latest"
# A fixed-length training set smaller than this moves to the accelerator once.
_DEVICE_RESIDENT_BYTES = 512 * 2**20


@dataclass(frozen=True)
class TrainConfig:
    """How to train. Exactly one of `steps` and `epochs` (neither: one epoch)."""

    steps: int | None = None
    epochs: float | None = None
    batch_size: int = 32
    learning_rate: float = 5e-5
    weight_decay: float = 0.01
    warmup_ratio: float = 0.06
    max_grad_norm: float = 1.0
    precision: str = "fp32"  # requested; fp16/bf16 need CUDA, else fp32 with a warning
    mode: str = "full"  # "full" | "bitfit"
    seed: int = 0
    eval_every: int = 0  # also evaluate every N steps; 0: only at the end
    eval_batch_size: int | None = None  # None: twice the training batch
    checkpoint_every: int = 0  # 0: no periodic checkpoints
    checkpoint_dir: str | None = None
    keep_checkpoints: int = 2
    device: str | None = None  # None: CUDA when available, else CPU

    def validate(self) -> None:
        if self.steps is not None and self.epochs is not None:
            raise ConfigError("both steps and epochs were given", "give one of --steps and --epochs")
        if self.steps is not None and self.steps < 1:
            raise ConfigError(f"steps must be at least 1, not {self.steps}", "give --steps 1 or more")
        if self.epochs is not None and not self.epochs > 0:
            raise ConfigError(f"epochs must be positive, not {self.epochs}", "give --epochs above 0")
        if self.batch_size < 1:
            raise ConfigError(f"batch size must be at least 1, not {self.batch_size}", "give --batch-size 1 or more")
        if self.precision not in PRECISIONS:
            raise ConfigError(f"unknown precision {self.precision!r}", f"use one of {', '.join(PRECISIONS)}")
        if self.mode not in MODES:
            raise ConfigError(f"unknown training mode {self.mode!r}", f"use one of {', '.join(MODES)}")
        if self.eval_every < 0 or self.checkpoint_every < 0:
            raise ConfigError("eval/checkpoint intervals cannot be negative", "give 0 (off) or a step count")
        if self.checkpoint_every and not self.checkpoint_dir:
            raise ConfigError("checkpoints were asked for without a folder", "add --checkpoint-dir DIR")
        if not self.learning_rate > 0:
            raise ConfigError(f"learning rate must be positive, not {self.learning_rate}", "give e.g. 5e-5")


@dataclass(frozen=True)
class TrainOutcome:
    steps: int  # completed, including those before a resume
    samples: int
    tokens: int
    wall_s: float  # host time, measured, pauses excluded, evaluation included
    train_wall_s: float  # host time of the training steps alone
    losses: tuple[float, ...]  # one per step, from step 1
    eval: Mapping[str, Mapping[str, float]]  # split -> metrics of the last evaluation
    precision: str  # actually used
    device: str
    trainable_params: int
    total_params: int
    cancelled: bool = False
    twin: TwinCost | None = None
    start_step: int = 0  # where this invocation began (resume)

    @property
    def final_loss(self) -> float | None:
        return self.losses[-1] if self.losses else None

    @property
    def samples_per_s(self) -> float:
        return self.samples / self.train_wall_s if self.train_wall_s > 0 else 0.0


class TrainControl:
    """Pause, resume and cancel a run from another thread; honoured at step boundaries."""

    def __init__(self) -> None:
        self._running = threading.Event()
        self._running.set()
        self._cancelled = threading.Event()
        self.reason = ""

    def pause(self) -> None:
        self._running.clear()

    def resume(self) -> None:
        self._running.set()

    def cancel(self, reason: str = "cancelled") -> None:
        self.reason = reason
        self._cancelled.set()
        self._running.set()  # a paused loop must wake up to see the cancel

    @property
    def paused(self) -> bool:
        return not self._running.is_set()

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def wait_until_running(self, poll_s: float = 0.2) -> None:
        while not self._running.wait(poll_s):
            pass


# ---------------------------------------------------------------- parameters

def apply_mode(model: torch.nn.Module, mode: str) -> int:
    """Set requires_grad for `mode`; returns the number of trainable parameters.

    BitFit trains the bias terms only, plus the task head (standard practice: a
    freshly initialised head must learn).
    """
    if mode not in MODES:
        raise ConfigError(f"unknown training mode {mode!r}", f"use one of {', '.join(MODES)}")
    head_found = False
    for name, param in model.named_parameters():
        if mode == "full":
            param.requires_grad_(True)
            continue
        in_head = name.split(".")[0] in HEAD_NAMES
        head_found |= in_head
        param.requires_grad_(in_head or name.endswith("bias"))
    if mode == "bitfit" and not head_found:
        raise ConfigError(
            f"BitFit found no task head in {type(model).__name__}",
            f"name the head module one of {', '.join(HEAD_NAMES)}, or train in mode 'full'",
        )
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def _no_decay(model: torch.nn.Module) -> set[int]:
    """Biases and normalisation weights take no weight decay."""
    skip: set[int] = set()
    for module in model.modules():
        is_norm = isinstance(module, (torch.nn.LayerNorm, torch.nn.GroupNorm)) or \
            "LayerNorm" in type(module).__name__ or "RMSNorm" in type(module).__name__
        for pname, param in module.named_parameters(recurse=False):
            if is_norm or pname == "bias":
                skip.add(id(param))
    return skip


def build_optimizer(model: torch.nn.Module, config: TrainConfig, device: torch.device) -> torch.optim.Optimizer:
    skip = _no_decay(model)
    trainable = [p for p in model.parameters() if p.requires_grad]
    if not trainable:
        raise ConfigError("the model has no trainable parameters", "train in mode 'full' or 'bitfit'")
    groups = [
        {"params": [p for p in trainable if id(p) not in skip], "weight_decay": config.weight_decay},
        {"params": [p for p in trainable if id(p) in skip], "weight_decay": 0.0},
    ]
    groups = [g for g in groups if g["params"]]
    if device.type == "cpu":
        # The fused CPU kernel (torch >= 2.4) is several times faster than the loop.
        with contextlib.suppress(RuntimeError, TypeError, ValueError):
            return torch.optim.AdamW(groups, lr=config.learning_rate, fused=True)
    # On CUDA keep torch's default (foreach): it is what the step tracer models.
    return torch.optim.AdamW(groups, lr=config.learning_rate)


class LinearWarmup:
    """Linear warm-up to the peak rate, then linear decay to zero (transformers' schedule).

    A class rather than a closure so that the scheduler's state is picklable.
    """

    def __init__(self, warmup_steps: int, total_steps: int) -> None:
        self.warmup_steps = warmup_steps
        self.total_steps = total_steps

    def __call__(self, step: int) -> float:
        if step < self.warmup_steps:
            return step / max(1, self.warmup_steps)
        return max(0.0, (self.total_steps - step) / max(1, self.total_steps - self.warmup_steps))


def resolve_device(requested: str | None) -> torch.device:
    """The torch device to train on: `requested` (e.g. "cpu", "cuda", "cuda:1") once checked
    to exist on this host, else CUDA when available, else the CPU."""
    if not requested:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(requested)
    except (RuntimeError, ValueError, TypeError):
        raise ConfigError(f"--device {requested!r} is not a torch device",
                          f"use cpu, or cuda (cuda:N for one GPU){_cuda_hint()}") from None
    if device.type == "cpu":
        return device
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ConfigError(f"--device {requested} asks for CUDA, but this PyTorch sees no CUDA GPU",
                              "use --device cpu (or leave --device out), or install a CUDA build of PyTorch "
                              "(on a Jetson: NVIDIA's JetPack wheel)")
        if device.index is not None and device.index >= count:
            raise ConfigError(f"--device {requested}: this host has {count} CUDA GPU(s)",
                              f"use cuda:0 to cuda:{count - 1}, or leave --device out")
        return device
    backend = getattr(torch, device.type, None)
    if device.type == "mps":
        backend = getattr(torch.backends, "mps", None)
    available = getattr(backend, "is_available", None)
    if not (callable(available) and available()):
        raise ConfigError(f"--device {requested}: no {device.type} device is available on this host",
                          f"use --device cpu (or leave --device out){_cuda_hint()}")
    return device


def _cuda_hint() -> str:
    return "; CUDA is available here" if torch.cuda.is_available() else ""


def resolve_precision(requested: str, device: torch.device) -> str:
    """The precision a run on `device` can use: 16-bit autocast needs CUDA."""
    if requested == "fp32":
        return "fp32"
    if device.type != "cuda":
        log.warning("%s needs CUDA; training in fp32 on %s instead", requested, device)
        return "fp32"
    if requested == "bf16" and not torch.cuda.is_bf16_supported():
        log.warning("this GPU has no bf16; training in fp16 instead")
        return "fp16"
    return requested


# ---------------------------------------------------------------- data

def _stack(dataset: Any) -> dict[str, torch.Tensor] | None:
    """All samples as one tensor per field when every sample has the same shape."""
    if isinstance(dataset, Mapping):
        return {k: torch.as_tensor(v) for k, v in dataset.items()}
    features, labels = getattr(dataset, "features", None), getattr(dataset, "labels", None)
    if isinstance(features, Mapping) and isinstance(labels, torch.Tensor):  # data.EncodedSplit
        if not all(isinstance(v, torch.Tensor) for v in features.values()):
            return None  # dynamic padding: one tensor per sample
        return {**features, "labels": labels}
    if hasattr(dataset, "column_names") and hasattr(dataset, "with_format"):  # datasets.Dataset
        columns = dataset.with_format("torch")[:]
        if all(isinstance(v, torch.Tensor) for v in columns.values()):
            return dict(columns)
        return None
    items = [dataset[i] for i in range(len(dataset))]
    if not items:
        return None
    keys = list(items[0].keys())
    try:
        return {k: torch.stack([torch.as_tensor(item[k]) for item in items]) for k in keys}
    except (RuntimeError, KeyError):
        return None  # ragged (dynamic padding): collate batch by batch


def _length(dataset: Any) -> int:
    if isinstance(dataset, Mapping):
        return len(next(iter(dataset.values())))
    return len(dataset)


class BatchSource:
    """Batches in a seeded order that depends on nothing but the seed and the epoch."""

    def __init__(self, dataset: Any, batch_size: int, device: torch.device, seed: int,
                 collate: Callable[[list[Any]], Mapping[str, torch.Tensor]] | None = None,
                 shuffle: bool = True) -> None:
        self.size = _length(dataset)
        if self.size == 0:
            raise ConfigError("the training set is empty", "give more --train-samples or check the data")
        self.batch_size = batch_size
        self.device = device
        self.seed = seed
        self.shuffle = shuffle
        self.dataset = dataset
        self.collate = collate
        self.stacked = _stack(dataset)  # None when samples differ in length: collate per batch
        if self.stacked is None and collate is None:
            raise ConfigError("samples have different shapes and no collate function was given",
                              "pad to a fixed length, or pass the data's collate function")
        self._resident = False
        if self.stacked is not None:
            nbytes = sum(t.numel() * t.element_size() for t in self.stacked.values())
            if device.type != "cpu" and nbytes <= _DEVICE_RESIDENT_BYTES:
                self.stacked = {k: v.to(device) for k, v in self.stacked.items()}
                self._resident = True
        self._epoch = -1
        self._order: torch.Tensor | None = None
        self._generator = torch.Generator().manual_seed(seed)

    @property
    def batches_per_epoch(self) -> int:
        return math.ceil(self.size / self.batch_size)

    def order(self, epoch: int) -> torch.Tensor:
        """The sample order of `epoch`: the epoch-th permutation of a generator seeded once."""
        if not self.shuffle:
            return torch.arange(self.size)
        if epoch < self._epoch:
            self._generator = torch.Generator().manual_seed(self.seed)
            self._epoch = -1
        while self._epoch < epoch:
            self._order = torch.randperm(self.size, generator=self._generator)
            self._epoch += 1
        assert self._order is not None
        return self._order

    def batch(self, index: int) -> dict[str, torch.Tensor]:
        """The index-th batch of the run (0-based, across epochs)."""
        epoch, offset = divmod(index, self.batches_per_epoch)
        rows = self.order(epoch)[offset * self.batch_size:(offset + 1) * self.batch_size]
        if self.stacked is not None:
            if self._resident:
                rows = rows.to(self.device)
            out = {k: v.index_select(0, rows) for k, v in self.stacked.items()}
        else:
            assert self.collate is not None
            out = dict(self.collate([self.dataset[int(i)] for i in rows]))
        if not self._resident and self.device.type != "cpu":
            out = {k: v.to(self.device, non_blocking=True) for k, v in out.items()}
        return out


# ---------------------------------------------------------------- model I/O

def _input_filter(model: torch.nn.Module) -> Callable[[Mapping[str, torch.Tensor]], dict[str, torch.Tensor]]:
    """Pass only the fields `model.forward` names (a Pythia model takes no token_type_ids)."""
    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return dict
    named = {n for n, p in params.items() if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}
    if not named:
        return dict
    return lambda batch: {k: v for k, v in batch.items() if k in named}


def _field(output: Any, name: str, index: int) -> torch.Tensor:
    if isinstance(output, Mapping):
        return output[name]
    value = getattr(output, name, None)
    if value is None and isinstance(output, (tuple, list)):
        value = output[index]
    if not isinstance(value, torch.Tensor):
        raise ConfigError(f"the model's output has no {name}", "give the batch a 'labels' field")
    return value


# ---------------------------------------------------------------- the trainer

class Trainer:
    """Fine-tunes one model on one dataset; every step is reported to `callbacks`.

    `metric_fn(predictions, labels) -> {name: value}` scores an evaluation split
    (numpy arrays: class ids, or floats for regression). With a `twin` (anything with
    `run_step(trace)`, and optionally `driven()`), each step is also run on the twin
    with `trace_for(batch_size, seq_len)`'s trace.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        train_data: Any,
        config: TrainConfig,
        *,
        eval_data: Mapping[str, Any] | None = None,
        collate: Callable[[list[Any]], Mapping[str, torch.Tensor]] | None = None,
        metric_fn: Callable[[np.ndarray, np.ndarray], Mapping[str, float]] | None = None,
        callbacks: Iterable[Callback] = (),
        control: TrainControl | None = None,
        twin: Any | None = None,
        trace_for: Callable[[int, int], StepTrace] | None = None,
        run_name: tuple[str, str] = ("model", "task"),
        twin_name: str | None = None,
    ) -> None:
        config.validate()
        if twin is not None and trace_for is None:
            raise ConfigError("a twin was given without a step trace", "pass trace_for=... with the twin")
        self.config = config
        self.device = resolve_device(config.device)
        self.precision = resolve_precision(config.precision, self.device)
        self.model = model.to(self.device)
        self.trainable_params = apply_mode(self.model, config.mode)
        self.total_params = sum(p.numel() for p in self.model.parameters())
        self.data = BatchSource(train_data, config.batch_size, self.device, config.seed, collate)
        self.eval_data = dict(eval_data or {})
        self._eval_sources: dict[str, BatchSource] = {}
        self.collate = collate
        self.metric_fn = metric_fn
        self.callbacks: list[Callback] = list(callbacks)
        self.control = control or TrainControl()
        self.twin = twin
        self.trace_for = trace_for
        self.run_name = run_name
        self.twin_name = twin_name
        self._traces: dict[tuple[int, int], StepTrace] = {}
        spe = self.data.batches_per_epoch
        if config.steps is not None:
            self.total_steps = config.steps
        else:
            self.total_steps = max(1, math.ceil((config.epochs if config.epochs is not None else 1.0) * spe))
        self.warmup_steps = math.ceil(self.total_steps * config.warmup_ratio)
        self.optimizer = build_optimizer(self.model, config, self.device)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, LinearWarmup(self.warmup_steps, self.total_steps))
        self.scaler = _grad_scaler() if self.precision == "fp16" else None
        self._inputs = _input_filter(self.model)
        self._params = [p for p in self.model.parameters() if p.requires_grad]
        self._fold_clip = self.scaler is None and all(g.get("fused") for g in self.optimizer.param_groups)

    # -- events

    def emit(self, event: Event) -> None:
        for callback in self.callbacks:
            callback(event)

    # -- the loop

    def run(self, resume_from: str | Path | None = None) -> TrainOutcome:
        cfg = self.config
        step = 0
        losses: list[float] = []
        samples = tokens = 0
        prior_wall = prior_train = 0.0
        twin_total = TwinCost(0.0) if self.twin is not None else None
        if resume_from is not None:
            state = self._load(resume_from)
            step, losses = int(state["step"]), [float(x) for x in state["losses"]]
            samples, tokens = int(state["samples"]), int(state["tokens"])
            prior_wall, prior_train = float(state["wall_s"]), float(state["train_wall_s"])
            if twin_total is not None and state.get("twin") is not None:
                twin_total = TwinCost(float(state["twin"]["time_s"]), dict(state["twin"]["energy_j"]))
        else:
            _seed_everything(cfg.seed)
        start_step = step
        last_eval: dict[str, Mapping[str, float]] = {}
        self.emit(RunStarted(
            model=self.run_name[0], task=self.run_name[1], mode=cfg.mode, precision=self.precision,
            device=str(self.device), batch_size=cfg.batch_size, total_steps=self.total_steps,
            steps_per_epoch=self.data.batches_per_epoch, seed=cfg.seed,
            trainable_params=self.trainable_params, total_params=self.total_params,
            start_step=start_step, twin=self.twin_name))
        t0 = time.perf_counter()
        paused_s = train_s = 0.0
        autocast = self._autocast()
        driven = self.twin.driven() if self.twin is not None and hasattr(self.twin, "driven") \
            else contextlib.nullcontext()

        def elapsed() -> float:
            return time.perf_counter() - t0 - paused_s

        def outcome(cancelled: bool) -> TrainOutcome:
            return TrainOutcome(
                steps=step, samples=samples, tokens=tokens, wall_s=prior_wall + elapsed(),
                train_wall_s=prior_train + train_s, losses=tuple(losses), eval=dict(last_eval),
                precision=self.precision, device=str(self.device),
                trainable_params=self.trainable_params, total_params=self.total_params,
                cancelled=cancelled, twin=twin_total, start_step=start_step)

        self.model.train()
        with driven:
            while step < self.total_steps:
                # Step boundary: the only place pause and cancel take effect.
                if self.control.paused and not self.control.cancelled:
                    self.emit(Paused(step))
                    p0 = time.perf_counter()
                    self.control.wait_until_running()
                    paused_s += time.perf_counter() - p0
                    if not self.control.cancelled:
                        self.emit(Resumed(step))
                if self.control.cancelled:
                    if cfg.checkpoint_dir and step > start_step:
                        self._checkpoint(step, losses, samples, tokens, prior_wall + elapsed(),
                                         prior_train + train_s, twin_total)
                    self.emit(RunCancelled(step, samples, prior_wall + elapsed(),
                                           self.control.reason or "cancelled", twin_total))
                    return outcome(cancelled=True)
                epoch = step // self.data.batches_per_epoch
                self.emit(StepBegin(step + 1, epoch))
                s0 = time.perf_counter()
                batch = self.data.batch(step)
                lr = self.scheduler.get_last_lr()[0]
                loss_value, grad_norm = self._train_step(batch, autocast)
                wall = time.perf_counter() - s0
                train_s += wall
                step += 1
                rows = int(next(iter(batch.values())).shape[0])
                seq = int(batch["input_ids"].shape[1]) if "input_ids" in batch and batch["input_ids"].dim() > 1 else 0
                samples += rows
                tokens += rows * seq
                losses.append(loss_value)
                twin_step = None
                if self.twin is not None and twin_total is not None:
                    twin_step = self._run_twin(rows, seq)
                    twin_total = twin_total + twin_step
                self.emit(StepEnd(step=step, epoch=epoch, loss=loss_value, samples=rows, tokens=rows * seq,
                                  lr=lr, wall_s=wall, elapsed_s=elapsed(), grad_norm=grad_norm, twin=twin_step))
                if cfg.eval_every and step % cfg.eval_every == 0 and step < self.total_steps:
                    last_eval.update(self.evaluate(step))
                    self.model.train()
                if cfg.checkpoint_every and step % cfg.checkpoint_every == 0:
                    self._checkpoint(step, losses, samples, tokens, prior_wall + elapsed(),
                                     prior_train + train_s, twin_total)
        last_eval.update(self.evaluate(step))
        result = outcome(cancelled=False)
        self.emit(RunFinished(step, samples, result.wall_s, result.final_loss, twin_total))
        return result

    def _autocast(self) -> Callable[[], contextlib.AbstractContextManager[Any]]:
        if self.precision == "fp32":
            return contextlib.nullcontext
        dtype = torch.float16 if self.precision == "fp16" else torch.bfloat16
        return lambda: torch.autocast(device_type=self.device.type, dtype=dtype)

    def _train_step(self, batch: Mapping[str, torch.Tensor],
                    autocast: Callable[[], contextlib.AbstractContextManager[Any]]) -> tuple[float, float]:
        with autocast():
            loss = _field(self.model(**self._inputs(batch)), "loss", 0)
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
            self.scaler.unscale_(self.optimizer)
        else:
            loss.backward()
        if self._fold_clip:
            norm = _grad_norm(self._params)
            # Clipping folded into the fused AdamW kernel, which divides every gradient by
            # grad_scale as it reads it: one pass over the gradients fewer than clip_grad_norm_.
            self.optimizer.grad_scale = torch.clamp(  # type: ignore[attr-defined]
                (norm + 1e-6) / self.config.max_grad_norm, min=1.0)
        else:
            norm = torch.nn.utils.clip_grad_norm_(self._params, self.config.max_grad_norm)
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        # The step's one host-device sync: loss and gradient norm together.
        loss_value, grad_norm = torch.stack([loss.detach().float(), norm.float()]).tolist()
        return loss_value, grad_norm

    def _run_twin(self, rows: int, seq: int) -> TwinCost:
        key = (rows, seq)
        trace = self._traces.get(key)
        if trace is None:
            assert self.trace_for is not None
            trace = self._traces[key] = self.trace_for(rows, seq)
        result = self.twin.run_step(trace)  # type: ignore[union-attr]
        return TwinCost(float(result.time_s), {k: float(v) for k, v in dict(result.energy_j).items()})

    # -- evaluation

    @torch.inference_mode()
    def evaluate(self, step: int) -> dict[str, Mapping[str, float]]:
        """Score every evaluation split; emits one EvalResult per split."""
        results: dict[str, Mapping[str, float]] = {}
        if not self.eval_data:
            return results
        self.model.eval()
        autocast = self._autocast()
        batch_size = self.config.eval_batch_size or 2 * self.config.batch_size
        for split, dataset in self.eval_data.items():
            t0 = time.perf_counter()
            source = self._eval_sources.get(split)
            if source is None:
                source = self._eval_sources[split] = BatchSource(
                    dataset, batch_size, self.device, 0, self.collate, shuffle=False)
            preds: list[torch.Tensor] = []
            labels: list[torch.Tensor] = []
            loss_sum = torch.zeros((), device=self.device)
            for index in range(source.batches_per_epoch):
                batch = source.batch(index)
                with autocast():
                    out = self.model(**self._inputs(batch))
                logits = _field(out, "logits", 1).float()
                if "labels" in batch:
                    loss_sum += _field(out, "loss", 0).float() * logits.shape[0]
                    labels.append(batch["labels"])
                preds.append(logits.squeeze(-1) if logits.shape[-1] == 1 else logits.argmax(-1))
            pred_np = torch.cat(preds).cpu().numpy()
            metrics: dict[str, float] = {}
            if labels:
                label_np = torch.cat(labels).cpu().numpy()
                metrics["loss"] = float(loss_sum.item()) / source.size
                if self.metric_fn is not None:
                    metrics.update({k: float(v) for k, v in self.metric_fn(pred_np, label_np).items()})
            results[split] = metrics
            self.emit(EvalResult(step, split, metrics, source.size, time.perf_counter() - t0))
        return results

    # -- checkpoints

    def _fingerprint(self) -> dict[str, Any]:
        cfg = self.config
        return {
            "model": self.run_name[0], "task": self.run_name[1], "seed": cfg.seed,
            "batch_size": cfg.batch_size, "total_steps": self.total_steps,
            "learning_rate": cfg.learning_rate, "weight_decay": cfg.weight_decay,
            "warmup_ratio": cfg.warmup_ratio, "max_grad_norm": cfg.max_grad_norm,
            "mode": cfg.mode, "precision": self.precision, "train_size": self.data.size,
        }

    def _checkpoint(self, step: int, losses: Sequence[float], samples: int, tokens: int,
                    wall_s: float, train_wall_s: float, twin: TwinCost | None) -> Path:
        assert self.config.checkpoint_dir is not None
        root = Path(self.config.checkpoint_dir)
        target = root / f"step-{step:07d}"
        tmp = root / f".step-{step:07d}.tmp"
        tmp.mkdir(parents=True, exist_ok=True)
        epoch, offset = divmod(step, self.data.batches_per_epoch)
        state = {
            "format": 1,
            "fingerprint": self._fingerprint(),
            "step": step, "epoch": epoch, "batch_in_epoch": offset,
            "losses": list(losses), "samples": samples, "tokens": tokens,
            "wall_s": wall_s, "train_wall_s": train_wall_s,
            "twin": None if twin is None else {"time_s": twin.time_s, "energy_j": dict(twin.energy_j)},
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "scaler": None if self.scaler is None else self.scaler.state_dict(),
            "rng": _rng_state(),
        }
        torch.save(state, tmp / CHECKPOINT_FILE)
        if target.exists():
            shutil.rmtree(target)
        tmp.rename(target)
        (root / LATEST_FILE).write_text(target.name + "\n")
        self._prune(root)
        self.emit(Checkpointed(step, str(target)))
        return target

    def _prune(self, root: Path) -> None:
        keep = max(1, self.config.keep_checkpoints)
        for old in sorted(root.glob("step-*"))[:-keep]:
            shutil.rmtree(old, ignore_errors=True)

    def _load(self, where: str | Path) -> dict[str, Any]:
        path = find_checkpoint(where)
        # Our own file; it holds numpy and Python RNG states, which weights_only refuses.
        state = torch.load(path, map_location="cpu", weights_only=False)
        mine, theirs = self._fingerprint(), dict(state.get("fingerprint", {}))
        differ = sorted(k for k in mine if theirs.get(k) != mine[k])
        if differ:
            detail = ", ".join(f"{k}: checkpoint {theirs.get(k)!r} vs now {mine[k]!r}" for k in differ)
            raise ConfigError(f"checkpoint {path} belongs to a different run ({detail})",
                              "resume with the same model, task, seed, batch size and steps as the "
                              "checkpointed run, or start without --resume")
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        if self.scaler is not None and state.get("scaler") is not None:
            self.scaler.load_state_dict(state["scaler"])
        _set_rng_state(state["rng"])
        log.info("resumed from %s at step %d", path, state["step"])
        return state


def find_checkpoint(where: str | Path) -> Path:
    """The checkpoint file in `where`: a checkpoint folder, or a run folder's latest."""
    path = Path(where)
    if path.is_file():
        return path
    if (path / CHECKPOINT_FILE).is_file():
        return path / CHECKPOINT_FILE
    latest = path / LATEST_FILE
    if latest.is_file():
        candidate = path / latest.read_text().strip() / CHECKPOINT_FILE
        if candidate.is_file():
            return candidate
    found = sorted(path.glob(f"step-*/{CHECKPOINT_FILE}"))
    if found:
        return found[-1]
    raise ConfigError(f"no checkpoint in {path}",
                      "give the --checkpoint-dir of an earlier run (it holds step-NNNNNNN folders)")


def _grad_norm(params: Sequence[torch.nn.Parameter]) -> torch.Tensor:
    """The L2 norm of all gradients together, as clip_grad_norm_ computes it."""
    grads = [p.grad for p in params if p.grad is not None]
    return torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads, 2.0)), 2.0)


def _grad_scaler() -> Any:
    try:
        return torch.amp.GradScaler("cuda")
    except (AttributeError, TypeError):  # torch < 2.3
        return torch.cuda.amp.GradScaler()


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def _rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: Mapping[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
