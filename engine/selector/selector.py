"""The trained selector: predicts time, power and energy of a workload at every setting of
its space, and chooses the best for an objective (optionally after a few probes).

    selector, report = train_selector(dataset)             # CV, then the winner refitted
    choice = selector.choose(workload, parse_objective("energy"))
    choice.setting, choice.predicted, choice.maxn, choice.saving, choice.confidence

Every figure it returns is labelled `predicted`, except probe figures (`twin` or `measured`).
"""

from __future__ import annotations

import logging
import math
import platform
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from engine.core.measurement import Measurement
from engine.dvfs.objectives import Objective
from engine.device.baseline import Baseline
from engine.device.setting import MAXN, DvfsSetting
from engine.core.errors import ConfigError
from engine.core.jsontypes import JsonObject, as_list
from engine.core.provenance import Source
from engine.selector.cv_table import CvTableRow, cv_row_json
from engine.selector.dataset import SOURCE_COLUMN, Dataset
from engine.selector.features import (
    FEATURE_COLUMNS,
    LOG_COLUMNS,
    MODULE_COLUMN_NAMES,
    N_WORKLOAD_COLUMNS,
    SettingEncoder,
    WorkloadFeatures,
    feature_matrix,
    feature_schema,
    log_columns,
    workload_part,
)
from engine.selector.probes import (Correction, Measure, Prediction, measured_first, plan_probes, rank, run_probes,
                                   trusted_first)

if TYPE_CHECKING:  # scikit-learn is imported to train, not to predict (a compact model needs none)
    from pathlib import Path

    from engine.device.twin.profile import TwinProfile

    from engine.selector.basis import DataBasis
    from engine.selector.candidates import CandidateSpec, SettingClassifier
    from engine.selector.estimator import FiguresModel
    from engine.selector.selection import CVReport, Progress
    from engine.selector.uncertainty import ChoiceUncertainty

log = logging.getLogger(__name__)

RANGE_SLACK = math.log(1.25)  # a workload scale feature may lie 25% beyond the training range


def selector_schema(source_column: bool) -> dict[str, Any]:
    """The feature schema of a selector: the schema's columns, then the source column of one trained on
    both sources."""
    schema = feature_schema()
    if source_column:
        schema["columns"] = schema["columns"] + [SOURCE_COLUMN]
    return schema


@dataclass(frozen=True)
class Confidence:
    """How far to trust a choice: the selector's cross-validated record, whether this
    workload lies inside what it was trained on, and the spread of the top candidates."""

    level: str  # "high" | "medium" | "low"
    cv_mean_regret: float  # on held-out workloads, at training
    cv_worst_regret: float
    cv_energy_mape: float | None
    top_spread: float  # predicted cost of the 3rd best over the best, minus 1
    runner_up_margin: float  # predicted cost of the 2nd best over the best, minus 1
    extrapolating: tuple[str, ...]  # workload (and module) features outside the training range
    reason: str
    module: str | None = None  # the module it chose for (None: the one it was trained on, unnamed)
    module_trained: bool = True  # whether the selector was trained on that module's data

    def to_json(self) -> JsonObject:
        out = {k: getattr(self, k) for k in self.__dataclass_fields__}
        out["extrapolating"] = list(self.extrapolating)
        out["source"] = Source.PREDICTED.value
        return out


