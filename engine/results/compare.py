"""Comparisons, computed once for every client: a run against its baseline (the board's uncapped mode by name:
MAXN, mode 0, on an AGX Orin; MAXN_SUPER on an Orin Nano / NX)
(energy saving, slowdown, per rail, power), when two runs are comparable at all, and a
sweep's optimum against MAXN. The experiment (RunFigures), the store (RunRecords), the
TUI's Compare page, the sweep result and the report all call these."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal, Mapping, get_args

from engine.core.errors import ConfigError
from engine.core.jsontypes import JsonObject, JsonValue, as_float
from engine.core.interval import Interval
from engine.core.provenance import MetricProvenance, Source
from engine.device.setting import DvfsSetting
from engine.results.baseline import BASELINE_POLICY, matching_baseline, maxn_command, mode_text, stored_mode_name
from engine.results.format import id_list
from engine.results.records import DeviceRecord, RunRecord, WorkloadRecord, dvfs_setting
from engine.results.sweeps import PointSummary
from engine.results.totals import RunTotals

if TYPE_CHECKING:  # annotations only: engine.results.store imports the results modules
    from engine.results.store import Store

__all__ = [
    "BASELINE_POLICY", "SIGN_CONVENTION", "Comparison", "Mismatch", "PairComparison", "RunFigures", "Side",
    "SweepSaving", "baseline_remedy", "board_note", "compare_pair", "compare_records", "compare_stored",
    "comparison", "fitting_baselines", "flatten_metrics", "mismatch", "optimum_vs_maxn", "per_sample_saving_pct",
    "per_sample_slowdown_pct", "rail_saving_pct", "saving_pct", "slowdown_pct", "stored_baseline",
]


# Which side of a comparison a run is: the policy's, or the MAXN baseline's.
RunRole = Literal["policy", "baseline"]
RUN_ROLES: tuple[RunRole, ...] = get_args(RunRole)

# The one sign convention of every saving shown (CLI, TUI, reports, exports), said once.
SIGN_CONVENTION = "positive saving = less energy than MAXN, positive slowdown = slower"


@dataclass(frozen=True)
class RunFigures:
    """One run's figures; all of them (but host_wall_s) from `source`."""

    run_id: int
    role: RunRole
    policy: str  # the spec, e.g. "online" or "maxn"
    source: Source
    totals: RunTotals  # time, energy per rail and over `rails`, samples, steps: what the store holds
    host_wall_s: float | None = None  # measured on the host, whatever the source
    metric: str | None = None  # the task's primary metric
    metric_value: float | None = None
    setting: DvfsSetting | None = None  # the last one applied
    history: tuple[tuple[int, DvfsSetting], ...] = ()
    detail: Mapping[str, JsonValue] = field(default_factory=dict)  # the policy's describe()
    simulated: bool = False
    reused: bool = False  # a stored baseline, not run now
    cancelled: bool = False
    weights: str | None = None  # "pretrained" | "random"; None: not known (simulated: no metric)
    synthetic: bool | None = None  # trained on generated data

    @property
    def mode_name(self) -> str:
        """Its mode's name (`MAXN_SUPER`); `MAXN` for a run stored before modes were named."""
        name = (self.detail or {}).get("mode_name")
        return name if isinstance(name, str) and name else stored_mode_name(None)

    @property
    def mode_label(self) -> str:
        """Its mode by name and id, as the UI names a baseline: `MAXN_SUPER (mode 2)`."""
        name = (self.detail or {}).get("mode_name")
        return mode_text(None if self.setting is None else self.setting.to_json(), name if isinstance(name, str)
                         else None)

    @property
    def metric_provenance(self) -> MetricProvenance:
        """Whether `metric` means anything: pretrained weights evaluated on real data."""
        return MetricProvenance(self.weights, self.synthetic)

    @property
    def metric_label(self) -> str:
        """`measured`, `measured (host)` (the twin's runs), or `not meaningful (random weights / ...)`."""
        return self.metric_provenance.label(self.source)

    # The run's figures, read from its totals (never summed again here).
    @property
    def rails_preset(self) -> str:
        return self.totals.rails_preset or ""

    @property
    def rails(self) -> tuple[str, ...]:
        """The rails `energy_j` sums."""
        return self.totals.rails

    @property
    def steps(self) -> int:
        return int(self.totals.steps or 0)

    @property
    def samples(self) -> int:
        return int(self.totals.samples or 0)

    @property
    def time_s(self) -> float:
        return self.totals.time_s

    @property
    def energy_j(self) -> float:
        return self.totals.total_j

    @property
    def rail_energy_j(self) -> Mapping[str, float]:
        return self.totals.rail_energy_j

    @property
    def avg_power_w(self) -> float:
        return self.totals.avg_power_w or 0.0

    @property
    def samples_per_s(self) -> float:
        return self.totals.samples_per_s or 0.0

    @property
    def joules_per_sample(self) -> float:
        return self.totals.joules_per_sample or 0.0

    def to_json(self) -> JsonObject:
        return {
            "run_id": self.run_id, "role": self.role, "policy": self.policy, "source": self.source.value,
            "simulated": self.simulated, "reused": self.reused, "cancelled": self.cancelled,
            "steps": self.steps, "samples": self.samples, "time_s": self.time_s, "energy_j": self.energy_j,
            "energy_rails": {"preset": self.rails_preset, "rails": list(self.rails)},
            "rail_energy_j": dict(self.rail_energy_j), "avg_power_w": self.avg_power_w,
            "samples_per_s": self.samples_per_s, "joules_per_sample": self.joules_per_sample,
            "metric": None if self.metric is None else {"name": self.metric, "value": self.metric_value,
                                                        "label": self.metric_label,
                                                        **self.metric_provenance.to_json()},
            "setting": None if self.setting is None else {**self.setting.to_json(), "label": self.setting.label()},
            "history": [{"from_step": s, "label": st.label(), "setting": st.to_json()} for s, st in self.history],
            "policy_detail": dict(self.detail),
            "host_wall_s": None if self.host_wall_s is None else {"value": self.host_wall_s,
                                                                  "source": Source.MEASURED.value},
        }


