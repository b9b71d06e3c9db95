"""Setup's zoo listing and its live memory estimate (no Textual, no torch).

`zoo_rows` lists every zoo model with its family, size and defaults (the model picker);
`memory_line` is the form's workload's estimated peak memory against what the board leaves
for training (engine.workload.sizing, from the zoo's config or a local config.json; a hub id
is estimated once the run resolves it), with what would make it fit in the form's terms.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.core.constants import DEFAULT_BATCH_SIZE, DEFAULT_SEQ_LEN, Precision, parse_mode, parse_precision
from engine.core.errors import SlmDvfsError
from engine.core.units import format_bytes
from tui.forms import SetupValues, int_or_none, lora_settings, zoo_names


@dataclass(frozen=True)
class ZooRow:
    """One zoo model as the model picker lists it."""

    name: str
    family: str
    params: int
    batch_size: int
    seq_len: int
    precision: str

    def label(self) -> str:
        return f"{self.name:<24} {self.family:<10} {params_text(self.params):>6}  " \
               f"b{self.batch_size} L{self.seq_len} {self.precision}"


@functools.lru_cache(maxsize=1)
def zoo_rows() -> tuple[ZooRow, ...]:
    """Every zoo model, smallest first."""
    from engine.workload.zoo import load_zoo

    try:
        entries = load_zoo().values()
    except SlmDvfsError:
        return ()
    rows = (ZooRow(e.name, e.family, e.params, e.batch_size, e.seq_len, e.precision) for e in entries)
    return tuple(sorted(rows, key=lambda r: r.params))


def params_text(n: int) -> str:
    """4386178 -> "4.4M", 2506176512 -> "2.51B"."""
    return f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.1f}M"


# Remedies as the form would apply them: CLI flag -> the field it sets (the form has no
# gradient checkpointing, so a remedy that needs it is not offered here).
_REMEDY_FIELDS = {"--batch-size": "batch size", "--precision": "precision", "--mode": "mode",
                  "--max-seq-len": "seq length", "--model": "model"}


def memory_status(values: SetupValues, mem_total_bytes: int | None = None) -> MemoryLine:
    """The workload's estimated peak memory against the board whose MemTotal is `mem_total_bytes`
    (None: the AGX Orin 64GB's), as every run checks it, in one or two lines: "memory:
    fits: 3.2 GiB of 58.4 GiB (...)" or "memory: does not fit: ...; try mode lora"; for a hub
    id, that it is estimated once the model is resolved. Torch-free."""
    from engine.workload.sizing import estimate_memory, memory_fit

    errors = values.errors()
    if any(k in errors for k in ("model", "batch_size", "seq_len", "lora_rank")):
        return MemoryLine("memory: estimated once the fields marked in red are fixed")
    try:
        found = _config_for(values.model.strip())
        if found is None:
            return MemoryLine("memory: estimated once the model is resolved (hub ids are read when the run starts)")
        name, config, defaults = found
        batch = int_or_none(values.batch_size) or defaults[0]
        length = int_or_none(values.seq_len) or defaults[1]
        precision = defaults[2] if values.precision == "default" else parse_precision(values.precision)
        positions = int(config.get("max_position_embeddings", length))
        if length > positions:
            return MemoryLine(f"memory: seq length {length} exceeds the {positions} positions {name} takes")
        fit = memory_fit(estimate_memory(config, batch, length, precision, parse_mode(values.mode),
                                         lora=lora_settings(values)), name, mem_total_bytes=mem_total_bytes)
    except SlmDvfsError as exc:
        return MemoryLine(f"memory: {exc.what}")
    parts = ", ".join(f"{k} {format_bytes(v)}" for k, v in fit.estimate.parts())
    head = fit.summary().split("; try ")[0]
    if fit.fits:
        return MemoryLine(f"memory: {head} (estimate: {parts}) [predicted]")
    tries = [t for t in (_as_fields(r.flags) for r in fit.remedies) if t][:2]
    advice = "; try " + " or ".join(tries) if tries else "; try a smaller model"
    return MemoryLine(f"memory: {head}{advice} (estimate: {parts}) [predicted]", over=True)


def memory_line(values: SetupValues) -> str:
    """memory_status's line alone."""
    return memory_status(values).text


@dataclass(frozen=True)
class MemoryLine:
    text: str
    over: bool = False  # the step does not fit the board: Setup marks the line (by this, never by its text)


def _as_fields(flags: str) -> str | None:
    words, out = flags.split(), []
    for flag, value in zip(words[::2], words[1::2]):
        if flag not in _REMEDY_FIELDS or len(words) % 2:
            return None
        out.append(f"{_REMEDY_FIELDS[flag]} {value}")
    return ", ".join(out) or None


def _config_for(spec: str) -> tuple[str, Mapping[str, Any], tuple[int, int, Precision]] | None:
    """A zoo model's or a local config.json's architecture and defaults; None for a hub id
    (its config is read when the run resolves it)."""
    name = next((n for n in zoo_names() if n.lower() == spec.lower()), None)
    if name is not None:
        from engine.workload.zoo import get_entry

        entry = get_entry(name)
        return name, entry.config, (entry.batch_size, entry.seq_len, entry.precision)
    path = Path(spec).expanduser()
    if not (path.is_file() or path.is_dir()):
        return None
    from engine.workload.models import resolve_model  # reads the config.json; builds nothing

    resolved = resolve_model(str(path))
    known = resolved.entry
    if known is not None:
        return resolved.name, resolved.config, (known.batch_size, known.seq_len, known.precision)
    return resolved.name, resolved.config, (DEFAULT_BATCH_SIZE, DEFAULT_SEQ_LEN, "fp32")
