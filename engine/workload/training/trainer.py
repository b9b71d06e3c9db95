"""The fine-tuning loop: AdamW, linear warm-up schedule, clipping, mixed precision,
deterministic data order, evaluation, checkpoints that resume bit-for-bit, and events.

Kept lean on purpose: it is also what the energy is measured on, so it avoids
needless host-device syncs (one `.tolist()` per step for the loss and gradient norm),
sets gradients to None, and indexes pre-stacked fixed-length tensors instead of
collating sample by sample. Batches come from `batching`, checkpoint files and RNG
state from `checkpoint`, the step-boundary control (pause, cancel) from `loop`; the
trainer knows nothing of power or twins: an optional `step_hook(rows, seq_len)` runs
after each step, before its StepEnd.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np
import torch

from engine.core.constants import Mode, Precision, parse_mode, parse_precision
from engine.core.errors import ConfigError
from engine.core.jsontypes import JsonObject, as_float, as_int, as_list
from engine.workload.data.batching import BatchSource
from engine.workload.training.checkpoint import (
    RESTART,
    load_state,
    save_checkpoint,
    seed_everything,
)
from engine.workload.events import Callback, Checkpointed, EvalResult, RunCancelled, RunFinished, RunStarted, StepEnd, TrainerEvent
from engine.workload.lora import LoraSettings, is_peft_model
from engine.workload.training.loop import StepHook, StepLoop, TrainControl
from engine.workload.training.optim import (
    LinearWarmup,
    build_optimizer,
    model_params,
    prepare_model,
    resolve_device,
    resolve_precision,
)

log = logging.getLogger(__name__)

ADAPTER_DIR = "adapter"  # a LoRA checkpoint's adapter, in peft's format


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
    precision: Precision = "fp32"  # requested; fp16/bf16 need CUDA, else fp32 with a warning
    mode: Mode = "full"
    lora: LoraSettings | None = None  # mode "lora": rank, alpha, dropout, targets (None: the defaults)
    grad_checkpointing: bool = False  # recompute activations in the backward pass (less memory)
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
        parse_precision(self.precision)  # a library caller's config: the CLI and the TUI parsed these already
        parse_mode(self.mode)
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
    precision: Precision  # actually used
    device: str
    trainable_params: int
    total_params: int
    cancelled: bool = False
    start_step: int = 0  # where this invocation began (resume)

    @property
    def final_loss(self) -> float | None:
        return self.losses[-1] if self.losses else None

    @property
    def samples_per_s(self) -> float:
        return self.samples / self.train_wall_s if self.train_wall_s > 0 else 0.0


# ---------------------------------------------------------------- model I/O

def _input_filter(model: torch.nn.Module) -> Callable[[Mapping[str, torch.Tensor]], dict[str, torch.Tensor]]:
    """Pass only the fields `model.forward` names (a Pythia model takes no token_type_ids);
    a peft wrapper passes its base model's fields on."""
    if is_peft_model(model):
        model = model.get_base_model()
    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return dict
    named = {n for n, p in params.items() if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}
    if not named:
        return dict
    return lambda batch: {k: v for k, v in batch.items() if k in named}


def _field(output: object, name: str, index: int) -> torch.Tensor:
    value = output[name] if isinstance(output, Mapping) else getattr(output, name, None)
    if value is None and isinstance(output, (tuple, list)):
        value = output[index]
    if not isinstance(value, torch.Tensor):
        raise ConfigError(f"the model's output has no {name}", "give the batch a 'labels' field")
    return value


# ---------------------------------------------------------------- the trainer

