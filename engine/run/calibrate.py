"""`slm-dvfs calibrate`: the measured sweeps in the results store fitted by the twin's calibration
(engine.device.twin.calibration), written as a calibrated overlay profile in the data dir with a
fit report beside it. Reading the store is quick and done first; the fit touches no store, and
nothing is written unless the whole fit succeeded."""

from __future__ import annotations

import json
import logging
import os
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from engine.core.errors import ConfigError
from engine.core.jsontypes import JsonObject
from engine.core.provenance import Source
from engine.device.monitor import RAIL_PRESETS
from engine.device.rails import preset_rails, total_rails
from engine.device.twin.calibration import Calibration, FitOptions, Observation, calibrate_profile, calibrated_name
from engine.device.twin.calibration import check_profile_name, overlay_toml
from engine.device.twin.profile import devices_dir, load_profile, user_profiles_dir
from engine.results.calibration_report import format_calibration
from engine.results.records import DeviceRecord, SweepPoint, WorkloadRecord, dvfs_setting, setting_key
from engine.results.sweeps import RAILS_ALL
from engine.core.text import shown

if TYPE_CHECKING:
    from engine.core.trace import StepMix
    from engine.device.twin.profile import TwinProfile
    from engine.results.store import Store

log = logging.getLogger(__name__)

DEFAULT_BASE = "agx-orin-64gb"
MIN_POINTS = 6  # measured settings, over all sweeps
MIN_GPU_STEPS = 3  # distinct pinned GPU clocks in at least one sweep: a curve, not a point
HOW_TO_MEASURE = ("measure sweeps on the board with `slm-dvfs sweep --model M --task T --space gpu --rails gpu+cpu` "
                  "(GPU pinned min=max at each step, CPU/EMC on their governors, plus MAXN), or import earlier "
                  "measurements with `slm-dvfs import-sweep FILE`; docs/twin.md, \"Calibration\", says how many")


@dataclass(frozen=True)
class CalibrateSpec:
    sweeps: tuple[int, ...] = ()  # sweep ids; empty: every measured sweep in the store
    twin: str | None = None  # the profile to calibrate (None: agx-orin-64gb)
    name: str | None = None  # the calibrated profile's name (None: "<base>-calibrated")
    params: tuple[str, ...] | None = None  # uncertain numbers to fit (None: all the profile lists)
    loso: bool = True  # leave-one-sweep-out errors (one refit per sweep)
    options: FitOptions = field(default_factory=FitOptions)


@dataclass(frozen=True)
class SweepUsed:
    """A measured sweep the fit saw."""

    id: int
    workload: str  # WorkloadRecord.label: model/task (batch, length, precision, mode, ...)
    points: int  # settings (repeats averaged)
    energy_only: int  # of which without a time
    rails: tuple[str, ...]

    @property
    def name(self) -> str:
        return f"s{self.id}"

    def to_json(self) -> JsonObject:
        return {"id": self.id, "name": self.name, "workload": self.workload, "points": self.points,
                "energy_only": self.energy_only, "rails": list(self.rails)}


@dataclass(frozen=True)
class Gathered:
    observations: tuple[Observation, ...]
    sweeps: tuple[SweepUsed, ...]
    base: TwinProfile  # the profile fitted


@dataclass(frozen=True)
class CalibrateResult:
    calibration: Calibration
    profile_name: str
    profile_path: Path
    report_markdown: Path
    report_json: Path
    sweeps: tuple[SweepUsed, ...]

    def report_text(self) -> str:
        return format_calibration(self.calibration, sweeps=self.sweeps, profile_name=self.profile_name,
                                  profile_path=self.profile_path,
                                  report_paths=(self.report_markdown, self.report_json))

    def summary_line(self) -> str:
        """One line for a status bar: what was fitted, how well, where it went."""
        cal = self.calibration
        loso = cal.loso_summary()
        held = ("" if loso["curve_rmse_pct"] is None else
                f"; held-out curve RMSE {loso['curve_rmse_pct']:.1f}%")
        bounds = "" if not cal.at_bounds else f"; at a bound: {', '.join(h.path for h in cal.at_bounds)}"
        return (f"calibrated {cal.base.name} to {cal.n_sweeps} measured sweep(s): energy MAPE "
                f"{cal.energy_mape_before_pct:.1f}% -> {cal.energy_mape_pct:.1f}%{held} [predicted vs measured]"
                f"{bounds}; use --twin {self.profile_name}")

    def to_json(self) -> JsonObject:
        return {"profile": self.profile_name, "profile_path": str(self.profile_path), "summary": self.summary_line(),
                "report_markdown": str(self.report_markdown), "report_json": str(self.report_json),
                "sweeps": [s.to_json() for s in self.sweeps], "calibration": self.calibration.to_json(),
                "next": f"--twin {self.profile_name}"}


