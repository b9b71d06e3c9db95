"""Dynamic padding (the default) and the task's length distribution in the trace and the twin."""

from __future__ import annotations

import argparse
import json
import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest

from conftest import migrate
from traces import BERT_BASE_LIKE as TRACE

from engine.cli import main, numbers
from engine.core.constants import DEFAULT_PADDING
from engine.core.errors import ConfigError
from engine.core.trace import StepMix
from engine.device.setting import MAXN, DvfsSetting
from engine.device.twin.fast import fast_points, mix_estimate, setting_control
from engine.device.twin.profile import load_profile
from engine.results import migrations
from engine.results.store import Store, WorkloadRecord
from engine.run.experiment import ExperimentSpec
from engine.run.sweep import SweepSpec
from engine.workload.data import lengths
from engine.workload.finetune import FinetuneSpec
from engine.workload.resolve import resolve_workload
from engine.workload.spec import WorkloadSpec

pytestmark = pytest.mark.usefixtures("isolated_env")  # conftest: state, data and a module's trace cache in tmp

PROFILE = load_profile("agx-orin-64gb")
# A shorter step, memory-bound where the long one is compute-bound: the twin's max(compute,
# memory) per op group makes it nonlinear in a trace.
SHORT = replace(TRACE, seq_len=32, ops=tuple(replace(op, flops=op.flops / 8, bytes=op.bytes * 50) for op in TRACE.ops),
                host_cycles=TRACE.host_cycles / 2)


# --------------------------------------------------------------------------- defaults and flags
def test_dynamic_padding_is_the_default_everywhere() -> None:
    assert DEFAULT_PADDING == "dynamic"
    assert ExperimentSpec(WorkloadSpec("bert-tiny", "sst2")).workload.padding == "dynamic"
    assert SweepSpec(WorkloadSpec("bert-tiny", "sst2")).workload.padding == "dynamic"
    assert FinetuneSpec(WorkloadSpec("bert-tiny", "sst2")).workload.padding == "dynamic"


@pytest.mark.parametrize(("argv", "padding"), [
    ([], "dynamic"), (["--pad", "dynamic"], "dynamic"), (["--pad", "max"], "max_length"),
    (["--padding", "max_length"], "max_length"), (["--padding", "dynamic", "--pad", "dynamic"], "dynamic"),
])
def test_pad_flag_and_its_deprecated_spelling(argv: list[str], padding: str) -> None:
    p = argparse.ArgumentParser()
    numbers.add_pad_argument(p, deprecated_padding=True)
    assert numbers.padding_of(p.parse_args(argv)) == padding


def test_pad_and_padding_that_disagree_are_refused() -> None:
    p = argparse.ArgumentParser()
    numbers.add_pad_argument(p, deprecated_padding=True)
    with pytest.raises(ConfigError, match="disagree"):
        numbers.padding_of(p.parse_args(["--pad", "max", "--padding", "dynamic"]))


# --------------------------------------------------------------------------- length distributions
def test_sst2_batches_are_shorter_than_qnli_and_mnli() -> None:
    sst2, mnli, qnli = (lengths.published(t) for t in ("sst2", "mnli", "qnli"))
    assert sst2.origin.startswith("published: [P1]")  # names its source in profiles/glue_lengths.toml
    assert sst2.mean < mnli.mean < qnli.mean
    for b in (1, 8, 32):
        e = [lengths.expected_batch_max(d, b, 128) for d in (sst2, mnli, qnli)]
        assert e[0] < e[1] < e[2] <= 128
    # several times shorter: SST-2's sentences against QNLI's question-and-passage pairs
    assert qnli.mean > 3 * sst2.mean


@pytest.mark.parametrize("task", ["sst2", "cola", "mnli", "qnli", "rte", "wnli", "stsb", "mrpc", "qqp"])
def test_bucket_weights_sum_to_one_and_the_batch_max_rises_with_batch_size(task: str) -> None:
    dist = lengths.published(task)
    means = []
    for b in (1, 4, 16, 64):
        weights = lengths.bucket_weights(dist, b, 128)
        assert sum(w for _l, w in weights) == pytest.approx(1.0, abs=1e-12)
        assert all(w > 0 for _l, w in weights) and [l for l, _w in weights] == sorted({l for l, _w in weights})
        assert all(l % lengths.TRACE_LENGTH_BUCKET == 0 or l == 128 for l, _w in weights) and weights[-1][0] <= 128
        means.append(sum(l * w for l, w in weights))
        assert lengths.expected_batch_max(dist, b, 128) <= means[-1] + 1e-9  # buckets round up
    assert means == sorted(means) and means[0] < means[-1]


