"""Synthetic "measured" sweeps from a perturbed twin: a truth that is known, for the calibration's
tests and benchmark (bench/bench_calibration.py). Nothing here is measured: these observations
exist only in memory (or in a test's temporary store); never store them as measured in a user's.

The perturbation moves several uncertain numbers of the shipped profile by known amounts within
their bounds (about one to one and a half prior sds each): power, timing, the host's (launch cycles
and the training loop's serial work) and MAXN's GPU governor (podgov_load_seen < 1, so MAXN settles
lower than the shipped twin's for some workloads, as published measurements show).
"""

from __future__ import annotations

import math
import random
from typing import TYPE_CHECKING, Mapping, Sequence

from engine.core.trace import StepMix, StepTrace
from engine.device.baseline import profile_baseline
from engine.device.setting import DvfsSetting
from engine.device.twin.calibration.observations import Observation
from engine.device.twin.params import get_param, with_params

if TYPE_CHECKING:  # the profile module loads with the first profile
    from engine.device.twin.profile import TwinProfile

GPU_CPU_RAILS = ("VDD_GPU_SOC", "VDD_CPU_CV")  # what published Orin fine-tuning measurements sum

# The known truth, as values of the shipped agx-orin-64gb profile's uncertain numbers.
PERTURBATION: Mapping[str, float] = {
    "gpu.capacitance_f": 2.5e-8,  # prior 2.2e-8, sd 0.3e-8
    "gpu.vf.knee_hz": 720e6,  # prior 620 MHz, sd 80: the voltage floor holds longer
    "gpu.vf.max_v": 0.85,  # prior 0.80, sd 0.04
    "gpu.leak_mw": 420.0,  # prior 250, sd 120
    "gpu.matmul_efficiency": 0.6,  # prior 0.7, sd 0.1
    "cpu.launch_cycles": 48000.0,  # prior 40000, sd 8000
    "cpu.serial_scale": 1.4,  # prior 1.0, sd 0.3: the board's loop does 40% more serial host work per step
    "rails.VDD_GPU_SOC.static_mw": 1650.0,  # prior 1485, sd 150
    "gpu.podgov_load_seen": 0.875,  # prior 1.0, sd 0.1: podgov sees 87.5% of the busy time
}


def perturbed_profile(profile: TwinProfile, perturbation: Mapping[str, float] | None = None) -> TwinProfile:
    """`profile` with the perturbation's numbers (default PERTURBATION), named "<name>-perturbed"."""
    from dataclasses import replace

    values = dict(PERTURBATION if perturbation is None else perturbation)
    for path, value in values.items():
        spread = next((s for s in profile.uncertainty if s.path == path), None)
        if spread is not None:
            spread.check(value, f"the perturbation of {profile.name}")
        get_param(profile, path)  # refuses unknown paths
    return replace(with_params(profile, values), name=f"{profile.name}-perturbed", base=profile.name)


def gpu_sweep_settings(profile: TwinProfile, *, steps: Sequence[int] | None = None, maxn: bool = True) -> tuple[DvfsSetting, ...]:
    """The profile's baseline (MAXN; MAXN_SUPER on an Orin Nano) and the GPU pinned (min = max) at each table
    step (or those indices) in its mode, CPU/EMC on governors."""
    table = profile.gpu.table_hz
    chosen = range(len(table)) if steps is None else steps
    base = profile_baseline(profile).setting
    out = [DvfsSetting(gpu_hz=table[i], nvpmodel=base.nvpmodel) for i in chosen]
    return ((base,) if maxn else ()) + tuple(out)


def synthetic_sweep(trace: StepTrace | StepMix, truth: TwinProfile, *, sweep: str,
                    settings: Sequence[DvfsSetting] | None = None, rails: Sequence[str] = GPU_CPU_RAILS,
                    noise: float = 0.015, seed: int = 0, energy_only: int = 0) -> list[Observation]:
    """One sweep "measured" on the `truth` profile: each figure times a log-normal factor of sd
    `noise`; the last `energy_only` pinned settings have no time (as an energy-only import)."""
    from engine.device.twin.calibration.observations import predict

    chosen = tuple(settings) if settings is not None else gpu_sweep_settings(truth)
    base = profile_baseline(truth).setting
    rng = random.Random(f"{seed}:{sweep}")
    names = tuple(rails)
    exact = [Observation(sweep, trace, s, names, 1.0, None) for s in chosen]
    preds = predict(truth, exact)
    n = len(chosen)
    out = []
    for k, (s, p) in enumerate(zip(chosen, preds)):
        e = p.energy_j_per_sample * math.exp(rng.gauss(0.0, noise))
        t = p.time_s_per_sample * math.exp(rng.gauss(0.0, noise))
        timeless = s != base and k >= n - energy_only
        out.append(Observation(sweep, trace, s, names, e, None if timeless else t))
    return out
