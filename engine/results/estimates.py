"""How far a twin's saving against the baseline (MAXN; MAXN_SUPER on an Orin Nano / NX) may be from a
board's: the twin ensemble's paired interval laid around the figure the twin gave (engine.device.twin.ensemble; docs/twin.md, "Intervals").

A twin sweep or run says what the twin computed (`twin`); read as an estimate of what a board
would show, it is as uncertain as the profile's parameters, and this interval says how much.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from engine.core.errors import SlmDvfsError
from engine.core.interval import LEVEL, Interval, quantile_interval
from engine.core.provenance import Source
from engine.device.baseline import profile_baseline
from engine.device.setting import DvfsSetting

if TYPE_CHECKING:  # annotations only: the twin loads when an interval is asked for (as before)
    from engine.core.trace import StepMix, StepTrace
    from engine.device.twin.profile import TwinProfile

log = logging.getLogger(__name__)


def board_estimate(source: Source, steps: StepTrace | StepMix | None, profile: TwinProfile | str | None,
                   setting: DvfsSetting, saving_pct: float) -> Interval | None:
    """A saving (percent) of one `setting` against MAXN read as an estimate of a board's: the twin's
    interval (twin_saving_interval) for the twin's figures; None for measured or predicted ones (a
    board's saving is what it is) and where none can be had. Computed once by the engine for every
    client (a run's Comparison, a sweep's SweepSaving)."""
    if source is not Source.TWIN:
        return None
    return twin_saving_interval(steps, profile, setting, saving_pct / 100.0)


def twin_saving_interval(steps: StepTrace | StepMix | None, profile: TwinProfile | str | None, setting: DvfsSetting,
                         saving: float) -> Interval | None:
    """The interval of a twin's `saving` (a fraction) of `setting` against MAXN for a workload's
    `steps` (a StepTrace or StepMix) under `profile` (a TwinProfile or its name): the members'
    paired savings' spread around the nominal member, laid on `saving`. None when it cannot be had
    (no steps, an unknown profile, a setting the profile refuses): the figure is then shown bare."""
    from engine.device.twin.ensemble import ensemble
    from engine.device.twin.profile import load_profile

    if steps is None or profile is None:
        return None
    try:
        prof = load_profile(profile) if isinstance(profile, str) else profile
        base = profile_baseline(prof).setting  # the profile's uncapped mode: MAXN_SUPER (mode 2) on an Orin Nano
        if setting == base:
            return None
        ens = ensemble(steps, prof, [base, setting])
    except (SlmDvfsError, KeyError, ValueError) as exc:
        log.info("no twin interval for %s: %s", setting.label(), exc)
        return None
    members = ens.savings(setting)
    spread = quantile_interval([m - members[0] for m in members], LEVEL)
    return Interval(saving + spread.low, saving + spread.high, LEVEL,
                    f"{ens.basis}, paired").hull(saving)
