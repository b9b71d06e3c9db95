"""One fine-tuning run, from a spec to a result: model, data, tokenizer, loop.

The library call behind `slm-dvfs finetune` and the TUI's runs. Offline by default:
a zoo model without a cached checkpoint trains from random weights, and synthetic
GLUE data stands in for the real thing; the result says which (`weights`, `synthetic`).
The run knows nothing of power or twins: whoever assembles it may pass `step_hook`, a
factory that gets the run's `trace_for(rows, seq_len)` and returns what runs after each
step (the run harness advances the digital twin with it); the harness also fills the
result's twin figures, from its power monitor.
"""

from __future__ import annotations

import contextlib
import logging
import math
import re
from datetime import datetime, timezone
from pathlib import Path
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import TYPE_CHECKING, Callable, Iterable, Mapping

from engine.core.constants import DEFAULT_PADDING, Mode, Padding, Precision
from engine.core.errors import ConfigError
from engine.core.jsontypes import JsonObject, JsonValue
from engine.core.paths import data_dir
from engine.core.provenance import Source
from engine.core.trace import StepTrace
from engine.workload.events import Callback, EvalResult, RunControl, TrainerEvent
from engine.workload.data.lengths import bucket_of
from engine.workload.training.loop import StepHook, TrainControl
from engine.workload.lora import LoraSettings
from engine.workload.spec import WorkloadSpec
from engine.workload.trace.loop import check_loop_for

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedTokenizerBase

    from engine.workload.data.text import EncodedSplit
    from engine.workload.data.lengths import LengthDistribution
    from engine.workload.resolve import Workload

log = logging.getLogger(__name__)

# When the spec names no learning rate: the usual rate for fine-tuning a pretrained
# model, and a larger one for a model that starts from random weights.
LR_PRETRAINED = 5e-5
LR_RANDOM = 1e-3
# Dynamic padding: batch lengths are rounded up (engine.workload.data.lengths.bucket_of) for the twin's
# step traces: a run needs a handful of traces, not one per length.