def test_bucket_weights_follow_the_batch_max_law() -> None:
    """P(batch max <= l) = F(l)^b: with the small-bucket folding off, each weight is the
    difference of that law at the bucket's edges."""
    dist = lengths.published("mnli")
    got = dict(lengths.bucket_weights(dist, 8, 64, min_weight=0.0))
    assert got[48] == pytest.approx(dist.cdf(48) ** 8 - dist.cdf(32) ** 8)
    assert got[64] == pytest.approx(1.0 - dist.cdf(48) ** 8)  # truncated at the maximum length


def test_measured_lengths_are_empirical() -> None:
    dist = lengths.measured("sst2", [5, 9, 9, 30], "measured: test")
    assert dist.measured and dist.cdf(9) == 0.75 and dist.mean == pytest.approx(13.25)
    assert dict(lengths.bucket_weights(dist, 1, 128)) == {16: 0.75, 32: 0.25}


# --------------------------------------------------------------------------- the mixture on the twin
def test_mean_trace_weights_the_ops() -> None:
    mix = StepMix(((0.25, SHORT), (0.75, TRACE)))
    mean = mix.mean_trace()
    assert mean.seq_len == 128 and mean.batch_size == TRACE.batch_size
    assert mean.flops == pytest.approx(0.25 * SHORT.flops + 0.75 * TRACE.flops)
    assert mean.bytes == pytest.approx(0.25 * SHORT.bytes + 0.75 * TRACE.bytes)
    assert mean.host_cycles == pytest.approx(0.25 * SHORT.host_cycles + 0.75 * TRACE.host_cycles)
    assert StepMix.single(TRACE).mean_trace() is TRACE
    with pytest.raises(ValueError, match="sum to 1"):
        StepMix(((0.5, SHORT), (0.6, TRACE)))


@pytest.mark.parametrize("setting", [MAXN, DvfsSetting(gpu_hz=612_000_000)])
def test_a_mix_costs_the_weighted_mean_of_its_parts(setting: DvfsSetting) -> None:
    mix = StepMix(((0.4, SHORT), (0.6, TRACE)))
    (p_mix,), (p_short,), (p_long,) = (fast_points(t, PROFILE, [setting], steps=3) for t in (mix, SHORT, TRACE))
    assert p_mix.measurement.time_s == pytest.approx(0.4 * p_short.measurement.time_s + 0.6 * p_long.measurement.time_s)
    assert p_mix.measurement.energy_j == pytest.approx(0.4 * p_short.measurement.energy_j
                                                       + 0.6 * p_long.measurement.energy_j)
    # not the twin of the averaged trace: the twin is nonlinear (launch overheads, governors)
    (p_avg,) = fast_points(mix.mean_trace(), PROFILE, [setting], steps=3)
    assert p_avg.measurement.energy_j != pytest.approx(p_mix.measurement.energy_j, rel=1e-6)


def test_a_one_part_mix_is_the_trace_exactly() -> None:
    settings = [MAXN, DvfsSetting(gpu_hz=612_000_000)]
    assert fast_points(StepMix.single(TRACE), PROFILE, settings) == fast_points(TRACE, PROFILE, settings)


def test_the_twin_steps_a_mix_as_the_fast_path_costs_it(twin_session) -> None:  # type: ignore[no-untyped-def]
    twin = twin_session.twin
    mix = StepMix(((0.3, SHORT), (0.7, TRACE)))
    before, t0 = twin.energy_j(), twin.now()
    step = twin.run_step(mix)
    spent = sum(twin.energy_j().values()) - sum(before.values())
    est = mix_estimate(mix, setting_control(MAXN, PROFILE), PROFILE)
    assert twin.now() - t0 == pytest.approx(step.time_s) == pytest.approx(est.time_s, rel=1e-9)
    assert spent == pytest.approx(step.total_energy_j) == pytest.approx(sum(est.energy_j.values()), rel=1e-9)


