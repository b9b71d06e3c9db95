"""The results store's records: frozen values, one per row kind, each carrying its Source
(measured, twin, predicted); the canonical form of a stored setting; rows -> records."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field, fields
from datetime import datetime, timezone
from typing import Iterable, Literal, Mapping, Protocol, SupportsInt, get_args, runtime_checkable

from engine.core.constants import Mode, Padding, Precision, parse_choice, parse_mode, parse_padding, parse_precision
from engine.core.errors import ConfigError
from engine.results.errors import stored_choice
from engine.core.jsontypes import JsonObject, as_object
from engine.core.provenance import MetricProvenance, Source, parse_source
from engine.core.trace import StepTrace
from engine.device.base import DeviceIdentity
from engine.device.power import PowerSample
from engine.device.setting import DvfsSetting
from engine.results.totals import RunTotals
from engine.workload.lora import LoraSettings
from engine.workload.resolve import Workload
from engine.workload.spec import WorkloadSpec, loop_in_key
from engine.workload.trace.loop import DEFAULT_LOOP, Loop, parse_loop

__all__ = [
    "RUN_STATUSES", "STORED_STATUSES", "SETTING_KEYS", "RunStatus", "parse_status", "ComparisonRecord", "DeviceRecord", "RunRecord", "SweepPoint", "SweepRecord",
    "WorkloadRecord", "as_source", "dvfs_setting", "several_boards", "normalize_setting", "setting_key", "trace_features",
]

# How a run (or a sweep) stands; "abandoned": its process died while it ran (a run's since schema v4, a
# sweep's since v11). RUN_STATUSES: what a process writes; STORED_STATUSES: what a row may hold.
RunStatus = Literal["running", "finished", "failed", "cancelled", "abandoned"]
STORED_STATUSES: tuple[RunStatus, ...] = get_args(RunStatus)
RUN_STATUSES: tuple[RunStatus, ...] = STORED_STATUSES[:4]
ABANDONED: RunStatus = "abandoned"
SETTING_KEYS = ("gpu_hz", "cpu_hz", "emc_hz", "nvpmodel")
_SETTING_ALIASES = {"nvpmodel_id": "nvpmodel", "mode": "nvpmodel"}


# --------------------------------------------------------------------------- values
def as_source(value: Source | str) -> Source:
    try:
        return Source(value)
    except ValueError:
        raise ConfigError(f"unknown source {value!r}", "use measured, twin or predicted") from None


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def timestamp(value: datetime | str | None) -> str:
    if value is None:
        return utc_now()
    return value.isoformat(timespec="seconds") if isinstance(value, datetime) else str(value)


def json_text(value: object) -> str | None:
    return None if value is None else json.dumps(value, sort_keys=True, default=json_default)


def json_default(value: object) -> object:
    if isinstance(value, Mapping):
        return dict(value)
    if hasattr(value, "to_json"):
        return value.to_json()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


@runtime_checkable
class _HasJson(Protocol):
    """A value that writes itself as JSON (a DvfsSetting)."""

    def to_json(self) -> object: ...


def from_json_text(text: str | None) -> Mapping[str, object] | None:
    """A JSON object column (a setting, a config, metrics, rail energies) as stored; None for NULL."""
    return None if text is None else as_object(json.loads(text))


def _numbers(values: Mapping[str, object] | None) -> dict[str, float]:
    """A stored {rail: joules} as it stands (ints kept as ints); TypeError for a value not a number."""
    out: dict[str, float] = {}
    for key, value in (values or {}).items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"rail energy {key!r} is not a number: {value!r}")
        out[key] = value
    return out


def normalize_setting(setting: object) -> dict[str, object]:
    """A DVFS setting as stored: gpu_hz, cpu_hz, emc_hz (None = governor) and nvpmodel,
    plus any other keys it carries. Accepts a mapping, or anything with to_json()."""
    if setting is None:
        data: Mapping[str, object] = {}
    elif isinstance(setting, Mapping):
        data = setting
    elif isinstance(setting, _HasJson):
        data = as_object(setting.to_json())
    else:
        raise ConfigError(f"a DVFS setting must be a mapping, not {type(setting).__name__}",
                          "pass e.g. {'gpu_hz': 816000000, 'nvpmodel': 0}")
    out: dict[str, object] = {k: None for k in SETTING_KEYS}
    for key, value in data.items():
        key = _SETTING_ALIASES.get(key, key)
        if key in SETTING_KEYS and value is not None:
            try:
                if not isinstance(value, (str, SupportsInt)):  # int()'s own TypeError, for the except below
                    raise TypeError(f"int() cannot take a {type(value).__name__}")
                value = int(value)
            except (TypeError, ValueError):
                raise ConfigError(f"setting {key} must be a whole number, not {value!r}",
                                  "frequencies are in Hz, the power mode is an nvpmodel id") from None
        out[key] = value
    return out


def setting_key(setting: object) -> str:
    """The canonical text of a setting: equal settings have equal keys (how sweeps resume)."""
    return json.dumps(normalize_setting(setting), sort_keys=True, separators=(",", ":"))




def dvfs_setting(stored: Mapping[str, object]) -> DvfsSetting:
    """A stored setting (a run's or a sweep point's JSON) as a DvfsSetting; extra keys are ignored."""
    return DvfsSetting.from_json({k: v for k, v in stored.items()
                                  if k in ("gpu_hz", "cpu_hz", "emc_hz", "nvpmodel", "jetson_clocks")})


@dataclass(frozen=True)
class DeviceRecord:
    board: str
    module: str
    l4t: str | None = None
    jetpack: str | None = None
    profile: str | None = None
    is_twin: bool = False
    serial: str | None = None  # the device tree's serial-number; None: unknown (rows before schema v9) or none

    @property
    def source(self) -> Source:
        return Source.TWIN if self.is_twin else Source.MEASURED

    @classmethod
    def from_identity(cls, ident: DeviceIdentity) -> "DeviceRecord":
        return cls(ident.board, ident.module, ident.l4t, ident.jetpack, ident.profile, ident.is_twin,
                   getattr(ident, "serial", None))

    def same_module(self, other: "DeviceRecord") -> bool:
        """Results of the two compare and train together: the same module of the same kind (board or twin)."""
        return self.module == other.module and self.is_twin == other.is_twin

    def other_board(self, other: "DeviceRecord") -> bool:
        """Of one module but known to be two boards (both serials recorded, and different)."""
        return (self.same_module(other) and self.serial is not None and other.serial is not None
                and self.serial != other.serial)

    def label(self) -> str:
        """Which board, compactly: `P3701-0005 (AGX Orin 64GB) #1422921012345 L4T 36.4.0` (twin: `[twin]`)."""
        parts = [self.module, f"#{self.serial}" if self.serial else "", f"L4T {self.l4t}" if self.l4t else "",
                 "[twin]" if self.is_twin else ""]
        return " ".join(p for p in parts if p)

    def to_json(self) -> JsonObject:
        return {"board": self.board, "module": self.module, "l4t": self.l4t, "jetpack": self.jetpack,
                "profile": self.profile, "is_twin": self.is_twin, "serial": self.serial,
                "source": self.source.value}


def several_boards(devices: Iterable[DeviceRecord | None]) -> bool:
    """Whether records of these devices need their board named: several boards (or twins) of one kind
    (a twin's results and a board's are told apart by their source already)."""
    boards = {(d.is_twin, d.module, d.serial, d.l4t) for d in devices if d is not None}
    return any(sum(1 for b in boards if b[0] == twin) > 1 for twin in (False, True))


@dataclass(frozen=True)
class WorkloadRecord:
    model: str
    task: str
    batch_size: int
    seq_len: int
    precision: Precision
    mode: Mode = "full"
    family: str | None = None
    params: int | None = None
    data_source: str | None = None
    features: Mapping[str, float] = field(default_factory=dict)  # flops, bytes, kernels, intensity
    # Trace features are documented estimates from a meta-tensor trace, not measurements.
    source: Source = Source.PREDICTED
    lora: LoraSettings | None = None  # mode "lora": the adapters' settings as given (schema v6)
    grad_checkpointing: bool = False  # schema v6
    padding: Padding = "max_length"  # rows before schema v7 are max_length
    # The training loop (engine/workload/trace/loop.py): no column of its own, the stored key carries it
    # (`|loop=hf`; lean, the default, leaves the key as before: rows stored before the loop was recorded
    # ran it), and a row's is read back from its key.
    loop: Loop = DEFAULT_LOOP
    # The model's config as resolved (schema v11): what rebuilds exactly this model, whatever its name
    # says (a config file's stem may be a zoo model's name). None: not recorded (rows before v11).
    config: Mapping[str, object] | None = None

    def __post_init__(self) -> None:
        parse_mode(self.mode)  # a record a library caller builds is stored as it is: never a mode outside the set
        parse_loop(self.loop)
        if self.lora is not None and self.mode != "lora":
            raise ConfigError(f"LoRA settings were given for mode {self.mode!r}", "give mode 'lora', or no LoRA settings")
        if self.mode == "lora" and self.lora is None:
            object.__setattr__(self, "lora", LoraSettings())
        object.__setattr__(self, "source", as_source(self.source))

    @property
    def spec(self) -> WorkloadSpec:
        """The workload this row stores, named as it was recorded (its model never re-resolved by name:
        its config, where recorded, is the model)."""
        return WorkloadSpec(model=self.model, name=self.model, task=self.task, batch_size=self.batch_size,
                            seq_len=self.seq_len, precision=self.precision, mode=self.mode, lora=self.lora,
                            grad_checkpointing=self.grad_checkpointing, padding=self.padding, loop=self.loop,
                            config=self.config)

    @property
    def key(self) -> str:
        """The store's key of this workload (WorkloadSpec.key)."""
        return self.spec.key

    @classmethod
    def from_trace(cls, trace: StepTrace, task: str, mode: Mode = "full", family: str | None = None,
                   data_source: str | None = None, lora: LoraSettings | None = None,
                   grad_checkpointing: bool = False, padding: Padding = "max_length",
                   config: Mapping[str, object] | None = None, loop: Loop = DEFAULT_LOOP) -> "WorkloadRecord":
        """From a StepTrace: its shape and its totals as features."""
        return cls(
            model=trace.model, task=task, batch_size=trace.batch_size, seq_len=trace.seq_len,
            precision=trace.precision, mode=mode, family=family, params=trace.params or None,
            data_source=data_source, features=trace_features(trace), padding=padding, loop=loop,
            lora=lora if mode == "lora" else None, grad_checkpointing=grad_checkpointing, config=config,
        )

    @classmethod
    def from_workload(cls, workload: Workload, data_source: str | None = None) -> "WorkloadRecord":
        """From a resolved workload (trace totals as features, labelled predicted)."""
        return cls.from_trace(workload.trace, workload.task, mode=workload.mode, family=workload.family,
                              data_source=data_source, lora=workload.lora,
                              grad_checkpointing=workload.grad_checkpointing, padding=workload.padding,
                              config=workload.config, loop=workload.loop)

    def lora_text(self) -> str | None:
        """The LoRA settings as the store's column holds them (JSON), or None."""
        return None if self.lora is None else json.dumps(self.lora.to_json(), sort_keys=True)

    @property
    def label(self) -> str:
        """Which workload, for a line that names it: `bert-tiny/sst2 (batch 32, length 128, fp32, full)`,
        with its padding, loop, LoRA or checkpointing where they are not the defaults (as its key says them:
        a loop other than lean, `hf loop`)."""
        mode = f"lora r{self.lora.rank}" if self.mode == "lora" and self.lora is not None else self.mode
        parts = (f"batch {self.batch_size}", f"length {self.seq_len}", self.precision, mode,
                 "checkpointed" if self.grad_checkpointing else "",
                 "" if self.padding == "max_length" else f"pad {self.padding}",
                 "" if self.loop == DEFAULT_LOOP else f"{self.loop} loop")
        return f"{self.model}/{self.task} ({', '.join(p for p in parts if p)})"

    def to_json(self, definition: bool = False) -> JsonObject:
        """As JSON; the model's config (its full definition) only with `definition`, else whether it was recorded."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "config"}
        out.update(features=dict(self.features), source=self.source.value, key=self.key,
                   lora=None if self.lora is None else self.lora.to_json(self.family),
                   config_recorded=self.config is not None)
        if definition:
            out["config"] = None if self.config is None else dict(self.config)
        return out


def trace_features(trace: StepTrace) -> dict[str, float]:
    """The selector's workload features of a StepTrace."""
    return {
        "flops": float(trace.flops),
        "bytes": float(trace.bytes),
        "kernels": float(trace.kernels),
        "arithmetic_intensity": float(trace.arithmetic_intensity),
        "host_cycles": float(trace.host_cycles),
    }


