"""What a run fine-tunes, as one value: `WorkloadSpec`, and the one key of a workload.

A spec is what the user asked for (the CLI's flags, the TUI's Setup form, a fleet job, a library
caller): a model reference (zoo name, hub id, checkpoint folder or config.json), a GLUE task, the
batch, length and precision (None: the zoo entry's), the training mode with its variant (LoRA
settings, gradient checkpointing), the padding, the data source and the seed. `named()` resolves
it without torch: the model's display name and config, the canonical task, the zoo's defaults
filled in. `key` is what the store, the baseline lookup, the selector, the TUI and the fleet know a
workload by; no other code builds one. `engine.workload.resolve.resolve_workload` turns a spec into
the `Workload` every stage uses (its step trace), once per run.

A spec may also stand for a stored workload (`WorkloadRecord.spec`): its model is then its recorded
name with its recorded config, never resolved again by name (a config file's stem may name a zoo
model of another architecture).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Mapping

from engine.core.constants import (DEFAULT_BATCH_SIZE, DEFAULT_PADDING, DEFAULT_SEQ_LEN, Mode, Padding, Precision,
                                   parse_mode, parse_padding, parse_precision)
from engine.core.errors import ConfigError
from engine.core.jsontypes import JsonObject
from engine.workload.lora import LoraSettings, check_mode_options
from engine.workload.trace.loop import DEFAULT_LOOP, Loop, parse_loop

if TYPE_CHECKING:
    from engine.workload.models import ResolvedModel

MAX_SEED = 2**32  # NumPy's seeds are 0 to 2**32-1


@dataclass(frozen=True)
class Defaults:
    batch_size: int
    seq_len: int
    precision: Precision


def defaults_for(model: str) -> Defaults:
    """Batch, length and precision of the zoo entry `model` names (or matches); else the general defaults."""
    from engine.workload.models import resolve_model

    try:
        entry = resolve_model(model).entry
    except ConfigError:
        entry = None
    if entry is None:
        return Defaults(DEFAULT_BATCH_SIZE, DEFAULT_SEQ_LEN, "fp32")
    return Defaults(entry.batch_size, entry.seq_len, entry.precision)


@dataclass(frozen=True)
class WorkloadSpec:
    """One fine-tuning workload, as asked for or as stored (see the module's docstring)."""

    model: str  # what to build: zoo name, hub id, checkpoint folder or config.json (a stored one: its name)
    task: str  # a GLUE task, any common spelling (named: the canonical key, e.g. "sst2")
    batch_size: int | None = None  # None: the zoo entry's
    seq_len: int | None = None  # the maximum length a batch pads to; None: the zoo entry's
    precision: Precision | None = None  # None: the zoo entry's
    mode: Mode = "full"
    lora: LoraSettings | None = None  # mode "lora": the adapters' settings (None: the defaults)
    grad_checkpointing: bool = False
    padding: Padding = DEFAULT_PADDING
    # the training loop its steps run in (engine/workload/trace/loop.py): lean, slm-dvfs's own, unless named;
    # a command picks it with default_loop / check_loop_for (hf only where the twin alone computes)
    loop: Loop = DEFAULT_LOOP
    data: str = "synthetic"  # where the text comes from: "synthetic" | "hub" | a GLUE folder (not in the key)
    seed: int = 0  # of weights, data and order (not in the key: runs of two seeds are one workload)
    allow_download: bool = False  # a hub id's config and weights may be fetched
    name: str | None = None  # the model's display name once named (what the key holds); None: not yet
    # The model's definition once named (or as a store recorded it, schema v11): what rebuilds exactly this
    # model, whatever its name says. None: not named yet, or a store row from before v11.
    config: Mapping[str, object] | None = field(default=None, hash=False, repr=False)

    def validate(self) -> None:
        """Every field in range (a clear error naming the flag), before anything is resolved. The fixed
        sets are parsed here once for a library caller (the CLI and the TUI parsed them already): nothing
        after a spec checks them again."""
        parse_mode(self.mode)
        if self.precision is not None:
            parse_precision(self.precision)
        parse_padding(self.padding)
        parse_loop(self.loop)
        check_mode_options(self.mode, self.lora)
        for what, flag, value in (("batch size", "--batch-size", self.batch_size),
                                  ("sequence length", "--max-seq-len", self.seq_len)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ConfigError(f"{what} must be a whole number of at least 1, not {value!r}",
                                  f"give {flag} 1 or more")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not 0 <= self.seed < MAX_SEED:
            raise ConfigError(f"seed {self.seed!r} is out of range (NumPy takes 0 to 2**32-1)",
                              f"give --seed from 0 to {MAX_SEED - 1}")

    # ------------------------------------------------------------------ naming (torch-free)
    @property
    def is_named(self) -> bool:
        """Whether the model's name and the shape are settled (named(), a Workload's or a record's spec)."""
        return (self.name is not None and self.batch_size is not None and self.seq_len is not None
                and self.precision is not None)

    @property
    def named_precision(self) -> Precision:
        """The precision of a named spec (named() filled the zoo's in); a ConfigError before it is named."""
        if self.precision is None:
            raise ConfigError(f"the workload {self.model} on {self.task} has no precision yet",
                              "name it first (WorkloadSpec.named())")
        return self.precision

    def resolved_model(self) -> ResolvedModel:
        """Where the model reference points (engine.workload.models.ResolvedModel), without building it.
        With a config (named, or recorded) the model is that config: the reference's resolution only when
        it still gives that very config (its weights, if any), else the model as recorded, whatever its
        name resolves to now."""
        from engine.workload.models import resolve_model

        if self.config is None:
            return resolve_model(self.model, allow_download=self.allow_download)
        try:
            found = resolve_model(self.model)
        except ConfigError:  # a recorded name that is no zoo model, a file gone since
            found = None
        if found is not None and dict(found.config) == dict(self.config):
            return found
        return as_recorded(self.name or self.model, self.config)

    def named(self, resolved: ResolvedModel | None = None) -> WorkloadSpec:
        """This workload with its model's name and config, the canonical task and the zoo's defaults for
        what was left None (checked; no torch). A named spec with its config is returned as it is; one
        without (a store row from before schema v11) gets the config its name resolves to. `resolved`:
        the model's resolution when the caller has it (it is not looked up again)."""
        if self.is_named and self.config is not None:
            return self
        from engine.workload.glue import get_task

        self.validate()
        model = resolved or self.resolved_model()
        if self.is_named:
            return replace(self, config=dict(model.config))
        defaults = defaults_for(self.model)
        return replace(self, task=get_task(self.task).name, batch_size=self.batch_size or defaults.batch_size,
                       seq_len=self.seq_len or defaults.seq_len, precision=self.precision or defaults.precision,
                       lora=self.lora if self.mode == "lora" else None, name=model.name, config=dict(model.config))

    # ------------------------------------------------------------------ identity
    @property
    def lora_settings(self) -> LoraSettings | None:
        """The LoRA settings a run uses (the defaults when none were given); None unless mode 'lora'."""
        return (self.lora or LoraSettings()) if self.mode == "lora" else None

    @property
    def variant(self) -> str:
        """What the mode leaves unsaid and a step's cost depends on: the LoRA settings (rank and targets
        shape the adapters; dropout adds operators) and gradient checkpointing."""
        parts = []
        if self.mode == "lora":
            parts.append(f"lora-{(self.lora or LoraSettings()).key()}")
        if self.grad_checkpointing:
            parts.append("ckpt")
        return "+".join(parts)

    @property
    def key(self) -> str:
        """What the store knows this workload by: the one definition of a workload's identity. What was
        added to a workload later is in it only when used, so the keys of workloads stored before stay the
        same: the variant, dynamic padding (rows stored before padding was part of a workload mean
        max_length; dynamic padding is another workload: its steps are shorter) and a loop other than
        slm-dvfs's own lean loop (`|loop=hf`: the Trainer-style loop's host side is another workload; rows
        stored before the loop was recorded ran the lean loop, engine/workload/trace/loop.py). The data
        source and the seed are not in it."""
        n = self if self.is_named else self.named()
        key = f"{n.name}|{n.task}|{n.batch_size}|{n.seq_len}|{n.precision}|{n.mode}" + (
            f"|{n.variant}" if n.variant else "")
        key = key if n.padding == "max_length" else f"{key}|pad={n.padding}"
        return key if n.loop == DEFAULT_LOOP else f"{key}|loop={n.loop}"

    def to_json(self) -> JsonObject:
        return {"model": self.model, "task": self.task, "batch_size": self.batch_size, "seq_len": self.seq_len,
                "precision": self.precision, "mode": self.mode,
                "lora": None if self.lora is None else self.lora.to_json(),
                "grad_checkpointing": self.grad_checkpointing, "padding": self.padding, "loop": self.loop, "data": self.data,
                "seed": self.seed, "allow_download": self.allow_download, "name": self.name}


def loop_in_key(key: str) -> str:
    """The loop a store key names (WorkloadSpec.key puts a loop other than lean last, as `|loop=NAME`), lean
    where it names none (every row stored before the loop was recorded); as text: a stored row's reader
    parses it and names the row if it is not a loop."""
    _rest, _bar, last = key.rpartition("|")
    return last[len("loop="):] if last.startswith("loop=") else DEFAULT_LOOP


def as_recorded(name: str, config: Mapping[str, object]) -> ResolvedModel:
    """A model as a store recorded it (its name and config): a ResolvedModel with no weights to load."""
    from engine.workload.models import ResolvedModel
    from engine.workload.zoo import MODEL_TYPE_FAMILY

    family = MODEL_TYPE_FAMILY.get(str(config.get("model_type")))
    if family is None:
        raise ConfigError(f"{name}: the recorded model type {config.get('model_type')!r} is not one slm-dvfs supports",
                          "leave this workload's results out")
    return ResolvedModel(f"recorded:{name}", dict(config), family, name, None, None)
