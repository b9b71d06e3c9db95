"""The twin's fast mode: sweep points computed straight from a step trace with the governors and
the model, no tree, no store, no torch (thousands of points a second; the selector's data generator)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Mapping, Sequence

from engine.core.clocks import highest_at_most
from engine.core.errors import ConfigError
from engine.core.measurement import Measurement
from engine.core.provenance import Source
from engine.core.trace import StepMix, StepTrace, as_mix
from engine.device.base import ClockDomain
from engine.device.rails import total_rails
from engine.device.setting import DvfsSetting, check_clocks

if TYPE_CHECKING:  # the model loads with the first point computed
    from engine.device.twin.governors import ControlState
    from engine.device.twin.model import Clocks
    from engine.device.twin.profile import TwinProfile


# --------------------------------------------------------------------------- fast mode
def setting_control(setting: DvfsSetting, profile: TwinProfile) -> ControlState:
    """The twin's control state once `setting` is applied to a freshly booted board:
    the mode's default governors and caps (mode 0 = MAXN), jetson_clocks' pins at the
    mode maximum, then each pinned domain. Refuses unlisted clocks and clocks above the
    mode's cap with `check_clocks`, as `check_setting` does on a device."""
    from engine.device.twin.governors import default_control

    mode_id = profile.initial_mode if setting.nvpmodel is None else setting.nvpmodel
    mode = profile.mode(mode_id)
    control = default_control(profile, mode_id)
    if setting.jetson_clocks:
        g, c, e = control.gpu, control.cpu, control.emc
        control = replace(
            control,
            gpu=replace(g, min_hz=g.max_hz, cur_hz=g.max_hz),
            cpu=replace(c, min_hz=c.max_hz, cur_hz=c.max_hz),
            emc=replace(e, locked=True, cur_hz=highest_at_most(profile.emc.table_hz, e.max_hz)),
        )
    tables = {ClockDomain.GPU: profile.gpu.table_hz, ClockDomain.CPU: profile.cpu.table_hz,
              ClockDomain.EMC: profile.emc.table_hz}
    check_clocks(setting, tables, mode)
    for domain, hz in setting.pinned.items():
        if domain is ClockDomain.GPU:
            control = replace(control, gpu=replace(control.gpu, min_hz=hz, max_hz=hz, cur_hz=hz))
        elif domain is ClockDomain.CPU:
            control = replace(control, cpu=replace(control.cpu, min_hz=hz, max_hz=hz, cur_hz=hz))
        else:
            control = replace(control, emc=replace(control.emc, locked=True, cur_hz=hz))
    return control


@dataclass(frozen=True)
class FastPoint:
    """One fast-sweep point: the measurement and what it is made of."""

    setting: DvfsSetting
    measurement: Measurement  # over the rails asked for
    rail_energy_j: Mapping[str, float]  # every rail, over the measured steps
    gpu_hz: int  # where the governors settled
    cpu_hz: int
    emc_hz: int


def fast_points(
    trace: StepTrace | StepMix,
    profile: TwinProfile,
    settings: Sequence[DvfsSetting],
    *,
    warmup_steps: int = 1,
    steps: int = 5,
    rails: Sequence[str] | None = None,
) -> list[FastPoint]:
    """`fast_sweep` with each point's per-rail energy and settled clocks."""

    check_counts(warmup_steps, steps, 1)
    names = total_rails(profile.rail_names) if rails is None else tuple(rails)  # None: the module's total
    unknown = [r for r in names if r not in profile.rail_names]
    if unknown:
        raise ConfigError(f"rail(s) {', '.join(unknown)} not in profile {profile.name}",
                          f"use some of {', '.join(profile.rail_names)}")
    # The twin is deterministic and (in this mode) has no thermal state, so warm-up steps
    # cost what measured ones do: they are validated, not computed.
    mix = as_mix(trace)
    memo: dict[ControlState, MixEstimate] = {}
    out: list[FastPoint] = []
    for setting in settings:
        control = setting_control(setting, profile)
        est = memo.get(control)
        if est is None:
            est = memo[control] = mix_estimate(mix, control, profile)
        clocks = est.clocks
        rail_j = {name: joules * steps for name, joules in est.energy_j.items()}
        power_w = sum(est.power_mw[r] for r in names) / 1000.0
        m = Measurement(
            time_s=est.time_s * steps,
            energy_j=sum(rail_j[r] for r in names),
            samples=mix.batch_size * steps,
            peak_power_w=power_w,  # the twin's power is constant over a steady step
            source=Source.TWIN,
        )
        out.append(FastPoint(setting, m, rail_j, clocks.gpu_hz, clocks.cpu_hz, clocks.emc_hz))
    return out


