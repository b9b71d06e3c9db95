"""A model configuration's sanity and whether its training fits, checked before anything allocates.

`check_config` refuses dimensions no model has (negative or zero sizes, heads that do not
divide the hidden size, an absurd vocabulary) with a ConfigError naming the key.
`estimate_memory` (engine.workload.sizing.memory) adds up what a fine-tuning step holds at its peak;
`memory_fit` sets it against the board's budget and finds what would make it fit, and
`check_memory` refuses a step over the budget with the estimate and those remedies, before
any model is built.

The budget is the memory Linux sees on the board less a reserve for L4T and the desktop
(`board_budget`, `os_reserve_bytes`): a caller that read the board's /proc/meminfo
(engine.device.meminfo) passes its MemTotal; the AGX Orin 64GB's when unknown. Jetson memory
is unified: CPU and GPU share the budget. All torch-free (the TUI's Setup shows the fit live).
"""

from __future__ import annotations

from typing import Mapping

from engine.core.errors import ConfigError
from engine.workload.sizing.fit import (MemoryFit, MemoryFitError, Remedy, board_budget, check_memory, memory_fit,
                                        os_reserve_bytes)
from engine.workload.sizing.memory import (DEFAULT_BOARD_MEMORY_BYTES, DEFAULT_BUDGET_BYTES, GIB, ORIN_MEMTOTAL_BYTES,
                                    OS_RESERVE_BYTES, MemoryEstimate, estimate_memory, estimate_params,
                                    trainable_params)
from engine.workload.zoo import dims

__all__ = ["LIMITS", "check_config", "MemoryEstimate", "MemoryFit", "Remedy", "estimate_memory",
           "estimate_params", "trainable_params", "memory_fit", "check_memory", "board_budget", "os_reserve_bytes", "MemoryFitError", "GIB",
           "DEFAULT_BOARD_MEMORY_BYTES", "DEFAULT_BUDGET_BYTES", "ORIN_MEMTOTAL_BYTES", "OS_RESERVE_BYTES"]

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


def check_config(config: Mapping[str, object], name: str = "the model") -> None:
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
