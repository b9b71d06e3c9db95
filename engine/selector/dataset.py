"""Training data: sweep points as (workload, setting) -> time, power and energy per sample.

Two ways in:
- `from_store`: the sweeps recorded in the results store (`slm-dvfs sweep`), of one
  source (measured on a board, or twin) unless both are asked for; then the source is
  a feature column (`source_measured`) and never mixed silently.
- `from_twin_zoo`: twin sweeps computed on the spot with `fast_sweep` over the model
  zoo x batch sizes x sequence lengths x precisions x training modes x training loops (a
  Trainer-style `hf` loop and slm-dvfs's `lean` one: the same model work, not the same host
  work, so every shape is a workload of each; one GLUE task by
  default: tasks change only the classification head, whose cost the trace carries; of
  tasks given, those with the same head have identical traces, hence identical rows, and
  one task per head is kept). Models of LARGE_MODEL_PARAMS or more take the small batch
  sizes only (LARGE_BATCH_SIZES): how they are fine-tuned on a board, and a retrain stays
  a few minutes.
"""

from __future__ import annotations

import hashlib
import logging
from collections import defaultdict
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from engine.device.base import ClockDomain, PowerMode
from engine.core.constants import MODES, PRECISIONS, Mode, Precision
from engine.core.measurement import Measurement
from engine.device.setting import DvfsSetting
from engine.dvfs.space import setting_space
from engine.core.errors import ConfigError, NoSweepPointsError
from engine.core.jsontypes import JsonObject
from engine.core.provenance import Source
from engine.selector.features import FEATURE_COLUMNS, SettingEncoder, WorkloadFeatures, feature_matrix
from engine.selector.modules import concat, encoder_of_module, pick_module
from engine.workload.trace.loop import LOOPS, Loop

if TYPE_CHECKING:
    from engine.core.trace import StepTrace
    from engine.device.twin.profile import TwinProfile
    from engine.results.store import Store

log = logging.getLogger(__name__)

SOURCE_CHOICES = ("measured", "twin", "both")
# The default grid of `train-selector --from-twin-zoo` (and of bench/bench_selector.py).
DEFAULT_TASKS = ("sst2",)
DEFAULT_BATCH_SIZES = (8, 32)
DEFAULT_SEQ_LENS = (64, 256)
DEFAULT_PRECISIONS: tuple[Precision, ...] = PRECISIONS  # bf16: the zoo's default for its larger decoders
DEFAULT_MODES: tuple[Mode, ...] = MODES
DEFAULT_LOOPS: tuple[Loop, ...] = LOOPS
LARGE_MODEL_PARAMS = 300_000_000
LARGE_BATCH_SIZES = (4, 8)
SOURCE_COLUMN = "source_measured"