@dataclass(frozen=True)
class Comparison:
    """A run against its MAXN baseline: positive saving = less energy, positive slowdown = slower."""

    saving_pct: float
    slowdown_pct: float
    rail_saving_pct: Mapping[str, float]
    power_change_pct: float
    source: Source
    rails_preset: str | None
    record_id: int | None = None  # the store's comparison row
    # A twin's saving read as an estimate of a board's: the twin ensemble's interval, computed once by the
    # engine (engine.results.estimates.twin_saving_interval); None for measured figures, a run whose
    # setting changed during it, a reused baseline, or where none can be had.
    interval: Interval | None = None

    def to_json(self) -> JsonObject:
        return {"saving_pct": self.saving_pct, "slowdown_pct": self.slowdown_pct,
                "rail_saving_pct": dict(self.rail_saving_pct), "power_change_pct": self.power_change_pct,
                "source": self.source.value, "rails_preset": self.rails_preset, "record_id": self.record_id,
                "board_estimate": None if self.interval is None else self.interval.to_json()}


# --------------------------------------------------------------------------- the arithmetic
def saving_pct(energy_j: float, base_energy_j: float) -> float:
    """Energy saved against the baseline, in percent of it (negative: it cost more)."""
    return 100.0 * (base_energy_j - energy_j) / base_energy_j


def slowdown_pct(time_s: float, base_time_s: float) -> float:
    """Time added against the baseline, in percent of it (negative: faster)."""
    return 100.0 * (time_s - base_time_s) / base_time_s