def parse_sweep_ids(texts: Sequence[str]) -> tuple[int, ...]:
    """`s3`, `3` or `s3,s5` -> sweep ids."""
    out: list[int] = []
    for text in texts:
        for part in str(text).split(","):
            if not part.strip():
                continue
            m = re.fullmatch(r"\s*[sS]?([0-9]{1,19})\s*", part)  # ASCII digits; 19: SQLite's ids fit
            if not m:
                raise ConfigError(f"{shown(part)!r} is not a sweep id", "give sweep ids as s3 or 3 (`slm-dvfs sweeps` "
                                  "lists them)")
            out.append(int(m.group(1)))
    return tuple(dict.fromkeys(out))


@dataclass(frozen=True)
class StoredSweep:
    """What the fit needs of one stored sweep, read in one go (the store is let go before tracing)."""

    id: int
    device: DeviceRecord
    workload: WorkloadRecord
    rails: object  # the sweep space's rails preset, as stored (a preset's name, or a list of rails)
    points: tuple[SweepPoint, ...]


def read_measured(store: Store, spec: CalibrateSpec) -> tuple[StoredSweep, ...]:
    """The measured sweeps `spec` names (all when none), as stored; refuses unknown ids, sweeps
    that are not measured when named, and a store without any."""
    wanted = set(spec.sweeps)
    sweeps = [s for s in store.list_sweeps() if not wanted or s.id in wanted]
    missing = sorted(wanted - {s.id for s in sweeps})
    if missing:
        raise ConfigError(f"no sweep {', '.join(f's{i}' for i in missing)} in the results store",
                          "check the ids (`slm-dvfs sweeps` lists them; `slm-dvfs sweeps --source measured` the "
                          "measured ones)")
    not_measured = [s for s in sweeps if s.source != Source.MEASURED]
    if wanted and not_measured:
        raise ConfigError(f"sweep {', '.join(f's{s.id}' for s in not_measured)} is {not_measured[0].source.value}, "
                          "not measured: the twin cannot be calibrated to its own figures", HOW_TO_MEASURE)
    sweeps = sorted((s for s in sweeps if s.source == Source.MEASURED), key=lambda s: s.id)
    if not sweeps:
        raise ConfigError("the results store holds no measured sweeps to calibrate the twin against", HOW_TO_MEASURE)
    return tuple(StoredSweep(s.id, store.get_device(s.device_id), store.get_workload(s.workload_id),
                             s.space.get("rails", RAILS_ALL), tuple(store.sweep_points(s.id))) for s in sweeps)


def observe(stored: Sequence[StoredSweep], spec: CalibrateSpec) -> Gathered:
    """The observations of stored sweeps, checked against the profile: the same board, rails it
    models, enough points to fit. Re-traces each workload (torch-free when its trace is cached)."""
    base = load_profile(spec.twin or DEFAULT_BASE)
    for sweep in stored:  # every board checked before anything is traced
        _check_board(sweep.device, base, sweep.id)
    observations: list[Observation] = []
    used: list[SweepUsed] = []
    for sweep in stored:
        if not sweep.points:
            continue
        rails = _rails(sweep.rails, sweep.points, base, sweep.id)
        obs = _observations(f"s{sweep.id}", _steps(sweep.workload, sweep.id), rails, sweep.points)
        observations += obs
        used.append(SweepUsed(sweep.id, sweep.workload.label, len(obs),
                              sum(1 for o in obs if o.time_s_per_sample is None), rails))
    _check_enough(observations)
    return Gathered(tuple(observations), tuple(used), base)


def gather(store: Store, spec: CalibrateSpec) -> Gathered:
    """read_measured() then observe(): the observations of the measured sweeps `spec` names."""
    return observe(read_measured(store, spec), spec)


def calibrate_gathered(gathered: Gathered, spec: CalibrateSpec) -> CalibrateResult:
    """Fit, then write the overlay profile and its report (Markdown + JSON) to the data dir's
    profiles folder; nothing is written if anything fails before."""
    base = gathered.base
    name = check_profile_name(spec.name or calibrated_name(base))
    if (devices_dir() / f"{name}.toml").is_file():
        raise ConfigError(f"{name!r} is a shipped profile's name: a calibrated one by that name would never load",
                          f"choose another --name, e.g. {calibrated_name(base)}")
    cal = calibrate_profile(base, gathered.observations, paths=spec.params, options=spec.options, loso=spec.loso,
                            name=name)
    root = load_profile(base.base) if base.base else None
    note = ", ".join(s.name for s in gathered.sweeps)
    toml_text = overlay_toml(cal, name=name, root=root, sweeps_note=note)
    out_dir = user_profiles_dir()
    path = out_dir / f"{name}.toml"
    md_path, json_path = out_dir / f"{name}-report.md", out_dir / f"{name}-report.json"
    result = CalibrateResult(cal, name, path, md_path, json_path, gathered.sweeps)
    md_text = format_calibration(cal, sweeps=gathered.sweeps, profile_name=name, profile_path=path,
                                 report_paths=(md_path, json_path), markdown=True)
    json_text = json.dumps(result.to_json(), indent=2, default=str) + "\n"
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        for target, text in ((md_path, md_text), (json_path, json_text), (path, toml_text)):
            _write_atomic(target, text)
    except OSError as exc:
        raise ConfigError(f"cannot write the calibrated profile to {out_dir}: {exc.strerror}",
                          "check the data dir's permissions and free space (SLM_DVFS_DATA_DIR moves it)") from None
    log.info("calibrated profile %s written to %s", name, path)
    return result