@dataclass(frozen=True)
class Choice:
    """What the selector chose for one workload, and why."""

    workload: WorkloadFeatures
    objective: str
    setting: DvfsSetting
    predicted: Prediction  # the chosen setting's figures (corrected by probes when there were any)
    maxn: Prediction
    confidence: Confidence
    top: tuple[Prediction, ...]  # best first
    probes: tuple[tuple[DvfsSetting, Measurement], ...] = ()
    correction: Correction | None = None
    chooser: str = ""  # the winning candidate that chose
    trained_on: str = "twin"  # the selector's training source
    # Intervals on the figures (engine.selector.uncertainty.with_uncertainty); None: not asked for
    uncertainty: "ChoiceUncertainty | None" = None
    baseline_name: str = "MAXN"  # the mode `maxn` is in, by name (on_board: MAXN_SUPER on an Orin Nano)

    @property
    def baseline_label(self) -> str:
        """The baseline by its mode's name and id: `MAXN_SUPER (mode 2)`."""
        return f"{self.baseline_name} (mode {self.maxn.setting.nvpmodel})"

    @property
    def saving(self) -> float:
        """Expected energy saving against MAXN (fraction, predicted)."""
        return 1.0 - self.predicted.energy_per_sample / self.maxn.energy_per_sample

    @property
    def slowdown(self) -> float:
        return self.predicted.time_per_sample / self.maxn.time_per_sample - 1.0

    def to_json(self) -> JsonObject:
        return {
            "workload": self.workload.to_json(),
            "objective": self.objective,
            "setting": self.setting.to_json(),
            "label": self.setting.label(),
            "predicted": self.predicted.to_json(),
            "maxn": self.maxn.to_json(),
            "expected_saving": self.saving,
            "expected_slowdown": self.slowdown,
            "expected_saving_interval": None if self.uncertainty is None else self.uncertainty.saving.to_json(),
            "saving_source": Source.PREDICTED.value,
            "confidence": self.confidence.to_json(),
            "top": [p.to_json() for p in self.top],
            "probes": [{"setting": s.to_json(), "label": s.label(), "measurement": m.to_json()} for s, m in self.probes],
            "correction": None if self.correction is None else self.correction.to_json(),
            "chooser": self.chooser,
            "selector_trained_on": self.trained_on,
            "uncertainty": None if self.uncertainty is None else self.uncertainty.to_json(),
            "baseline": {"setting": self.maxn.setting.to_json(), "mode_name": self.baseline_name,
                         "label": self.baseline_label},
        }

    def on_board(self, baseline: Baseline) -> Choice:
        """This choice in a board's terms: each setting in the selector's MAXN mode (mode 0) moved to the board's
        baseline mode (Baseline.in_its_mode), which it is named by."""
        # the selector speaks the AGX Orin's MAXN, mode 0, the mode its settings pin clocks in (features, the
        # shipped selectors); on a board whose baseline is another mode the same clocks are pinned in that one
        def moved(p: Prediction) -> Prediction:
            return replace(p, setting=baseline.in_its_mode(p.setting))

        return replace(self, setting=baseline.in_its_mode(self.setting), predicted=moved(self.predicted),
                       maxn=moved(self.maxn), top=tuple(moved(p) for p in self.top),
                       probes=tuple((baseline.in_its_mode(s), m) for s, m in self.probes),
                       baseline_name=baseline.name)


