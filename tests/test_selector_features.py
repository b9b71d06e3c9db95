"""Selector features: workload description, setting encoding, the feature schema."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest

from engine.device.twin.profile import load_profile
from engine.device.setting import MAXN, MAXN_PINNED, DvfsSetting
from engine.core.errors import ConfigError
from engine.selector.candidates import log_columns
from engine.selector.dataset import head_representatives, profile_settings
from engine.core.trace import OP_KINDS
from engine.selector.features import (
    FEATURE_COLUMNS,
    LOG_COLUMNS,
    N_WORKLOAD_COLUMNS,
    WORKLOAD_COLUMNS,
    SettingEncoder,
    WorkloadFeatures,
    describe_workload,
    feature_matrix,
    feature_schema,
)

MHZ = 1_000_000


@pytest.fixture(autouse=True)
def _trace_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("SLM_DVFS_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "selector-cache"))


@pytest.fixture(scope="module")
def encoder():
    return SettingEncoder.from_profile(load_profile("agx-orin-64gb"))


def test_describe_zoo_workload_uses_entry_defaults_and_trace():
    w, trace = describe_workload("bert-tiny", "SST-2")
    assert (w.model, w.task, w.family) == ("bert-tiny", "sst2", "bert")
    assert (w.batch_size, w.seq_len, w.precision) == (32, 128, "fp32")  # the zoo entry's defaults
    assert (w.layers, w.hidden, w.heads) == (2, 128, 2)
    assert w.params == 4_386_178  # the zoo's count for a 2-label head
    assert w.flops == trace.flops > 0 and w.bytes == trace.bytes and w.kernels == trace.kernels
    assert w.arithmetic_intensity == pytest.approx(trace.flops / trace.bytes)
    assert w.key == "bert-tiny|sst2|32|128|fp32|full"
    assert w.shape_key == "bert-tiny|32|128|fp32|full"  # the task is not part of the CV group


def test_describe_out_of_zoo_shape_and_tasks():
    cfg = {"model_type": "bert", "vocab_size": 30522, "hidden_size": 384, "num_hidden_layers": 6,
           "num_attention_heads": 6, "intermediate_size": 1536, "max_position_embeddings": 512, "type_vocab_size": 2}
    w2, _ = describe_workload("bert-L6-H384", "sst2", batch_size=16, seq_len=64, config=cfg)
    w3, _ = describe_workload("bert-L6-H384", "mnli", batch_size=16, seq_len=64, config=cfg)
    wr, _ = describe_workload("bert-L6-H384", "stsb", batch_size=16, seq_len=64, config=cfg)
    assert (w2.layers, w2.hidden, w2.heads) == (6, 384, 6)
    assert (w2.task_num_labels, w3.task_num_labels, wr.task_num_labels, wr.task_regression) == (2, 3, 1, True)
    assert w3.params > w2.params > wr.params  # the head grows with the labels
    with pytest.raises(ConfigError, match="exceeds"):
        describe_workload("bert-L6-H384", "sst2", seq_len=1024, config=cfg)


def test_bitfit_trains_fewer_parameters():
    full, _ = describe_workload("bert-tiny", "sst2", batch_size=8, seq_len=32)
    bitfit, _ = describe_workload("bert-tiny", "sst2", batch_size=8, seq_len=32, mode="bitfit")
    assert bitfit.params == full.params and bitfit.trainable_params < full.trainable_params / 10
    # The mode enters as the share of parameters trained, not as a flag per mode.
    share = FEATURE_COLUMNS.index("trainable_fraction")
    assert full.row()[share] == 1.0 and bitfit.row()[share] == pytest.approx(bitfit.trainable_params / bitfit.params)
    assert bitfit.mode == "bitfit" and not any(c.startswith("mode_") for c in FEATURE_COLUMNS)
    # BitFit skips the weights' gradients and their optimizer state: the trace, hence the row, says so.
    assert bitfit.row()[FEATURE_COLUMNS.index("flops")] < full.row()[FEATURE_COLUMNS.index("flops")]


def test_setting_encoding_flags_governors_with_nominal_clocks(encoder):
    row = dict(zip(FEATURE_COLUMNS[N_WORKLOAD_COLUMNS:], encoder.row(DvfsSetting(gpu_hz=816 * MHZ, nvpmodel=0))))
    assert row["gpu_governor"] == 0.0 and row["gpu_ghz"] == pytest.approx(0.816)
    assert row["cpu_governor"] == 1.0 and row["cpu_ghz"] == pytest.approx(2.2016)  # governor: the mode's top
    assert row["emc_governor"] == 1.0 and row["emc_ghz"] == pytest.approx(3.199)
    maxn = dict(zip(FEATURE_COLUMNS[N_WORKLOAD_COLUMNS:], encoder.row(MAXN)))
    assert maxn["gpu_governor"] == 1.0 and maxn["gpu_ghz"] == pytest.approx(1.3005)
    # A capped mode: the nominal value of a governed domain is the cap (MODE_15W: GPU 408 MHz).
    assert encoder.nominal(DvfsSetting(nvpmodel=1))[0] == 408 * MHZ
    pinned = dict(zip(FEATURE_COLUMNS[N_WORKLOAD_COLUMNS:], encoder.row(MAXN_PINNED)))
    assert pinned["jetson_clocks"] == 1.0 and pinned["gpu_governor"] == 0.0


def test_feature_matrix_and_schema(encoder):
    w, _ = describe_workload("bert-tiny", "sst2", batch_size=8, seq_len=32)
    settings = profile_settings(load_profile("agx-orin-64gb"), "gpu")
    assert settings[0] == MAXN and len(settings) == 12
    x = feature_matrix([w] * len(settings), list(settings), encoder)
    assert x.shape == (12, len(FEATURE_COLUMNS))
    assert np.all(x[:, :N_WORKLOAD_COLUMNS] == x[0, :N_WORKLOAD_COLUMNS])  # one workload
    assert sorted(x[1:, FEATURE_COLUMNS.index("gpu_ghz")]) == pytest.approx([f / 1e3 for f in
                                                                              (306, 408, 510, 612, 714, 816, 918,
                                                                               1020, 1122, 1224, 1300.5)])
    logged = log_columns(x)
    assert logged[0, FEATURE_COLUMNS.index("flops")] == pytest.approx(math.log(w.flops))
    assert logged[0, FEATURE_COLUMNS.index("gpu_governor")] == 1.0  # flags are not logged
    schema = feature_schema()
    assert schema["columns"] == list(FEATURE_COLUMNS) and schema["version"] >= 1
    assert set(schema["log_columns"]) == {FEATURE_COLUMNS[i] for i in LOG_COLUMNS}
    with pytest.raises(ConfigError):
        feature_matrix([w], [], encoder)


def test_workload_features_validate_and_round_trip():
    w, _ = describe_workload("pythia-14m", "rte", batch_size=8, seq_len=32)
    assert w.family == "pythia" and w.row()[FEATURE_COLUMNS.index("params")] == w.params
    assert WorkloadFeatures.from_json(json.loads(json.dumps(w.to_json()))) == w  # op groups included
    with pytest.raises(ConfigError):
        WorkloadFeatures.from_json({**w.to_json(), "family": "t5"})
    with pytest.raises(ConfigError):
        WorkloadFeatures.from_json({**w.to_json(), "surprise": 1})


def test_tasks_sharing_a_head_are_represented_once():
    reps = head_representatives(["sst2", "cola", "mnli", "stsb", "rte"])
    assert reps == {"sst2": ["sst2", "cola", "rte"], "mnli": ["mnli"], "stsb": ["stsb"]}


def test_columns_say_what_a_step_costs_not_which_architecture():
    names = [n for n, _log in WORKLOAD_COLUMNS]
    for identity in ("family", "layers", "hidden", "heads", "mode", "task"):
        assert not any(n == identity or n.startswith(identity + "_") for n in names), identity
    w, trace = describe_workload("pythia-14m", "sst2", batch_size=8, seq_len=32)
    # The same step under another family's name, shape or task is the same row: the selector sees costs only.
    relabelled = replace(w, model="other", family="llama", layers=99, hidden=7, heads=1, task="mnli",
                         task_num_labels=3)
    assert relabelled.row() == w.row()
    row = dict(zip(names, w.row()))
    for what, total in (("flops", trace.flops), ("bytes", trace.bytes), ("kernels", trace.kernels)):
        shares = [row[f"{kind}_{what}_share"] for kind in OP_KINDS]
        assert sum(shares) == pytest.approx(1.0)
        assert row[f"matmul_{what}_share"] == pytest.approx(
            sum(getattr(op, what) for op in trace.ops if op.kind == "matmul") / total)
    assert row["trainable_fraction"] == 1.0 and row["precision_half"] == 0.0
    half, _ = describe_workload("pythia-14m", "sst2", batch_size=8, seq_len=32, precision="bf16")
    assert dict(zip(names, half.row()))["precision_half"] == 1.0  # bf16 runs on tensor cores like fp16


def test_an_old_workload_record_reads_but_says_it_cannot_be_a_row():
    w, _ = describe_workload("bert-tiny", "sst2", batch_size=8, seq_len=32)
    old = {k: v for k, v in w.to_json().items() if k != "ops"}  # as slm-dvfs wrote it before op groups
    back = WorkloadFeatures.from_json(old)
    assert back.ops == () and back.flops == w.flops
    with pytest.raises(ConfigError, match="no op groups") as err:
        back.row()
    assert "describe_workload" in err.value.remedy


def test_the_loops_serial_host_work_is_a_feature():
    """Version 2's columns had host_cycles but not the loop's serial host work: a Trainer-style (hf) step and a
    lean one were the same row, so the selector predicted hf figures for the lean loop."""
    from engine.workload.trace.loop import loop_serial_cycles

    names = [n for n, _log in WORKLOAD_COLUMNS]
    hf, hf_trace = describe_workload("bert-tiny", "sst2", batch_size=8, seq_len=32, loop="hf")
    lean, lean_trace = describe_workload("bert-tiny", "sst2", batch_size=8, seq_len=32, loop="lean")
    assert hf.serial_cycles == hf_trace.serial_cycles > 0 and lean.serial_cycles == lean_trace.serial_cycles == 0
    assert hf.host_cycles == lean.host_cycles and hf.key != lean.key and hf.shape_key == lean.shape_key
    a, b = dict(zip(names, hf.row())), dict(zip(names, lean.row()))
    # (and the GPU's share of the step at reference rates, which the serial work lowers)
    assert {n for n in names if a[n] != b[n]} == {"serial_share", "loop_host_cycles_per_sample", "gpu_share_ref"}
    assert a["gpu_share_ref"] < b["gpu_share_ref"]
    total = hf.host_cycles + hf.serial_cycles
    assert a["serial_share"] == pytest.approx(hf.serial_cycles / total) and b["serial_share"] == 0.0
    assert a["loop_host_cycles_per_sample"] == pytest.approx(total / 8)
    assert b["loop_host_cycles_per_sample"] == pytest.approx(lean.host_cycles / 8)  # positive: its log is defined
    assert dict(zip(FEATURE_COLUMNS, log_columns(np.array([lean.row()]))[0]))["loop_host_cycles_per_sample"] > 0
    # a record written before the field: its trace carried the loop's work at the record's shape
    old = {k: v for k, v in hf.to_json().items() if k != "serial_cycles"}
    assert WorkloadFeatures.from_json(old).serial_cycles == loop_serial_cycles("hf", 8, 32) == hf.serial_cycles
    assert WorkloadFeatures.from_json({**old, "loop": "lean"}).serial_cycles == 0.0
    with pytest.raises(ConfigError, match="serial_cycles"):
        replace(hf, serial_cycles=-1.0)


def test_the_gpus_share_of_a_step_tells_a_launch_bound_step_from_a_gpu_bound_one():
    """Schema 4: leaving a family out, a launch-bound step (bert-tiny, batch 8) and a GPU-bound one (BERT-base,
    batch 32, length 256) must differ in a bounded column, not only in the totals' logs."""
    names = [n for n, _log in WORKLOAD_COLUMNS]
    tiny, _ = describe_workload("bert-tiny", "sst2", batch_size=8, seq_len=32)
    base, _ = describe_workload("bert-base-uncased", "sst2", batch_size=32, seq_len=256)
    small, large = (dict(zip(names, w.row()))["gpu_share_ref"] for w in (tiny, base))
    assert 0.0 < small < 0.5 < large < 1.0


