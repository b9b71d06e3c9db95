"""Step traces: costs that agree with theory, scale as they should, and are cached."""

from __future__ import annotations

import json

import pytest
import torch

from engine.workload.models import build_model
from engine.core.trace import OP_KINDS, StepTrace
from engine.workload.trace.tracer import capture_step_trace, step_trace, trace_path, model_fingerprint
from engine.workload.training.optim import apply_mode
from engine.workload.zoo import get_entry


def _kind(trace: StepTrace, kind: str):
    return next(op for op in trace.ops if op.kind == kind)


@pytest.fixture(scope="module")
def bert_tiny() -> torch.nn.Module:
    return build_model(get_entry("bert-tiny").config, "sst2", device="meta")


@pytest.fixture(scope="module")
def bert_mini() -> torch.nn.Module:
    return build_model(get_entry("bert-mini").config, "sst2", device="meta")


def _non_embedding_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for n, p in model.named_parameters() if ".embeddings." not in n)


@pytest.mark.parametrize("fixture", ["bert_tiny", "bert_mini"])
def test_matmul_flops_match_six_n_t(fixture: str, request: pytest.FixtureRequest) -> None:
    model = request.getfixturevalue(fixture)
    b, L = 8, 128
    record = capture_step_trace(model, name=fixture, batch_size=b, seq_len=L)
    assert record.method == "meta"
    matmul = _kind(record.trace, "matmul").flops
    theory = 6 * _non_embedding_params(model) * b * L
    assert abs(matmul / theory - 1) < 0.15, (matmul, theory)
    # Attention (Q·Kᵀ and P·V, forward and backward) is counted apart from the matmuls:
    # 4·L·h FLOPs per token per layer forward, twice that backward (a fused kernel).
    cfg = model.config
    attention = _kind(record.trace, "attention").flops
    attn_theory = 3 * 4 * L * cfg.hidden_size * b * L * cfg.num_hidden_layers
    assert 0.8 < attention / attn_theory < 1.5, (attention, attn_theory)


def test_scaling_with_batch_and_sequence(bert_tiny: torch.nn.Module) -> None:
    base = capture_step_trace(bert_tiny, name="t", batch_size=4, seq_len=64).trace
    twice_batch = capture_step_trace(bert_tiny, name="t", batch_size=8, seq_len=64).trace
    twice_len = capture_step_trace(bert_tiny, name="t", batch_size=4, seq_len=128).trace
    optimizer = _kind(base, "optimizer").flops
    # Forward/backward work is linear in the batch; the optimizer does not depend on it.
    fb = base.flops - optimizer
    assert (twice_batch.flops - optimizer) / fb == pytest.approx(2.0, rel=0.05)
    assert _kind(twice_batch, "optimizer") == _kind(base, "optimizer")
    # At least linear in the sequence, attention quadratic.
    assert (twice_len.flops - optimizer) / fb >= 2.0
    assert _kind(twice_len, "attention").flops / _kind(base, "attention").flops == pytest.approx(4.0, rel=0.05)
    # Kernel counts depend on the graph, not on the shapes.
    assert twice_batch.kernels == base.kernels == twice_len.kernels
    assert {op.kind: op.kernels for op in twice_batch.ops} == {op.kind: op.kernels for op in base.ops}
    assert twice_batch.bytes > base.bytes
    assert twice_batch.host_cycles > base.host_cycles  # per-sample host work


def test_trace_shape_and_notes(bert_tiny: torch.nn.Module) -> None:
    record = capture_step_trace(bert_tiny, name="bert-tiny", batch_size=2, seq_len=32)
    trace = record.trace
    assert (trace.model, trace.batch_size, trace.seq_len, trace.precision) == ("bert-tiny", 2, 32, "fp32")
    kinds = {op.kind for op in trace.ops}
    assert kinds <= set(OP_KINDS)
    assert {"matmul", "attention", "elementwise", "reduction", "embedding", "optimizer"} <= kinds
    assert all(op.flops >= 0 and op.bytes > 0 and op.kernels > 0 for op in trace.ops)
    assert trace.params == sum(p.numel() for p in bert_tiny.parameters())
    # The optimizer reads and writes params, grads and two moments: at least 7 fp32 words each.
    assert _kind(trace, "optimizer").bytes >= 7 * 4 * trace.params
    assert trace.host_cycles > 0
    assert any("estimate" in note for note in record.notes)
    assert StepTrace.from_json(json.loads(json.dumps(trace.to_json()))) == trace