def rail_saving_pct(rail_j: Mapping[str, float], base_rail_j: Mapping[str, float]) -> dict[str, float]:
    """saving_pct per rail, for the rails both runs have and the baseline used energy on."""
    return {rail: saving_pct(rail_j[rail], base_j) for rail, base_j in base_rail_j.items()
            if base_j > 0 and rail in rail_j}


def per_sample_saving_pct(joules_per_sample: float, base_joules_per_sample: float) -> float:
    """A sweep point's energy per sample saved against MAXN's, in percent."""
    return 100.0 * (1.0 - joules_per_sample / base_joules_per_sample)


def per_sample_slowdown_pct(seconds_per_sample: float, base_seconds_per_sample: float) -> float:
    return 100.0 * (seconds_per_sample / base_seconds_per_sample - 1.0)


# --------------------------------------------------------------------------- two runs
@dataclass(frozen=True)
class Side:
    """One side of a comparison: what decides whether two runs compare, and the figures compared."""

    run_id: int
    source: Source
    rails_preset: str | None  # the preset `energy_j` totals
    simulated: bool
    energy_j: float | None
    time_s: float | None
    rail_energy_j: Mapping[str, float] = field(default_factory=dict)
    device: DeviceRecord | None = None  # the board it ran on; None: not known (one experiment's runs share it)
    workload: WorkloadRecord | None = None  # what it fine-tuned; None: not known (one experiment's runs share it)
    policy: str | None = None  # the policy it ran (a baseline's must be MAXN); None: not known

    @property
    def avg_power_w(self) -> float:
        return self.energy_j / self.time_s if self.energy_j is not None and self.time_s else 0.0

    @classmethod
    def of(cls, run: "RunFigures | RunRecord") -> "Side":
        if isinstance(run, RunFigures):
            return cls(run.run_id, run.source, run.rails_preset, run.simulated, run.energy_j, run.time_s,
                       run.rail_energy_j, policy=run.policy)
        return cls(run.id, run.source, run.rails, run.simulated, run.energy_j, run.time_s, run.rail_energy_j,
                   run.device, run.workload, run.policy)


@dataclass(frozen=True)
class Mismatch:
    """Why two runs do not compare. kind: policy (the baseline is not a MAXN run), workload (two workloads),
    hardware (board vs twin), module (two modules), kind (simulated vs trained), rails (energy over other
    rails), baseline (it has no energy or time)."""

    kind: str
    what: str
    remedy: str

    def error(self, also: str = "") -> ConfigError:
        """The refusal as an error; `also`: more of what to do (baseline_remedy's runs that fit)."""
        return ConfigError(self.what, f"{self.remedy}; {also}" if also else self.remedy)


