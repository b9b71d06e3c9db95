"""How sure a choice is: intervals on the selector's figures, and how many probes they call for.

Two sources of doubt, combined (docs/selector.md, "Intervals"):

- the twin's parameters: an ensemble of plausible profiles (engine.device.twin.ensemble) costs the
  workload at the chosen setting and at MAXN; the saving is taken within each member (paired) and
  its spread around the nominal member is laid around the selector's predicted saving. The same
  relative spread gives the chosen setting's and MAXN's energy intervals, and the members' own
  optima say how far the optimum's GPU clock may lie from where the twin puts it.
- the selector's record: the 90th percentile of its cross-validated regret on held-out workloads
  (kept at training as `training["cv_regret"]`). A choice that cost (1 + r) times the oracle's
  energy saves less: the interval's low end becomes 1 - (1 - low) * (1 + r90).

A selector file trained before the quantiles were kept gives an interval from the ensemble only,
and says so (naming the worst held-out miss it does keep, and, where the MAXN verdict rests on that
figure, that the interval leaves it out); a workload without a trace (features only) gets the regret
part only.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Mapping, Sequence

from engine.core.jsontypes import JsonObject
from engine.core.interval import LEVEL, Interval, quantile, quantile_interval
from engine.core.provenance import Source
from engine.device.setting import DvfsSetting
from engine.results.format import saving_text

if TYPE_CHECKING:
    from engine.core.trace import StepMix, StepTrace
    from engine.device.twin.ensemble import Ensemble
    from engine.device.twin.profile import TwinProfile
    from engine.selector.selector import Choice, Selector

log = logging.getLogger(__name__)

REGRET_QUANTILES = (0.5, 0.9, 0.95)
# The probe rule (probes_for): how many probe windows a choice's doubt is worth.
FLAT_STEPS = 1  # the ensemble's optima spanning this many GPU steps or fewer: neighbours cost alike
REGRET_SMALL = 0.02  # held-out choices rarely (10%) cost more than this over the oracle
REGRET_LARGE = 0.05


def regret_summary(regrets: Sequence[float], label: str) -> JsonObject:
    """The quantiles of a candidate's held-out regrets, as a selector keeps them (training["cv_regret"])."""
    vals = sorted(float(r) for r in regrets)
    return {"label": label, "workloads": len(vals),
            **{f"q{round(100 * q)}": quantile(vals, q) for q in REGRET_QUANTILES}}


def cv_regret_q90(selector: Selector) -> float | None:
    """The 90th percentile of the selector's held-out regret, or None for a file without it."""
    kept = (getattr(selector, "training", None) or {}).get("cv_regret")
    if not isinstance(kept, Mapping) or "q90" not in kept:
        return None
    value = float(kept["q90"])
    return value if math.isfinite(value) and value >= 0 else None


@dataclass(frozen=True)
class ChoiceUncertainty:
    """Intervals on one choice's predicted figures (fractions, J per sample, Hz)."""

    saving: Interval  # energy saving against MAXN
    energy: Interval | None = None  # the chosen setting's energy per sample
    maxn_energy: Interval | None = None
    regret_q90: float | None = None  # the selector's held-out regret, 90th percentile
    optimum_gpu_hz: Interval | None = None  # where the ensemble's members put the optimum's GPU clock
    optimum_steps: int | None = None  # GPU steps that spread spans
    members: int = 0  # the ensemble's size (0: none)
    note: str = ""  # what the interval leaves out

    @property
    def basis(self) -> str:
        return self.saving.basis

    def to_json(self) -> JsonObject:
        return {"saving": self.saving.to_json(),
                "energy_per_sample_j": None if self.energy is None else self.energy.to_json(),
                "maxn_energy_per_sample_j": None if self.maxn_energy is None else self.maxn_energy.to_json(),
                "cv_regret_q90": self.regret_q90,
                "optimum_gpu_hz": None if self.optimum_gpu_hz is None else self.optimum_gpu_hz.to_json(),
                "optimum_steps": self.optimum_steps, "ensemble_members": self.members, "note": self.note,
                "source": Source.PREDICTED.value}


