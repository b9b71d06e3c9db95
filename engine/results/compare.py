"""Comparisons: a run against its MAXN Mode 0 baseline, computed once for every client; and the
stored-baseline lookup."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from engine.core.errors import ConfigError
from engine.core.provenance import Source
from engine.device.setting import DvfsSetting


BASELINE_POLICY = "maxn"


@dataclass(frozen=True)
class RunFigures:
    """One run's figures; all of them (but host_wall_s) from `source`."""

    run_id: int
    role: str  # "policy" | "baseline"
    policy: str  # the spec, e.g. "online" or "maxn"
    source: Source
    rails_preset: str
    rails: tuple[str, ...]  # the rails `energy_j` sums
    steps: int
    samples: int
    time_s: float
    energy_j: float
    rail_energy_j: Mapping[str, float]
    host_wall_s: float | None = None  # measured on the host, whatever the source
    metric: str | None = None  # the task's primary metric
    metric_value: float | None = None
    setting: DvfsSetting | None = None  # the last one applied
    history: tuple[tuple[int, DvfsSetting], ...] = ()
    detail: Mapping[str, Any] = field(default_factory=dict)  # the policy's describe()
    simulated: bool = False
    reused: bool = False  # a stored baseline, not run now
    cancelled: bool = False

    @property
    def avg_power_w(self) -> float:
        return self.energy_j / self.time_s if self.time_s > 0 else 0.0

    @property
    def samples_per_s(self) -> float:
        return self.samples / self.time_s if self.time_s > 0 else 0.0

    @property
    def joules_per_sample(self) -> float:
        return self.energy_j / self.samples if self.samples else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id, "role": self.role, "policy": self.policy, "source": self.source.value,
            "simulated": self.simulated, "reused": self.reused, "cancelled": self.cancelled,
            "steps": self.steps, "samples": self.samples, "time_s": self.time_s, "energy_j": self.energy_j,
            "energy_rails": {"preset": self.rails_preset, "rails": list(self.rails)},
            "rail_energy_j": dict(self.rail_energy_j), "avg_power_w": self.avg_power_w,
            "samples_per_s": self.samples_per_s, "joules_per_sample": self.joules_per_sample,
            "metric": None if self.metric is None else {"name": self.metric, "value": self.metric_value},
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
    rails_preset: str
    record_id: int | None = None  # the store's comparison row

    def to_json(self) -> dict[str, Any]:
        return {"saving_pct": self.saving_pct, "slowdown_pct": self.slowdown_pct,
                "rail_saving_pct": dict(self.rail_saving_pct), "power_change_pct": self.power_change_pct,
                "source": self.source.value, "rails_preset": self.rails_preset, "record_id": self.record_id}


def compare(run: RunFigures, baseline: RunFigures) -> Comparison:
    """Energy saving and slowdown in percent of the baseline (per rail too)."""
    if run.rails_preset != baseline.rails_preset:
        raise ConfigError(f"run {run.run_id} totals {run.rails_preset} but baseline {baseline.run_id} totals "
                          f"{baseline.rails_preset}", "compare runs over the same --rails preset")
    if baseline.energy_j <= 0 or baseline.time_s <= 0:
        raise ConfigError(f"baseline run {baseline.run_id} has no energy or time", "run the baseline again")
    if {run.source, baseline.source} == {Source.MEASURED, Source.TWIN}:
        raise ConfigError("cannot compare a board's run with a twin's", "compare runs of one kind")
    rails = {}
    for rail, base_j in baseline.rail_energy_j.items():
        if base_j > 0 and rail in run.rail_energy_j:
            rails[rail] = 100.0 * (base_j - run.rail_energy_j[rail]) / base_j
    return Comparison(
        saving_pct=100.0 * (baseline.energy_j - run.energy_j) / baseline.energy_j,
        slowdown_pct=100.0 * (run.time_s - baseline.time_s) / baseline.time_s,
        rail_saving_pct=rails,
        power_change_pct=100.0 * (run.avg_power_w / baseline.avg_power_w - 1.0) if baseline.avg_power_w else 0.0,
        source=run.source,
        rails_preset=run.rails_preset,
    )


def stored_baseline(store: Any, *, workload_key: str, task: str, device_id: int, source: Source, steps: int,
                    seed: int, rails_preset: str, rails: tuple[str, ...], simulated: bool,
                    exclude: int | None = None) -> RunFigures | None:
    """The newest finished MAXN run of this workload on this device with the same steps,
    seed, rail preset and kind (simulated or trained)."""
    from engine.workload.glue import get_task

    primary = get_task(task).primary_metric
    for rec in store.find_runs(workload_key, device_id, policy=BASELINE_POLICY, steps=steps, seed=seed,
                               source=source):
        rec_simulated = (rec.notes or "").startswith("simulated")
        if rec.id == exclude or rec.rails != rails_preset or rec_simulated != simulated or not rec.energy_j:
            continue
        metric_name = next((k for k in rec.metrics if k == primary or k.endswith("/" + primary)), None)
        setting = None if rec.setting is None else DvfsSetting.from_json(
            {k: v for k, v in rec.setting.items() if k in ("gpu_hz", "cpu_hz", "emc_hz", "nvpmodel", "jetson_clocks")})
        rail_j = dict(rec.rail_energy_j)
        return RunFigures(
            run_id=rec.id, role="baseline", policy=BASELINE_POLICY, source=rec.source, rails_preset=rails_preset,
            rails=rails,
            steps=rec.steps or steps, samples=rec.samples or 0, time_s=float(rec.time_s or 0.0),
            energy_j=float(rec.energy_j), rail_energy_j=rail_j, host_wall_s=rec.wall_s, metric=metric_name,
            metric_value=None if metric_name is None else _as_float(rec.metrics[metric_name]), setting=setting,
            simulated=rec_simulated, reused=True,
        )
    return None


def _as_float(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def flatten_metrics(evals: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """{split: {name: v}} -> {name: v} for one split, {split/name: v} for several."""
    if len(evals) == 1:
        return {k: float(v) for k, v in next(iter(evals.values())).items()}
    return {f"{split}/{k}": float(v) for split, m in evals.items() for k, v in m.items()}