def mismatch(run: Side, base: Side) -> Mismatch | None:
    """None when `run` compares with `base`: a baseline run (policy maxn: the board's uncapped mode, MAXN or
    MAXN_SUPER, whatever its id; every saving is against it), one
    workload (the store's key: model, task, shape, precision, mode and its variant, padding), same kind of
    hardware (not a board against the twin), one module, both simulated or both trained, energy over the
    same rails preset, a baseline with energy and time. The one check of comparability: the experiment's,
    the store's, `slm-dvfs compare`, the report and the Compare page. Its remedies are the store-free
    ones; compare_stored() adds the MAXN runs that would fit."""
    if base.policy is not None and base.policy != BASELINE_POLICY:
        swap = run.policy == BASELINE_POLICY
        return Mismatch("policy", f"run {base.run_id} ran policy {base.policy}, not the baseline (policy maxn, the "
                        f"board's uncapped mode: MAXN or MAXN_SUPER): a saving is against the baseline only"
                        + (f" (run {run.run_id} is the MAXN run)" if swap else ""),
                        f"compare the other way round: slm-dvfs compare {base.run_id} {run.run_id}" if swap else
                        "name a MAXN run of its workload as the baseline, or none (`slm-dvfs compare N` finds it)")
    if run.workload is not None and base.workload is not None and run.workload.key != base.workload.key:
        return Mismatch("workload", f"run {run.run_id} fine-tuned {run.workload.label} but run {base.run_id} "
                        f"{base.workload.label}: a saving between two workloads says nothing about the setting",
                        "compare a run with a MAXN run of its own workload (`slm-dvfs compare N` finds it)")
    if {run.source, base.source} == {Source.MEASURED, Source.TWIN}:
        return Mismatch("hardware", f"run {run.run_id} is {run.source.value} but run {base.run_id} is "
                        f"{base.source.value}", "compare runs of one kind: both on the board, or both on the twin")
    if run.device is not None and base.device is not None and run.device.module != base.device.module:
        return Mismatch("module", f"run {run.run_id} ran on {run.device.module} but run {base.run_id} on "
                        f"{base.device.module}: different modules never compare",
                        "compare runs of one module (a baseline on another board of the same module is allowed)")
    if run.simulated != base.simulated:
        sim, trained = (run, base) if run.simulated else (base, run)
        return Mismatch("kind", f"run {sim.run_id} is simulated but run {trained.run_id} was trained",
                        "compare runs of one kind: both simulated, or both trained")
    if run.rails_preset != base.rails_preset:
        return Mismatch("rails", f"run {run.run_id} totals rails {run.rails_preset} but baseline run "
                        f"{base.run_id} totals {base.rails_preset}",
                        "compare runs whose energy is over the same rails (the same --rails preset)")
    if not base.energy_j or base.energy_j <= 0 or not base.time_s or base.time_s <= 0:
        return Mismatch("baseline", f"baseline run {base.run_id} has no energy or time figures",
                        "pick a finished baseline with figures, or run it again")
    return None


def board_note(run: "Side | RunRecord", base: "Side | RunRecord") -> str | None:
    """"other board (#SERIAL)" when the two ran on two boards of one module (comparable, but said), else None."""
    a, b = run.device, base.device
    if a is None or b is None or not a.other_board(b):
        return None
    return f"other board (#{b.serial})"


def comparison(run: Side, base: Side) -> Comparison:
    """Energy saving and slowdown in percent of the baseline (per rail too); raises ConfigError
    when the two do not compare."""
    problem = mismatch(run, base)
    if problem is not None:
        raise problem.error()
    if run.energy_j is None or run.time_s is None:
        raise ConfigError(f"run {run.run_id} has no energy or time figures", "compare a run that finished")
    if base.energy_j is None or base.time_s is None:  # mismatch() refused such a baseline: narrowed here
        raise Mismatch("baseline", f"baseline run {base.run_id} has no energy or time figures",
                       "pick a finished baseline with figures, or run it again").error()
    return Comparison(
        saving_pct=saving_pct(run.energy_j, base.energy_j),
        slowdown_pct=slowdown_pct(run.time_s, base.time_s),
        rail_saving_pct=rail_saving_pct(run.rail_energy_j, base.rail_energy_j),
        power_change_pct=100.0 * (run.avg_power_w / base.avg_power_w - 1.0) if base.avg_power_w else 0.0,
        source=Source.PREDICTED if Source.PREDICTED in (run.source, base.source) else run.source,
        rails_preset=run.rails_preset,
    )


@dataclass(frozen=True)
class PairComparison:
    """Two stored runs compared (compare_pair): totals, or per training sample when their lengths differ."""

    run: RunRecord
    base: RunRecord
    comparison: Comparison  # its saving and slowdown are per sample when `per_sample`
    per_sample: bool
    notes: tuple[str, ...]  # what the figures rest on: per sample, another board, another seed

    def to_json(self) -> JsonObject:
        def side(r: RunRecord) -> JsonObject:
            return {"run_id": r.id, "policy": r.policy, "source": r.source.value, "status": r.status,
                    "workload": None if r.workload is None else {"label": r.workload.label, "key": r.workload.key},
                    "device": None if r.device is None else r.device.label(), "steps": r.steps, "samples": r.samples,
                    "seed": r.seed, "energy_j": r.energy_j, "time_s": r.time_s, "joules_per_sample": r.joules_per_sample}
        return {"run": side(self.run), "baseline": side(self.base), **self.comparison.to_json(),
                "per_sample": self.per_sample, "notes": list(self.notes), "sign_convention": SIGN_CONVENTION}