class Selector:
    """A fitted model (or a classifier plus a model for the figures) over a setting space."""

    def __init__(
        self,
        *,
        model: FiguresModel,  # the fitted estimators, their compact form, or a transferred model
        chooser: SettingClassifier | None,
        encoder: SettingEncoder,
        candidates: Sequence[DvfsSetting],
        source: str,
        source_column: bool,
        winner: str,
        cv_table: Sequence[CvTableRow],
        objective: str,
        training: JsonObject,
        ranges: dict[str, tuple[float, float]],
        encoders: dict[str, SettingEncoder] | None = None,
    ) -> None:
        self.model = model
        self.chooser = chooser
        self.encoder = encoder
        self.candidates = tuple(candidates)
        self.source = source
        self.source_column = source_column
        self.winner = winner
        self.cv_table = [r.copy() for r in cv_table]
        self.objective = objective
        self.training = dict(training)
        self.ranges = dict(ranges)
        # The modules it learnt from, each with its encoder (one, or none named, for a per-module selector).
        self.encoders = dict(encoders or ({} if encoder.module is None else {encoder.module: encoder}))
        self.modules = tuple(self.encoders)
        self.module = encoder.module  # the module it predicts for (use_module, for_profile)
        self.schema = selector_schema(source_column)
        self.path: Path | None = None  # set by load_selector to the file it was read from

    @property
    def trained_modules(self) -> list[str]:
        """The modules whose sweeps it was trained on, as its training record says ([] where it does not)."""
        return [str(m) for m in as_list(self.training.get("modules") or [])]

    @property
    def module_trained(self) -> bool:
        """Whether the module it predicts for is one it learnt from."""
        return self.module is None or self.module in self.modules

    def use_module(self, module: str | None) -> None:
        """Predict for `module`, one it learnt (its encoder kept); None: as it is."""
        if module is None:
            return
        if module not in self.encoders:
            raise ConfigError(f"the selector learnt {', '.join(self.modules) or 'no named module'}, not {module!r}",
                              "give --module one of those, or the board's module with --twin NAME / --sysfs-root PATH")
        self.for_encoder(self.encoders[module])

    def for_profile(self, profile: TwinProfile) -> None:
        """Predict for the module of a device profile (a twin's, a board's module profile), whether or not it
        learnt from it: that module's columns, and its setting space in the selector's terms."""
        from engine.selector.dataset import profile_settings

        enc = self.encoders.get(str(profile.identity.module)) or SettingEncoder.from_profile(profile)
        space = self.training.get("space")
        settings = profile_settings(profile, space if space in ("gpu", "gpu+emc") else "gpu")
        self.for_encoder(enc, [enc.to_selector(s) for s in settings])

    def for_encoder(self, encoder: SettingEncoder, candidates: Sequence[DvfsSetting] | None = None) -> None:
        """Predict with `encoder` (its module's tables and figures) among `candidates` (default: the settings
        of its space it learnt for that module, else its own)."""
        if candidates is None:
            table = set(encoder_table(encoder))
            candidates = [s for s in self.candidates if s.gpu_hz is None or s.gpu_hz in table] or self.candidates
        self.encoder = encoder
        self.module = encoder.module
        self.candidates = tuple(candidates)

    # ------------------------------------------------------------------ predictions
    def _rows(self, workload: WorkloadFeatures, settings: Sequence[DvfsSetting], as_source: Source) -> np.ndarray:
        x = feature_matrix([workload] * len(settings), list(settings), self.encoder)
        if self.source_column:
            x = np.hstack([x, np.full((len(settings), 1), float(as_source == Source.MEASURED))])
        return x

    def predict(self, workload: WorkloadFeatures, settings: Sequence[DvfsSetting] | None = None, *,
                as_source: Source = Source.MEASURED) -> list[Prediction]:
        """Predicted time, power and energy per sample at each setting (default: the whole space).
        `as_source` matters only for a selector trained on both sources."""
        settings = list(self.candidates if settings is None else settings)
        if not settings:
            raise ConfigError("no settings to predict for", "give at least one DVFS setting")
        t, p, e = self.model.predict(self._rows(workload, settings, as_source))
        return [Prediction(s, float(ti), float(pi), float(ei)) for s, ti, pi, ei in zip(settings, t, p, e)]

    def _ranked(self, workload: WorkloadFeatures, objective: Objective, settings: Sequence[DvfsSetting] | None,
                as_source: Source) -> tuple[list[Prediction], dict[DvfsSetting, Prediction]]:
        settings = list(self.candidates if settings is None else settings)
        if MAXN not in settings:
            settings.insert(0, MAXN)  # the baseline every saving is stated against
        preds = self.predict(workload, settings, as_source=as_source)
        by = {p.setting: p for p in preds}
        return rank(preds, objective, by[MAXN]), by

    def probe_plan(self, workload: WorkloadFeatures, objective: Objective | None = None, *, probes: int = 1,
                   settings: Sequence[DvfsSetting] | None = None,
                   as_source: Source = Source.MEASURED) -> list[DvfsSetting]:
        """The settings `choose(..., probes=K)` measures, in order (for callers that take the windows first)."""
        objective = objective or Objective()
        ranked, _by = self._ranked(workload, objective, settings, as_source)
        return plan_probes(ranked, probes, self._x_of, baseline=objective.needs_baseline)

    def _x_of(self, setting: DvfsSetting) -> float:
        return math.log(self.encoder.nominal(setting)[0] / 1e9)

    def extrapolating(self, workload: WorkloadFeatures) -> tuple[str, ...]:
        """Workload and module features outside the training range (scale features with 25% slack)."""
        x = feature_matrix([workload], [MAXN], self.encoder)
        row = log_columns(x, LOG_COLUMNS)[0]
        out = []
        first_module = FEATURE_COLUMNS.index(MODULE_COLUMN_NAMES[0])
        for i, name in enumerate(FEATURE_COLUMNS):
            if N_WORKLOAD_COLUMNS <= i < first_module:
                continue  # the settings: its own space's
            lo, hi = self.ranges.get(name, (-math.inf, math.inf))
            slack = RANGE_SLACK if i in LOG_COLUMNS else 1e-9
            if not (lo - slack <= row[i] <= hi + slack):
                out.append(name)
        return tuple(out)

    def choose(
        self,
        workload: WorkloadFeatures,
        objective: Objective | None = None,
        *,
        settings: Sequence[DvfsSetting] | None = None,
        probes: int = 0,
        measure: Measure | None = None,
        as_source: Source = Source.MEASURED,
        top: int = 3,
    ) -> Choice:
        """The best setting for `objective` among `settings` (default: the space it was trained on).
        With probes > 0, `measure(setting) -> Measurement` takes the probe windows first."""
        objective = objective or Objective()
        ranked, by = self._ranked(workload, objective, settings, as_source)
        probed: list[tuple[DvfsSetting, Measurement]] = []
        corr = None
        if probes:
            if measure is None:
                raise ConfigError(f"{probes} probe(s) asked for but nothing to measure them with",
                                  "pass --twin [PROFILE] (or run on the board) to take probe windows")
            corrected, probed, corr = run_probes(ranked, probes, measure, self._x_of,
                                                 baseline=objective.needs_baseline)
            by = {p.setting: p for p in corrected}
            near = trusted_first(rank(corrected, objective, by[MAXN]), [s for s, _m in probed], self._x_of)
            ranked = measured_first(near, objective, by[MAXN])
        chosen = ranked[0]
        chooser = self.winner
        if self.chooser is not None and not probes and objective.name == "energy" and not objective.needs_baseline:
            ranked_cls = self.chooser.rank(workload_part(self._rows(workload, [MAXN], as_source),
                                                         self.source_column))[0]
            pick = next((s for s, _p in ranked_cls if s in by), None)
            if pick is not None:
                chosen = by[pick]
        elif self.chooser is not None:
            chooser = f"{self.model.spec.label} (the classifier {self.winner} knows only the energy objective)"
        costs = [objective.cost(p.measurement()) for p in ranked[:max(top, 3)]]
        conf = self._confidence(workload, costs)
        return Choice(
            workload=workload, objective=objective.spec, setting=chosen.setting, predicted=chosen,
            maxn=by[MAXN], confidence=conf, top=tuple(ranked[:top]), probes=tuple(probed), correction=corr,
            chooser=chooser, trained_on=self.source,
        )

    def _confidence(self, workload: WorkloadFeatures, costs: Sequence[float]) -> Confidence:
        win = next((r for r in self.cv_table if r.get("label") == self.winner), CvTableRow())
        mean_r, worst_r = float(win.get("mean_regret", math.nan)), float(win.get("worst_regret", math.nan))
        mape = next((r.get("mape_energy") for r in self.cv_table if r.get("label") == self.model.spec.label), None)
        spread = costs[min(2, len(costs) - 1)] / costs[0] - 1.0
        margin = costs[min(1, len(costs) - 1)] / costs[0] - 1.0
        extra = self.extrapolating(workload)
        if not self.module_trained:
            learnt = ", ".join(self.modules) or "another module"
            beyond = [c for c in extra if c.startswith("module_")]
            level = "low" if beyond or worst_r > 0.05 or extra else "medium"
            reason = (f"not trained on {self.module} (learnt from {learnt}): predicted from its module figures"
                      + (f", beyond the trained modules' in {', '.join(beyond)}" if beyond else ", within the "
                         "trained modules' range")
                      + (f"; the workload outside the training range in {', '.join(c for c in extra if c not in beyond)}"
                         if len(extra) > len(beyond) else "") + "; consider --probes")
        elif extra:
            level, reason = "low", f"outside the training range in {', '.join(extra)}; consider --probes"
        elif worst_r > 0.05:
            level, reason = "medium", f"in range, but held-out workloads saw up to {worst_r:.1%} regret"
        else:
            level, reason = "high", f"in range; held-out workloads saw {mean_r:.2%} mean, {worst_r:.2%} worst regret"
        return Confidence(level, mean_r, worst_r, mape, spread, margin, extra, reason, self.module,
                          self.module_trained)

    @property
    def basis(self) -> DataBasis:
        """What its choices rest on (engine.selector.basis.DataBasis)."""
        from engine.selector.basis import basis_of

        return basis_of(self)

    def describe(self) -> JsonObject:
        return {
            "basis": self.basis.to_json(),
            "winner": self.winner,
            "figures_from": self.model.spec.label,
            "source": self.source,
            "objective": self.objective,
            "settings": len(self.candidates),
            "space": self.training.get("space"),
            "profile": self.encoder.profile,
            "module": self.module,
            "module_trained": self.module_trained,
            "modules": list(self.modules),
            "trained_at": self.training.get("created_at"),
            "rows": self.training.get("rows"),
            "workloads": self.training.get("workloads"),
            "cv_table": [cv_row_json(r) for r in self.cv_table],
        }