@dataclass(frozen=True, eq=False)
class Dataset:
    """One row per (workload, setting) with its per-sample targets."""

    workloads: tuple[WorkloadFeatures, ...]
    settings: tuple[DvfsSetting, ...]
    time_per_sample: np.ndarray  # s
    power_w: np.ndarray  # average power over the window, W
    energy_per_sample: np.ndarray  # J
    sources: tuple[Source, ...]
    encoder: SettingEncoder
    space: str = "gpu"
    source_column: bool = False  # True when the user asked for both sources
    notes: tuple[str, ...] = field(default_factory=tuple)
    # Per-row sample weights (None: every row 1); engine.selector.mixing.weigh_measured sets them.
    weights: np.ndarray | None = None
    devices: tuple[str, ...] = ()  # the boards the measured rows were taken on (names, for the data basis)
    # Each row's module (the store's device record, the twin zoo's profile's module; () where not known),
    # and for rows of several modules each module's encoder: each row is encoded against its own module's
    # tables and facts (the module columns), its settings in the selector's terms (SettingEncoder).
    row_modules: tuple[str, ...] = ()
    module_encoders: Mapping[str, SettingEncoder] = field(default_factory=dict)

    def __post_init__(self) -> None:
        n = len(self.workloads)
        lengths = {len(self.settings), len(self.time_per_sample), len(self.power_w), len(self.energy_per_sample),
                   len(self.sources)}
        if self.weights is not None:
            lengths.add(len(self.weights))
        if lengths != {n}:
            raise ConfigError("dataset columns differ in length", "build datasets with from_store / from_twin_zoo")
        if n == 0:
            raise ConfigError("the training data is empty",
                              "record sweeps first (`slm-dvfs sweep`), or train with --from-twin-zoo")
        if self.row_modules and len(self.row_modules) != n:
            raise ConfigError("dataset columns differ in length", "build datasets with from_store / from_twin_zoo")
        if self.module_encoders and not set(self.row_modules) <= set(self.module_encoders):
            raise ConfigError("a training row's module has no encoder",
                              "build across-module datasets with from_store(across_modules=True) or from_twin_zoos")
        if not self.source_column and len(set(self.sources)) > 1:
            raise ConfigError("the training data mixes measured and twin points",
                              "train on one source, or ask for both (--source both) to make it a feature")

    def __len__(self) -> int:
        return len(self.workloads)

    @property
    def source(self) -> str:
        return "both" if self.source_column else self.sources[0].value

    @property
    def columns(self) -> tuple[str, ...]:
        return FEATURE_COLUMNS + ((SOURCE_COLUMN,) if self.source_column else ())

    @property
    def modules(self) -> tuple[str, ...]:
        """The modules its rows are of, in order (one, or none known, for a single module's data)."""
        return tuple(dict.fromkeys(self.row_modules))

    @property
    def across_modules(self) -> bool:
        """Rows of several modules, each encoded against its own."""
        return len(self.module_encoders) > 1

    def encoder_of(self, i: int) -> SettingEncoder:
        """Row i's module's encoder."""
        return self.module_encoders[self.row_modules[i]] if self.module_encoders else self.encoder

    def X(self) -> np.ndarray:  # scikit-learn's name for the feature matrix
        encoders: SettingEncoder | list[SettingEncoder] = self.encoder
        if self.module_encoders:
            encoders = [self.module_encoders[m] for m in self.row_modules]
        x = feature_matrix(self.workloads, self.settings, encoders)
        if self.source_column:
            x = np.hstack([x, np.array([[float(s == Source.MEASURED)] for s in self.sources])])
        return x

    def groups(self) -> np.ndarray:
        """Cross-validation groups: one per workload shape (its tasks stay together)."""
        ids: dict[str, int] = {}
        return np.array([ids.setdefault(w.shape_key, len(ids)) for w in self.workloads])

    def by_workload(self) -> dict[str, np.ndarray]:
        """Row indices of each workload (and source): the sweep a choice is made from."""
        out: dict[str, list[int]] = defaultdict(list)
        for i, (w, s) in enumerate(zip(self.workloads, self.sources)):
            key = f"{w.key}|{s.value}" if self.source_column else w.key
            out[f"{key}|{self.row_modules[i]}" if self.across_modules else key].append(i)
        return {k: np.array(v) for k, v in out.items()}

    def energy_only(self) -> np.ndarray:
        """Rows measured without a time (an imported energy-only point): time and power are NaN."""
        return ~np.isfinite(self.time_per_sample)

    def measurement(self, i: int) -> Measurement:
        """Row i as a per-sample measurement (one sample), with its source (a row with a time)."""
        t = float(self.time_per_sample[i])
        return Measurement(t, float(self.energy_per_sample[i]), 1, None, self.sources[i])

    def subset(self, idx: Sequence[int] | np.ndarray) -> "Dataset":
        idx = np.asarray(idx)
        kept = {self.row_modules[i] for i in idx} if self.row_modules else set()
        return Dataset(
            tuple(self.workloads[i] for i in idx), tuple(self.settings[i] for i in idx),
            self.time_per_sample[idx], self.power_w[idx], self.energy_per_sample[idx],
            tuple(self.sources[i] for i in idx), self.encoder, self.space, self.source_column, self.notes,
            None if self.weights is None else self.weights[idx], self.devices,
            tuple(self.row_modules[i] for i in idx) if self.row_modules else (),
            {m: e for m, e in self.module_encoders.items() if m in kept},  # the modules its rows are of
        )

    def digest(self) -> str:
        """SHA-256 of what a model learns from: features, targets, sources."""
        h = hashlib.sha256()
        h.update(",".join(self.columns).encode())
        h.update(np.ascontiguousarray(np.round(self.X(), 9)).tobytes())
        for arr in (self.time_per_sample, self.power_w, self.energy_per_sample):
            h.update(np.ascontiguousarray(np.round(np.log(arr), 9)).tobytes())
        h.update("".join(s.value[0] for s in self.sources).encode())
        if self.weights is not None:  # unweighted data keeps the digest it always had
            h.update(np.ascontiguousarray(np.round(self.weights, 9)).tobytes())
        return h.hexdigest()

    def summary(self) -> JsonObject:
        return {
            "rows": len(self),
            "workloads": len(self.by_workload()),
            "groups": len(set(self.groups().tolist())),
            "models": sorted({w.model for w in self.workloads}),
            "source": self.source,
            "space": self.space,
            "settings": len(set(self.settings)),
            "profile": self.encoder.profile,
            "digest": self.digest(),
            "notes": list(self.notes),
            **self.source_counts(),
        }

    def source_counts(self) -> JsonObject:
        """Workloads and rows of each source (and the boards of the measured ones): the data basis."""
        out: JsonObject = {}
        for src in (Source.TWIN, Source.MEASURED):
            rows = [i for i, s in enumerate(self.sources) if s == src]
            out[f"{src.value}_rows"] = len(rows)
            out[f"{src.value}_workloads"] = len({self.workloads[i].key for i in rows})
        out["energy_only_rows"] = int(self.energy_only().sum())
        out["devices"] = list(self.devices)
        if self.row_modules:  # the modules it rests on (recorded only where known: not for the twin zoo)
            out["modules"] = sorted(set(self.row_modules))
        if self.across_modules:  # each module's profile: what its rows were encoded against
            out["across_modules"] = {m: e.profile for m, e in self.module_encoders.items()}
        return out


