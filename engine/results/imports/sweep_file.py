"""Sweeps measured elsewhere, read from a CSV or JSON file (`slm-dvfs import-sweep`).

One row per measured point: the setting (GPU clock, optionally CPU, EMC and the nvpmodel mode, or
`maxn`: the board's uncapped mode, MAXN or MAXN_SUPER, with its dynamic governors), the energy over
the rails it sums, the time when known (energy-only rows are kept as such: their time is None, never
0), the training samples it covers, and optionally the repeat number. The workload comes from flags
(WorkloadFlags) or from columns, constant per workload: a file with several workloads (or rail sets)
becomes one sweep per workload and rail set, so energies over different rails are never mixed. Every
value is checked against the board's tables (BoardTables); the first wrong cell stops the import
with the file, line (CSV) or row (JSON), column and what to do. torch-free.

The formats and columns are documented in docs/experiments.md ("Importing measured sweeps").
"""

from __future__ import annotations

import hashlib
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping

from engine.core.constants import DEFAULT_PADDING, MODES, Mode, Padding, Precision, parse_mode, parse_padding, parse_precision
from engine.core.errors import ConfigError, SlmDvfsError
from engine.core.jsontypes import as_int
from engine.core.plausible import MAX_BATCH, MAX_REPEATS, MAX_SAMPLES, MAX_SEQ_LEN, time_problem
from engine.core.text import shown
from engine.core.userinput import check_name, number_value
from engine.core.provenance import Source
from engine.device.baseline import board_baseline
from engine.device.setting import MAXN, DvfsSetting
from engine.results.imports.read import read_bytes, table_rows
from engine.results.imports.fields import (
    BoardTables,
    CellError,
    check_caps,
    clock_hz,
    positive,
    power_mode,
    rail_set,
    whole,
)
from engine.results.records import SweepPoint, WorkloadRecord, setting_key
from engine.results.store.sweep_tables import FinishedSweep
from engine.workload.lora import LoraSettings
from engine.workload.trace.loop import Loop, default_loop, parse_loop

IMPORT_METHOD = "import"  # the sweep space's "method" of an imported sweep
CLOCK_COLUMNS = {f"{d}{suffix}": (d, unit) for d in ("gpu", "cpu", "emc")
                 for suffix, unit in (("_mhz", "MHz"), ("_hz", "Hz"), ("", "MHz"))}
MODE_COLUMNS = ("mode", "nvpmodel", "power_mode")  # `mode` holding full/bitfit/head/lora is the training mode
WORKLOAD_COLUMNS = {"model": ("model",), "task": ("task",), "batch_size": ("batch_size", "batch"),
                    "seq_len": ("max_seq_len", "seq_len"), "precision": ("precision",),
                    "train_mode": ("train_mode", "training_mode"), "padding": ("pad", "padding"), "loop": ("loop",)}
WORKLOAD_NAMES = frozenset(c for cols in WORKLOAD_COLUMNS.values() for c in cols)
OTHER_COLUMNS = ("setting", "energy_j", "power_w", "time_s", "samples", "repeat", "rails")
KNOWN_COLUMNS = frozenset(CLOCK_COLUMNS) | frozenset(MODE_COLUMNS) | frozenset(OTHER_COLUMNS) | WORKLOAD_NAMES
MAXN_LABELS = ("maxn", "maxn mode 0", "maxn_mode_0", "maxn-mode-0")
GOVERNOR = ("gov", "governor", "dynamic", "auto")  # a clock cell that says its governor decided
ENERGY_TOLERANCE = 0.02  # energy_j and power_w x time_s given together must agree to 2%


@dataclass(frozen=True)
class WorkloadFlags:
    """The workload and file-wide values the command line gives (None: not given; a column may)."""

    model: str | None = None
    task: str | None = None
    batch_size: int | None = None
    seq_len: int | None = None
    precision: Precision | None = None
    mode: Mode | None = None  # None: full
    padding: Padding | None = None  # None: the CLI's default (dynamic)
    loop: Loop | None = None  # None: a column says it, else lean (a board trained with slm-dvfs's own loop)
    samples: int | None = None  # training samples each point covers
    rails: str | None = None  # the rails every energy sums, e.g. gpu+cpu
    lora: LoraSettings | None = None
    grad_checkpointing: bool = False