# --------------------------------------------------------------------------- workloads and the store
def test_a_dynamic_workload_is_a_mix_and_another_workload() -> None:
    fixed = resolve_workload(WorkloadSpec("bert-tiny", "qnli", batch_size=8, seq_len=128, padding="max_length"))
    dyn = resolve_workload(WorkloadSpec("bert-tiny", "qnli", batch_size=8, seq_len=128, padding="dynamic"))
    assert fixed.steps.is_single and fixed.steps.parts[0][1] is fixed.trace and fixed.lengths is None
    assert not dyn.steps.is_single and dyn.lengths is not None and dyn.lengths["origin"].startswith("published")
    assert dyn.trace.flops < fixed.trace.flops and dyn.trace.seq_len == 128  # filed under its maximum length
    assert fixed.key == "bert-tiny|qnli|8|128|fp32|full"  # the key it always had
    assert dyn.key != fixed.key and dyn.key.endswith("|pad=dynamic")
    assert WorkloadRecord.from_workload(dyn).key == dyn.key and WorkloadRecord.from_workload(dyn).padding == "dynamic"
    assert json.loads(json.dumps(dyn.to_json()))["lengths"]["buckets"][-1][0] <= 128
    with pytest.raises(ConfigError, match="unknown padding"):
        resolve_workload(WorkloadSpec("bert-tiny", "qnli", padding="longest"))


def test_workloads_stored_before_padding_was_recorded_read_as_max_length(tmp_path: Path) -> None:
    path = tmp_path / "v5.sqlite"
    conn = sqlite3.connect(path, isolation_level=None)
    migrate(conn, 5)
    conn.execute("PRAGMA user_version = 5")
    old = WorkloadRecord("bert-tiny", "sst2", 32, 128, "fp32")
    conn.execute("INSERT INTO workloads (key, model, task, batch_size, seq_len, precision, mode, source, created_at) "
                 "VALUES (?, 'bert-tiny', 'sst2', 32, 128, 'fp32', 'full', 'predicted', 'then')", (old.key,))
    conn.close()
    with Store(path) as store:
        assert store.schema_version() == migrations.SCHEMA_VERSION
        wid, rec = store.find_workload(old.key)  # type: ignore[misc]
        assert rec.padding == "max_length" and rec.key == old.key
        assert store.ensure_workload(old) == wid
        dyn = replace(old, padding="dynamic")
        did = store.ensure_workload(dyn)
        assert did != wid and store.get_workload(did).padding == "dynamic"