def compare_pair(run: RunRecord, base: RunRecord) -> PairComparison:
    """A stored run against a stored baseline (`slm-dvfs compare`, the Compare page): refused with the
    mismatch's error when they do not compare; runs of different lengths (a MAXN run of other steps) are
    compared per training sample, and said so."""
    c = comparison(Side.of(run), Side.of(base))
    notes: list[str] = []
    samples, base_samples = run.samples, base.samples
    jps, base_jps, sps, base_sps = run.joules_per_sample, base.joules_per_sample, run.samples_per_s, base.samples_per_s
    per_sample = False
    # totals of runs of different lengths do not compare; per sample they do
    if samples and base_samples and samples != base_samples and jps and base_jps and sps and base_sps:
        per_sample = True
        c = replace(c, saving_pct=per_sample_saving_pct(jps, base_jps),
                    slowdown_pct=per_sample_slowdown_pct(1.0 / sps, 1.0 / base_sps),
                    rail_saving_pct={r: per_sample_saving_pct(rj / samples, base.rail_energy_j[r] / base_samples)
                                     for r, rj in run.rail_energy_j.items() if base.rail_energy_j.get(r)})
        notes.append(f"run {run.id} trained {run.samples} samples, MAXN run {base.id} {base.samples}: "
                     f"saving and slowdown are per sample")
    other = board_note(run, base)
    if other is not None:  # comparable (one module), but said
        notes.append(f"MAXN run {base.id} ran on {other}")
    if base.seed != run.seed:
        notes.append(f"MAXN run {base.id} used seed {base.seed}, run {run.id} seed {run.seed}")
    return PairComparison(run, base, c, per_sample, tuple(notes))


def fitting_baselines(store: Store, run: RunRecord) -> tuple[RunRecord, ...]:
    """The stored MAXN runs `run` compares with (mismatch() finds nothing against them), newest first: of
    its workload, on its board or another of its module. `slm-dvfs runs` cannot show which fit (it lists
    no batch, length or padding): a refusal names these instead."""
    if run.workload is None or run.device_id is None:
        return ()
    me = Side.of(run)
    found = store.find_runs(run.workload.key, run.device_id, policy=BASELINE_POLICY, scope="module")
    return tuple(r for r in found if r.id != run.id and mismatch(me, Side.of(r)) is None)


def baseline_remedy(store: Store, run: RunRecord) -> str:
    """Which baseline to give `run` instead: the ids of the MAXN runs that fit it, or the command that
    makes one (its workload, board kind, steps, seed and rails spelled out)."""
    fits = fitting_baselines(store, run)
    if fits:
        ids = id_list([r.id for r in fits])
        which = "the MAXN runs that fit" if len(fits) > 1 else "the MAXN run that fits"
        return f"{which} run {run.id}: {ids} (`slm-dvfs compare {run.id} {fits[0].id}`)"
    return f"no MAXN run in the store fits run {run.id}: make one with `{maxn_command(run)}`"


def compare_stored(store: Store, run: RunRecord, base: RunRecord) -> PairComparison:
    """compare_pair with the store at hand: a refusal's remedy also names the MAXN runs that fit `run`
    (or how to make one), so the user need not find them in a listing that cannot tell them apart."""
    problem = mismatch(Side.of(run), Side.of(base))
    if problem is not None:
        swapped = problem.kind == "policy" and run.policy == BASELINE_POLICY  # its remedy says all
        raise problem.error("" if swapped else baseline_remedy(store, run))
    return compare_pair(run, base)