def run_calibration(spec: CalibrateSpec, *, store: Store) -> CalibrateResult:
    """gather() from the store, then calibrate_gathered(): what the CLI and the TUI run."""
    return calibrate_gathered(gather(store, spec), spec)


# --------------------------------------------------------------------------- helpers
def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _check_board(device: DeviceRecord, profile: TwinProfile, sweep_id: int) -> None:
    """A measured sweep of another module calibrates another board's twin: refused. A module the
    store does not know (an import without one) is taken as the profile's."""
    module = (device.module or "").strip()
    if not module or module.lower().startswith("unknown"):
        return
    ours = profile.identity.module
    part = ours.split()[0].upper()
    named = re.search(r"\(([^)]*)\)", ours)
    if module.split()[0].upper() == part or (named and named.group(1).lower() in module.lower()):
        return
    raise ConfigError(f"sweep s{sweep_id} was measured on {device.board} ({module}), not on the board of profile "
                      f"{profile.name} ({ours})",
                      "leave it out with --sweeps, or calibrate that board's profile with --twin NAME")


def _steps(record: WorkloadRecord, sweep_id: int) -> StepMix:
    from engine.workload.resolve import resolve_workload

    try:
        # the model as the store recorded it (schema v11), not what its name resolves to now
        workload = resolve_workload(record.spec)
    except ConfigError as exc:
        raise ConfigError(f"sweep s{sweep_id}'s workload ({record.label}) cannot be traced: {exc.what}",
                          f"{exc.remedy}; or leave the sweep out with --sweeps") from None
    return workload.steps  # with dynamic padding, the mix of its batch lengths


def _rails(preset: object, points: Sequence[SweepPoint], profile: TwinProfile, sweep_id: int) -> tuple[str, ...]:
    text = ",".join(map(str, preset)) if isinstance(preset, (list, tuple)) else str(preset or RAILS_ALL).strip()
    if text.lower() == RAILS_ALL:
        seen = {r for p in points for r in (p.rail_energy_j or {})}
        names = tuple(r for r in profile.rail_names if r in seen) + tuple(sorted(seen - set(profile.rail_names)))
        names = total_rails(names or tuple(profile.rail_names))  # the module's total: VDD_IN on an Orin Nano
    elif text.lower() in RAIL_PRESETS:
        names = preset_rails(text, profile.rail_names) or ()
    else:
        names = tuple(r.strip() for r in text.split(",") if r.strip())
    unknown = [r for r in names if r not in profile.rail_names]
    if unknown or not names:
        raise ConfigError(f"sweep s{sweep_id}'s energy sums rail(s) {', '.join(unknown) or '(none)'} that profile "
                          f"{profile.name} does not model", f"its rails are {', '.join(profile.rail_names)}; "
                          "leave the sweep out with --sweeps")
    return names


def _observations(name: str, steps: StepMix, rails: tuple[str, ...], points: Sequence[SweepPoint]) -> list[Observation]:
    groups: dict[str, list[SweepPoint]] = {}
    for p in points:
        groups.setdefault(setting_key(p.setting), []).append(p)
    out = []
    for pts in groups.values():
        bad = [p for p in pts if not p.samples or p.samples <= 0]
        if bad:
            raise ConfigError(f"sweep {name} holds a point of {bad[0].samples!r} samples at {bad[0].setting}",
                              "every stored point needs the samples it measured; leave the sweep out with --sweeps")
        energy = statistics.fmean(p.energy_j / p.samples for p in pts)
        timed = [p.time_s / p.samples for p in pts if p.time_s is not None]
        out.append(Observation(name, steps, dvfs_setting(pts[0].setting), rails, energy,
                               statistics.fmean(timed) if timed else None))
    return out


def _check_enough(observations: Sequence[Observation]) -> None:
    by_sweep: dict[str, set[int]] = {}
    for ob in observations:
        if ob.setting.gpu_hz is not None:
            by_sweep.setdefault(ob.sweep, set()).add(ob.setting.gpu_hz)
    steps = max((len(v) for v in by_sweep.values()), default=0)
    if len(observations) < MIN_POINTS or steps < MIN_GPU_STEPS:
        raise ConfigError(f"too few measured points to calibrate: {len(observations)} setting(s), at most {steps} "
                          f"pinned GPU clock(s) in one sweep; the fit needs at least {MIN_POINTS} settings with "
                          f"{MIN_GPU_STEPS}+ GPU clocks in one sweep (better: 3+ workloads x 6+ GPU steps, plus MAXN)",
                          HOW_TO_MEASURE)