# --------------------------------------------------------------------------- the CLI
def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    code = main([*argv, "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    return json.loads(out.out)


def test_run_simulate_and_sweep_fast_pad_dynamic_by_default(capsys: pytest.CaptureFixture[str]) -> None:
    common = ("--model", "bert-tiny", "--task", "qnli", "--twin", "agx-orin-64gb", "--max-seq-len", "128",
              "--batch-size", "8")
    dyn = _json(capsys, "run", *common, "--simulate", "--steps", "4")
    fixed = _json(capsys, "run", *common, "--simulate", "--steps", "4", "--pad", "max")
    assert dyn["workload"]["padding"] == "dynamic" and fixed["workload"]["padding"] == "max_length"
    # less energy; not always less time: the governors clock a lighter step lower
    assert dyn["run"]["energy_j"] < fixed["run"]["energy_j"]
    sweep_dyn = _json(capsys, "sweep", *common, "--fast")
    sweep_max = _json(capsys, "sweep", *common, "--fast", "--pad", "max")
    assert sweep_dyn["sweep_id"] != sweep_max["sweep_id"]  # another workload, another sweep
    assert sweep_dyn["maxn"]["energy_j"]["mean"] < sweep_max["maxn"]["energy_j"]["mean"]
    # a simulated step and a fast point cost the same mix the same (MAXN, 5 measured steps a point)
    assert dyn["run"]["energy_j"] / 4 == pytest.approx(sweep_dyn["maxn"]["energy_j"]["mean"] / 5, rel=1e-9)


def test_select_describes_the_padded_workload(capsys: pytest.CaptureFixture[str]) -> None:
    common = ("select", "--model", "bert-tiny", "--task", "mnli", "--max-seq-len", "128", "--batch-size", "8")
    dyn = _json(capsys, *common, "--twin", "--probes", "1")
    fixed = _json(capsys, *common, "--pad", "max")
    assert dyn["workload"]["flops"] < fixed["workload"]["flops"]
    assert dyn["workload"]["seq_len"] == fixed["workload"]["seq_len"] == 128


def test_a_real_cpu_run_measures_its_datas_lengths(capsys: pytest.CaptureFixture[str]) -> None:
    out = _json(capsys, "finetune", "--model", "bert-tiny", "--task", "qnli", "--steps", "2", "--batch-size", "4",
                "--max-seq-len", "64", "--train-samples", "24", "--eval-samples", "8")
    assert out["padding"] == "dynamic"
    got = out["lengths"]
    assert got["origin"].startswith("measured") and got["examples"] == 24
    assert 2 < got["mean"] <= got["max"] <= 64 and got["expected_batch_max"] <= 64


def test_the_text_report_says_how_batches_are_padded(capsys: pytest.CaptureFixture[str]) -> None:
    common = ["run", "--model", "bert-tiny", "--task", "mnli", "--twin", "agx-orin-64gb", "--simulate", "--steps", "2"]
    assert main(common) == 0
    assert "seq <=128, padded per batch to " in capsys.readouterr().out
    assert main([*common, "--pad", "max"]) == 0
    assert "(batch 32, seq 128, fp32, full, hf loop)" in capsys.readouterr().out  # simulated: the twin's default


def test_the_selectors_store_data_describes_a_dynamic_sweep_as_dynamic(tmp_path: Path) -> None:
    from engine.selector.dataset import from_store
    from engine.selector.features import describe_workload
    from engine.run.sweep import run_sweep

    with Store(tmp_path / "r.sqlite") as store:
        run_sweep(SweepSpec(WorkloadSpec("bert-tiny", "qnli", batch_size=8, seq_len=128), fast=True,
                            twin="agx-orin-64gb"), store=store)
        ds = from_store(store, source="twin")
    want = describe_workload("bert-tiny", "qnli", batch_size=8, seq_len=128, padding="dynamic")[0]
    assert set(ds.workloads) == {want}
    assert want != describe_workload("bert-tiny", "qnli", batch_size=8, seq_len=128)[0]


def test_the_stored_key_is_the_resolved_workloads_key() -> None:
    """Setup's oracle check finds sweeps by a spec's key (no trace): it must be the key the engine files them under."""
    from engine.workload.lora import LoraSettings
    from engine.workload.resolve import resolve_workload

    cases = ({"padding": "max_length"}, {"padding": "dynamic"},
             {"mode": "lora", "lora": LoraSettings(rank=4), "padding": "dynamic"},
             {"mode": "bitfit", "grad_checkpointing": True, "batch_size": 8, "seq_len": 64})
    for kw in cases:
        asked = WorkloadSpec("BERT-Tiny", "SST-2", **kw)
        assert asked.key == resolve_workload(WorkloadSpec("bert-tiny", "sst2", **kw)).key, kw


def test_the_selectors_workload_key_is_the_stores_key(tmp_path: Path) -> None:
    """The selector keys each workload's rows (the sweep a choice is made from) by the store's key: a max-length
    and a dynamically padded sweep of one shape (or a LoRA variant) are two workloads, not one."""
    from engine.selector.dataset import from_store
    from engine.selector.features import describe_workload
    from engine.run.sweep import run_sweep
    from engine.workload.lora import LoraSettings

    for kw in ({"padding": "max_length"}, {"padding": "dynamic"},
               {"mode": "lora", "lora": LoraSettings(rank=4), "padding": "dynamic"}):
        assert describe_workload("bert-tiny", "sst2", **kw)[0].key == resolve_workload(WorkloadSpec("bert-tiny", "sst2",
                                                                                                   **kw)).key
    with Store(tmp_path / "r.sqlite") as store:
        for pad in ("dynamic", "max_length"):
            run_sweep(SweepSpec(WorkloadSpec("bert-tiny", "sst2", padding=pad), fast=True, twin="agx-orin-64gb"),
                      store=store)
        ds = from_store(store, source="twin")
    assert set(ds.by_workload()) == {resolve_workload(WorkloadSpec("bert-tiny", "sst2", padding=pad)).key
                                     for pad in ("dynamic", "max_length")}
