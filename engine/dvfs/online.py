"""The online policy: find a good GPU clock during the run itself, with no prior data.

The first steps of the run are spent profiling. Each profiled setting gets a short
window: `warmup_steps` steps that are not counted (governors, caches and the EMC
settle after a clock change), then `measure_steps` steps whose time and energy are
summed. Profiling steps are ordinary training steps, so their cost is part of the
run's own total; `describe()` also reports it separately.

Candidates: the device's GPU table from 306 MHz up to its maximum (or a given list).
CPU and EMC stay with their governors, in the board's uncapped mode (MAXN, mode 0, on an AGX Orin;
MAXN_SUPER on an Orin Nano / NX), as published Orin studies do.

Search (`search=`):
- `coarse-to-fine` (default): first every `coarse_stride`-th candidate (the maximum
  always included), then the unprofiled candidates within a stride of the best coarse
  one. Energy per sample against GPU clock is unimodal on Orin (slow clocks pay static
  power for longer, fast ones pay V^2), so this finds the sweep's optimum with fewer
  windows: 11 steps, stride 2 -> 6 coarse + 2 fine = 8 windows instead of 11.
- `sweep`: every candidate, in order.
`order` is `descending` (default: start near MAXN, where the board already is) or
`ascending`. With a slowdown limit in the objective (`energy@5%`), MAXN itself is
profiled first as the reference; it is also a candidate.

After the last window the policy applies the best setting for the objective
(`Objective.best`) and keeps it for the rest of the run.

Prior (`prior=twin`, off by default): before the run, the twin ensemble of plausible profiles
(engine.device.twin.ensemble; the device's profile, or `profile=NAME`) costs the workload's steps at
every candidate, and only the GPU steps its members find optimal (the central 90%), widened by one
step on each side, are profiled: where the plausible boards agree, a few windows settle it; where
they disagree, the search spans what they disagree over. Windows saved are training steps at the
optimum instead of at worse clocks.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence, TypedDict

from engine.device.base import ClockDomain
from engine.core.units import format_mhz
from engine.core.measurement import Measurement
from engine.dvfs.objectives import Objective
from engine.device.baseline import baseline_setting, profile_baseline
from engine.device.setting import MAXN, DvfsSetting, check_setting
from engine.core.clocks import parse_mhz
from engine.core.errors import ConfigError, DeviceError
from engine.core.text import shown
from engine.core.userinput import parse_int
from engine.core.jsontypes import JsonObject

if TYPE_CHECKING:
    from engine.device.twin.profile import TwinProfile
    from engine.dvfs.policies import PolicyContext

log = logging.getLogger(__name__)

SEARCHES = ("coarse-to-fine", "sweep")
PRIORS = ("none", "twin")
ORDERS = ("descending", "ascending")
DEFAULT_MIN_HZ = 306_000_000  # the bottom of the r35.2+/r36 table; r35.1's lower steps are not worth a window


@dataclass(frozen=True)
class Phase:
    """One profiling window."""

    setting: DvfsSetting
    role: str  # "baseline" | "coarse" | "fine" | "sweep"
    index: int | None = None  # position in the candidate list (None for the baseline)


class OnlinePolicy:
    name = "online"

    def __init__(
        self,
        *,
        candidates_hz: Sequence[int] | None = None,
        min_hz: int = DEFAULT_MIN_HZ,
        warmup_steps: int = 1,
        measure_steps: int = 2,
        search: str = "coarse-to-fine",
        coarse_stride: int = 2,
        order: str = "descending",
        prior: str = "none",
        profile: str | TwinProfile | None = None,
    ) -> None:
        _positive_int("warmup_steps", warmup_steps, allow_zero=True)
        _positive_int("measure_steps", measure_steps)
        _positive_int("coarse_stride", coarse_stride)
        if search not in SEARCHES:
            raise ConfigError(f"unknown online search {search!r}", f"use one of {', '.join(SEARCHES)}")
        if order not in ORDERS:
            raise ConfigError(f"unknown candidate order {order!r}", f"use one of {', '.join(ORDERS)}")
        if prior not in PRIORS:
            raise ConfigError(f"unknown online prior {prior!r}", f"use one of {', '.join(PRIORS)}")
        if prior != "none" and candidates_hz is not None:
            raise ConfigError("online: prior=twin chooses the candidates; candidates were given too",
                              "drop one of prior= and candidates=")
        if candidates_hz is not None and not candidates_hz:
            raise ConfigError(
                "the online policy got an empty candidate list", "give at least one GPU clock, or none for the table"
            )
        self.given_hz = None if candidates_hz is None else tuple(sorted({int(f) for f in candidates_hz}))
        self.min_hz = int(min_hz)
        self.warmup_steps = warmup_steps
        self.measure_steps = measure_steps
        self.search = search
        self.coarse_stride = coarse_stride
        self.order = order
        self.prior = prior
        self.profile = profile  # the ensemble's profile (name or TwinProfile); None: the device's
        self._reset()

    def _reset(self) -> None:
        self.candidates_hz: tuple[int, ...] = ()
        self.objective: Objective | None = None
        self._plan: list[Phase] = []
        self._current: Phase | None = None
        self._step_in_phase = 0
        self._acc: Measurement | None = None
        self._results: list[tuple[Phase, Measurement]] = []
        self._fine_planned = False
        self._steps = 0
        self._profiling_cost: Measurement | None = None
        self._chosen: DvfsSetting | None = None
        self._chosen_m: Measurement | None = None
        self._started = False
        self.prior_summary: JsonObject | None = None
        self._base: DvfsSetting = MAXN  # the board's uncapped mode, found in initial()

    # ------------------------------------------------------------------ the Policy protocol

    @property
    def profiling(self) -> bool:
        return self._started and self._chosen is None

    @property
    def steps_per_window(self) -> int:
        return self.warmup_steps + self.measure_steps

    @property
    def profiling_steps(self) -> int:
        """Steps spent profiling so far."""
        return self._steps

    @property
    def chosen(self) -> DvfsSetting | None:
        return self._chosen

    def initial(self, ctx: "PolicyContext") -> DvfsSetting:
        self._reset()
        self.objective = ctx.objective
        self._base = baseline_setting(ctx.device.power_modes())
        self.candidates_hz = self._candidates(ctx)
        n = len(self.candidates_hz)
        if self.search == "sweep":
            idx = list(range(n))
        else:
            idx = list(range(0, n, self.coarse_stride))
            if idx[-1] != n - 1:
                idx.append(n - 1)  # the maximum is always a coarse point
        role = "sweep" if self.search == "sweep" else "coarse"
        self._plan = [self._phase(i, role) for i in self._ordered(idx)]
        if ctx.objective.needs_baseline:
            self._plan.insert(0, Phase(self._base, "baseline"))
        self._started = True
        self._current = self._plan.pop(0)
        log.info(
            "online policy: profiling %d GPU clocks (%s, %d+%d steps each)%s",
            n, self.search, self.warmup_steps, self.measure_steps,
            " after MAXN as the reference" if ctx.objective.needs_baseline else "",
        )
        return self._current.setting

    def on_step_end(self, step: int, cost: Measurement | None) -> DvfsSetting | None:
        if not self._started:
            raise ConfigError("the online policy got a step before its initial setting", "call initial(ctx) first")
        if self._chosen is not None:
            return None
        phase = self._current
        assert phase is not None and self.objective is not None
        self._steps += 1
        self._step_in_phase += 1
        if cost is not None:
            self._profiling_cost = cost if self._profiling_cost is None else self._profiling_cost + cost
        if self._step_in_phase > self.warmup_steps:
            if cost is None:
                raise DeviceError(
                    f"the online policy got no time/energy for step {step}",
                    "run on the twin, or give the controller a power monitor on a board",
                )
            self._acc = cost if self._acc is None else self._acc + cost
        if self._step_in_phase < self.steps_per_window:
            return None

        assert self._acc is not None
        self._results.append((phase, self._acc))
        log.info("online: %s -> %.4g J/sample, %.4g s/sample", phase.setting.label(),
                 self._acc.joules_per_sample, self._acc.seconds_per_sample)
        self._step_in_phase, self._acc = 0, None
        if not self._plan and self.search == "coarse-to-fine" and not self._fine_planned:
            self._fine_planned = True
            self._plan = self._fine_phases()
        if self._plan:
            self._current = self._plan.pop(0)
            return self._current.setting
        return self._finish(phase.setting)

    def describe(self) -> JsonObject:
        obj = self.objective
        baseline = self._baseline()
        return {
            "policy": self.name,
            "spec": self.spec,
            "objective": None if obj is None else obj.spec,
            "search": self.search,
            "order": self.order,
            "coarse_stride": self.coarse_stride,
            "warmup_steps": self.warmup_steps,
            "measure_steps": self.measure_steps,
            "candidates_hz": list(self.candidates_hz),
            "prior": self.prior_summary,
            "profiling": self.profiling,
            "profiling_steps": self._steps,
            "max_profiling_steps": self.max_profiling_steps,
            "profiling_cost": None if self._profiling_cost is None else self._profiling_cost.to_json(),
            "profiled": [
                {
                    "role": ph.role,
                    "setting": ph.setting.to_json(),
                    "label": ph.setting.label(),
                    "measurement": m.to_json(),
                    "cost": None if obj is None else obj.cost(m),
                    "feasible": None if obj is None or (obj.needs_baseline and baseline is None)
                    else obj.feasible(m, baseline),
                }
                for ph, m in self._results
            ],
            "baseline": None if baseline is None else baseline.to_json(),
            "setting": None if self._chosen is None else self._chosen.to_json(),
            "label": None if self._chosen is None else self._chosen.label(),
            "measurement": None if self._chosen_m is None else self._chosen_m.to_json(),
            "reason": self._reason(),
        }

    # ------------------------------------------------------------------ helpers

    @property
    def spec(self) -> str:
        return (f"online:search={self.search},order={self.order},stride={self.coarse_stride},"
                f"warmup={self.warmup_steps},measure={self.measure_steps}"
                + (f",prior={self.prior}" if self.prior != "none" else ""))

    @property
    def max_profiling_steps(self) -> int:
        """An upper bound on the steps profiling takes (exact for `sweep`)."""
        n = len(self.candidates_hz)
        if self.search == "sweep":
            windows = n
        else:
            coarse = len(range(0, n, self.coarse_stride)) + (0 if (n - 1) % self.coarse_stride == 0 else 1)
            windows = min(n, coarse + 2 * (self.coarse_stride - 1))
        if self.objective is not None and self.objective.needs_baseline:
            windows += 1
        return windows * self.steps_per_window

    def _candidates(self, ctx: "PolicyContext") -> tuple[int, ...]:
        table = ctx.device.clock_table(ClockDomain.GPU)
        if self.given_hz is not None:
            for hz in self.given_hz:  # unlisted or above the mode's cap: refuse before the run
                check_setting(ctx.device, DvfsSetting(gpu_hz=hz, nvpmodel=self._base.nvpmodel))
            return self.given_hz
        out = tuple(f for f in table if f >= self.min_hz)
        if not out:
            raise ConfigError(
                f"no GPU clock at or above {format_mhz(self.min_hz)} MHz in the device's table",
                "lower min_hz, or give the candidates explicitly",
            )
        return self._plausible(ctx, out) if self.prior == "twin" else out

    def _plausible(self, ctx: "PolicyContext", table: tuple[int, ...]) -> tuple[int, ...]:
        """The candidates the twin ensemble's members find optimal (central 90%), one step wider each side."""
        from engine.device.twin.ensemble import ensemble
        from engine.device.twin.profile import load_profile

        steps = getattr(ctx.workload, "steps", None) or getattr(ctx.workload, "trace", None)
        if steps is None:
            raise ConfigError("online: prior=twin needs the workload's step trace, and the policy was given none",
                              "run it through `slm-dvfs run` (the experiment passes it), or drop prior=twin")
        name = self.profile or ctx.device.identity().profile
        if name is None:
            raise ConfigError("online: prior=twin needs a twin profile of this board", "add profile=NAME")
        profile = load_profile(name) if isinstance(name, str) else name
        baseline = profile_baseline(profile).setting  # the profile's ids: MAXN_SUPER is mode 2 on an Orin Nano
        settings = [DvfsSetting(gpu_hz=f, nvpmodel=baseline.nvpmodel) for f in table]
        ens = ensemble(steps, profile, settings)
        assert self.objective is not None
        optima = []
        for e_row, t_row in zip(ens.energy_ps, ens.time_ps):
            ms = [(s, Measurement(t, e, 1, None)) for s, t, e in zip(ens.settings, t_row, e_row)]
            base = ms[ens.settings.index(baseline)][1]
            best, _m = self.objective.best([p for p in ms if p[0] != baseline], base, baseline_setting=baseline)
            if best != baseline:
                optima.append(table.index(best.gpu_hz))
        if not optima:
            return table
        optima.sort()
        tail = (1.0 - ens.level) / 2.0
        lo = optima[int(round(tail * (len(optima) - 1)))]
        hi = optima[int(round((1.0 - tail) * (len(optima) - 1)))]
        out = table[max(0, lo - 1):hi + 2]
        self.prior_summary = {"basis": ens.basis, "level": ens.level, "optimum_gpu_mhz": [table[lo] / 1e6,
                              table[hi] / 1e6], "optimum_steps": hi - lo, "candidates": len(out), "of": len(table)}
        log.info("online prior: the ensemble's optima lie at %s-%s MHz; profiling %d of %d GPU clocks",
                 format_mhz(table[lo]), format_mhz(table[hi]), len(out), len(table))
        return out

    def _phase(self, index: int, role: str) -> Phase:
        return Phase(DvfsSetting(gpu_hz=self.candidates_hz[index], nvpmodel=self._base.nvpmodel), role, index)

    def _ordered(self, idx: list[int]) -> list[int]:
        return sorted(idx, reverse=self.order == "descending")

    def _baseline(self) -> Measurement | None:
        return next((m for ph, m in self._results if ph.role == "baseline"), None)

    def _fine_phases(self) -> list[Phase]:
        assert self.objective is not None
        coarse = [(ph.setting, m) for ph, m in self._results if ph.role == "coarse"]
        best, _m = self.objective.best(coarse, self._baseline(), baseline_setting=self._base)
        centre = next((ph.index for ph, _m in self._results if ph.role == "coarse" and ph.setting == best), None)
        if centre is None:  # nothing within the slowdown limit: MAXN it is, no refinement
            return []
        done = {ph.index for ph, _m in self._results}
        s = self.coarse_stride
        idx = [i for i in range(centre - s + 1, centre + s) if 0 <= i < len(self.candidates_hz) and i not in done]
        return [self._phase(i, "fine") for i in self._ordered(idx)]

    def _finish(self, current: DvfsSetting) -> DvfsSetting | None:
        assert self.objective is not None
        points = [(ph.setting, m) for ph, m in self._results]
        self._chosen, self._chosen_m = self.objective.best(points, self._baseline(), baseline_setting=self._base)
        log.info("online policy chose %s after %d profiling steps (%s)",
                 self._chosen.label(), self._steps, self.objective.spec)
        return None if self._chosen == current else self._chosen

    def _reason(self) -> str:
        if not self._started:
            return "not started"
        if self._chosen is None:
            return f"profiling: {len(self._results)} window(s) of {self.steps_per_window} steps done"
        return (f"lowest {self.objective.spec if self.objective else ''} cost of {len(self._results)} "
                f"profiled settings ({self.search}, {self._steps} profiling steps)")


