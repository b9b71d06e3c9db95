"""What a LoRA run adapts: rank, alpha, dropout and the target modules, per family by default.

Torch-free values (the CLI, the TUI's forms, the memory estimate and the trace cache's key read
them without importing peft); the wrapping itself goes through the peft library, imported only
when a model is adapted (the `lora` extra installs it).

Default targets are the attention projections the LoRA paper adapts (query and value), named as
each transformers implementation names them; a fused projection (GPT-NeoX's query_key_value,
GPT-2's c_attn, Phi-3's qkv_proj) is adapted whole.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeGuard

from engine.core.constants import Mode
from engine.core.jsontypes import JsonObject, as_float, as_int, as_list, as_object

from engine.core.errors import ConfigError
from engine.core.optional import import_optional
from engine.core.plausible import MAX_LORA_RANK

if TYPE_CHECKING:  # annotations only: peft is imported when a model is wrapped
    from types import ModuleType

    import torch
    from peft import PeftModel

# family (engine.workload.zoo.FAMILIES) -> module names peft's target_modules matches
DEFAULT_TARGETS: dict[str, tuple[str, ...]] = {
    "bert": ("query", "value"),
    "roberta": ("query", "value"),
    "electra": ("query", "value"),
    "distilbert": ("q_lin", "v_lin"),
    "deberta": ("query_proj", "value_proj"),
    "pythia": ("query_key_value",),
    "gpt2": ("c_attn",),
    "opt": ("q_proj", "v_proj"),
    "llama": ("q_proj", "v_proj"),
    "qwen": ("q_proj", "v_proj"),
    "gemma": ("q_proj", "v_proj"),
    "phi": ("qkv_proj",),
}


@dataclass(frozen=True)
class LoraSettings:
    """Low-rank adapters: W + (alpha / rank) * B @ A on each target module."""

    rank: int = 8
    alpha: float = 16.0
    dropout: float = 0.05
    targets: tuple[str, ...] = ()  # empty: the family's DEFAULT_TARGETS

    def __post_init__(self) -> None:
        if isinstance(self.rank, bool) or not isinstance(self.rank, int) or not 1 <= self.rank <= MAX_LORA_RANK:
            raise ConfigError(f"LoRA rank {self.rank!r} is out of range",
                              f"give --lora-rank between 1 and {MAX_LORA_RANK} (8 is usual)")
        if not self.alpha > 0:
            raise ConfigError(f"LoRA alpha {self.alpha!r} must be positive", "give --lora-alpha > 0 (often twice the rank)")
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"LoRA dropout {self.dropout!r} is out of range", "give --lora-dropout in [0, 1)")
        object.__setattr__(self, "targets", tuple(str(t) for t in self.targets))

    def targets_for(self, family: str) -> tuple[str, ...]:
        """The modules to adapt in a model of `family`: the given targets, else the family's default."""
        if self.targets:
            return self.targets
        try:
            return DEFAULT_TARGETS[family]
        except KeyError:
            raise ConfigError(f"no default LoRA targets for family {family!r}",
                              "name the modules with --lora-targets (e.g. q_proj,v_proj)") from None

    def to_json(self, family: str | None = None) -> JsonObject:
        """The settings as JSON, with the modules adapted (the family's default when none were named)."""
        return {"rank": self.rank, "alpha": self.alpha, "dropout": self.dropout,
                "targets": list(self.shown_targets(family))}

    def shown_targets(self, family: str | None) -> tuple[str, ...]:
        """The modules adapted as said to a user: the ones given, else the family's defaults (an
        unknown family: none, and nothing is raised: wrapping the model says what to do)."""
        return self.targets or (DEFAULT_TARGETS.get(family, ()) if family else ())

    @classmethod
    def from_json(cls, data: object) -> "LoraSettings":
        """Settings as to_json wrote them (the targets as given); KeyError, TypeError or ValueError for
        JSON of another shape."""
        d = as_object(data)
        return cls(rank=as_int(d["rank"]), alpha=as_float(d["alpha"]), dropout=as_float(d["dropout"]),
                   targets=tuple(str(t) for t in as_list(d.get("targets") or ())))

    def key(self) -> str:
        """A short stable text for cache keys and run records."""
        return f"r{self.rank}-a{self.alpha:g}-d{self.dropout:g}" + (f"-{'+'.join(self.targets)}" if self.targets else "")


def check_mode_options(mode: Mode, lora: LoraSettings | None) -> None:
    """LoRA settings belong to mode 'lora' only: given for another mode they would be silently unused."""
    if lora is not None and mode != "lora":
        raise ConfigError(f"LoRA settings were given for mode {mode!r}", "add --mode lora, or drop the --lora-* options")


# ---------------------------------------------------------------- wrapping (imports peft and torch)

PEFT_REMEDY = "install the lora extra: pip install -e '.[lora]'"


def _peft() -> ModuleType:
    return import_optional("peft", "LoRA", PEFT_REMEDY)


def is_peft_model(model: object) -> TypeGuard[PeftModel]:
    """Whether `model` is wrapped by peft (a PeftModel), without importing peft."""
    return callable(getattr(model, "get_base_model", None)) and hasattr(model, "peft_config")


def family_of(model: torch.nn.Module) -> str | None:
    """The zoo family of a transformers model (through a peft wrapper), or None."""
    from engine.workload.zoo import MODEL_TYPE_FAMILY

    config = getattr(model, "config", None)
    return MODEL_TYPE_FAMILY.get(str(getattr(config, "model_type", None)))


def linear_module_names(model: torch.nn.Module) -> tuple[str, ...]:
    """The distinct leaf names of the model's linear layers: what --lora-targets can name."""
    import torch

    names = {name.rsplit(".", 1)[-1] for name, module in model.named_modules()
             if name and (isinstance(module, torch.nn.Linear) or type(module).__name__ == "Conv1D")}
    return tuple(sorted(names))


def wrap_lora(model: torch.nn.Module, settings: LoraSettings, family: str | None = None,
              modules_to_save: tuple[str, ...] = ()) -> PeftModel:
    """`model` with peft's LoRA adapters on the target modules and the head trained whole (peft's
    classifier/score, plus `modules_to_save`); everything else frozen. Returns the PeftModel
    (peft adapts `model` in place)."""
    if is_peft_model(model):
        return model
    family = family or family_of(model)
    targets = settings.targets_for(family or type(model).__name__)
    available = linear_module_names(model)
    missing = [t for t in targets if t not in available]
    if missing:
        raise ConfigError(
            f"LoRA target module(s) {', '.join(missing)} are not in {type(model).__name__}",
            f"name linear modules it has with --lora-targets: {', '.join(available) or 'none found'}")
    peft = _peft()
    config = peft.LoraConfig(
        task_type=peft.TaskType.SEQ_CLS, r=settings.rank, lora_alpha=settings.alpha,
        lora_dropout=settings.dropout, target_modules=list(targets),
        modules_to_save=list(modules_to_save) or None,
        fan_in_fan_out=family == "gpt2",  # GPT-2's Conv1D stores its weight transposed
    )
    with warnings.catch_warnings():  # peft asks a deprecated transformers property; not the user's concern
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        return peft.get_peft_model(model, config)
