"""What a run fine-tunes, resolved before anything runs.

`resolve_workload` turns (model, task, batch, length, precision, mode) into the step
trace every twin figure is computed from (meta tensors: nothing is allocated; a workload
traced before comes from `trace_cache` without importing torch).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

from engine.core.errors import ConfigError
from engine.core.provenance import Source
from engine.core.trace import StepMix, StepTrace
from engine.workload.lora import LoraSettings
from engine.workload.trace_cache import WorkloadTrace, cached_workload_trace, store_workload_trace, trace_key

if TYPE_CHECKING:
    from engine.workload.glue import GlueTask

log = logging.getLogger(__name__)

def workload_key(model: str, task: str, batch_size: int, seq_len: int, precision: str, mode: str,
                 padding: str = "max_length", *, variant: str = "") -> str:
    """What the store keys a workload by. What was added to a workload later is in the key only when
    used, so the keys of workloads stored before stay the same: `variant` (mode_variant(): LoRA
    settings, checkpointing) and dynamic padding (rows stored before padding was part of a workload
    mean "max_length"; dynamic padding is another workload: its steps are shorter)."""
    key = f"{model}|{task}|{batch_size}|{seq_len}|{precision}|{mode}" + (f"|{variant}" if variant else "")
    return key if padding == "max_length" else f"{key}|pad={padding}"


def mode_variant(mode: str, lora: LoraSettings | None = None, grad_checkpointing: bool = False) -> str:
    """What a workload's mode leaves unsaid and its cost depends on: the LoRA settings (rank and
    targets shape the adapters; dropout adds operators) and gradient checkpointing."""
    parts = []
    if mode == "lora":
        parts.append(f"lora-{(lora or LoraSettings()).key()}")
    if grad_checkpointing:
        parts.append("ckpt")
    return "+".join(parts)


@dataclass(frozen=True)
class Workload:
    """One fine-tuning workload, resolved: names as the store keys them, and its step trace."""

    model: str  # display name, e.g. "bert-tiny" (the store's key)
    task: str  # canonical GLUE key, e.g. "sst2"
    family: str  # one of engine.workload.zoo.FAMILIES
    batch_size: int
    seq_len: int
    precision: str  # what the Orin runs (16-bit stays 16-bit on the twin)
    mode: str  # one of engine.core.constants.MODES
    trace: StepTrace  # an average step (max_length: the one step shape; dynamic: StepMix.mean_trace)
    total_params: int
    spec: str = ""  # what the user typed for the model
    lora: LoraSettings | None = None  # mode "lora": the adapters' settings (None: the defaults)
    grad_checkpointing: bool = False
    padding: str = "max_length"  # engine.core.constants.PADDINGS
    mix: StepMix | None = None  # the steps at each padded length with their weights; None: `trace` alone
    lengths: Mapping[str, Any] | None = None  # the length distribution's summary (dynamic padding)
    config: Mapping[str, Any] | None = None  # the model's config as resolved: what the store keeps to rebuild it

    @property
    def key(self) -> str:
        """What the store keys this workload by."""
        return workload_key(self.model, self.task, self.batch_size, self.seq_len, self.precision, self.mode,
                            self.padding, variant=mode_variant(self.mode, self.lora, self.grad_checkpointing))

    @property
    def lora_settings(self) -> LoraSettings | None:
        """The LoRA settings the run uses (the defaults when none were given); None unless mode 'lora'."""
        return (self.lora or LoraSettings()) if self.mode == "lora" else None

    @property
    def steps(self) -> StepMix:
        """What the twin runs for one step of this workload (the weighted buckets of dynamic padding)."""
        return self.mix if self.mix is not None else StepMix.single(self.trace)

    def to_json(self) -> dict[str, Any]:
        return {"model": self.model, "task": self.task, "family": self.family, "batch_size": self.batch_size,
                "seq_len": self.seq_len, "precision": self.precision, "mode": self.mode,
                "lora": None if self.lora_settings is None else self.lora_settings.to_json(self.family),
                "grad_checkpointing": self.grad_checkpointing,
                "trainable_params": self.trace.params, "total_params": self.total_params,
                "padding": self.padding,
                "trace": {"flops": self.trace.flops, "bytes": self.trace.bytes, "kernels": self.trace.kernels,
                          "source": Source.PREDICTED.value},
                **({"lengths": {**dict(self.lengths), "buckets": [[t.seq_len, w] for w, t in self.steps.parts]}}
                   if self.lengths is not None else {})}


def stored_key(model: str, task: str, *, batch_size: int | None = None, seq_len: int | None = None,
               precision: str | None = None, mode: str = "full", lora: LoraSettings | None = None,
               grad_checkpointing: bool = False, padding: str = "max_length") -> str:
    """The store's key of the workload resolve_workload() would return, without tracing it (no
    torch): the model's resolved name, the canonical task and the zoo's defaults for what is None.
    What a client (Setup's oracle check) looks a workload's sweeps up by, as the engine does."""
    from engine.workload.finetune import defaults_for
    from engine.workload.glue import get_task
    from engine.workload.models import resolve_model

    defaults = defaults_for(model)
    return workload_key(resolve_model(model).name, get_task(task).name, batch_size or defaults.batch_size,
                        seq_len or defaults.seq_len, precision or defaults.precision, mode, padding,
                        variant=mode_variant(mode, lora if mode == "lora" else None, grad_checkpointing))


def resolve_workload(
    model: str,
    task: str,
    *,
    batch_size: int | None = None,
    seq_len: int | None = None,
    precision: str | None = None,
    mode: str = "full",
    seed: int = 0,
    allow_download: bool = False,
    lora: LoraSettings | None = None,
    grad_checkpointing: bool = False,
    padding: str = "max_length",
    config: Mapping[str, Any] | None = None,
) -> Workload:
    """The workload a run or sweep of `model` on `task` fine-tunes, with its step trace
    (cached; captured on meta tensors when not). Defaults come from the zoo entry. With
    `padding="dynamic"` its steps are a mix of the lengths a batch pads to under the task's
    published length distribution (engine.workload.lengths), each traced (and cached).
    `config` (a stored workload's definition) is the model's architecture, `model` then only its
    name: the model is rebuilt as it was recorded, whatever the name resolves to now."""
    from engine.core.constants import MODES, PADDINGS, PRECISIONS
    from engine.workload.finetune import defaults_for
    from engine.workload.glue import get_task
    from engine.workload.models import resolve_model
    from engine.workload.sizing import check_memory, estimate_memory

    if mode not in MODES:
        raise ConfigError(f"unknown training mode {mode!r}", f"use one of {', '.join(MODES)}")
    if precision is not None and precision not in PRECISIONS:
        raise ConfigError(f"unknown precision {precision!r}", f"use one of {', '.join(PRECISIONS)}")
    if padding not in PADDINGS:
        raise ConfigError(f"unknown padding {padding!r}", "use --pad dynamic or --pad max")
    for name, value in (("batch size", batch_size), ("sequence length", seq_len)):
        if value is not None and value < 1:
            raise ConfigError(f"{name} must be at least 1, not {value}", f"give a {name} of 1 or more")
    glue = get_task(task)
    resolved = resolve_model(model, allow_download=allow_download) if config is None else _as_recorded(model, config)
    defaults = defaults_for(model)
    batch = batch_size or defaults.batch_size
    length = seq_len or defaults.seq_len
    max_pos = int(resolved.config.get("max_position_embeddings", 512))
    if length > max_pos:
        raise ConfigError(f"sequence length {length} exceeds what {resolved.name} can take ({max_pos} positions)",
                          f"give --max-seq-len {max_pos} or less")
    prec = precision or defaults.precision
    check_memory(estimate_memory(resolved.config, batch, length, prec, mode, lora=lora,
                                 checkpointing=grad_checkpointing), resolved.name, batch, length)
    # From the cache without building the model when this workload was traced before.
    traced = trace_workload(resolved.name, resolved.config, glue, batch_size=batch, seq_len=length,
                            precision=prec, mode=mode, seed=seed, lora=lora, grad_checkpointing=grad_checkpointing)
    mix, lengths = None, None
    if padding == "dynamic":
        mix, lengths = padded_steps(resolved.name, resolved.config, glue, batch_size=batch, seq_len=length,
                                    precision=prec, mode=mode, seed=seed, longest=traced.trace, lora=lora,
                                    grad_checkpointing=grad_checkpointing)
    return Workload(
        model=resolved.name, task=glue.name, family=resolved.family, batch_size=batch, seq_len=length,
        precision=prec, mode=mode, trace=traced.trace if mix is None else mix.mean_trace(length),
        total_params=traced.total_params, spec=str(model), padding=padding, mix=mix, lengths=lengths,
        lora=lora if mode == "lora" else None, grad_checkpointing=grad_checkpointing, config=resolved.config,
    )


def _as_recorded(name: str, config: Mapping[str, Any]) -> Any:
    """A model as a store recorded it (its name and config): a ResolvedModel with no weights to load."""
    from engine.workload.models import ResolvedModel
    from engine.workload.zoo import MODEL_TYPE_FAMILY

    family = MODEL_TYPE_FAMILY.get(str(config.get("model_type")))
    if family is None:
        raise ConfigError(f"{name}: the recorded model type {config.get('model_type')!r} is not one slm-dvfs supports",
                          "leave this workload's results out")
    return ResolvedModel(f"recorded:{name}", dict(config), family, name, None, None)


def padded_steps(name: str, config: Mapping[str, Any], task: GlueTask, *, batch_size: int, seq_len: int,
                 precision: str, mode: str, seed: int = 0, longest: StepTrace | None = None,
                 distribution: Any = None, lora: LoraSettings | None = None,
                 grad_checkpointing: bool = False) -> tuple[StepMix, dict[str, Any]]:
    """The steps of dynamically padded batches of `task` (its published length distribution,
    or `distribution`, an engine.workload.lengths.LengthDistribution): each bucket length a
    batch pads to, traced (cached), weighted by how often a batch's longest example falls in
    it; and the distribution's summary."""
    from engine.workload.lengths import bucket_weights, published

    dist = distribution if distribution is not None else published(task.name)
    parts: list[tuple[float, StepTrace]] = []
    for length, weight in bucket_weights(dist, batch_size, seq_len):
        if longest is not None and length == longest.seq_len:
            trace = longest
        else:
            trace = trace_workload(name, config, task, batch_size=batch_size, seq_len=length, precision=precision,
                                   mode=mode, seed=seed, lora=lora, grad_checkpointing=grad_checkpointing).trace
        parts.append((weight, trace))
    return StepMix(tuple(parts)), dist.summary(seq_len, batch_size)


def trace_workload(name: str, config: Mapping[str, Any], task: GlueTask, *, batch_size: int, seq_len: int,
                   precision: str, mode: str, seed: int = 0, lora: LoraSettings | None = None,
                   grad_checkpointing: bool = False) -> WorkloadTrace:
    """The step trace and parameter count of fine-tuning the model `config` describes on `task`
    (a GlueTask) at this shape: from the cache when this workload was traced before (nothing
    heavy imported), else built on meta tensors and traced (then cached, both here and in the
    tracer's own cache)."""
    if mode == "lora":  # the adapted modules are part of the key: a default target list may change
        from engine.workload.zoo import MODEL_TYPE_FAMILY

        lora = lora or LoraSettings()
        targets = lora.targets_for(MODEL_TYPE_FAMILY.get(str(config.get("model_type")), ""))
        lora_key: dict[str, Any] | None = {"rank": lora.rank, "dropout": lora.dropout, "targets": list(targets)}
    else:
        lora_key = None
    key = trace_key(name, config, task.name, batch_size=batch_size, seq_len=seq_len, precision=precision,
                    mode=mode, lora=lora_key, grad_checkpointing=grad_checkpointing)
    found = cached_workload_trace(key)
    if found is not None:
        return found
    from engine.workload.models import build_model
    from engine.workload.optim import prepare_model
    from engine.workload.tracer import step_trace

    net = build_model(config, task, seed=seed, device="meta")
    total = sum(p.numel() for p in net.parameters())  # the model's own: LoRA's adapters are not counted
    net, _ = prepare_model(net, mode, lora=lora, checkpointing=grad_checkpointing)
    record = step_trace(net, name=name, batch_size=batch_size, seq_len=seq_len, precision=precision)
    found = WorkloadTrace(record.trace, int(total), record.method, cached=False)
    store_workload_trace(key, found)
    return found

