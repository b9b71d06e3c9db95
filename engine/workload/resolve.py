"""What a run fine-tunes, resolved once before anything runs.

`resolve_workload` turns a `WorkloadSpec` (engine.workload.spec) into the `Workload` every stage of a
run uses: the named spec (its key, the model's name and config) and the step trace every twin figure
is computed from (meta tensors: nothing is allocated; a workload traced before comes from
`trace_cache` without importing torch).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Mapping

from engine.core.constants import Mode, Padding, Precision
from engine.core.errors import ConfigError
from engine.core.jsontypes import JsonObject, JsonValue, as_int
from engine.core.provenance import Source
from engine.core.trace import StepMix, StepTrace
from engine.workload.lora import LoraSettings
from engine.workload.spec import WorkloadSpec
from engine.workload.trace.loop import Loop, with_loop
from engine.workload.trace.trace_cache import WorkloadTrace, cached_workload_trace, store_workload_trace, trace_key

if TYPE_CHECKING:
    from engine.workload.data.lengths import LengthDistribution
    from engine.workload.models import ResolvedModel
    from engine.workload.sizing import MemoryFit

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Workload:
    """One fine-tuning workload, resolved once for every stage of a run: its named spec (the store's key,
    the model's name and config) and its step trace."""

    spec: WorkloadSpec  # named: the model's name and config, the canonical task, every default filled in
    family: str  # one of engine.workload.zoo.FAMILIES
    trace: StepTrace  # an average step (max_length: the one step shape; dynamic: StepMix.mean_trace)
    total_params: int
    mix: StepMix | None = None  # the steps at each padded length with their weights; None: `trace` alone
    lengths: Mapping[str, JsonValue] | None = None  # the length distribution's summary (dynamic padding)
    # Where the model came from (its weights, if any): what the trainer loads, not looked up again.
    model_ref: ResolvedModel | None = field(default=None, compare=False, repr=False)

    @property
    def model(self) -> str:
        """The model's display name, e.g. "bert-tiny" (the store's key holds it)."""
        return str(self.spec.name)

    @property
    def task(self) -> str:
        return self.spec.task

    @property
    def batch_size(self) -> int:
        return int(self.spec.batch_size or 0)

    @property
    def seq_len(self) -> int:
        return int(self.spec.seq_len or 0)

    @property
    def precision(self) -> Precision:
        """What the Orin runs (16-bit stays 16-bit on the twin)."""
        return self.spec.named_precision

    @property
    def mode(self) -> Mode:
        return self.spec.mode

    @property
    def lora(self) -> LoraSettings | None:
        """Mode "lora": the adapters' settings as given (None: the defaults); None for other modes."""
        return self.spec.lora if self.spec.mode == "lora" else None

    @property
    def grad_checkpointing(self) -> bool:
        return self.spec.grad_checkpointing

    @property
    def padding(self) -> Padding:
        return self.spec.padding

    @property
    def loop(self) -> Loop:
        """The training loop whose host side its steps carry (engine/workload/trace/loop.py)."""
        return self.spec.loop

    @property
    def config(self) -> Mapping[str, object] | None:
        """The model's config as resolved: what the store keeps to rebuild it."""
        return self.spec.config

    @property
    def key(self) -> str:
        """What the store keys this workload by (WorkloadSpec.key)."""
        return self.spec.key

    def check_memory(self, mem_total_bytes: int | None) -> MemoryFit | None:
        """This workload's step against the memory of a board whose MemTotal is `mem_total_bytes`
        (check_workload_memory): for a workload resolved before its board was known. None for one
        made from a step trace alone, with no model config to estimate from (a benchmark's, a test's)."""
        if self.model_ref is not None:
            resolved = self.model_ref
        elif self.spec.config is not None:  # a named spec (resolve_workload's) carries its model's config
            resolved = self.spec.resolved_model()
        else:
            return None
        return check_workload_memory(self.spec, resolved, mem_total_bytes)

    @property
    def lora_settings(self) -> LoraSettings | None:
        """The LoRA settings the run uses (the defaults when none were given); None unless mode 'lora'."""
        return self.spec.lora_settings

    @property
    def steps(self) -> StepMix:
        """What the twin runs for one step of this workload (the weighted buckets of dynamic padding)."""
        return self.mix if self.mix is not None else StepMix.single(self.trace)

    def to_json(self) -> JsonObject:
        return {"model": self.model, "task": self.task, "family": self.family, "batch_size": self.batch_size,
                "seq_len": self.seq_len, "precision": self.precision, "mode": self.mode,
                "lora": None if self.lora_settings is None else self.lora_settings.to_json(self.family),
                "grad_checkpointing": self.grad_checkpointing,
                "trainable_params": self.trace.params, "total_params": self.total_params,
                "padding": self.padding, "loop": self.loop,
                "trace": {"flops": self.trace.flops, "bytes": self.trace.bytes, "kernels": self.trace.kernels,
                          "source": Source.PREDICTED.value},
                **({"lengths": {**dict(self.lengths), "buckets": [[t.seq_len, w] for w, t in self.steps.parts]}}
                   if self.lengths is not None else {})}


def check_workload_memory(named: WorkloadSpec, resolved: ResolvedModel, mem_total_bytes: int | None = None, *,
                          cuda: bool = True) -> MemoryFit:
    """The one memory check of a workload before anything is built (run, sweep, a fleet board, the
    trainer): the named spec's step estimated from its model's config, against the budget of a
    board whose MemTotal is `mem_total_bytes` (engine.device.meminfo; None: the AGX Orin 64GB's).
    Raises MemoryFitError (a ConfigError with the estimate and the remedies) when it does not fit."""
    from engine.workload.sizing import check_memory, estimate_memory

    batch, length = int(named.batch_size or 0), int(named.seq_len or 0)
    return check_memory(estimate_memory(resolved.config, batch, length, named.named_precision, named.mode,
                                        lora=named.lora, checkpointing=named.grad_checkpointing),
                        resolved.name, batch, length, cuda=cuda, mem_total_bytes=mem_total_bytes)


def resolve_workload(spec: WorkloadSpec, *, mem_total_bytes: int | None = None) -> Workload:
    """The workload `spec` asks for, with its step trace (cached; captured on meta tensors when not).
    Defaults come from the zoo entry. With dynamic padding its steps are a mix of the lengths a batch
    pads to under the task's published length distribution (engine.workload.data.lengths), each traced (and
    cached). A spec with a recorded config (a stored workload's) is rebuilt as it was recorded, whatever
    its name resolves to now. Refused (ConfigError) before anything is traced when the model cannot take
    the length or its step would not fit the memory of the board whose MemTotal is `mem_total_bytes`
    (None: the AGX Orin 64GB's; `check_workload_memory`)."""
    resolved = spec.resolved_model()
    named = spec.named(resolved)
    length = int(named.seq_len or 0)
    max_pos = as_int(resolved.config.get("max_position_embeddings", 512))
    if length > max_pos:
        raise ConfigError(f"sequence length {length} exceeds what {resolved.name} can take ({max_pos} positions)",
                          f"give --max-seq-len {max_pos} or less")
    check_workload_memory(named, resolved, mem_total_bytes)
    # From the cache without building the model when this workload was traced before.
    traced = trace_workload(named)
    # The trace is the model's work, cached per shape; the loop's host side is the spec's.
    traced = replace(traced, trace=with_loop(traced.trace, named.loop))
    mix, lengths = None, None
    if named.padding == "dynamic":
        mix, lengths = padded_steps(named, longest=traced.trace)
    return Workload(spec=named, family=resolved.family, trace=traced.trace if mix is None else mix.mean_trace(length),
                    total_params=traced.total_params, mix=mix, lengths=lengths, model_ref=resolved)


def padded_steps(spec: WorkloadSpec, *, longest: StepTrace | None = None,
                 distribution: LengthDistribution | None = None) -> tuple[StepMix, JsonObject]:
    """The steps of dynamically padded batches of the named `spec`'s task (its published length
    distribution, or `distribution`, an engine.workload.data.lengths.LengthDistribution): each bucket length a
    batch pads to, traced (cached), weighted by how often a batch's longest example falls in it; and the
    distribution's summary. `longest`: the step at the full length, when traced already."""
    from engine.workload.data.lengths import bucket_weights, published

    dist = distribution if distribution is not None else published(spec.task)
    seq_len, batch_size = int(spec.seq_len or 0), int(spec.batch_size or 0)
    parts: list[tuple[float, StepTrace]] = []
    for length, weight in bucket_weights(dist, batch_size, seq_len):
        if longest is not None and length == longest.seq_len:
            trace = longest
        else:
            trace = with_loop(trace_workload(spec, seq_len=length).trace, spec.loop)
        parts.append((weight, trace))
    return StepMix(tuple(parts)), dist.summary(seq_len, batch_size)


def trace_workload(spec: WorkloadSpec, *, seq_len: int | None = None) -> WorkloadTrace:
    """The step trace and parameter count of fine-tuning the named `spec`'s model (its config) on its
    task at its shape (`seq_len`: another length, a padded bucket's): from the cache when this workload
    was traced before (nothing heavy imported), else traced on meta tensors (then cached, both here and,
    for a model built whole, in the tracer's own cache). A model whose layers are copies is not built
    whole: its trace is derived, exactly, from its one- and two-layer copies (trace/derive.py)."""
    if spec.config is None or spec.name is None:
        raise ConfigError(f"the workload of {spec.model} is not resolved", "trace a named spec (WorkloadSpec.named())")
    key = trace_key(spec, seq_len=seq_len)
    found = cached_workload_trace(key)
    if found is not None:
        return found
    from engine.workload.trace.derive import derive_by_layers

    length = int(seq_len or spec.seq_len or 0)
    derived = derive_by_layers(spec.config, lambda config: _trace_built(spec, config, length, cache=False))
    trace, total, method = derived if derived is not None else _trace_built(spec, spec.config, length, cache=True)
    found = WorkloadTrace(trace, total, method, cached=False)
    store_workload_trace(key, found)
    return found


def _trace_built(spec: WorkloadSpec, config: Mapping[str, object], seq_len: int, *,
                 cache: bool) -> tuple[StepTrace, int, str]:
    """The trace, total parameters and capture method of `spec`'s step with the model built from `config`
    on meta tensors. `cache`: through the tracer's cache (the full model's; a shallow copy is not kept)."""
    from engine.workload.glue import get_task
    from engine.workload.models import build_model
    from engine.workload.training.optim import prepare_model
    from engine.workload.trace.tracer import capture_step_trace, step_trace

    net = build_model(config, get_task(spec.task), seed=spec.seed, device="meta")
    total = sum(p.numel() for p in net.parameters())  # the model's own: LoRA's adapters are not counted
    trained, _ = prepare_model(net, spec.mode, lora=spec.lora_settings, checkpointing=spec.grad_checkpointing)
    trace = step_trace if cache else capture_step_trace
    record = trace(trained, name=str(spec.name), batch_size=int(spec.batch_size or 0), seq_len=seq_len,
                   precision=spec.named_precision)
    return record.trace, int(total), record.method
