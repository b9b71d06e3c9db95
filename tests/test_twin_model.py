"""The twin's profile, model and governors reproduce the published facts of an AGX Orin."""

from __future__ import annotations

import dataclasses
import math
import re
import time
from pathlib import Path

import pytest

from engine.device.twin.governors import default_control, pin_gpu, resolve
from engine.device.twin.model import Clocks, Load, estimate_step, idle_power_mw, rail_powers_mw
from engine.device.twin.profile import available_profiles, devices_dir, load_profile
from engine.core.errors import ProfileError
from engine.core.trace import OpCost, StepTrace

MHZ = 1_000_000
SPEC_IDLE_MW = {"VDD_GPU_SOC": 2399, "VDD_CPU_CV": 400, "VIN_SYS_5V0": 4032, "VDDQ_VDD2_1V8AO": 301}
SPEC_CPU_LOAD_MW = {"VDD_GPU_SOC": 3150, "VDD_CPU_CV": 14312, "VIN_SYS_5V0": 4968, "VDDQ_VDD2_1V8AO": 1091}
SPEC_GPU_TABLE = (306, 408, 510, 612, 714, 816, 918, 1020, 1122, 1224, 1300.5)


def bert_trace(
    layers: int, hidden: int, *, vocab: int = 30522, batch: int = 32, seq: int = 128, precision: str = "fp32"
) -> StepTrace:
    """A BERT-like fine-tuning step built from its shape, as a tracer would measure it.

    Matmul FLOPs = 6 x (weights) x tokens (forward + two backward GEMMs); attention
    adds the QK^T and PV products; element-wise traffic counts activation passes per
    layer (dropout, residual adds, GELU, head permutes, masking), forward plus twice
    for backward; ~30 kernels per layer forward and twice that backward; AdamW reads
    and writes parameters, gradients and both moments. Host work (HF-Trainer-style
    Python loop, collation) is ~35 ms at 2.2 GHz.
    """
    inter, heads = 4 * hidden, max(1, hidden // 64)
    tokens = batch * seq
    bpe = 2 if precision in ("fp16", "bf16") else 4
    layer_matmul = 4 * hidden * hidden + 2 * hidden * inter
    layer_params = layer_matmul + 9 * hidden + inter
    emb_params = (vocab + 512 + 2) * hidden + 2 * hidden
    head_params = hidden * hidden + hidden + 2 * hidden + 2
    params = layers * layer_params + emb_params + head_params
    act, scores = tokens * hidden * bpe, batch * heads * seq * seq * bpe
    ops = (
        OpCost("matmul", 6.0 * (layers * layer_matmul + head_params) * tokens,
               layers * 3 * (6 * act + 2 * tokens * inter * bpe + layer_matmul * bpe), layers * 18 + 6),
        OpCost("attention", layers * 3 * 4.0 * batch * seq * seq * hidden, layers * 3 * (4 * act + 2 * scores), layers * 12),
        OpCost("elementwise", layers * 3.0 * (12 * tokens * hidden + 2 * tokens * inter + 4 * batch * heads * seq * seq),
               layers * (40 * act + 10 * tokens * inter * bpe + 12 * scores), layers * 45),
        OpCost("reduction", layers * 3 * 8.0 * tokens * hidden, layers * 12 * act, layers * 15),
        OpCost("embedding", 3.0 * tokens * hidden, 6 * act + 3 * emb_params * 4, 14),
        OpCost("optimizer", 12.0 * params, 36.0 * params, 40 + layers * 16 + 8),
        OpCost("other", 0.0, 1e6, 20),
    )  # fmt: skip
    return StepTrace(f"bert-{layers}x{hidden}", batch, seq, precision, ops, host_cycles=60e6 + 5e5 * batch, params=params)


@pytest.fixture(scope="module")
def profile():
    return load_profile("agx-orin-64gb")


TINY = bert_trace(2, 128)  # BERT-tiny: ~4.4M parameters, mostly embeddings
BASE = bert_trace(12, 768)  # BERT-base: ~110M
LARGE = bert_trace(24, 1024)  # BERT-large: ~335M


def sweep(trace, profile):
    """Energy and time per GPU step, CPU and EMC left to their governors (MAXN)."""
    maxn = default_control(profile, 0)
    out = {}
    for f in profile.gpu.table_hz:
        clocks, est = resolve(trace, pin_gpu(maxn, f), profile)
        assert clocks.gpu_hz == f
        out[f] = est
    return out


# --------------------------------------------------------------------------- profile


def test_traces_have_the_published_sizes():
    assert 4.0e6 < TINY.params < 4.8e6
    assert 105e6 < BASE.params < 115e6


def test_shipped_profile_holds_the_spec_facts(profile):
    assert "agx-orin-64gb" in available_profiles()
    assert tuple(f / MHZ for f in profile.gpu.table_hz) == SPEC_GPU_TABLE
    assert len(profile.cpu.table_hz) == 29 and profile.cpu.table_hz[-1] == 2201600000
    assert profile.emc.table_hz == (204000000, 665600000, 2133000000, 3199000000)
    assert profile.rail_names == tuple(SPEC_IDLE_MW)
    assert profile.module_power_limit_mw == 60000
    caps = {m.id: (m.name, m.online_cpus, m.cpu_max_hz, m.gpu_max_hz) for m in profile.modes}
    assert caps[0] == ("MAXN", 12, None, None)
    assert caps[1] == ("MODE_15W", 4, 1113600000, 408000000)
    assert caps[2] == ("MODE_30W", 8, 1728000000, 612000000)
    assert caps[3] == ("MODE_50W", 12, 1497600000, 816000000)
    # Peaks the spec states: FP32 ~5.3 TFLOPS and FP16 tensor ~42.5 TFLOPS at 1.3 GHz, 204.8 GB/s.
    top = profile.gpu.table_hz[-1]
    assert profile.gpu.fp32_flops_per_cycle * top == pytest.approx(5.3e12, rel=0.02)
    assert profile.gpu.tensor_flops_per_cycle * top == pytest.approx(42.5e12, rel=0.02)
    assert profile.emc.bytes_per_cycle * 3199e6 == pytest.approx(204.8e9, rel=0.01)
    assert profile.emc.bytes_per_cycle * 3199e6 * profile.emc.achievable == pytest.approx(156e9, rel=0.01)


def test_every_profile_value_names_its_source():
    path = devices_dir() / "agx-orin-64gb.toml"
    lines = path.read_text().splitlines()
    for i, line in enumerate(lines):
        if re.match(r"^[A-Za-z_]\w* = ", line):
            assert "#" in line or lines[i - 1].lstrip().startswith("#"), f"line {i + 1} has no source: {line}"


def test_unknown_profile_lists_the_available_ones():
    with pytest.raises(ProfileError) as err:
        load_profile("agx-orin-128gb")
    assert "agx-orin-64gb" in err.value.remedy
    assert "agx-orin-128gb" in err.value.what


def test_corrupt_profile_names_the_file(tmp_path: Path):
    bad = tmp_path / "broken.toml"
    bad.write_text("name = [unclosed\n")
    with pytest.raises(ProfileError) as err:
        load_profile(str(bad))
    assert str(bad) in err.value.what


def test_missing_key_names_file_and_key(tmp_path: Path):
    text = (devices_dir() / "agx-orin-64gb.toml").read_text()
    cut = tmp_path / "cut.toml"
    cut.write_text(re.sub(r"(?m)^sms = .*$", "", text))
    with pytest.raises(ProfileError) as err:
        load_profile(str(cut))
    assert "gpu.sms" in err.value.what and str(cut) in err.value.what


def test_wrong_type_names_the_key(tmp_path: Path):
    text = (devices_dir() / "agx-orin-64gb.toml").read_text()
    bad = tmp_path / "typed.toml"
    bad.write_text(re.sub(r"(?m)^tau_s = .*$", 'tau_s = "a minute"', text))
    with pytest.raises(ProfileError, match="thermal.tau_s"):
        load_profile(str(bad))


def test_vf_curve_has_a_floor(profile):
    vf = profile.gpu.vf
    assert vf.volts(306e6) == vf.volts(510e6) == vf.floor_v
    assert vf.volts(1300.5e6) == pytest.approx(vf.max_v)
    assert vf.volts(816e6) < vf.volts(1020e6) < vf.volts(1224e6)


# --------------------------------------------------------------------------- power


def test_idle_rails_match_the_spec(profile):
    clocks, est = resolve(None, default_control(profile, 0), profile)
    assert est is None
    assert clocks == Clocks(306 * MHZ, 729600000, 2133 * MHZ)
    idle = idle_power_mw(clocks, profile)
    for rail, mw in SPEC_IDLE_MW.items():
        assert idle[rail] == pytest.approx(mw, rel=0.02), rail


def test_cpu_load_rails_match_the_spec(profile):
    load = Load(cpu_busy_cores=12, traffic_bps=20e9)
    p = rail_powers_mw(Clocks(306 * MHZ, 2201600000, 3199 * MHZ), load, profile)
    for rail, mw in SPEC_CPU_LOAD_MW.items():
        assert p[rail] == pytest.approx(mw, rel=0.05), rail


def test_dynamic_power_grows_faster_than_clock_above_the_knee(profile):
    act = Load(gpu_activity=0.7)
    gpu = [rail_powers_mw(Clocks(f, 729600000, 2133 * MHZ), act, profile)["VDD_GPU_SOC"] for f in (612 * MHZ, 1224 * MHZ)]
    assert gpu[1] > 2.2 * (gpu[0] - profile.rail("VDD_GPU_SOC").static_mw)  # V^2 rises too


def test_energy_is_power_times_time(profile):
    est = estimate_step(BASE, Clocks(816 * MHZ, 2201600000, 3199 * MHZ), profile)
    for rail, mw in est.power_mw.items():
        assert est.energy_j[rail] == pytest.approx(mw * est.time_s / 1000.0, rel=1e-12)
    assert est.total_energy_j == pytest.approx(est.total_power_mw * est.time_s / 1000.0, rel=1e-12)
    assert str(est.source) == "twin"


# --------------------------------------------------------------------------- time


def test_roofline_uses_tensor_cores_for_half_precision(profile):
    clocks = Clocks(1300500000, 2201600000, 3199 * MHZ)
    fp32 = estimate_step(BASE, clocks, profile)
    fp16 = estimate_step(bert_trace(12, 768, precision="fp16"), clocks, profile)
    assert fp16.gpu_busy_s < 0.5 * fp32.gpu_busy_s


def test_memory_bound_work_follows_the_emc_clock(profile):
    stream = StepTrace("stream", 1, 1, "fp32", (OpCost("elementwise", 1e9, 20e9, 10),), host_cycles=0.0)
    fast = estimate_step(stream, Clocks(1300500000, 2201600000, 3199 * MHZ), profile)
    slow = estimate_step(stream, Clocks(1300500000, 2201600000, 2133 * MHZ), profile)
    assert slow.time_s / fast.time_s == pytest.approx(3199 / 2133, rel=0.02)
    assert fast.time_s == pytest.approx(20e9 / 156e9, rel=0.02)  # the spec's achievable bandwidth


def test_bert_tiny_is_bound_by_launches_and_host(profile):
    times = {f: est.time_s for f, est in sweep(TINY, profile).items()}
    t612, t1300 = times[612 * MHZ], times[1300500000]
    assert abs(t612 - t1300) / t1300 < 0.10
    est = estimate_step(TINY, Clocks(1300500000, 2201600000, 3199 * MHZ), profile)
    assert est.host_s > 0.9 * est.time_s  # the host thread is the bottleneck
    assert est.gpu_busy_s < 0.6 * est.time_s
    # ... whereas the CPU clock does move it
    slow_cpu = estimate_step(TINY, Clocks(1300500000, 1113600000, 3199 * MHZ), profile)
    assert slow_cpu.time_s > 1.5 * est.time_s


@pytest.mark.parametrize("trace", [BASE, LARGE], ids=["bert-base", "bert-large"])
def test_energy_against_gpu_clock_is_u_shaped(profile, trace):
    energy = {f: est.total_energy_j for f, est in sweep(trace, profile).items()}
    best = min(energy, key=energy.get)
    assert 612 * MHZ <= best <= 1020 * MHZ
    assert energy[306 * MHZ] > 1.1 * energy[best]  # too slow: static power for too long
    assert energy[1300500000] > 1.05 * energy[best]  # too fast: V^2 f
    times = [sweep_est.time_s for sweep_est in sweep(trace, profile).values()]
    assert times == sorted(times, reverse=True)  # faster with every step


@pytest.mark.parametrize("trace", [BASE, LARGE], ids=["bert-base", "bert-large"])
def test_optimum_saves_10_to_30_percent_against_maxn_mode0(profile, trace):
    maxn_clocks, maxn = resolve(trace, default_control(profile, 0), profile)
    # MAXN Mode 0 (dynamic governors) drives a busy GPU to its top clock.
    assert maxn_clocks.gpu_hz == 1300500000 and maxn_clocks.emc_hz == 3199 * MHZ
    # Over VDD_GPU_SOC + VDD_CPU_CV, as the seed paper measured (13.11% on average, up to 26.73%).
    paper = ("VDD_GPU_SOC", "VDD_CPU_CV")
    swept = sweep(trace, profile).values()
    best = min(sum(est.energy_j[r] for r in paper) for est in swept)
    saving = 1.0 - best / sum(maxn.energy_j[r] for r in paper)
    assert 0.10 <= saving <= 0.30
    # Over every rail the board's static power (DRAM, regulators) dilutes it, but it stays a saving.
    assert 0.0 < 1.0 - min(est.total_energy_j for est in swept) / maxn.total_energy_j < saving


def test_estimate_step_is_fast(profile):
    clocks = Clocks(816 * MHZ, 2201600000, 3199 * MHZ)
    n = 500
    t0 = time.perf_counter()
    for _ in range(n):
        estimate_step(BASE, clocks, profile)
    assert (time.perf_counter() - t0) / n < 1e-3


# --------------------------------------------------------------------------- governors


def test_governors_settle_by_load(profile):
    maxn = default_control(profile, 0)
    tiny_clocks, _ = resolve(TINY, maxn, profile)
    base_clocks, _ = resolve(BASE, maxn, profile)
    # podgov leaves a mostly idle GPU low, drives a busy one high
    assert tiny_clocks.gpu_hz < base_clocks.gpu_hz == 1300500000
    # the training thread spins on the GPU, so schedutil keeps its core at the top
    assert base_clocks.cpu_hz == 2201600000


def test_mode_caps_hold_under_load(profile):
    for mode in profile.modes:
        clocks, est = resolve(BASE, default_control(profile, mode.id), profile)
        assert est is not None
        if mode.gpu_max_hz:
            assert clocks.gpu_hz <= mode.gpu_max_hz
        if mode.cpu_max_hz:
            assert clocks.cpu_hz <= mode.cpu_max_hz
        if mode.emc_max_hz:
            assert clocks.emc_hz <= mode.emc_max_hz
    low, _ = resolve(BASE, default_control(profile, 1), profile)
    assert low == Clocks(408 * MHZ, 1113600000, 2133 * MHZ)
    # a user max above the cap does not lift it
    c = default_control(profile, 1)
    lifted = dataclasses.replace(c, gpu=dataclasses.replace(c.gpu, max_hz=1300500000))
    assert resolve(BASE, lifted, profile)[0].gpu_hz == 408 * MHZ


def test_module_power_limit_caps_the_gpu(profile):
    tight = dataclasses.replace(profile, module_power_limit_mw=20000.0)
    clocks, est = resolve(BASE, default_control(tight, 0), tight)
    assert est.total_power_mw <= 20000.0
    assert clocks.gpu_hz < 1300500000


def test_pinned_and_locked_domains_stay(profile):
    c = default_control(profile, 0)
    c = dataclasses.replace(
        pin_gpu(c, 510 * MHZ),
        cpu=dataclasses.replace(c.cpu, min_hz=1497600000, max_hz=1497600000),
        emc=dataclasses.replace(c.emc, locked=True, cur_hz=665600000),
    )
    for trace in (None, TINY, BASE):
        clocks, _ = resolve(trace, c, profile)
        assert clocks == Clocks(510 * MHZ, 1497600000, 665600000)


def test_sweep_points_are_cheap(profile):
    t0 = time.perf_counter()
    sweep(BASE, profile)
    assert time.perf_counter() - t0 < 0.5
    assert math.isfinite(sum(e.total_energy_j for e in sweep(TINY, profile).values()))
