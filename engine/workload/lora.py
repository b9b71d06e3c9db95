"""What a LoRA run adapts: rank, alpha, dropout and the target modules, per family by default.

Torch-free values (the CLI, the TUI's forms, the memory estimate and the trace cache's key read
them without importing peft); the wrapping itself goes through the peft library, imported only
when a model is adapted (the `lora` extra installs it).

Default targets are the attention projections the LoRA paper adapts (query and value), named as
each transformers implementation names them; a fused projection (GPT-NeoX's query_key_value,
GPT-2's c_attn, Phi-3's qkv_proj) is adapted whole.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.core.errors import ConfigError

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
        if isinstance(self.rank, bool) or not isinstance(self.rank, int) or not 1 <= self.rank <= 4096:
            raise ConfigError(f"LoRA rank {self.rank!r} is out of range", "give --lora-rank between 1 and 4096 (8 is usual)")
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

    def key(self) -> str:
        """A short stable text for cache keys and run records."""
        return f"r{self.rank}-a{self.alpha:g}-d{self.dropout:g}" + (f"-{'+'.join(self.targets)}" if self.targets else "")