class OnlineOptions(TypedDict, total=False):
    """OnlinePolicy's keyword arguments, as `online:...` and a client's policy options give them."""

    candidates_hz: Sequence[int] | None
    min_hz: int
    warmup_steps: int
    measure_steps: int
    search: str
    coarse_stride: int
    order: str
    prior: str
    profile: str | TwinProfile | None


def parse_online_options(arg: str) -> OnlineOptions:
    """`warmup=1,measure=2,search=sweep,stride=2,order=ascending,min=306,candidates=306/612/918`
    (clocks in MHz) -> OnlinePolicy keyword arguments."""
    out: OnlineOptions = {}
    keys = ("warmup", "measure", "search", "stride", "order", "min", "candidates", "prior", "profile")
    seen: set[str] = set()
    for item in arg.split(","):
        if not item.strip():
            continue
        key, eq, value = item.strip().partition("=")
        key, value = key.strip().lower(), value.strip() if key.strip().lower() == "profile" else value.strip().lower()
        if key not in keys or not eq or not value:
            raise ConfigError(
                f"bad online option {shown(item.strip())!r}",
                "use key=value with keys " + ", ".join(keys) + " (e.g. online:warmup=1,measure=2,search=sweep)",
            )
        if key in seen:
            raise ConfigError(f"online option {key} given twice", "give each once")
        seen.add(key)
        # one branch per key: each sets its keyword with its own type
        if key == "warmup":
            out["warmup_steps"] = _whole_option(key, value)
        elif key == "measure":
            out["measure_steps"] = _whole_option(key, value)
        elif key == "stride":
            out["coarse_stride"] = _whole_option(key, value)
        elif key == "min":
            out["min_hz"] = parse_mhz(value, what=f"online option {key}:")
        elif key == "candidates":
            out["candidates_hz"] = tuple(parse_mhz(v, what=f"online option {key}:") for v in value.split("/") if v.strip())
        elif key == "search":
            out["search"] = value
        elif key == "order":
            out["order"] = value
        elif key == "prior":
            out["prior"] = value
        else:
            out["profile"] = value
    return out


def _whole_option(key: str, value: str) -> int:
    try:
        return parse_int(value, f"online option {key}")
    except ConfigError:
        raise ConfigError(f"online option {key}={shown(value)} is not a whole number", f"e.g. {key}=2") from None


def _positive_int(name: str, value: object, *, allow_zero: bool = False) -> None:
    ok = isinstance(value, int) and not isinstance(value, bool) and (value >= 0 if allow_zero else value >= 1)
    if not ok:
        raise ConfigError(f"online option {name} must be a {'non-negative' if allow_zero else 'positive'} integer, "
                          f"got {value!r}", f"e.g. {name}=2")