@dataclass(frozen=True)
class FinetuneSpec:
    workload: WorkloadSpec  # model, task, shape, precision (16-bit falls back to fp32 off CUDA), mode, data, seed
    steps: int | None = None  # one of steps and epochs; neither: one epoch
    epochs: float | None = None
    train_samples: int | None = None
    eval_samples: int | None = None
    eval_every: int = 0
    checkpoint_every: int = 0
    checkpoint_dir: str | None = None
    resume: str | None = None  # a checkpoint folder to continue from
    learning_rate: float | None = None  # None: LR_PRETRAINED or LR_RANDOM
    device: str | None = None  # torch device; None: CUDA when available
    output_dir: str | None = None  # where the trained model goes (a LoRA run: default_output_dir())
    save_model: bool = True  # False: keep nothing (a sweep's training, an experiment's baseline)

    def validate(self) -> None:
        self.workload.validate()
        check_loop_for(True, self.workload.loop)  # it trains: with slm-dvfs's own loop, what the workload must name
        if self.steps is not None and self.epochs is not None:
            raise ConfigError("both steps and epochs were given", "give one of --steps and --epochs")
        for name in ("train_samples", "eval_samples", "steps"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ConfigError(f"{name.replace('_', ' ')} must be at least 1, not {value}",
                                  f"give --{name.replace('_', '-')} 1 or more")
        if self.checkpoint_every and not self.checkpoint_dir:
            raise ConfigError("checkpoints were asked for without a folder", "add --checkpoint-dir DIR")
        if self.epochs is not None and not (math.isfinite(self.epochs) and self.epochs > 0):
            raise ConfigError(f"epochs must be a positive number, not {self.epochs}", "give --epochs above 0")
        if self.device:
            from engine.workload.training.optim import resolve_device

            resolve_device(self.device)  # a device this host lacks fails now, not after the model loads


@dataclass(frozen=True)
class FinetuneResult:
    model: str
    task: str
    mode: Mode
    precision: Precision  # actually used on the host
    device: str
    batch_size: int
    max_seq_len: int
    steps: int
    samples: int
    wall_s: float  # host wall time, evaluation included (measured)
    train_wall_s: float  # host time of the training steps (measured)
    samples_per_s: float  # training samples per second of train_wall_s (measured)
    final_loss: float | None
    losses: tuple[float, ...]
    eval: Mapping[str, Mapping[str, float]]  # split -> metrics at the end
    primary_metric: str
    weights: str  # "pretrained" | "random"
    synthetic: bool
    data_source: str
    trainable_params: int
    params: int
    learning_rate: float
    cancelled: bool = False
    saved_to: str | None = None  # the folder the trained model (a LoRA run: its adapter) was saved in
    lora: LoraSettings | None = None  # a LoRA run's settings
    grad_checkpointing: bool = False
    family: str | None = None  # the model's (engine.workload.zoo.FAMILIES)
    twin_profile: str | None = None
    twin_precision: Precision | None = None  # what the twin simulated (16-bit runs on the Orin)
    twin_time_s: float | None = None  # training steps on the twin
    twin_energy_j: Mapping[str, float] | None = None  # per rail
    host_source: Source = Source.MEASURED
    twin_source: Source | None = None  # Source.TWIN when on the twin
    padding: Padding = DEFAULT_PADDING
    lengths: Mapping[str, JsonValue] | None = None  # the train split's token lengths, measured (tokenized here)

    @property
    def twin_total_energy_j(self) -> float | None:
        return None if self.twin_energy_j is None else float(sum(self.twin_energy_j.values()))

    def to_json(self) -> JsonObject:
        out: JsonObject = {
            "model": self.model, "task": self.task, "mode": self.mode, "precision": self.precision,
            "device": self.device, "batch_size": self.batch_size, "max_seq_len": self.max_seq_len,
            "steps": self.steps, "samples": self.samples, "learning_rate": self.learning_rate,
            "weights": self.weights, "synthetic": self.synthetic, "data_source": self.data_source,
            "trainable_params": self.trainable_params, "params": self.params,
            "cancelled": self.cancelled, "final_loss": self.final_loss,
            "lora": None if self.lora is None else self.lora.to_json(self.family),
            "grad_checkpointing": self.grad_checkpointing, "saved_to": self.saved_to, "padding": self.padding,
            "lengths": None if self.lengths is None else dict(self.lengths),
            "eval": {split: dict(m) for split, m in self.eval.items()},
            "primary_metric": self.primary_metric,
            "host": {"wall_s": self.wall_s, "train_wall_s": self.train_wall_s,
                     "samples_per_s": self.samples_per_s, "source": str(self.host_source)},
            "twin": None,
        }
        if self.twin_source is not None:
            out["twin"] = {
                "profile": self.twin_profile, "precision": self.twin_precision,
                "time_s": self.twin_time_s, "energy_j": dict(self.twin_energy_j or {}),
                "total_energy_j": self.twin_total_energy_j, "source": str(self.twin_source),
            }
        return out


TraceFor = Callable[[int, int], StepTrace]


def stamp_evals(callbacks: Iterable[Callback], weights: str, synthetic: bool) -> list[Callback]:
    """The callbacks, each handed EvalResult events that say what the model learnt from
    (weights, generated data), so whoever shows a metric can say whether it means anything."""
    def stamped(callback: Callback) -> Callback:
        def call(event: TrainerEvent) -> RunControl | None:
            if isinstance(event, EvalResult):
                event = replace(event, weights=weights, synthetic=synthetic)
            return callback(event)  # its answer too: a stop must reach the loop
        return call
    return [stamped(cb) for cb in callbacks]


def run_finetune(spec: FinetuneSpec, callbacks: Iterable[Callback] = (),
                 control: TrainControl | None = None, *,
                 step_hook: Callable[[TraceFor], StepHook | None] | None = None,
                 workload: Workload | None = None) -> FinetuneResult:
    """Fine-tune as `spec` says; every event goes to each of `callbacks`.

    `step_hook(trace_for)`, when given, builds the hook run after each step from the
    run's step traces (`trace_for(rows, seq_len)`, cached per shape). `workload`: the spec's
    workload as the caller resolved it (engine.workload.resolve.resolve_workload: named, its memory
    checked); without it the workload is named here, once."""
    from engine.workload.training.checkpoint import check_checkpoint_dir, find_checkpoint, read_meta
    from engine.workload.data.text import encode, load_glue_text
    from engine.workload.glue import get_task
    from engine.workload.training.metrics import compute_metrics
    from engine.workload.models import load_model
    from engine.workload.training.optim import prepare_model, resolve_device
    from engine.workload.resolve import check_workload_memory
    from engine.workload.data.tokenization import load_tokenizer
    from engine.workload.training.trainer import TrainConfig, Trainer

    spec.validate()
    if spec.checkpoint_dir:
        check_checkpoint_dir(spec.checkpoint_dir)
    if spec.resume:  # a missing, foreign or old-format checkpoint fails before the model loads
        read_meta(find_checkpoint(spec.resume))
    if workload is not None and workload.model_ref is not None:
        w, resolved = workload.spec, workload.model_ref
    else:
        resolved = spec.workload.resolved_model()
        w = spec.workload.named(resolved)
        # before anything allocates; 16-bit is a remedy only where autocast can run it
        check_workload_memory(w, resolved, cuda=resolve_device(spec.device).type == "cuda")
    task = get_task(w.task)
    batch_size, seq_len, precision = int(w.batch_size or 0), int(w.seq_len or 0), w.named_precision
    model, info = load_model(resolved, task, allow_download=w.allow_download, seed=w.seed)
    lora = w.lora_settings
    # Wrapped (LoRA) and checkpointed here, so that the step traces see what the trainer trains.
    trained, _ = prepare_model(model, w.mode, lora=lora, checkpointing=w.grad_checkpointing, seed=w.seed)
    if seq_len > info.max_positions:
        raise ConfigError(f"--max-seq-len {seq_len} exceeds what {info.name} can take "
                          f"({info.max_positions} positions)", f"give --max-seq-len {info.max_positions} or less")
    lr = spec.learning_rate or (LR_PRETRAINED if info.weights == "pretrained" else LR_RANDOM)

    text = load_glue_text(task, w.data, train_samples=spec.train_samples,
                          eval_samples=spec.eval_samples, seed=w.seed,
                          allow_download=w.allow_download)
    tokenizer = load_tokenizer(w.model, info, text.train_texts(),
                               allow_download=w.allow_download, task=task)
    align_pad_token(trained, tokenizer)
    encoded = encode(text, tokenizer, seq_len, padding=w.padding)

    @lru_cache(maxsize=None)
    def traced(rows: int, length: int) -> StepTrace:
        from engine.workload.trace.tracer import step_trace

        return step_trace(trained, name=info.name, batch_size=rows, seq_len=length, precision=precision).trace

    def trace_for(rows: int, length: int) -> StepTrace:
        if w.padding == "dynamic":
            length = bucket_of(length, seq_len)
        return traced(rows, length)

    config = TrainConfig(
        steps=spec.steps, epochs=spec.epochs, batch_size=batch_size, learning_rate=lr,
        precision=precision, mode=w.mode, seed=w.seed, eval_every=spec.eval_every,
        checkpoint_every=spec.checkpoint_every, checkpoint_dir=spec.checkpoint_dir, device=spec.device,
        lora=lora, grad_checkpointing=w.grad_checkpointing,
    )
    trainer = Trainer(
        trained, encoded.train, config, eval_data=encoded.eval, collate=encoded.collate,
        metric_fn=lambda preds, labels: compute_metrics(task, preds, labels),
        callbacks=stamp_evals(callbacks, info.weights, text.synthetic), control=control, step_hook=step_hook(trace_for) if step_hook is not None else None,
        run_name=(info.name, task.name),
    )
    outcome = trainer.run(resume_from=spec.resume)
    saved_to = None
    output_dir = spec.output_dir or (default_output_dir(info.name, task.name) if w.mode == "lora" else None)
    if output_dir and spec.save_model and not outcome.cancelled:
        saved_to = str(trainer.save_model(output_dir))
        with contextlib.suppress(OSError, AttributeError):  # the tokenizer is a convenience beside it
            tokenizer.save_pretrained(saved_to)
        log.info("%s saved in %s", "LoRA adapter" if w.mode == "lora" else "model", saved_to)
    return FinetuneResult(
        model=info.name, task=task.name, mode=w.mode, precision=outcome.precision,
        device=outcome.device, batch_size=batch_size, max_seq_len=seq_len, steps=outcome.steps,
        samples=outcome.samples, wall_s=outcome.wall_s, train_wall_s=outcome.train_wall_s,
        samples_per_s=outcome.samples_per_s, final_loss=outcome.final_loss, losses=outcome.losses,
        eval=outcome.eval, primary_metric=task.primary_metric, weights=info.weights,
        synthetic=text.synthetic, data_source=text.source,
        trainable_params=outcome.trainable_params, params=outcome.total_params, learning_rate=lr,
        cancelled=outcome.cancelled, saved_to=saved_to, lora=lora, grad_checkpointing=w.grad_checkpointing,
        family=info.family, padding=w.padding,
        lengths=measured_lengths(task.name, encoded.train, text.source).summary(seq_len, batch_size),
    )


def default_output_dir(model: str, task: str) -> Path:
    """Where a LoRA run's adapter goes when no --output-dir was given: a new folder under the
    data directory, named by model, task and time (runs never overwrite each other's)."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S-%f")
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{model}-{task}").strip("_") or "model"
    return data_dir() / "adapters" / f"{safe}-{stamp}"


def measured_lengths(task: str, split: EncodedSplit, source: str) -> LengthDistribution:
    """The token lengths of an encoded split's examples (special tokens in, padding out), as an
    engine.workload.data.lengths.LengthDistribution: what the run's own data holds."""
    from engine.workload.data.lengths import measured

    mask = split.features["attention_mask"]
    if isinstance(mask, list):  # dynamic padding: one unpadded tensor per example
        counts = [int(m.shape[0]) for m in mask]
    else:
        counts = [int(n) for n in mask.sum(dim=1).tolist()]
    return measured(task, counts, f"measured: the run's {source or 'data'}, tokenized")


def align_pad_token(model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase) -> None:
    """A decoder's head pools the last token that is not padding: it must know the id the
    tokenizer pads with (a tokenizer trained here pads with its own, not the checkpoint's)."""
    config = getattr(model, "config", None)
    pad = getattr(tokenizer, "pad_token_id", None)
    if config is None or pad is None or getattr(config, "pad_token_id", None) == pad:
        return
    log.info("the model's pad token id %s becomes the tokenizer's %s", config.pad_token_id, pad)
    config.pad_token_id = pad