def from_points(points: Iterable[tuple[WorkloadFeatures, DvfsSetting, Measurement]], encoder: SettingEncoder, *,
                space: str = "gpu", source_column: bool = False, notes: Sequence[str] = (),
                energy_only: Iterable[tuple[WorkloadFeatures, DvfsSetting, float, int, Source]] = (),
                devices: Sequence[str] = ()) -> Dataset:
    """A dataset from (workload, setting, measurement) triples; repeats of one
    (workload, setting, source) are pooled (times, energies and samples summed).
    `energy_only` adds points measured without a time, as (workload, setting, joules,
    samples, source): their time and power are NaN (never 0), pooled the same way, and a
    point with a time at the same (workload, setting, source) wins over them."""
    pooled: dict[tuple[WorkloadFeatures, DvfsSetting, Source], Measurement] = {}
    for w, s, m in points:
        key = (w, s, m.source)
        pooled[key] = m if key not in pooled else pooled[key] + m
    partial: dict[tuple[WorkloadFeatures, DvfsSetting, Source], tuple[float, int]] = {}
    for w, s, joules, samples, src in energy_only:
        key = (w, s, src)
        if key not in pooled:
            j0, n0 = partial.get(key, (0.0, 0))
            partial[key] = (j0 + float(joules), n0 + int(samples))
    rows = list(pooled.items())
    nan = float("nan")
    return Dataset(
        workloads=tuple(k[0] for k, _ in rows) + tuple(k[0] for k in partial),
        settings=tuple(k[1] for k, _ in rows) + tuple(k[1] for k in partial),
        time_per_sample=np.array([m.seconds_per_sample for _, m in rows] + [nan] * len(partial)),
        power_w=np.array([m.avg_power_w for _, m in rows] + [nan] * len(partial)),
        energy_per_sample=np.array([m.joules_per_sample for _, m in rows] + [j / n for j, n in partial.values()]),
        sources=tuple(k[2] for k, _ in rows) + tuple(k[2] for k in partial),
        encoder=encoder, space=space, source_column=source_column, notes=tuple(notes), devices=tuple(devices),
    )



# --------------------------------------------------------------------------- the store