def _ranges(ds: Dataset) -> dict[str, tuple[float, float]]:
    """Each workload and module column's range over the training rows (scale columns as logs)."""
    x = log_columns(ds.X()[:, :len(FEATURE_COLUMNS)], LOG_COLUMNS)
    return {name: (float(x[:, i].min()), float(x[:, i].max())) for i, name in enumerate(FEATURE_COLUMNS)
            if i < N_WORKLOAD_COLUMNS or name in MODULE_COLUMN_NAMES}


def encoder_table(encoder: SettingEncoder) -> tuple[int, ...]:
    """The GPU table of an encoder's profile (empty where the profile cannot be loaded)."""
    from engine.core.errors import ProfileError
    from engine.device.twin.profile import load_profile

    if not encoder.profile:
        return ()
    try:
        return tuple(load_profile(encoder.profile).gpu.table_hz)
    except (ConfigError, ProfileError):
        return ()


def train_selector(
    ds: Dataset,
    objective: Objective | None = None,
    *,
    candidates: Sequence[CandidateSpec] | None = None,
    n_splits: int | None = None,
    progress: Progress | None = None,
    command: JsonObject | None = None,
    jobs: int | None = None,
    shortlist: int | None = None,
) -> tuple[Selector, CVReport]:
    """Cross-validate the candidates, refit the winner on all of `ds`. A winning classifier
    chooses; the best regressor then gives the figures. `n_splits` defaults to selection.DEFAULT_SPLITS,
    `jobs` and `shortlist` to cross_validate's (a process per core; selection.DEFAULT_SHORTLIST)."""
    from engine.selector.candidates import default_candidates
    from engine.selector.selection import DEFAULT_SHORTLIST, DEFAULT_SPLITS, cross_validate

    n_splits = DEFAULT_SPLITS if n_splits is None else n_splits
    objective = objective or Objective()
    specs = list(candidates or default_candidates())
    report = cross_validate(ds, specs, objective, n_splits=n_splits, progress=progress, jobs=jobs,
                            shortlist=DEFAULT_SHORTLIST if shortlist is None else shortlist)
    by_label = {s.label: s for s in specs}
    win = by_label[report.winner.label]
    reg_spec, chooser_spec = win, None
    if win.kind == "classifier":
        best_reg = next((r for r in report.rows if r.kind == "regressor"), None)
        if best_reg is None:
            raise ConfigError("a classifier won but no regressor was cross-validated to give the figures",
                              "include at least one regressor among the candidates")
        reg_spec, chooser_spec = by_label[best_reg.label], win
    selector = fit_selector(ds, reg_spec, objective, chooser=chooser_spec, cv_table=report.table(),
                            splits=len(report.folds), progress=progress, command=command)
    selector.training["cv_graded_on"] = report.graded_on
    # The winner's held-out regrets, summarised: the choice's interval rests on them (uncertainty.py).
    from engine.selector.uncertainty import regret_summary

    selector.training["cv_regret"] = regret_summary([o.regret for o in report.outcomes[win.label]], win.label)
    return selector, report