def test_the_roofline_column_moves_with_the_gpu_and_emc_clocks_and_the_module(encoder):
    """hist-gb-roofline's extra input: log(compute time / memory time) at the row's clocks on its module."""
    from engine.selector.features import log_roofline_columns, roofline_column

    w, _ = describe_workload("bert-tiny", "sst2", batch_size=32, seq_len=128)
    settings = [DvfsSetting(gpu_hz=1300500000, nvpmodel=0), DvfsSetting(gpu_hz=612 * MHZ, nvpmodel=0),
                DvfsSetting(gpu_hz=612 * MHZ, emc_hz=2133 * MHZ, nvpmodel=0)]
    x = feature_matrix([w] * 3, settings, encoder)
    top, low_gpu, low_both = roofline_column(x)
    assert low_gpu - top == pytest.approx(math.log(1300.5 / 612), rel=1e-9)  # half the clock: twice the compute time
    assert low_both < low_gpu  # a lower EMC clock: longer memory time
    nano = SettingEncoder.from_profile(load_profile("orin-nano-8gb"))
    on_nano = roofline_column(feature_matrix([w], [settings[1]], nano))[0]
    assert on_nano != pytest.approx(low_gpu)  # fewer SMs, less bandwidth: the module enters
    both = log_roofline_columns(x)
    assert both.shape == (3, len(FEATURE_COLUMNS) + 1) and np.array_equal(both[:, -1], roofline_column(x))