@dataclass(frozen=True)
class RunRecord:
    id: int
    policy: str
    status: RunStatus
    source: Source
    started_at: str
    device_id: int | None = None
    workload_id: int | None = None
    objective: str | None = None
    setting: Mapping[str, object] | None = None  # None: not known (e.g. an imported log)
    seed: int | None = None
    steps: int | None = None
    samples: int | None = None
    finished_at: str | None = None
    wall_s: float | None = None  # host wall-clock time
    time_s: float | None = None  # time on the device (measured, or the twin's)
    energy_j: float | None = None  # over `rails`
    rail_energy_j: Mapping[str, float] = field(default_factory=dict)
    rails: str | None = None  # the preset the total is over, e.g. "gpu+cpu"
    avg_power_w: float | None = None
    samples_per_s: float | None = None
    joules_per_sample: float | None = None
    metrics: Mapping[str, object] = field(default_factory=dict)
    weights: str | None = None  # "pretrained" | "random"; None: not recorded
    synthetic: bool | None = None  # generated data; None: not recorded
    data_source: str | None = None  # "synthetic" | "hub:..." | "dir:..." (schema v5)
    label: str | None = None
    notes: str | None = None
    error: str | None = None
    device: DeviceRecord | None = None
    workload: WorkloadRecord | None = None
    simulated: bool = False  # the twin ran the step trace: nothing was trained (no loss, no eval metric)
    last_sample_t: float | None = None  # abandoned: the t of its last stored power sample (None: none)

    @property
    def totals(self) -> RunTotals | None:
        """Its figures as stored (None: it recorded none); `rails` holds the preset's name only."""
        if self.time_s is None:
            return None
        return RunTotals(time_s=self.time_s, rail_energy_j=dict(self.rail_energy_j), rails_preset=self.rails,
                         samples=self.samples, steps=self.steps, source=self.source, energy_j=self.energy_j)

    @property
    def status_warning(self) -> str | None:
        """A line for `show`, `export`, `report`: the run's figures are not final, and why."""
        if self.status == ABANDONED:
            last = ("no power samples were stored" if self.last_sample_t is None
                    else f"its last power sample is at t={self.last_sample_t:g} s")
            return (f"warning: run {self.id} was abandoned: its process died while it ran (killed, or the board "
                    f"lost power); its figures are incomplete ({last})")
        if self.status == "running":
            return (f"warning: run {self.id} is still running (or its process died and nothing has noticed yet); "
                    f"its figures are not final")
        return None

    @property
    def metric_provenance(self) -> MetricProvenance:
        """Whether its eval metrics mean anything (pretrained weights on real data)."""
        return MetricProvenance(self.weights, self.synthetic)

    @property
    def model(self) -> str | None:
        return self.workload.model if self.workload else None

    @property
    def task(self) -> str | None:
        return self.workload.task if self.workload else None

    def to_json(self) -> JsonObject:
        # Without `simulated`: the notes say it, and what `runs`, `show` and `export` print stays as it was.
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "simulated"}
        out.update(
            source=self.source.value,
            setting=None if self.setting is None else dict(self.setting),
            rail_energy_j=dict(self.rail_energy_j),
            metrics=dict(self.metrics),
            device=self.device.to_json() if self.device else None,
            workload=self.workload.to_json() if self.workload else None,
            metric_provenance=self.metric_provenance.to_json(),
        )
        return out


