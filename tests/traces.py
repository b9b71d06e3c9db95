"""Hand-built step traces shared by the tests (no model needs to be traced for them)."""

from __future__ import annotations

from engine.core.trace import OpCost, StepTrace

# One training step of a BERT-base-sized model (12 layers, hidden 768, 110M parameters)
# at batch 32 x 128 tokens in fp32: matmul FLOPs = 6 x 85M non-embedding params x 4096
# tokens. About 30 W at MAXN on the twin: compute-bound enough for the U-shaped energy curve.
BERT_BASE_LIKE = StepTrace(
    "bert-base-like", 32, 128, "fp32",
    (
        OpCost("matmul", 2.1e12, 4.0e9, 222),
        OpCost("attention", 5.8e10, 3.0e9, 144),
        OpCost("elementwise", 4.0e10, 2.0e10, 540),
        OpCost("optimizer", 1.3e9, 4.0e9, 240),
    ),
    host_cycles=7.6e7, params=110_000_000,
)  # fmt: skip


def workload_of(trace: StepTrace, task: str = "sst2", family: str = "bert", total_params: int | None = None,
                padding: str = "max_length", config=None):  # type: ignore[no-untyped-def]
    """A hand-built step trace as a resolved workload (engine.workload.resolve.Workload): its named spec
    is the trace's model, shape and precision."""
    from engine.workload.resolve import Workload
    from engine.workload.spec import WorkloadSpec

    spec = WorkloadSpec(trace.model, task, batch_size=trace.batch_size, seq_len=trace.seq_len,
                        precision=trace.precision, padding=padding, name=trace.model, config=config)
    return Workload(spec, family, trace, total_params or trace.params)


def bert_base_workload():  # type: ignore[no-untyped-def]
    """The trace above as an experiment workload (engine.workload.resolve.Workload)."""
    return workload_of(BERT_BASE_LIKE, total_params=110_000_000)