def fit_selector(
    ds: Dataset,
    spec: CandidateSpec,
    objective: Objective | None = None,
    *,
    chooser: CandidateSpec | None = None,
    cv_table: Sequence[CvTableRow] = (),
    splits: int = 0,
    progress: Progress | None = None,
    command: JsonObject | None = None,
) -> Selector:
    """A selector of the regressor `spec` (and a classifier `chooser` that picks, when given)
    fitted on all of `ds`, without cross-validation: train_selector after its CV, and
    leave-one-family-out evaluation (engine.selector.lofo), which fits on other families.
    Without a `cv_table` the selector has no CV record (its confidence says so: NaN regrets)."""
    from engine.selector.candidates import RegressorModel, SettingClassifier
    from engine.selector.selection import fit_all

    if spec.kind != "regressor" or (chooser is not None and chooser.kind != "classifier"):
        raise ConfigError(f"a selector takes a regressor for its figures (and optionally a classifier), "
                          f"not {spec.label}" + (f" and {chooser.label}" if chooser else ""),
                          "give a regressor candidate, e.g. hist-gb/time+energy")
    objective = objective or Objective()
    x = ds.X()
    clf: SettingClassifier | None = None
    if chooser is not None:
        if progress:
            progress(f"refitting {chooser.label} on all {len(ds)} rows")
        fitted = fit_all(chooser, ds, objective, x)
        assert isinstance(fitted, SettingClassifier)
        clf = fitted
    if progress:
        progress(f"refitting {spec.label} on all {len(ds)} rows" + (" for the figures" if chooser else ""))
    model = fit_all(spec, ds, objective, x)
    assert isinstance(model, RegressorModel)
    settings = list(dict.fromkeys(ds.settings))
    if MAXN in settings:
        settings.remove(MAXN)
        settings.insert(0, MAXN)
    from engine.selector.basis import from_training
    from engine.selector.mixing import measured_weight_of

    summary = ds.summary()
    training = {
        **summary,
        "basis": from_training(summary, command=command, measured_weight=measured_weight_of(ds)).to_json(),
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "objective": objective.spec,
        "splits": splits,
        "python": platform.python_version(),
        "command": command,
    }
    return Selector(
        model=model, chooser=clf, encoder=ds.encoder, candidates=settings, source=ds.source,
        source_column=ds.source_column, winner=(chooser or spec).label, cv_table=cv_table,
        objective=objective.spec, training=training,
        ranges=_ranges(ds),
        encoders=dict(ds.module_encoders) or None,
    )


__all__ = ["Choice", "Confidence", "Prediction", "Selector", "fit_selector", "selector_schema", "train_selector"]
