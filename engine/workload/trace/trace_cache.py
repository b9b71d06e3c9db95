"""A workload's step trace without building its model, when it was traced before; torch-free.

The tracer's cache (`tracer.step_trace`) is keyed by a fingerprint of the *built* model, so
finding a trace there means building the model on meta tensors first: seconds of importing
transformers and torch for a figure that is on disk. Commands that need only the trace and
the model's size (`select`, `sweep --fast`, `run --simulate`) look here first instead: an
entry is keyed by what the model is built from (the architecture config, the task's head,
the shape, precision and mode) together with the tracer's version and the torch and
transformers versions that traced it, and holds the trace and the model's parameter count.
An entry is written whenever a workload is traced through `resolve.trace_workload`, so the second
time a workload is asked for, nothing heavy is imported. Any other library version, or an
unreadable entry, means tracing again, as before.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Mapping

from engine.core.cachefile import store_cache_json
from engine.core.jsontypes import JsonObject, JsonValue
from engine.core.paths import cache_dir
from engine.core.trace import StepTrace

if TYPE_CHECKING:
    from engine.workload.spec import WorkloadSpec

log = logging.getLogger(__name__)

# Bump when the costing rules change: cached traces of older rules are ignored (tracer.py's too).
TRACER_VERSION = 1
ENTRY_VERSION = 1  # the layout of a workload entry


@dataclass(frozen=True)
class WorkloadTrace:
    """A workload's step trace and its model's size."""

    trace: StepTrace  # trace.params: the trainable parameters
    total_params: int  # every parameter of the classification model
    method: str  # how the trace was captured: "meta" | "real-step-scaled"
    cached: bool  # read from this cache rather than traced now


@lru_cache(maxsize=None)  # a distribution lookup scans sys.path: once per process is enough
def _library_version(name: str) -> str:
    from importlib import metadata  # here: importing it costs ~25 ms that `--help` need not pay

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "none"


def trace_key(spec: WorkloadSpec, *, seq_len: int | None = None) -> JsonObject:
    """Everything the trace of a named workload (`seq_len`: at another length, a padded bucket's) depends
    on, without building the model. LoRA (rank, dropout, the modules adapted) and checkpointing enter
    the key only when used, so entries cached before they existed are found again."""
    from engine.workload.zoo import MODEL_TYPE_FAMILY

    config = dict(spec.config or {})
    key: JsonObject = {
        "entry_version": ENTRY_VERSION, "tracer_version": TRACER_VERSION, "name": str(spec.name),
        "config": json.loads(json.dumps(config, sort_keys=True, default=str)), "task": str(spec.task),
        "batch_size": int(spec.batch_size or 0), "seq_len": int(seq_len or spec.seq_len or 0),
        "precision": str(spec.precision), "mode": str(spec.mode),
        # what turns the config into operators: another version may build or dispatch differently
        "torch": _library_version("torch"), "transformers": _library_version("transformers"),
    }
    lora = spec.lora_settings
    if lora is not None:  # the adapted modules are part of the key: a default target list may change
        targets = lora.targets_for(MODEL_TYPE_FAMILY.get(str(config.get("model_type")), ""))
        key["lora"] = {"dropout": lora.dropout, "rank": lora.rank, "targets": list(targets)}
        key["peft"] = _library_version("peft")  # it builds the adapters
    if spec.grad_checkpointing:
        key["grad_checkpointing"] = True
    return key


def entry_path(key: Mapping[str, JsonValue], root: Path | None = None) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", str(key["name"])).strip("_") or "model"
    return (root or cache_dir()) / "traces" / "workloads" / f"{safe}-{digest}.json"


def cached_workload_trace(key: Mapping[str, JsonValue], root: Path | None = None) -> WorkloadTrace | None:
    """The entry stored under `key`, or None when there is none (or it is unreadable, or not this key's)."""
    path = entry_path(key, root)
    try:
        data = json.loads(path.read_text())
        if data["key"] != dict(key):  # a digest collision, or an entry edited by hand
            return None
        return WorkloadTrace(StepTrace.from_json(data["trace"]), int(data["total_params"]), str(data["method"]),
                             cached=True)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("ignoring unreadable cached workload trace %s (%s); tracing again", path, exc)
        return None


def store_workload_trace(key: Mapping[str, JsonValue], found: WorkloadTrace, root: Path | None = None) -> None:
    """Write the entry (atomically); the cache is an optimisation, so a failure only logs."""
    path = entry_path(key, root)
    body = {"key": dict(key), "trace": found.trace.to_json(), "total_params": found.total_params,
            "method": found.method}
    store_cache_json(path, body, "workload trace", indent=1)