def choice_uncertainty(choice: Choice, selector: Selector, trace: StepTrace | StepMix | None = None,
                       profile: TwinProfile | str | None = None, *,
                       members: int | None = None, seed: int | None = None) -> ChoiceUncertainty | None:
    """The intervals of `choice` from the ensemble of `profile` (default: the profile the selector
    was trained for) over `trace` (a StepTrace or StepMix; None: no ensemble) and the selector's
    CV regret. None when there is neither."""
    from engine.device.twin.ensemble import MEMBERS, SEED

    r90 = cv_regret_q90(selector)
    ens = None
    if trace is not None:
        ens = _ensemble(choice, selector, trace, profile, MEMBERS if members is None else members,
                        SEED if seed is None else seed)
    if ens is None and r90 is None:
        return None
    s = choice.saving
    notes = []
    if ens is not None:
        savings = ens.savings(choice.setting, choice.maxn.setting)
        offsets = [v - savings[0] for v in savings]
        spread = quantile_interval(offsets, LEVEL)
        low, high = s + spread.low, s + spread.high
        basis = ens.basis
    else:
        low = high = s
        basis = ""
        notes.append("no step trace: the twin ensemble's part is left out")
    if r90 is not None:
        low = 1.0 - (1.0 - low) * (1.0 + r90)
        basis = (basis + " + " if basis else "") + "selector CV regret, 90th percentile"
    else:
        notes.append(_no_spread_note(choice))
    saving = Interval(min(low, s), max(high, s), LEVEL, basis)
    energy = maxn_energy = opt_gpu = None
    steps = None
    if ens is not None:
        energy = _relative(ens, choice.setting, choice.predicted.energy_per_sample)
        maxn_energy = _relative(ens, choice.maxn.setting, choice.maxn.energy_per_sample)
        opt_gpu, steps = ens.optimum_gpu(), ens.optimum_steps()
    return ChoiceUncertainty(saving, energy, maxn_energy, r90, opt_gpu, steps, 0 if ens is None else ens.members,
                             "; ".join(notes))


def _no_spread_note(choice: "Choice") -> str:
    """What an interval without the selector's regret quantiles leaves out, and why (its file keeps
    none): said with the worst held-out miss the file does keep, where it keeps one."""
    worst = getattr(getattr(choice, "confidence", None), "cv_worst_regret", None)
    fix = "a selector trained with `slm-dvfs train-selector` records the spread, and its interval includes it"
    if worst is not None and math.isfinite(worst):
        return (f"this selector file records only its worst held-out miss ({worst:.1%} more energy than the best "
                f"setting), not its spread, so the interval covers the twin's uncertainty only and leaves the "
                f"selector's own error out ({fix})")
    return ("this selector file does not record how far its held-out choices missed the optimum, so the interval "
            f"covers the twin's uncertainty only, not the selector's own error ({fix})")


def with_uncertainty(choice: Choice, selector: Selector, trace: StepTrace | StepMix | None = None,
                     profile: TwinProfile | str | None = None, *, members: int | None = None,
                     seed: int | None = None) -> Choice:
    """`choice` with its intervals attached (Choice.uncertainty); unchanged when none can be had."""
    try:
        unc = choice_uncertainty(choice, selector, trace, profile, members=members, seed=seed)
    except Exception as exc:  # noqa: BLE001 - an interval never stops a choice; the log says why
        log.warning("no interval for the choice of %s: %s: %s", choice.setting.label(), type(exc).__name__, exc)
        return choice
    return choice if unc is None else replace(choice, uncertainty=unc)


def _ensemble(choice: Choice, selector: Selector, trace: StepTrace | StepMix, profile: TwinProfile | str | None,
              members: int,
              seed: int) -> "Ensemble | None":
    from engine.device.twin.ensemble import ensemble
    from engine.device.twin.profile import calibrated_or, load_profile

    if profile is None or isinstance(profile, str):
        # unnamed: the selector's board, calibrated to the user's measurements when they have been
        board = selector.encoder.profile
        if profile is None and board is None:  # a selector that does not name its board: no ensemble
            return None
        profile = load_profile(profile or calibrated_or(str(board)))
    # the choice's baseline (MAXN; MAXN_SUPER where Choice.on_board moved it) and the candidates in its mode
    # that the profile's GPU table has
    from engine.device.baseline import Baseline

    base = Baseline(choice.maxn.setting)
    table = set(profile.gpu.table_hz)
    moved = (base.in_its_mode(s) for s in selector.candidates)
    settings: list[DvfsSetting] = list(dict.fromkeys(
        [base.setting, choice.setting, *(s for s in moved if s.gpu_hz is None or s.gpu_hz in table)]))
    return ensemble(trace, profile, settings, members=members, seed=seed)