@dataclass(frozen=True)
class ImportedPoint:
    setting: DvfsSetting
    repeat: int
    time_s: float | None  # None: energy only
    energy_j: float
    samples: int
    where: str  # "line 4" (CSV) or "row 3" (JSON)


@dataclass(frozen=True)
class ImportedSweep:
    """The points of one workload over one rail set."""

    workload: WorkloadRecord
    rails: str  # the sweep space's rails preset: all, gpu+cpu, or A,B
    rail_names: tuple[str, ...]
    points: tuple[ImportedPoint, ...]

    @property
    def settings(self) -> int:
        return len({setting_key(s) for s in {p.setting for p in self.points}})  # a key per setting, not per point

    @property
    def energy_only(self) -> int:
        return sum(1 for p in self.points if p.time_s is None)

    @property
    def repeats(self) -> int:
        return max(p.repeat for p in self.points) + 1


@dataclass(frozen=True)
class ImportedFile:
    path: Path
    sha256: str  # of the file's bytes: a file imported once is refused the second time
    kind: str  # csv | json
    rows: int
    sweeps: tuple[ImportedSweep, ...]
    ignored_columns: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()  # possible but unusual values, kept (e.g. a power above the module's limit)

    def space(self, sweep: ImportedSweep) -> dict[str, Any]:
        """The stored sweep's space: how it was obtained, from what, over which rails."""
        return {"method": IMPORT_METHOD, "file": self.path.name, "sha256": self.sha256, "rails": sweep.rails,
                "rails_summed": list(sweep.rail_names), "energy_only_points": sweep.energy_only}

    def finished_sweeps(self, label: str | None = None, *, profile: str | None = None) -> list[FinishedSweep]:
        """The sweeps as the store takes them (Store.add_finished_sweeps), labelled measured."""
        out = []
        for sw in self.sweeps:
            space = self.space(sw) | ({"profile": profile} if profile else {})
            points = [SweepPoint(sweep_id=0, setting=p.setting.to_json(), repeat=p.repeat, time_s=p.time_s,
                                 energy_j=p.energy_j, samples=p.samples, source=Source.MEASURED) for p in sw.points]
            out.append(FinishedSweep(workload=sw.workload, space=space, points=points, repeats=sw.repeats,
                                     source=Source.MEASURED, label=label or f"imported from {self.path.name}"))
        return out


def read_sweep_file(path: str | Path, tables: BoardTables, flags: WorkloadFlags = WorkloadFlags(), *,
                    default_mode: int = 0) -> ImportedFile:
    """Read and check a whole file; raise ConfigError at the first wrong value (nothing is stored by
    reading). Pinned rows without a mode get `default_mode` (sweeps pin clocks in the board's uncapped mode:
    mode 0, MAXN, on an AGX Orin; import-sweep passes its profile's)."""
    path = Path(path)
    raw = read_bytes(path)
    kind, rows, file_values = table_rows(path, raw)
    reader = _RowReader(path, tables, flags, file_values, default_mode)
    # A JSON file's "workload" object holds what every row shares; a row's own cell wins (samples,
    # rails, a mode), but a row of another workload than the file's is refused: one of the two is
    # wrong, and which the file cannot tell.
    for where, cells in rows:
        for column, cell in cells.items():
            shared = file_values.get(column)
            if cell is None or shared is None or not _names_workload(column, cell, shared):
                continue
            if not same_value(cell, shared):
                with reader.at(where, column):
                    raise CellError(f"{column} is {shown(cell)!r} here but the file's workload says {shown(shared)!r}",
                                    "give the value once (in the workload object, or in every row), or fix the row")
    rows = [(where, {**file_values, **{k: v for k, v in cells.items() if v is not None}}) for where, cells in rows]
    for where, cells in rows:
        reader.add(where, cells)
    sweeps = reader.sweeps()
    ignored = sorted({k for _w, cells in rows for k in cells if k not in KNOWN_COLUMNS})
    return ImportedFile(path=path, sha256=hashlib.sha256(raw).hexdigest(), kind=kind, rows=len(rows),
                        sweeps=sweeps, ignored_columns=tuple(ignored), warnings=tuple(reader.warnings))