@dataclass(frozen=True)
class SweepRecord:
    id: int
    device_id: int
    workload_id: int
    space: Mapping[str, object]
    warmup_steps: int
    steps: int
    repeats: int
    status: RunStatus
    source: Source
    created_at: str
    finished_at: str | None = None
    label: str | None = None
    planned: int | None = None  # the points it plans (settings x repeats); None: not recorded (before schema v11)

    @property
    def resumable(self) -> bool:
        """Whether running its sweep command again carries on from its stored points (any end but finished)."""
        return self.status in ("failed", "cancelled", ABANDONED)

    def status_note(self, done: int) -> str | None:
        """A line for `show sN` and `sweeps`: how it ended, when it did not finish, and that it resumes."""
        if not self.resumable:
            return None
        how = {ABANDONED: "was abandoned: its process died while it ran (killed, or the board lost power)",
               "failed": "failed", "cancelled": "was cancelled"}[self.status]
        of = f" of {self.planned}" if self.planned else ""
        return (f"sweep s{self.id} {how}; its {done}{of} stored point(s) are kept: running the same sweep command "
                f"again (same workload, space, steps and repeats) resumes it")


@dataclass(frozen=True)
class SweepPoint:
    sweep_id: int
    setting: Mapping[str, object]
    repeat: int
    time_s: float | None  # None: energy only, the time was not recorded (imported; schema v8)
    energy_j: float  # total over the sweep's rails
    samples: int
    rail_energy_j: Mapping[str, float] = field(default_factory=dict)
    avg_power_w: float | None = None  # None: energy_j / time_s (None when the time is too)
    source: Source | None = None  # None: the sweep's
    id: int | None = None
    created_at: str | None = None
    device_id: int | None = None  # the board that measured it; None: the sweep's device (schema v10)

    @property
    def key(self) -> tuple[str, int]:
        """What `completed_points` holds for this point."""
        return setting_key(self.setting), self.repeat