@dataclass(frozen=True)
class MixEstimate:
    """One step of a StepMix at a control state: time and per-rail energy are the weighted means
    of its parts' (each part settled by the governors on its own); power is energy over time."""

    time_s: float
    energy_j: Mapping[str, float]
    power_mw: Mapping[str, float]
    clocks: Clocks  # the heaviest part's settled clocks


def mix_estimate(mix: StepMix, control: ControlState, profile: TwinProfile, *, gpu_cap_hz: int | None = None) -> MixEstimate:
    """The twin's figures for one step of `mix` under `control`: the one place the length mixture
    of dynamic padding meets the twin (fast sweeps here, VirtualOrin.run_step steps by part).
    The twin is nonlinear in a trace, so this is the mean of the parts' figures, not the figure
    of a mean trace. A one-part mix gives that part's figures exactly."""
    from engine.device.twin.governors import resolve

    if mix.is_single:
        clocks, est = resolve(mix.parts[0][1], control, profile, gpu_cap_hz=gpu_cap_hz)
        assert est is not None
        return MixEstimate(est.time_s, dict(est.energy_j), dict(est.power_mw), clocks)
    time_s = 0.0
    energy: dict[str, float] = {}
    heaviest = max(mix.parts, key=lambda p: p[0])
    heaviest_clocks: Clocks | None = None
    for weight, part in mix.parts:
        c, est = resolve(part, control, profile, gpu_cap_hz=gpu_cap_hz)
        assert est is not None
        time_s += weight * est.time_s
        for name, joules in est.energy_j.items():
            energy[name] = energy.get(name, 0.0) + weight * joules
        if part is heaviest[1]:
            heaviest_clocks = c
    assert heaviest_clocks is not None  # the heaviest part is one of the parts
    power = {name: 1000.0 * joules / time_s for name, joules in energy.items()}
    return MixEstimate(time_s, energy, power, heaviest_clocks)


def fast_sweep(
    trace: StepTrace | StepMix,
    profile: TwinProfile,
    settings: Sequence[DvfsSetting],
    *,
    warmup_steps: int = 1,
    steps: int = 5,
    rails: Sequence[str] | None = None,
) -> list[tuple[DvfsSetting, Measurement]]:
    """Every setting's measurement computed from the step trace on the twin's model:
    `steps` measured steps at the clocks the governors settle on under the setting's mode
    caps and pins (MAXN = mode 0, dynamic governors). Pure: no tree, no store, no torch.
    Energy is over `rails` (default: the module's total, engine.device.rails); figures are `twin`. A StepMix
    (dynamic padding) costs each step as the weighted mean of its parts' (`mix_estimate`)."""
    return [(p.setting, p.measurement) for p in
            fast_points(trace, profile, settings, warmup_steps=warmup_steps, steps=steps, rails=rails)]


def check_counts(warmup: object, steps: object, repeats: object) -> None:
    for name, value, low in (("warm-up steps", warmup, 0), ("measured steps", steps, 1), ("repeats", repeats, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ConfigError(f"{name} must be a whole number of at least {low}, not {value!r}",
                              "e.g. --warmup-steps 1 --steps 5 --repeats 3")