def test_bitfit_trace_skips_weight_gradients() -> None:
    model = build_model(get_entry("bert-tiny").config, "sst2", device="meta")
    full = capture_step_trace(model, name="m", batch_size=8, seq_len=64).trace
    trainable = apply_mode(model, "bitfit")
    bitfit = capture_step_trace(model, name="m", batch_size=8, seq_len=64).trace
    assert bitfit.params == trainable < full.params / 10
    ratio = _kind(bitfit, "matmul").flops / _kind(full, "matmul").flops
    assert 0.6 < ratio < 0.75  # forward + input gradients, no weight gradients: ~4/6
    assert _kind(bitfit, "optimizer").bytes < _kind(full, "optimizer").bytes / 10


def test_half_precision_moves_fewer_bytes(bert_tiny: torch.nn.Module) -> None:
    fp32 = capture_step_trace(bert_tiny, name="t", batch_size=8, seq_len=64).trace
    fp16 = capture_step_trace(bert_tiny, name="t", batch_size=8, seq_len=64, precision="fp16")
    assert fp16.trace.precision == "fp16"
    assert _kind(fp16.trace, "matmul").flops == _kind(fp32, "matmul").flops
    assert _kind(fp16.trace, "matmul").bytes < _kind(fp32, "matmul").bytes
    assert any("fp16" in note for note in fp16.notes)


def test_pythia_traces_on_meta() -> None:
    model = build_model(get_entry("pythia-14m").config, "sst2", device="meta")
    record = capture_step_trace(model, name="pythia-14m", batch_size=4, seq_len=64)
    assert record.method == "meta"
    theory = 6 * sum(p.numel() for n, p in model.named_parameters() if "embed_in" not in n) * 4 * 64
    assert abs(_kind(record.trace, "matmul").flops / theory - 1) < 0.15


class _Branchy(torch.nn.Module):
    """A model whose forward branches on a value: meta tensors cannot run it."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(100, 16)
        self.body = torch.nn.Linear(16, 16)
        self.classifier = torch.nn.Linear(16, 2)

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
        h = self.body(self.embed(input_ids))
        if h.float().mean().item() > -1e9:  # a value meta tensors do not have
            h = torch.relu(h)
        logits = self.classifier(h.mean(dim=1))
        return {"loss": torch.nn.functional.cross_entropy(logits, labels), "logits": logits}


def _branchy_batch(model, batch_size, seq_len, device):
    return {"input_ids": torch.zeros(batch_size, seq_len, dtype=torch.long, device=device),
            "labels": torch.zeros(batch_size, dtype=torch.long, device=device)}


def test_falls_back_to_a_scaled_real_step_and_says_so() -> None:
    model = _Branchy()
    small = capture_step_trace(model, name="branchy", batch_size=4, seq_len=8, make_batch=_branchy_batch)
    large = capture_step_trace(model, name="branchy", batch_size=8, seq_len=8, make_batch=_branchy_batch)
    assert small.method == large.method == "real-step-scaled"
    assert any("meta capture failed" in n for n in small.notes)
    assert any("fallback" in n for n in small.notes)
    assert _kind(large.trace, "matmul").flops == pytest.approx(2 * _kind(small.trace, "matmul").flops)
    assert _kind(small.trace, "matmul").flops > 0
    assert small.trace.kernels == large.trace.kernels
    # The model itself was not touched by the real step.
    assert all(p.grad is None for p in model.parameters())


def test_step_trace_is_cached_as_json(tmp_path, monkeypatch, bert_tiny: torch.nn.Module) -> None:
    monkeypatch.setenv("SLM_DVFS_CACHE_DIR", str(tmp_path))
    first = step_trace(bert_tiny, name="bert-tiny", batch_size=4, seq_len=32)
    assert not first.cached
    path = trace_path("bert-tiny", 4, 32, "fp32", model_fingerprint(bert_tiny))
    assert first.path == path and path.parent == tmp_path / "traces" and path.is_file()
    data = json.loads(path.read_text())
    assert data["method"] == "meta" and StepTrace.from_json(data["trace"]) == first.trace
    second = step_trace(bert_tiny, name="bert-tiny", batch_size=4, seq_len=32)
    assert second.cached and second.trace == first.trace
    # A different shape or precision is a different trace.
    other = step_trace(bert_tiny, name="bert-tiny", batch_size=4, seq_len=32, precision="bf16")
    assert not other.cached and other.path != path


def test_bad_shapes_are_config_errors(bert_tiny: torch.nn.Module) -> None:
    from engine.core.errors import ConfigError

    with pytest.raises(ConfigError):
        capture_step_trace(bert_tiny, name="t", batch_size=0, seq_len=32)