def from_store(store: Store, *, source: str = "measured", profile: str = "agx-orin-64gb",
               space: str | None = None, rails: str = "all", module: str | None = None,
               across_modules: bool = False) -> Dataset:
    """Every recorded sweep point of `source` (measured | twin | both) in `store`, of the
    sweeps whose energy is over the `rails` preset (energies over other rails do not mix),
    of one module (`module`; None: the store's only one, else the profile's: modules_of_sweeps),
    or with `across_modules` of every module, each module's rows encoded against its own profile
    (engine.selector.modules.encoder_of_module; its settings in the selector's terms).
    Workload features are recomputed from the model's architecture and trace, exactly as
    `select` computes them for a new workload; workloads whose model cannot be resolved
    offline are skipped with a warning."""
    from engine.device.twin.profile import load_profile
    from engine.selector.features import features_of
    from engine.workload.resolve import resolve_workload

    if source not in SOURCE_CHOICES:
        raise ConfigError(f"unknown training source {source!r}", f"use one of {', '.join(SOURCE_CHOICES)}")
    wanted = {Source.MEASURED, Source.TWIN} if source == "both" else {Source(source)}
    fallback = SettingEncoder.from_profile(load_profile(profile))
    features: dict[int, WorkloadFeatures | None] = {}
    points: list[tuple[WorkloadFeatures, DvfsSetting, Measurement]] = []
    energy_only: list[tuple[WorkloadFeatures, DvfsSetting, float, int, Source]] = []
    skipped: set[str] = set()
    spaces: set[str] = set()
    devices: dict[int, str] = {}
    sweeps = [sw for sw in store.list_sweeps() if sw.source in wanted
              and not (isinstance(sw.space, Mapping) and sw.space.get("rails", "all") != rails)]
    module_of = {sw.device_id: store.get_device(sw.device_id).module for sw in sweeps}
    modules = sorted(set(module_of.values()))
    if not across_modules:
        chosen = pick_module(modules, module, load_profile(profile).identity.module, profile)
        sweeps = [sw for sw in sweeps if chosen is None or module_of[sw.device_id] == chosen]
        modules = [chosen] if chosen else []
    encoders = {m: encoder_of_module(m, fallback) for m in modules}
    if across_modules:  # modules with no profile of their own would look like one board to the selector
        seen: dict[tuple[float, ...], str] = {}
        for m, enc in encoders.items():
            twin = seen.setdefault(tuple(enc.module_row()), m)
            if twin != m:
                raise ConfigError(f"modules {twin} and {m} are encoded with the same figures (the profile "
                                  f"{enc.profile}): the selector could not tell their sweeps apart",
                                  "learn from each separately with --module M; a module with no shipped "
                                  "profile takes --profile's")
    row_module: list[str] = []  # each point's module, in the order of `points`
    energy_module: list[str] = []
    for sweep in sweeps:
        if sweep.workload_id not in features:
            rec = store.get_workload(sweep.workload_id)
            try:
                # the model as recorded, where it was (schema v11)
                features[sweep.workload_id] = features_of(resolve_workload(rec.spec))
            except ConfigError as exc:
                log.warning("skipping sweeps of %s: %s", rec.key, exc.what)
                skipped.add(rec.key)
                features[sweep.workload_id] = None
        w = features[sweep.workload_id]
        if w is None:
            continue
        if isinstance(sweep.space, Mapping) and sweep.space.get("space"):
            spaces.add(str(sweep.space["space"]))
        if sweep.source == Source.MEASURED and sweep.device_id not in devices:
            dev = store.get_device(sweep.device_id)
            devices[sweep.device_id] = " ".join(x for x in (dev.module, dev.l4t and f"L4T {dev.l4t}") if x)
        for p in store.sweep_points(sweep.id):
            setting = encoders[module_of[sweep.device_id]].to_selector(DvfsSetting.from_json(
                {k: v for k, v in p.setting.items() if k in ("gpu_hz", "cpu_hz", "emc_hz", "nvpmodel", "jetson_clocks")}))
            if p.samples <= 0:
                continue
            if p.time_s is None:  # an energy-only point (imported without a time): energy rows only
                if p.energy_j > 0:
                    energy_only.append((w, setting, p.energy_j, p.samples, p.source or sweep.source))
                    energy_module.append(module_of[sweep.device_id])
                continue
            if p.time_s <= 0:
                continue
            points.append((w, setting, Measurement(p.time_s, p.energy_j, p.samples, None, p.source or sweep.source)))
            row_module.append(module_of[sweep.device_id])
    if not points and not energy_only:
        every = store.list_sweeps()
        have = sorted({s.source.value for s in every})
        # sweeps of the wanted source over other rails: the likely fix is --rails, not more sweeps
        other_rails = sorted({str(s.space.get("rails", "all")) for s in every if s.source in wanted
                              and isinstance(s.space, Mapping) and s.space.get("rails", "all") != rails})
        raise NoSweepPointsError(
            f"the results store {getattr(store, 'path', '')} holds no {source} sweep points over rails "
            f"{rails} to train on"
            + (f" (it has {', '.join(have)} sweeps)" if have else "")
            + (f"; its {source} sweeps sum rails {', '.join(other_rails)}" if other_rails else ""),
            (f"give --rails {other_rails[0]} to learn from those, " if other_rails else "")
            + "record sweeps with `slm-dvfs sweep` (on the board for measured data), pick another --source, "
            "or train on the twin with --from-twin-zoo",
            other_rails,
        )
    notes = [f"skipped {k}: model not resolvable offline" for k in sorted(skipped)]
    chosen_space = space or (spaces.pop() if len(spaces) == 1 else "mixed")
    if energy_only:
        notes.append(f"{len(energy_only)} energy-only point(s) (no time): they teach energy, not time or power")
    parts = []
    for m in sorted(set(row_module) | set(energy_module)):  # pooled per module: a module's rows never mix
        part = from_points([pt for pt, pm in zip(points, row_module) if pm == m], encoders[m], space=chosen_space,
                           source_column=source == "both", notes=notes, devices=sorted(set(devices.values())),
                           energy_only=[e for e, em in zip(energy_only, energy_module) if em == m])
        parts.append(replace(part, row_modules=(m,) * len(part)))
    return concat(parts, module_encoders={m: encoders[m] for m in modules} if across_modules else {})