@dataclass(frozen=True)
class ComparisonRecord:
    run_id: int
    baseline_run_id: int
    saving_pct: float  # energy saved against the baseline (negative: it cost more)
    slowdown_pct: float  # time added against the baseline (negative: faster)
    source: Source
    rails: str | None = None
    id: int | None = None
    created_at: str | None = None

    def to_json(self) -> JsonObject:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["source"] = self.source.value
        return out


# --------------------------------------------------------------------------- rows -> records
def sample_from_row(row: sqlite3.Row) -> PowerSample:
    return PowerSample(float(row[0]), json.loads(row[1]))


def device_from_row(r: sqlite3.Row, prefix: str = "") -> DeviceRecord:
    return DeviceRecord(board=r[prefix + "board"], module=r[prefix + "module"], l4t=r[prefix + "l4t"],
                        jetpack=r[prefix + "jetpack"], profile=r[prefix + "profile"],
                        is_twin=bool(r[prefix + "is_twin"]),
                        serial=r[prefix + "serial"] if prefix + "serial" in r.keys() else None)


def parse_status(value: object) -> RunStatus:
    return parse_choice(value, STORED_STATUSES, "status", "--status")


def workload_from_row(r: sqlite3.Row, prefix: str = "") -> WorkloadRecord:
    row = f"workload {r[prefix + 'id'] if prefix + 'id' in r.keys() else r['workload_id']}"
    padding = r[prefix + "padding"] if prefix + "padding" in r.keys() else "max_length"
    key = r[prefix + "key"] if prefix + "key" in r.keys() else None
    return WorkloadRecord(
        model=r[prefix + "model"], task=r[prefix + "task"], batch_size=r[prefix + "batch_size"],
        seq_len=r[prefix + "seq_len"], precision=stored_choice(parse_precision, r[prefix + "precision"], row, "precision"),
        mode=stored_choice(parse_mode, r[prefix + "mode"], row, "mode"),
        family=r[prefix + "family"], params=r[prefix + "params"], data_source=r[prefix + "data_source"],
        features=json.loads(r[prefix + "features"]), source=stored_choice(parse_source, r[prefix + "source"], row, "source"),
        lora=_lora_from_text(r[prefix + "lora"]) if prefix + "lora" in r.keys() else None,
        grad_checkpointing=bool(r[prefix + "grad_checkpointing"]) if prefix + "grad_checkpointing" in r.keys()
        else False,
        padding=stored_choice(parse_padding, padding, row, "padding"),
        loop=stored_choice(parse_loop, loop_in_key(key), row, "key") if key is not None else DEFAULT_LOOP,
        config=from_json_text(r[prefix + "config"]) if prefix + "config" in r.keys() else None,
    )


