"""What the ML selector would choose for the workload on the setup form (no Textual here).

Asked before a run starts (in a worker: loading a selector and tracing the workload
takes seconds). Every figure is `predicted`. Where no selector is available the preview
says so and names the command that trains one.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from engine.core.errors import SlmDvfsError
from engine.core.interval import Interval
from engine.core.provenance import Source
from engine.results.format import saving_compact, versus_text

if TYPE_CHECKING:  # the run pipeline and the selector load when the selector is asked
    from engine.core.trace import StepMix
    from engine.device.twin.profile import TwinProfile
    from engine.run.experiment import ExperimentSpec
    from engine.selector.features import WorkloadFeatures
    from engine.workload.resolve import Workload

log = logging.getLogger(__name__)

TRAIN_COMMAND = "slm-dvfs train-selector --from-twin-zoo"


@dataclass(frozen=True)
class SelectorPreview:
    available: bool
    setting: str | None = None  # the chosen setting's label
    saving_pct: float | None = None  # energy saved against MAXN
    slowdown_pct: float | None = None
    confidence: str | None = None
    note: str = ""  # where the selector came from, or why there is none
    missing: bool = False  # no selector to load (train one): the Run page says so by this, not by the note
    source: Source = Source.PREDICTED
    basis: str = ""  # what the selector rests on, in a few words (engine.selector.basis.DataBasis.short)
    saving_interval: Interval | None = None  # of saving_pct, as fractions (engine.selector.uncertainty)
    maxn_about_optimal: str | None = None  # why MAXN is already about optimal (uncertainty.maxn_about_optimal)
    baseline: str = "MAXN"  # what the saving is against, by name and id (Choice.baseline_label: MAXN_SUPER (mode 2))

    def short(self) -> str:
        """One short line (the Run page): `selector: GPU 816 saves 13% (4–17%) [predicted]`, with
        `; MAXN about optimal` where line() gives that verdict (the two never disagree); the mode is
        named when it is not mode 0 (the mode every static setting runs in by default)."""
        return self.short_forms()[0]

    def short_forms(self) -> tuple[str, ...]:
        """short() and, where it gives the verdict, a narrower form that keeps it with every figure and the
        source whole (the Run page's pane is 48 columns wide at 80): `MAXN≈best: GPU 612 saves 3% (2–19%)
        [predicted]`. Longest first, as tui.fmt.fit takes them."""
        if not self.available:
            return ("selector: none available" if self.missing else "selector: no choice",)
        setting = (self.setting or "").replace(" · CPU gov", "").replace(" · EMC gov", "").replace(" · mode 0", "")
        choice = f"{setting} {saving_compact(self.saving_pct or 0.0, self.saving_interval)} [{self.source.value}]"
        if not self.maxn_about_optimal:
            return (f"selector: {choice}",)
        return f"selector: {choice}; MAXN about optimal", f"MAXN≈best: {choice}"

    def line(self) -> str:
        if not self.available:
            return f"selector: {self.note}"
        named = f"selector ({self.basis})" if self.basis else "selector"
        verdict = "; MAXN is already about optimal for this workload" if self.maxn_about_optimal else ""
        return (f"{named} chooses {self.setting}; "
                f"{versus_text(self.saving_pct, self.slowdown_pct, than=self.baseline, interval=self.saving_interval)} "
                f"[{self.source.value}]{verdict}")


def selector_available() -> bool:
    """Whether the `ml` policy has a selector to load: the user's or the shipped one (a look at
    the files, not a load: loading imports scikit-learn)."""
    from engine.selector.persistence import DEFAULT_NAME, shipped_selector_dir, user_selector_dir

    return any((folder() / DEFAULT_NAME).is_file() for folder in (user_selector_dir, shipped_selector_dir))


def preview_choice(spec: ExperimentSpec, workload: Workload | None = None, *,
                   board: TwinProfile | None = None) -> SelectorPreview:
    """The selector's choice for an ExperimentSpec's workload and objective.

    `workload` (the spec's, resolved) saves resolving it again when the caller has it
    (the Run page's preview); Setup's resolves it as the run will, so the two give one interval:
    the twin ensemble costs the steps the run takes (with dynamic padding, the mix of its lengths),
    as the `ml` policy does once the run starts. It chooses for the run's module as the policy does
    (MLPolicy._for_board): the spec's twin profile, else `board` (the session's module profile), in that
    board's baseline mode, its interval from that profile's ensemble."""
    from engine.dvfs.objectives import parse_objective
    from engine.selector.persistence import load_selector
    from engine.device.baseline import AGX_MAXN, profile_baseline
    from engine.device.twin.profile import load_profile
    from engine.selector.uncertainty import maxn_about_optimal, with_uncertainty

    try:
        selector = load_selector()
    except SlmDvfsError:
        return SelectorPreview(False, note=f"none available; train one with `{TRAIN_COMMAND}`", missing=True)
    try:
        profile = load_profile(spec.twin) if spec.twin else board
        if profile is not None:
            selector.for_profile(profile)
        features, steps = _features(spec, workload)
        base = profile_baseline(profile) if profile is not None else AGX_MAXN
        choice = with_uncertainty(selector.choose(features, parse_objective(spec.objective)).on_board(base),
                                  selector, steps, profile)
    except SlmDvfsError as exc:
        return SelectorPreview(False, note=f"cannot choose for this workload: {exc.what}")
    conf = getattr(choice, "confidence", None)
    unc = getattr(choice, "uncertainty", None)
    return SelectorPreview(
        True, setting=choice.setting.label(), saving_pct=100.0 * choice.saving, slowdown_pct=100.0 * choice.slowdown,
        confidence=getattr(conf, "level", None), note=f"{getattr(selector, 'source', '?')}-trained selector",
        basis=_basis(selector), saving_interval=None if unc is None else unc.saving,
        maxn_about_optimal=maxn_about_optimal(choice), baseline=choice.baseline_label,
    )


def _basis(selector: Any) -> str:
    basis = getattr(selector, "basis", None)
    return basis.short() if basis is not None else ""


def _features(spec: ExperimentSpec, workload: Workload | None) -> tuple[WorkloadFeatures, StepMix]:
    """The selector's features of the workload, and the steps the twin ensemble costs for its interval."""
    from engine.selector.policy import workload_features
    from engine.workload.resolve import resolve_workload

    if workload is None:
        workload = resolve_workload(spec.workload)
    return workload_features(workload), workload.steps