# --------------------------------------------------------------------------- the twin zoo


class _ProfileTables:
    """A Device-shaped view of a twin profile's clock tables and modes, for setting_space."""

    def __init__(self, profile: TwinProfile) -> None:
        self._p = profile

    def clock_table(self, domain: ClockDomain) -> tuple[int, ...]:
        tables = {ClockDomain.GPU: self._p.gpu.table_hz, ClockDomain.CPU: self._p.cpu.table_hz,
                  ClockDomain.EMC: self._p.emc.table_hz}
        return tuple(sorted(tables[ClockDomain(domain)]))

    def power_modes(self) -> tuple[PowerMode, ...]:
        return tuple(self._p.modes)


def profile_settings(profile: TwinProfile, space: str = "gpu") -> tuple[DvfsSetting, ...]:
    """The setting space of a twin profile's device (MAXN first)."""
    return setting_space(_ProfileTables(profile), space)  # type: ignore[arg-type]


def twin_measure(trace: StepTrace, profile: TwinProfile, settings: Sequence[DvfsSetting]) -> list[tuple[DvfsSetting, Measurement]]:
    """Twin figures of a trace at each setting, without training (engine.run.sweep.fast_sweep)."""
    from engine.device.twin.fast import fast_sweep

    return list(fast_sweep(trace, profile, list(settings)))


def head_representatives(tasks: Sequence[str]) -> dict[str, list[str]]:
    """One task per classification head (labels, regression): task -> the tasks it stands for."""
    from engine.workload.glue import get_task

    reps: dict[tuple[int, bool], list[str]] = {}
    for t in tasks:
        g = get_task(t)
        reps.setdefault((g.num_labels, g.is_regression), []).append(g.name)
    return {names[0]: names for names in reps.values()}


def model_params(name: str, config: Mapping[str, Any] | None) -> int:
    """A model's size before tracing it: the zoo's count, else an estimate from its config."""
    from engine.workload.sizing import estimate_params
    from engine.workload.zoo import load_zoo

    entry = load_zoo().get(name) if config is None else None
    if entry is not None:
        return int(entry.params)
    if config is None:
        from engine.workload.models import resolve_model

        config = resolve_model(name).config
    return int(estimate_params(config))