def _lora_from_text(text: str | None) -> LoraSettings | None:
    return None if not text else LoraSettings.from_json(json.loads(text))


def run_from_row(r: sqlite3.Row) -> RunRecord:
    synthetic = r["synthetic"]
    return RunRecord(
        id=r["id"], policy=r["policy"], status=stored_choice(parse_status, r["status"], f"run {r['id']}", "status"),
        source=stored_choice(parse_source, r["source"], f"run {r['id']}", "source"), started_at=r["started_at"],
        device_id=r["device_id"], workload_id=r["workload_id"], objective=r["objective"],
        setting=from_json_text(r["setting"]), seed=r["seed"], steps=r["steps"], samples=r["samples"],
        finished_at=r["finished_at"], wall_s=r["wall_s"], time_s=r["time_s"], energy_j=r["energy_j"],
        rail_energy_j=_numbers(from_json_text(r["rail_energy_j"])), rails=r["rails"], avg_power_w=r["avg_power_w"],
        samples_per_s=r["samples_per_s"], joules_per_sample=r["joules_per_sample"],
        metrics=from_json_text(r["metrics"]) or {}, weights=r["weights"],
        synthetic=None if synthetic is None else bool(synthetic), label=r["label"], notes=r["notes"],
        error=r["error"],
        device=device_from_row(r, "d_") if r["device_id"] is not None else None,
        workload=workload_from_row(r, "w_") if r["workload_id"] is not None else None,
        simulated=bool(r["simulated"]),
        data_source=r["data_source"] if "data_source" in r.keys() else None,
        last_sample_t=r["last_sample_t"] if "last_sample_t" in r.keys() else None,
    )