def _names_workload(column: str, *values: Any) -> bool:
    """Whether a column names the workload (model, task, shape...); `mode` only when it holds training modes."""
    if column == "mode":
        return all(str(v).strip().lower() in MODES for v in values)
    return column in WORKLOAD_NAMES


def same_value(a: Any, b: Any) -> bool:
    """Whether two cells say the same: as numbers where both are (`32` and `32.0`), else as words."""
    try:
        return number_value(a, "") == number_value(b, "")
    except SlmDvfsError:
        return str(a).strip().lower() == str(b).strip().lower()


def _key_of(setting: DvfsSetting, keys: dict[DvfsSetting, str]) -> str:
    """setting_key(setting), computed once per distinct setting."""
    key = keys.get(setting)
    if key is None:
        key = keys[setting] = setting_key(setting)
    return key


# --------------------------------------------------------------------------- reading the rows
@dataclass
class _Group:
    workload: WorkloadRecord
    rails: str
    rail_names: tuple[str, ...]
    rows: list[tuple[str, DvfsSetting, int | None, float | None, float, int]] = field(default_factory=list)


class _RowReader:
    def __init__(self, path: Path, tables: BoardTables, flags: WorkloadFlags, file_values: Mapping[str, Any],
                 default_mode: int) -> None:
        self.path, self.tables, self.flags, self.file_values = path, tables, flags, file_values
        self.default_mode = default_mode
        # a `maxn` row is the board's baseline, its uncapped mode whatever its id (MAXN_SUPER, mode 2, on an Orin Nano)
        try:
            self.baseline = board_baseline(tables.modes).setting
        except ConfigError:  # tables with no uncapped mode (or none): a maxn row means the AGX Orin's, as before
            self.baseline = MAXN
        self.groups: dict[tuple[str, str], _Group] = {}
        self._workloads: dict[tuple[Any, ...], WorkloadRecord] = {}
        self.warnings: list[str] = []

    @contextmanager
    def at(self, where: str, column: str | None) -> Iterator[None]:
        """Re-raise a wrong value with where it is: the file, line or row, column."""
        try:
            yield
        except SlmDvfsError as exc:
            place = f"{self.path}, {where}" + (f", column {column}" if column else "")
            raise ConfigError(f"{place}: {exc.what}",
                              (exc.remedy + "; " if exc.remedy else "") + "nothing was stored") from None

    def add(self, where: str, cells: dict[str, Any]) -> None:
        workload = self._workload(where, cells)
        setting = self._setting(where, cells)
        energy, time_s = self._energy(where, cells)
        samples = self._given(where, cells, "samples", self.flags.samples, "samples")
        with self.at(where, "samples"):
            if samples is None:
                raise CellError("the training samples this point covers are not given",
                                "add a samples column, or --samples N for the whole file")
            samples = whole(samples, "samples", 1, MAX_SAMPLES)
        repeat = None
        if cells.get("repeat") is not None:
            with self.at(where, "repeat"):
                repeat = whole(cells["repeat"], "repeat", 0, MAX_REPEATS)
        rails_text = self._given(where, cells, "rails", self.flags.rails, "rails")
        with self.at(where, "rails"):
            if rails_text is None:
                raise CellError("the rails the energy sums are not given",
                                "add a rails column, or --rails (e.g. --rails gpu+cpu, or "
                                "--rails VDD_GPU_SOC+VDD_CPU_CV); energies over different rails are never mixed")
            preset, names = rail_set(str(rails_text), self.tables)
        group = self.groups.setdefault((workload.key, preset), _Group(workload, preset, names))
        group.rows.append((where, setting, repeat, time_s, energy, samples))

    def sweeps(self) -> tuple[ImportedSweep, ...]:
        return tuple(ImportedSweep(g.workload, g.rails, g.rail_names, self._numbered(g)) for g in self.groups.values())

    def _numbered(self, group: _Group) -> tuple[ImportedPoint, ...]:
        """Repeat numbers: as given; rows of one setting without one take the next free numbers, in order.

        Linear in the rows: a setting's free numbers are found from where the last search ended (a number
        once taken stays taken), not from 0 for each row, which made a long file of one setting quadratic."""
        keys: dict[DvfsSetting, str] = {}  # one key per setting, not one per row (settings repeat)
        taken: dict[str, dict[int, str]] = {}
        for where, setting, repeat, *_rest in group.rows:
            if repeat is None:
                continue
            seen = taken.setdefault(_key_of(setting, keys), {})
            if repeat in seen:
                with self.at(where, "repeat"):
                    raise CellError(f"{setting.label()} repeat {repeat} is already given at {seen[repeat]}",
                                    "number each repetition of a setting once, or leave repeat empty")
            seen[repeat] = where
        free: dict[str, int] = {}  # per setting: every number below it is taken
        points = []
        for where, setting, repeat, time_s, energy, samples in group.rows:
            if repeat is None:
                key = _key_of(setting, keys)
                seen = taken.setdefault(key, {})
                repeat = free.get(key, 0)
                while repeat in seen:
                    repeat += 1
                seen[repeat] = where
                free[key] = repeat + 1
            points.append(ImportedPoint(setting, repeat, time_s, energy, samples, where))
        return tuple(points)

    # -- one row's parts
    def _given(self, where: str, cells: Mapping[str, Any], column: str, flag: Any, flag_name: str,
               columns: tuple[str, ...] | None = None) -> Any:
        """A workload-wide value: the row's cell, the file's workload object, or the flag; a cell that
        disagrees with the flag is refused (the flag would silently lose)."""
        names = columns or (column,)
        cell = next((cells[c] for c in names if cells.get(c) is not None), None)
        if cell is None:
            cell = next((self.file_values[c] for c in names if self.file_values.get(c) is not None), None)
        if cell is not None and flag is not None and not same_value(cell, flag):
            with self.at(where, column):
                raise CellError(f"{column} is {shown(cell)!r} here but --{flag_name.replace('_', '-')} says "
                                f"{shown(flag)!r}",
                                f"drop --{flag_name.replace('_', '-')} (the column gives it per row), or fix the cell")
        return cell if cell is not None else flag

    def _workload(self, where: str, cells: dict[str, Any]) -> WorkloadRecord:
        f = self.flags
        train_mode = cells.get("mode") if str(cells.get("mode", "")).lower() in MODES else None
        values = {
            "model": self._given(where, cells, "model", f.model, "model"),
            "task": self._given(where, cells, "task", f.task, "task"),
            "batch_size": self._given(where, cells, "batch_size", f.batch_size, "batch_size",
                                      WORKLOAD_COLUMNS["batch_size"]),
            "seq_len": self._given(where, cells, "max_seq_len", f.seq_len, "max_seq_len", WORKLOAD_COLUMNS["seq_len"]),
            "precision": self._given(where, cells, "precision", f.precision, "precision"),
            "train_mode": self._given(where, {**cells, "train_mode": cells.get("train_mode") or train_mode},
                                      "train_mode", f.mode, "mode", WORKLOAD_COLUMNS["train_mode"]),
            "padding": self._given(where, cells, "pad", f.padding, "pad", WORKLOAD_COLUMNS["padding"]),
            "loop": self._given(where, cells, "loop", f.loop, "loop"),
        }
        key = tuple(values.values())
        if key not in self._workloads:
            self._workloads[key] = self._resolve(where, values)
        return self._workloads[key]

    def _resolve(self, where: str, v: dict[str, Any]) -> WorkloadRecord:
        from engine.workload.spec import defaults_for
        from engine.workload.glue import get_task
        from engine.workload.models import resolve_model

        for name, flag in (("model", "--model"), ("task", "--task")):
            if v[name] is None:
                with self.at(where, name):
                    raise CellError(f"the workload's {name} is not given",
                                    f"add a {name} column, or {flag} for the whole file")
        with self.at(where, "model"):
            resolved = resolve_model(check_name(v["model"], "model"))
        with self.at(where, "task"):
            task = get_task(check_name(v["task"], "task", limit=64)).name
        defaults = defaults_for(str(v["model"]))
        with self.at(where, "batch_size"):
            batch = defaults.batch_size if v["batch_size"] is None else whole(v["batch_size"], "batch size", 1,
                                                                              MAX_BATCH)
        with self.at(where, "max_seq_len"):
            seq = (defaults.seq_len if v["seq_len"] is None
                   else whole(v["seq_len"], "max sequence length", 1, MAX_SEQ_LEN))
            positions = as_int(resolved.config.get("max_position_embeddings", seq))
            if seq > positions:
                raise CellError(f"max sequence length {seq} is more than {resolved.name} takes ({positions} positions)",
                                f"give the length it was fine-tuned at, {positions} or less")
        with self.at(where, "precision"):
            precision = parse_precision(str(v["precision"] or defaults.precision).lower())
        with self.at(where, "pad"):
            padding = parse_padding(str(v["padding"] or DEFAULT_PADDING).lower())
        with self.at(where, "loop"):
            # not said: a board's measurements are of a run that trained, with slm-dvfs's own loop (a file of
            # a Trainer's runs says `hf` in a loop column or with --loop hf)
            loop = parse_loop(str(v["loop"] or default_loop(trains=True)).lower())
        entry = resolved.entry
        with self.at(where, "mode"):
            mode = parse_mode(str(v["train_mode"] or "full").lower())
            record = WorkloadRecord(
                model=resolved.name, task=task, batch_size=batch, seq_len=seq, precision=precision, mode=mode,
                family=resolved.family, params=entry.params if entry else None, padding=padding, loop=loop,
                lora=(self.flags.lora or LoraSettings()) if mode == "lora" else None,
                grad_checkpointing=self.flags.grad_checkpointing,
                config=resolved.config,  # the model itself: a config file's stem may name another (schema v11)
            )
        with self.at(where, None):
            self._check_fits(resolved, record)
        return record

    def _check_fits(self, resolved: Any, w: WorkloadRecord) -> None:
        """A workload whose step cannot fit the board's memory was not measured on it."""
        from engine.workload.sizing.fit import check_memory
        from engine.workload.sizing.memory import estimate_memory

        limits = self.tables.limits
        if limits is None:
            return
        try:  # the budget every run on that board is held to (its MemTotal, as its profile gives it)
            check_memory(estimate_memory(resolved.config, w.batch_size, w.seq_len, w.precision, w.mode, lora=w.lora,
                                         checkpointing=w.grad_checkpointing, params=w.params),
                         resolved.name, w.batch_size, w.seq_len, mem_total_bytes=limits.memory_bytes)
        except ConfigError as exc:
            raise CellError(f"this workload cannot have run on {limits.profile}: {exc.what}",
                            "check the batch size, length, precision and mode the file gives (or --profile)") from None

    def _setting(self, where: str, cells: Mapping[str, Any]) -> DvfsSetting:
        clocks: dict[str, int | None] = {"gpu": None, "cpu": None, "emc": None}
        maxn = str(cells.get("setting") or "").strip().lower() in MAXN_LABELS
        if cells.get("setting") is not None and not maxn:
            with self.at(where, "setting"):
                raise CellError(f"unknown setting {shown(cells['setting'])!r}",
                                "write maxn (the board's uncapped mode, MAXN or MAXN_SUPER, dynamic governors), "
                                "or give the clocks in their columns")
        for column, (domain, unit) in CLOCK_COLUMNS.items():
            value = cells.get(column)
            if value is None or str(value).strip().lower() in GOVERNOR:
                continue
            with self.at(where, column):
                if domain == "gpu" and str(value).strip().lower() in MAXN_LABELS:
                    maxn = True
                    continue
                if clocks[domain] is not None:
                    raise CellError(f"the {domain.upper()} clock is given twice in this row",
                                    f"keep one of the {domain}_mhz / {domain}_hz / {domain} columns")
                clocks[domain] = clock_hz(value, domain, unit, self.tables)
        mode_col = next((c for c in MODE_COLUMNS if cells.get(c) is not None
                         and not (c == "mode" and str(cells[c]).lower() in MODES)), None)
        mode = None
        if mode_col is not None:
            with self.at(where, mode_col):
                mode = power_mode(cells[mode_col], self.tables)
        if maxn:
            with self.at(where, "setting"):
                if any(hz is not None for hz in clocks.values()) or mode not in (None, self.baseline.nvpmodel):
                    raise CellError(f"a maxn row pins nothing: the board's baseline, mode {self.baseline.nvpmodel} (its "
                                    "uncapped MAXN or MAXN_SUPER), leaves every clock to its governor",
                                    "leave the clock and mode cells of a maxn row empty")
            return self.baseline
        if all(hz is None for hz in clocks.values()):
            if mode is None:
                with self.at(where, None):
                    raise CellError("the row names no setting",
                                    "give gpu_mhz (or gpu_hz), a mode, or setting = maxn")
            return DvfsSetting(nvpmodel=mode)  # a mode with its governors
        mode = self.default_mode if mode is None else mode
        with self.at(where, mode_col or "mode"):
            check_caps(mode, clocks, self.tables)
        return DvfsSetting(gpu_hz=clocks["gpu"], cpu_hz=clocks["cpu"], emc_hz=clocks["emc"], nvpmodel=mode)

    def _energy(self, where: str, cells: Mapping[str, Any]) -> tuple[float, float | None]:
        time_s = power = energy = None
        if cells.get("time_s") is not None:
            with self.at(where, "time_s"):
                time_s = positive(cells["time_s"], "time", "s")
        if cells.get("power_w") is not None:
            with self.at(where, "power_w"):
                power = positive(cells["power_w"], "power", "W")
        if cells.get("energy_j") is not None:
            with self.at(where, "energy_j"):
                energy = positive(cells["energy_j"], "energy", "J")
        if energy is None:
            with self.at(where, "energy_j" if power is None else "time_s"):
                if power is None:
                    raise CellError("the row gives no energy", "add energy_j, or power_w with time_s")
                if time_s is None:
                    raise CellError("power_w alone gives no energy: the time is not given",
                                    "add time_s (energy = power_w x time_s), or give energy_j")
            energy = power * time_s
        elif power is not None and time_s is not None and abs(power * time_s / energy - 1) > ENERGY_TOLERANCE:
            with self.at(where, "power_w"):
                raise CellError(f"energy_j {energy:g} J disagrees with power_w x time_s = {power * time_s:g} J",
                                "give energy_j or power_w, or fix whichever is wrong")
        self._plausible(where, energy, time_s, power)
        return energy, time_s

    def _plausible(self, where: str, energy: float, time_s: float | None, power: float | None) -> None:
        """Refuse what the board cannot have drawn (engine.core.plausible); keep, with a warning,
        an average above its power limit."""
        limits = self.tables.limits
        if limits is None:
            return
        with self.at(where, "time_s"):
            problem = None if time_s is None else time_problem(time_s)
            if problem:
                raise CellError(problem, "give the point's time in seconds, as measured")
        column = "power_w" if power is not None else "energy_j"
        with self.at(where, column):
            problem = limits.power_problem(power, "power_w") if power is not None else \
                limits.energy_problem(energy, time_s, "energy_j")
            if problem:
                raise CellError(problem, f"give the {'power in W' if power is not None else 'energy in J'} over the "
                                "rails named, as measured")
        if time_s is not None:
            warning = limits.power_warning(energy / time_s, "average power")
            if warning:
                self.warnings.append(f"{where}: {warning} (kept: possible for a short point, unusual as an average)")