def from_twin_zoo(
    *,
    profile: str = "agx-orin-64gb",
    models: Sequence[str] | None = None,
    configs: Mapping[str, Mapping[str, Any]] | None = None,
    tasks: Sequence[str] | None = None,
    batch_sizes: Sequence[int] = DEFAULT_BATCH_SIZES,
    seq_lens: Sequence[int] = DEFAULT_SEQ_LENS,
    precisions: Sequence[Precision] = DEFAULT_PRECISIONS,
    modes: Sequence[Mode] = DEFAULT_MODES,
    loops: Sequence[Loop] = DEFAULT_LOOPS,
    large_batch_sizes: Sequence[int] | None = LARGE_BATCH_SIZES,
    space: str = "gpu",
    progress: Callable[[int, int, str], None] | None = None,
) -> Dataset:
    """Twin training data, computed now: fast_sweep of every workload of the grid over the
    profile's setting space. `models` defaults to the whole zoo; `configs` adds architectures
    by name (e.g. shapes outside the zoo). Models of LARGE_MODEL_PARAMS or more take
    `large_batch_sizes` instead of `batch_sizes` (None: the same). Shapes longer than a
    model's positions, or that the board's memory cannot hold, and modes the tracer cannot
    apply, are skipped (the notes say how many, and why). Each shape is a workload of every loop
    of `loops` (its own key; one cross-validation group with the others, WorkloadFeatures.shape_key)."""
    from engine.device.twin.profile import load_profile
    from engine.selector.features import describe_workload
    from engine.workload.zoo import load_zoo

    # each a typed value, parsed by the caller (the CLI's --modes, --precisions, --loops)
    if not modes or not precisions or not loops:
        raise ConfigError("no training modes, precisions or loops to generate data for",
                          "give at least one of each (the defaults: every mode, precision and loop)")
    prof = load_profile(profile)
    encoder = SettingEncoder.from_profile(prof)
    settings = profile_settings(prof, space)  # the board's terms (what the twin runs), kept in the selector's
    mem_total = int(prof.memory_total_mb * 1024 * 1024) if prof.memory_total_mb else None
    archs: dict[str, Mapping[str, Any] | None] = {}
    if models is None and configs is None:
        models = list(load_zoo())
    for m in models or ():
        archs[m] = None
    for name, cfg in (configs or {}).items():
        archs[name] = cfg
    reps = head_representatives(list(tasks) if tasks else list(DEFAULT_TASKS))
    grid = []
    for m in archs:
        large = large_batch_sizes is not None and model_params(m, archs[m]) >= LARGE_MODEL_PARAMS
        for b in (large_batch_sizes if large else batch_sizes) or ():
            grid += [(m, t, b, l, p, md, lp) for t in reps for l in seq_lens for p in precisions for md in modes
                     for lp in loops]
    points: list[tuple[WorkloadFeatures, DvfsSetting, Measurement]] = []
    skipped: list[str] = []  # why each skipped grid point could not be described
    for n, (m, t, b, l, p, md, lp) in enumerate(grid):
        what = f"{m} {t} b{b} L{l} {p} {md} {lp}"
        if progress:
            progress(n, len(grid), what)
        try:
            w, trace = describe_workload(m, t, batch_size=b, seq_len=l, precision=p, mode=md, config=archs[m],
                                         loop=lp, mem_total_bytes=mem_total)
        except ConfigError as exc:
            log.info("skipping %s: %s", what, exc.what)
            skipped.append(f"{what}: {exc.what}")
            continue
        for s, meas in twin_measure(trace, prof, settings):
            points.append((w, encoder.to_selector(s), meas))
    if progress:
        progress(len(grid), len(grid), "done")
    covered = "; ".join(f"{k} covers {', '.join(v)}" for k, v in reps.items() if len(v) > 1)
    notes = [f"twin profile {prof.name}, space {space}, {len(settings)} settings per workload",
             f"modes {', '.join(modes)}", f"loops {', '.join(loops)}"]
    if covered:
        notes.append(f"tasks sharing a head have identical twin rows, one kept: {covered}")
    if skipped and not points:
        raise ConfigError(
            f"every one of the {len(grid)} grid point(s) was skipped, e.g. {skipped[0]}",
            "choose shapes the models can take and the board can hold (smaller --batch-sizes / --seq-lens)",
        )
    if skipped:
        notes.append(f"{len(skipped)} grid point(s) skipped (a sequence longer than the model's positions, "
                     f"a step the board's memory cannot hold, or a mode the model cannot take), e.g. {skipped[0]}")
    ds = from_points(points, encoder, space=space, notes=notes)
    return replace(ds, row_modules=(str(encoder.module),) * len(ds))


def from_twin_zoos(profiles: Sequence[str], **grid: Any) -> Dataset:
    """The twin zoo (from_twin_zoo, the same grid) of each module's profile, as one dataset: each
    module's rows encoded against its own profile (its module columns, its tables, its uncapped mode
    as the selector's mode 0), a workload's sweeps on two modules two sweeps (Dataset.by_workload), a
    shape on every module one cross-validation group (no fold learns a shape from another module)."""
    names = list(dict.fromkeys(profiles))
    if len(names) < 2:
        return from_twin_zoo(profile=names[0] if names else "agx-orin-64gb", **grid)
    parts: list[Dataset] = []
    for name in names:
        part = from_twin_zoo(profile=name, **grid)
        if part.encoder.module in {p.encoder.module for p in parts}:
            raise ConfigError(f"profiles of one module given twice ({part.encoder.module}: {name})",
                              "give each module's profile once")
        parts.append(part)
    return concat(parts, module_encoders={str(p.encoder.module): p.encoder for p in parts})
