"""A deep model's step trace from two shallow copies of it, without building the full model.

A transformer's layers are copies: every layer dispatches the same operators on tensors of the same
shapes, and what lies outside them (embeddings, masks, rotary tables, the head, the loss) does not
depend on how many there are. The optimizer's foreach kernels are one launch per call whatever the
number of tensors, its bytes scale with the parameters. So each figure of a step trace is affine in the
layer count N, and the trace of N layers is T(1) + (N - 1) * (T(2) - T(1)), from the same config built
with one layer and with two, on meta tensors. Every figure a trace holds is a whole number (FLOPs,
bytes, kernels, cycles; halves where 16-bit precision halves the bytes) far below 2**53, where floats
add exactly: the derived trace equals the full model's bit for bit (tests/test_cold_select.py checks it
for each family that takes this path). The parameter counts extrapolate alike.

Tracing cost grows with the layers (each is built, and each of its operators dispatched through the
counting mode, forward, backward and optimizer): a 30-layer SmolLM2 is traced at the cost of three layers.

Families whose layers differ are built whole (`derivable` says None):
- gemma2 alternates sliding-window and global attention layer by layer (and gemma3 in a longer
  pattern), so one and two layers do not give the step of the others;
- any config that lists its layers' kinds (`layer_types`), or turns on Qwen's sliding window for
  some layers (`use_sliding_window`), for the same reason;
- a model type not listed below: nobody has checked that its layers are copies;
- a model of two layers or fewer: nothing to save.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from engine.core.trace import OP_KINDS, OpCost, StepTrace

# Model types whose layers are identical copies, checked against the built model's trace for each
# (tests/test_cold_select.py); the alias keys each type names its layer count by (zoo._DIM_ALIASES).
HOMOGENEOUS = frozenset({"bert", "roberta", "distilbert", "electra", "deberta-v2", "gpt_neox", "gpt2", "opt",
                         "llama", "qwen2", "qwen3", "gemma", "phi3"})
LAYER_KEYS = ("num_hidden_layers", "n_layer", "n_layers")


def layer_key(config: Mapping[str, object]) -> str | None:
    """The config key that holds the number of layers, or None when it does not say."""
    for key in LAYER_KEYS:
        value = config.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return key
    return None


def derivable(config: Mapping[str, object]) -> tuple[str, int] | None:
    """(the layer key, the layer count) when the trace of `config` can be derived from one and two layers;
    None when the model must be built whole (see the module's list)."""
    key = layer_key(config)
    if key is None or str(config.get("model_type")) not in HOMOGENEOUS:
        return None
    if "layer_types" in config or config.get("use_sliding_window") is True:
        return None
    layers = config[key]
    assert isinstance(layers, int)
    return (key, layers) if layers > 2 else None


def with_layers(config: Mapping[str, object], key: str, layers: int) -> dict[str, object]:
    """`config` with `layers` layers, everything else as it was."""
    return {**dict(config), key: layers}


def extrapolate(one: StepTrace, two: StepTrace, layers: int) -> StepTrace:
    """The trace of `layers` layers from those of one and two: T(1) + (layers - 1) * (T(2) - T(1))."""
    k = layers - 1

    def at(a: float, b: float) -> float:
        return a + k * (b - a)

    first, second = _by_kind(one), _by_kind(two)
    ops = []
    for kind in OP_KINDS:
        a, b = first.get(kind, OpCost(kind, 0.0, 0.0, 0)), second.get(kind, OpCost(kind, 0.0, 0.0, 0))
        op = OpCost(kind, at(a.flops, b.flops), at(a.bytes, b.bytes), a.kernels + k * (b.kernels - a.kernels))
        if op.kernels or op.flops or op.bytes:  # as the tracer's tally lists them
            ops.append(op)
    return StepTrace(model=two.model, batch_size=two.batch_size, seq_len=two.seq_len, precision=two.precision,
                     ops=tuple(ops), host_cycles=at(one.host_cycles, two.host_cycles),
                     params=one.params + k * (two.params - one.params), serial_cycles=two.serial_cycles)


def derive_by_layers(config: Mapping[str, object],
                     trace_of: Callable[[Mapping[str, object]], tuple[StepTrace, int, str]],
                     ) -> tuple[StepTrace, int, str] | None:
    """The (trace, total parameters, method) of `config` from `trace_of` its one- and two-layer copies; None
    when it cannot be derived (`derivable`), or a shallow copy fell back from meta tensors to a real step
    (whose scaling is not exact)."""
    found = derivable(config)
    if found is None:
        return None
    key, layers = found
    one, one_total, one_method = trace_of(with_layers(config, key, 1))
    two, two_total, two_method = trace_of(with_layers(config, key, 2))
    if one_method != "meta" or two_method != "meta":
        return None
    total = one_total + (layers - 1) * (two_total - one_total)
    return extrapolate(one, two, layers), total, "meta"


def _by_kind(trace: StepTrace) -> dict[str, OpCost]:
    return {op.kind: op for op in trace.ops}