def compare_records(run: RunRecord, baseline: RunRecord) -> Comparison:
    """Two stored runs, both finished with energy and time figures."""
    for r in (run, baseline):
        if r.status != "finished" or r.energy_j is None or not r.time_s:
            raise ConfigError(f"run {r.id} has no finished energy and time figures ({r.status})",
                              "compare two finished runs")
    return comparison(Side.of(run), Side.of(baseline))


# --------------------------------------------------------------------------- a sweep's optimum
@dataclass(frozen=True)
class SweepSaving:
    """A sweep's optimum against its baseline point (the board's uncapped mode: MAXN, or MAXN_SUPER), per
    training sample."""

    saving_pct: float
    slowdown_pct: float | None  # None: either point is energy-only (its time was not recorded)
    source: Source
    # The twin's saving read as an estimate of a board's (engine.results.estimates.twin_saving_interval),
    # computed once by the sweep that found it; None for measured figures or where none can be had.
    interval: Interval | None = None

    def to_json(self) -> JsonObject:
        return {"saving_pct": self.saving_pct, "slowdown_pct": self.slowdown_pct, "source": self.source.value,
                "board_estimate": None if self.interval is None else self.interval.to_json()}


def optimum_vs_maxn(optimum: PointSummary | None, maxn: PointSummary | None) -> SweepSaving | None:
    """None when the sweep has no optimum or did not measure MAXN."""
    if optimum is None or maxn is None:
        return None
    slowdown = None
    if optimum.seconds_per_sample is not None and maxn.seconds_per_sample is not None:
        slowdown = per_sample_slowdown_pct(optimum.seconds_per_sample.mean, maxn.seconds_per_sample.mean)
    return SweepSaving(
        per_sample_saving_pct(optimum.joules_per_sample.mean, maxn.joules_per_sample.mean), slowdown, optimum.source)


# --------------------------------------------------------------------------- stored baselines
def stored_baseline(store: Store, *, workload_key: str, task: str, device_id: int, source: Source, steps: int,
                    seed: int, rails_preset: str, rails: tuple[str, ...], simulated: bool,
                    exclude: int | None = None) -> RunFigures | None:
    """matching_baseline as the experiment's RunFigures (reused, with the task's primary metric)."""
    from engine.workload.glue import get_task

    rec = matching_baseline(store, workload_key=workload_key, device_id=device_id, source=source, steps=steps,
                            seed=seed, rails_preset=rails_preset, simulated=simulated, exclude=exclude)
    if rec is None:
        return None
    primary = get_task(task).primary_metric
    metric_name = next((k for k in rec.metrics if k == primary or k.endswith("/" + primary)), None)
    stored = rec.totals or RunTotals(time_s=0.0)
    return RunFigures(
        run_id=rec.id, role="baseline", policy=BASELINE_POLICY, source=rec.source,
        totals=replace(stored, rails=rails, rails_preset=rails_preset, steps=stored.steps or steps,
                       samples=stored.samples or 0, energy_j=float(rec.energy_j or 0.0)), host_wall_s=rec.wall_s,
        metric=metric_name, metric_value=None if metric_name is None else _as_float(rec.metrics[metric_name]),
        setting=None if rec.setting is None else dvfs_setting(rec.setting), simulated=rec.simulated, reused=True,
        detail={"mode_name": stored_mode_name(rec.setting)},
        weights=rec.weights, synthetic=rec.synthetic,
    )


def _as_float(value: object) -> float | None:
    try:
        return as_float(value)
    except (TypeError, ValueError):
        return None


def flatten_metrics(evals: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """{split: {name: v}} -> {name: v} for one split, {split/name: v} for several."""
    if len(evals) == 1:
        return {k: float(v) for k, v in next(iter(evals.values())).items()}
    return {f"{split}/{k}": float(v) for split, m in evals.items() for k, v in m.items()}
