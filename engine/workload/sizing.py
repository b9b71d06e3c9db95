"""A model configuration's sanity and its training memory, checked before anything allocates.

`check_config` refuses dimensions no model has (negative or zero sizes, heads that do not
divide the hidden size, an absurd vocabulary) with a ConfigError naming the key.
`estimate_memory` adds up what a fine-tuning step holds: weights, gradients, the AdamW
state and the activations at the batch and length (the per-layer activation count of
Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models", 2022:
s*b*h*(34 + 5*a*s/h) bytes at 16 bits), and `check_memory` refuses an estimate over the
board's memory with the figures and the largest batch that would fit.

The board's memory defaults to the AGX Orin 64GB's 64 GiB (`DEFAULT_BOARD_MEMORY_BYTES`),
shared by CPU and GPU; a caller that knows the board's memory passes it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from engine.core.errors import ConfigError
from engine.workload.zoo import dims

GIB = 1024**3
DEFAULT_BOARD_MEMORY_BYTES = 64 * GIB  # the AGX Orin 64GB's unified LPDDR5

# key -> (lowest, highest): beyond these no model of the families we train exists.
LIMITS: dict[str, tuple[int, int]] = {
    "hidden_size": (1, 65_536),
    "num_hidden_layers": (1, 1_024),
    "num_attention_heads": (1, 1_024),
    "intermediate_size": (1, 1_048_576),
    "vocab_size": (1, 4_000_000),
    "max_position_embeddings": (1, 1_048_576),
    "type_vocab_size": (0, 1_024),
}


def check_config(config: Mapping[str, Any], name: str = "the model") -> None:
    """Refuse a configuration with impossible dimensions (ConfigError, naming the key)."""
    remedy = "fix the config.json (as save_pretrained writes it), or use a zoo model (profiles/models.toml)"
    config = {**config, **dims(config)}  # GPT-2 and DistilBERT name their dimensions differently
    for key, (low, high) in LIMITS.items():
        if key not in config:
            continue  # transformers fills in its default
        value = config[key]
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{name}: {key} must be a whole number, not {value!r}", remedy)
        if not low <= value <= high:
            raise ConfigError(f"{name}: {key} {value} is out of range ({low} to {high})", remedy)
    hidden, heads = config.get("hidden_size"), config.get("num_attention_heads")
    if isinstance(hidden, int) and isinstance(heads, int) and hidden % heads:
        raise ConfigError(f"{name}: {heads} attention heads do not divide the hidden size {hidden}",
                          "give a num_attention_heads that divides hidden_size")


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes a fine-tuning step holds (estimated)."""

    params: int
    weights: int
    gradients: int
    optimizer: int
    activations: int
    activations_per_sample: int

    @property
    def total(self) -> int:
        return self.weights + self.gradients + self.optimizer + self.activations

    def describe(self) -> str:
        parts = (("weights", self.weights), ("gradients", self.gradients), ("AdamW state", self.optimizer),
                 ("activations", self.activations))
        return f"{self.total / GIB:,.1f} GiB (" + ", ".join(f"{k} {v / GIB:,.1f}" for k, v in parts) + ")"


def estimate_params(config: Mapping[str, Any]) -> int:
    """Parameters of the backbone and a small head, from the configuration alone."""
    config = {**config, **dims(config)}
    h = int(config.get("hidden_size", 768))
    layers = int(config.get("num_hidden_layers", 12))
    inter = int(config.get("intermediate_size", 4 * h))
    vocab = int(config.get("vocab_size", 30_522))
    embed = vocab * h
    if config.get("model_type") == "bert":  # learned positions and token types, and the pooler
        embed += (int(config.get("max_position_embeddings", 512)) + int(config.get("type_vocab_size", 2))) * h
        embed += h * h + h
    per_layer = 4 * h * h + 2 * h * inter + inter + 9 * h
    return embed + layers * per_layer + 2 * h + 3 * h


def estimate_memory(config: Mapping[str, Any], batch_size: int, seq_len: int, precision: str = "fp32",
                    mode: str = "full") -> MemoryEstimate:
    """What a training step of `config` at (batch, length) holds; see the module's doc."""
    params = estimate_params(config)
    config = {**config, **dims(config)}
    h = int(config.get("hidden_size", 768))
    layers = int(config.get("num_hidden_layers", 12))
    heads = int(config.get("num_attention_heads", 12))
    width = 1 if precision == "fp32" else 0  # fp32 activations take twice the 16-bit figure
    per_sample = layers * seq_len * h * (34 + 5 * heads * seq_len // max(1, h)) << width
    trained = params if mode == "full" else params // 100  # BitFit: biases and the head
    return MemoryEstimate(
        params=params, weights=4 * params, gradients=4 * trained, optimizer=8 * trained,
        activations=per_sample * batch_size, activations_per_sample=per_sample,
    )


def check_memory(estimate: MemoryEstimate, name: str, batch_size: int, seq_len: int,
                 memory_bytes: int = DEFAULT_BOARD_MEMORY_BYTES) -> None:
    """Refuse a step that would not fit `memory_bytes`, with the estimate and what would fit."""
    if estimate.total <= memory_bytes:
        return
    fixed = estimate.total - estimate.activations
    fits = (memory_bytes - fixed) // max(1, estimate.activations_per_sample)
    if fits >= 1:
        remedy = f"use --batch-size {min(fits, batch_size - 1)} or less, or a shorter --max-seq-len"
    elif estimate.weights + estimate.activations_per_sample <= memory_bytes:
        remedy = "the model's training state alone does not fit: try --mode bitfit, or use a smaller model"
    else:
        remedy = "the model alone does not fit: use a smaller model"
    raise ConfigError(
        f"{name} at batch {batch_size}, length {seq_len} needs an estimated {estimate.describe()}, more than "
        f"the board's {memory_bytes / GIB:,.0f} GiB", remedy)
