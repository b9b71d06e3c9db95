"""A workload traced once is found again without building its model (no torch, no transformers),
with the same trace and parameter count; anything that could change the trace misses."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import IsolatedEnv

ROOT = Path(__file__).resolve().parent.parent


def named(task: str = "sst2", config: dict | None = None, **shape: object) -> object:
    """bert-tiny on `task` at `shape`, named as resolve_workload names it (its config, or `config`)."""
    from engine.workload.models import resolve_model
    from engine.workload.spec import WorkloadSpec

    return WorkloadSpec("bert-tiny", task, name="bert-tiny", config=config or dict(resolve_model("bert-tiny").config),
                        **shape)

# resolve_workload and describe_workload in a fresh interpreter: what they return, what was imported.
_RESOLVE = """
import json, sys
from engine.workload.resolve import resolve_workload
from engine.workload.spec import WorkloadSpec
from engine.selector.features import describe_workload
w = resolve_workload(WorkloadSpec("bert-tiny", "sst2", batch_size=4, seq_len=32, mode=sys.argv[1], padding="max_length"))
feats, trace = describe_workload("bert-tiny", "sst2", batch_size=4, seq_len=32, mode=sys.argv[1])
heavy = sorted({m.split(".")[0] for m in sys.modules} & {"torch", "transformers"})
print(json.dumps({"trace": w.trace.to_json(), "total": w.total_params, "feats": feats.to_json(),
                  "same": trace == w.trace, "heavy": heavy}))
"""


def _resolve(mode: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", _RESOLVE, mode], capture_output=True, text=True, cwd=ROOT,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("mode", ["full", "bitfit"])
def test_a_traced_workload_comes_back_without_torch_and_unchanged(isolated_env: IsolatedEnv, mode: str) -> None:
    first = _resolve(mode)  # traced now: the model is built on meta tensors
    assert first["heavy"] == ["torch", "transformers"]
    again = _resolve(mode)
    assert again["heavy"] == []
    assert again == {**first, "heavy": []}
    assert again["same"]
    if mode == "bitfit":  # the trace counts what trains, the entry every parameter
        assert again["total"] > again["trace"]["params"] > 0
    assert list((isolated_env.cache_dir / "traces" / "workloads").glob("bert-tiny-*.json"))


def test_the_cached_entry_holds_what_building_the_model_gives(isolated_env: IsolatedEnv) -> None:
    from engine.workload.glue import get_task
    from engine.workload.models import build_model, resolve_model
    from engine.workload.resolve import trace_workload
    from engine.workload.trace.trace_cache import cached_workload_trace, trace_key
    from engine.workload.trace.tracer import step_trace

    config = resolve_model("bert-tiny").config
    task = get_task("mrpc")
    traced = trace_workload(named("mrpc", batch_size=2, seq_len=16, precision="fp16"))
    assert not traced.cached
    net = build_model(config, task, device="meta")
    assert traced.total_params == sum(p.numel() for p in net.parameters())
    assert traced.trace == step_trace(net, name="bert-tiny", batch_size=2, seq_len=16, precision="fp16").trace
    key = trace_key(named("mrpc", batch_size=2, seq_len=16, precision="fp16"))
    hit = cached_workload_trace(key)
    assert hit is not None and hit.cached
    assert (hit.trace, hit.total_params, hit.method) == (traced.trace, traced.total_params, traced.method)


def test_anything_the_trace_depends_on_is_in_the_key(isolated_env: IsolatedEnv) -> None:
    from engine.workload.models import resolve_model
    from engine.workload.trace.trace_cache import entry_path, trace_key

    config = dict(resolve_model("bert-tiny").config)
    key = trace_key(named(batch_size=4, seq_len=32, precision="fp32"))
    assert key["torch"] != "none" and key["transformers"] != "none"  # the versions that trace are named
    variants = [
        trace_key(named(config={**config, "num_hidden_layers": 3}, batch_size=4, seq_len=32, precision="fp32")),
        trace_key(named("stsb", batch_size=4, seq_len=32, precision="fp32")),
        trace_key(named(batch_size=8, seq_len=32, precision="fp32")),
        trace_key(named(batch_size=4, seq_len=64, precision="fp32")),
        trace_key(named(batch_size=4, seq_len=32, precision="fp32"), seq_len=64),  # a padded bucket's length
        trace_key(named(batch_size=4, seq_len=32, precision="bf16")),
        trace_key(named(batch_size=4, seq_len=32, precision="fp32", mode="bitfit")),
        trace_key(named(batch_size=4, seq_len=32, precision="fp32", grad_checkpointing=True)),
        trace_key(named(batch_size=4, seq_len=32, precision="fp32", mode="lora")),
        {**key, "torch": "0.0.1"},
        {**key, "tracer_version": key["tracer_version"] + 1},
    ]
    paths = {entry_path(k) for k in variants}
    assert len(paths) == len(variants) - 1 and entry_path(key) not in paths  # seq_len 64 twice: one entry
    # what is not in a step's cost is not in the key: the data source and the seed
    assert trace_key(named(batch_size=4, seq_len=32, precision="fp32", data="hub", seed=7)) == key


def test_an_unreadable_or_foreign_entry_is_traced_again(isolated_env: IsolatedEnv) -> None:
    from engine.workload.resolve import trace_workload
    from engine.workload.trace.trace_cache import entry_path, trace_key

    spec = named(batch_size=2, seq_len=16, precision="fp32")
    first = trace_workload(spec)
    path = entry_path(trace_key(spec))
    body = json.loads(path.read_text())
    body["key"]["batch_size"] = 3  # an entry that is not this key's (a collision, or an edit)
    path.write_text(json.dumps(body))
    again = trace_workload(spec)
    assert not again.cached and again.trace == first.trace
    path.write_text("{not json")
    assert not trace_workload(spec).cached
    assert trace_workload(spec).cached  # rewritten