class Trainer:
    """Fine-tunes one model on one dataset; every step is reported to `callbacks`.

    `metric_fn(predictions, labels) -> {name: value}` scores an evaluation split
    (numpy arrays: class ids, or floats for regression). `step_hook(rows, seq_len)`,
    when given, runs after every training step, before the step's StepEnd.
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
        step_hook: StepHook | None = None,
        run_name: tuple[str, str] = ("model", "task"),
    ) -> None:
        config.validate()
        self.config = config
        self.device = resolve_device(config.device)
        self.precision = resolve_precision(config.precision, self.device)
        # LoRA wraps the model (peft); the optimizer below gets only what trains.
        model, self.trainable_params = prepare_model(model, config.mode, lora=config.lora,
                                                     checkpointing=config.grad_checkpointing, seed=config.seed)
        self.model = model.to(self.device)
        self.total_params = model_params(self.model)
        self.data = BatchSource(train_data, config.batch_size, self.device, config.seed, collate)
        self.eval_data = dict(eval_data or {})
        self._eval_sources: dict[str, BatchSource] = {}
        self.collate = collate
        self.metric_fn = metric_fn
        self.callbacks: list[Callback] = list(callbacks)
        self.control = control or TrainControl()
        self._loop = StepLoop(self.control, self.callbacks)  # a fresh one for each run()
        self.step_hook = step_hook
        self.run_name = run_name
        spe = self.data.batches_per_epoch
        if config.steps is not None:
            self.total_steps = config.steps
        else:
            self.total_steps = max(1, math.ceil((config.epochs if config.epochs is not None else 1.0) * spe))
        self.warmup_steps = math.ceil(self.total_steps * config.warmup_ratio)
        self.optimizer = build_optimizer(self.model, self.device, learning_rate=config.learning_rate,
                                         weight_decay=config.weight_decay)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, LinearWarmup(self.warmup_steps, self.total_steps))
        self.scaler = _grad_scaler() if self.precision == "fp16" else None
        self._inputs = _input_filter(self.model)
        self._params = [p for p in self.model.parameters() if p.requires_grad]
        self._fold_clip = self.scaler is None and all(g.get("fused") for g in self.optimizer.param_groups)

    # -- events

    def emit(self, event: TrainerEvent) -> None:
        """To every callback, through the run's step loop (which keeps a callback's stop)."""
        self._loop.emit(event)

    # -- the loop

    def run(self, resume_from: str | Path | None = None) -> TrainOutcome:
        cfg = self.config
        step = 0
        losses: list[float] = []
        samples = tokens = 0
        prior_wall = prior_train = 0.0
        if resume_from is not None:
            state = self._load(resume_from)
            step, losses = as_int(state["step"]), [as_float(x) for x in as_list(state["losses"])]
            samples, tokens = as_int(state["samples"]), as_int(state["tokens"])
            prior_wall, prior_train = as_float(state["wall_s"]), as_float(state["train_wall_s"])
        else:
            seed_everything(cfg.seed)
        start_step = step
        last_eval: dict[str, Mapping[str, float]] = {}
        loop = self._loop = StepLoop(self.control, self.callbacks)
        self.emit(RunStarted(
            model=self.run_name[0], task=self.run_name[1], mode=cfg.mode, precision=self.precision,
            device=str(self.device), batch_size=cfg.batch_size, total_steps=self.total_steps,
            steps_per_epoch=self.data.batches_per_epoch, seed=cfg.seed,
            trainable_params=self.trainable_params, total_params=self.total_params,
            start_step=start_step))
        t0 = time.perf_counter()
        train_s = 0.0
        autocast = self._autocast()

        def elapsed() -> float:
            return time.perf_counter() - t0 - loop.paused_s

        def outcome(cancelled: bool) -> TrainOutcome:
            return TrainOutcome(
                steps=step, samples=samples, tokens=tokens, wall_s=prior_wall + elapsed(),
                train_wall_s=prior_train + train_s, losses=tuple(losses), eval=dict(last_eval),
                precision=self.precision, device=str(self.device),
                trainable_params=self.trainable_params, total_params=self.total_params,
                cancelled=cancelled, start_step=start_step)

        self.model.train()
        while step < self.total_steps or loop.stopping:  # a stop at the last step still ends it cancelled
            epoch = step // self.data.batches_per_epoch
            if loop.boundary(step, epoch):  # the only place pause, cancel and a callback's stop take effect
                if cfg.checkpoint_dir and step > start_step:
                    self._checkpoint(step, losses, samples, tokens, prior_wall + elapsed(), prior_train + train_s)
                self.emit(RunCancelled(step, samples, prior_wall + elapsed(), loop.reason))
                return outcome(cancelled=True)
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
            if self.step_hook is not None:
                self.step_hook(rows, seq)
            self.emit(StepEnd(step=step, epoch=epoch, loss=loss_value, samples=rows, tokens=rows * seq,
                              lr=float(lr), wall_s=wall, elapsed_s=elapsed(), grad_norm=grad_norm))
            if loop.stopping:
                continue  # to the boundary, which ends the run: no evaluation or checkpoint first
            if cfg.eval_every and step % cfg.eval_every == 0 and step < self.total_steps:
                last_eval.update(self.evaluate(step))
                self.model.train()
            if cfg.checkpoint_every and step % cfg.checkpoint_every == 0:
                self._checkpoint(step, losses, samples, tokens, prior_wall + elapsed(), prior_train + train_s)
        last_eval.update(self.evaluate(step))
        result = outcome(cancelled=False)
        self.emit(RunFinished(step, samples, result.wall_s, result.final_loss))
        return result

    def _autocast(self) -> Callable[[], contextlib.AbstractContextManager[object]]:
        if self.precision == "fp32":
            return contextlib.nullcontext
        dtype = torch.float16 if self.precision == "fp16" else torch.bfloat16
        return lambda: torch.autocast(device_type=self.device.type, dtype=dtype)

    def _train_step(self, batch: Mapping[str, torch.Tensor],
                    autocast: Callable[[], contextlib.AbstractContextManager[object]]) -> tuple[float, float]:
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
            # an attribute the fused kernel reads (torch.optim.AdamW's _fused_adamw), not one Optimizer declares
            setattr(self.optimizer, "grad_scale", torch.clamp((norm + 1e-6) / self.config.max_grad_norm, min=1.0))
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

    def _fingerprint(self) -> JsonObject:
        cfg = self.config
        return {
            "model": self.run_name[0], "task": self.run_name[1], "seed": cfg.seed,
            "batch_size": cfg.batch_size, "total_steps": self.total_steps,
            "learning_rate": cfg.learning_rate, "weight_decay": cfg.weight_decay,
            "warmup_ratio": cfg.warmup_ratio, "max_grad_norm": cfg.max_grad_norm,
            "mode": cfg.mode, "precision": self.precision, "train_size": self.data.size,
            # only when set: checkpoints of runs before these existed keep resuming
            **({"lora": (cfg.lora or LoraSettings()).key()} if cfg.mode == "lora" else {}),
            **({"grad_checkpointing": True} if cfg.grad_checkpointing else {}),
        }

    def _checkpoint(self, step: int, losses: Sequence[float], samples: int, tokens: int,
                    wall_s: float, train_wall_s: float) -> Path:
        assert self.config.checkpoint_dir is not None
        epoch, offset = divmod(step, self.data.batches_per_epoch)
        state = {
            "fingerprint": self._fingerprint(),
            "step": step, "epoch": epoch, "batch_in_epoch": offset,
            "losses": list(losses), "samples": samples, "tokens": tokens,
            "wall_s": wall_s, "train_wall_s": train_wall_s,
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "scaler": None if self.scaler is None else self.scaler.state_dict(),
        }
        target = save_checkpoint(self.config.checkpoint_dir, step, state, keep=self.config.keep_checkpoints)
        if is_peft_model(self.model):  # the adapter as peft saves it, beside the resumable state
            self.save_model(target / ADAPTER_DIR)
        self.emit(Checkpointed(step, str(target)))
        return target

    def save_model(self, folder: str | Path) -> Path:
        """The trained model in Hugging Face's format: a LoRA run's adapter as peft saves it
        (adapter_config.json + adapter_model.safetensors, the head included), else the whole model."""
        folder = Path(folder)
        try:
            folder.mkdir(parents=True, exist_ok=True)
            from transformers import PreTrainedModel
            from transformers.utils import logging as hf_logging

            model = self.model
            if not (is_peft_model(model) or isinstance(model, PreTrainedModel)):
                raise ConfigError(f"{type(model).__name__} is not a Hugging Face model: it cannot be saved in "
                                  "their format", "fine-tune a transformers model to save it (--output-dir)")
            bars = hf_logging.is_progress_bar_enabled()
            hf_logging.disable_progress_bar()  # no tqdm bar over a progress line or a TUI
            try:
                model.save_pretrained(str(folder))
            finally:
                if bars:
                    hf_logging.enable_progress_bar()
        except OSError as exc:
            raise ConfigError(f"cannot save the model in {folder}: {exc.strerror or exc}",
                              "give a writable --output-dir with room for the model") from None
        return folder

    def _load(self, where: str | Path) -> dict[str, object]:
        path, state = load_state(where, self._fingerprint())
        self.model.load_state_dict(_state_dict(state["model"]))
        self.optimizer.load_state_dict(_state_dict(state["optimizer"]))
        self.scheduler.load_state_dict(_state_dict(state["scheduler"]))
        if self.scaler is not None and state.get("scaler") is not None:
            self.scaler.load_state_dict(_state_dict(state["scaler"]))
        log.info("resumed from %s at step %d", path, state["step"])
        return state


def _state_dict(value: object) -> dict[str, object]:
    """A state dict as torch.load read it back from our own checkpoint."""
    if isinstance(value, dict):
        return value
    raise ConfigError(f"a checkpoint's state is a {type(value).__name__}, not a state dict", RESTART)


def _grad_norm(params: Sequence[torch.nn.Parameter]) -> torch.Tensor:
    """The L2 norm of all gradients together, as clip_grad_norm_ computes it."""
    grads = [p.grad for p in params if p.grad is not None]
    return torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads, 2.0)), 2.0)


def _grad_scaler() -> torch.amp.GradScaler:
    try:
        return torch.amp.GradScaler("cuda")
    except (AttributeError, TypeError):  # torch < 2.3
        return torch.cuda.amp.GradScaler()