def _relative(ens: "Ensemble", setting: DvfsSetting, predicted: float) -> Interval:
    """The members' spread of a setting's energy relative to the nominal member, laid on `predicted`."""
    col = [row[ens.settings.index(setting)] for row in ens.energy_ps]
    iv = quantile_interval([v / col[0] for v in col], LEVEL, ens.basis).scaled(predicted)
    return iv.hull(predicted)


# --------------------------------------------------------------------------- MAXN about optimal
NEAR_ZERO = 0.01  # a saving of 1% or less: within what runs of one setting differ by, no saving to speak of


def maxn_about_optimal(choice: "Choice") -> str | None:
    """Why the baseline (MAXN; MAXN_SUPER on an Orin Nano) is already about optimal for the choice's workload,
    or None when the choice
    clearly saves: its predicted saving is near zero; or MAXN lies within the optimum's interval (the
    saving's interval, paired within each twin member, reaches down to about zero); or the saving is
    within the selector's own error of zero (its held-out regret's 90th percentile, or where a file
    records none, the worst regret it saw: the part of the doubt that interval then leaves out, and
    the reason says so)."""
    s = choice.saving
    than = getattr(choice, "baseline_name", "MAXN")  # its mode's name: MAXN_SUPER on an Orin Nano
    if s <= NEAR_ZERO:  # in words, as every saving is said (it may be negative: never "-0.6%")
        return f"the selector predicts {saving_text(100.0 * s, than=than)}"
    unc = getattr(choice, "uncertainty", None)
    if unc is not None and unc.saving.low <= NEAR_ZERO:
        return (f"the saving's {unc.saving.level:.0%} interval reaches down to "
                f"{saving_text(100.0 * unc.saving.low, than=than)}")
    r90 = None if unc is None else unc.regret_q90
    regret, which = (r90, "90% of") if r90 is not None else (choice.confidence.cv_worst_regret, "all")
    if regret is not None and math.isfinite(regret) and s <= regret:
        why = (f"the predicted saving ({s:.1%}) is within the selector's own error: {which} its choices for "
               f"workloads it was tested on cost up to {regret:.1%} more energy than the best setting")
        if r90 is None and unc is not None:  # the interval was costed without it
            why += f" (an error the saving's {unc.saving.level:.0%} interval leaves out)"
        return why
    return None


# --------------------------------------------------------------------------- how many probes
def probes_for(choice: "Choice", max_probes: int) -> tuple[int, str]:
    """How many probe windows the choice's doubt is worth, and why (the rule of docs/selector.md):

    - the workload lies outside the training range: `max_probes`;
    - else the larger of what the ensemble and the regret ask for: the members' optima spanning
      `FLAT_STEPS` GPU steps or fewer ask for none, each step more for one more probe; a 90th
      percentile CV regret above REGRET_SMALL asks for one, above REGRET_LARGE for `max_probes`;
    - with neither known (no trace, an old selector file), the confidence level decides:
      high none, medium one, low `max_probes`.
    """
    conf = choice.confidence
    if conf.extrapolating:
        return max_probes, f"outside the training range ({', '.join(conf.extrapolating)})"
    unc = getattr(choice, "uncertainty", None)
    steps = None if unc is None else unc.optimum_steps
    r90 = None if unc is None else unc.regret_q90
    if steps is None and r90 is None:
        n = {"high": 0, "medium": 1}.get(conf.level, max_probes)
        return min(n, max_probes), f"no interval to go by; confidence {conf.level}"
    need, why = 0, []
    if steps is not None:
        need = max(need, steps - FLAT_STEPS)
        why.append(f"the ensemble's optima span {steps} GPU step(s)")
    if r90 is not None:
        need = max(need, max_probes if r90 > REGRET_LARGE else 1 if r90 > REGRET_SMALL else 0)
        why.append(f"CV regret {r90:.1%} (90th percentile)")
    return min(max(need, 0), max_probes), "; ".join(why)
