"""The selector's inputs: what a workload is, what a setting is, as one row of numbers.

A row is a workload joined with a DVFS setting (GPU, CPU and EMC clocks, each with a
governor flag and a nominal value, the nvpmodel mode and jetson_clocks).

The workload columns say what a training step costs and its shape, never which
architecture it is: the step trace's FLOPs, DRAM bytes, kernel launches, arithmetic
intensity and host cycles (in total, per sample, per kernel, and each op group's share:
matmul, attention, elementwise, ...), the training loop's serial host work (a Hugging Face
Trainer-style loop's per-step Python and collation, which the GPU waits for; none for the lean
loop: engine/workload/trace/loop.py), the parameters and the trainable fraction of them
(full fine-tuning 1, BitFit, a frozen backbone and LoRA far less: no one-hot per mode),
batch, length and precision. So a family the selector never saw (a new architecture) is
described in the same terms as the ones it learnt from; bench/bench_selector.py grades it
by leaving whole families out of training.

A domain left to its governor has no clock of its own; it is encoded as a flag plus a
nominal value, the highest clock the mode allows there (what the governor may reach),
so that a model can still compare it to pinned clocks.

The column list is the feature schema: a saved selector records it, and loading refuses
a file whose schema differs (FEATURE_SCHEMA_VERSION changes whenever the columns or
their meaning do).
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from engine.core.constants import Mode, Padding, Precision
from engine.device.baseline import swap_uncapped
from engine.device.setting import DvfsSetting
from engine.core.errors import ConfigError
from engine.core.jsontypes import JsonObject, as_int, as_list, as_object
from engine.workload.lora import LoraSettings
from engine.workload.resolve import Workload
from engine.workload.spec import WorkloadSpec
from engine.workload.trace.loop import DEFAULT_LOOP, Loop, loop_serial_cycles
from engine.workload.zoo import FAMILIES as ZOO_FAMILIES
from engine.core.trace import OP_KINDS, OpCost, StepTrace

if TYPE_CHECKING:
    from engine.device.twin.profile import TwinProfile

log = logging.getLogger(__name__)

# 2: architecture-agnostic columns (version 1 had the family, layers, hidden size, heads, a
# BitFit flag and the task's head; a selector saved with them is refused: retrain it).
# 3: the training loop's serial host work (serial_share, loop_host_cycles_per_sample): version 2
# could not tell the hf loop from the lean one.
# 4: gpu_share_ref, the GPU's share of a step at reference rates: leaving a family out, the trees could
# not tell a small launch-bound step from a GPU-bound one by the totals' logs alone.
# 5: module columns (SMs, the GPU's and CPU's top clocks, CPU cores, memory bandwidth and size, power limit)
# and settings that mean the same on every module: `uncapped_mode` (the board's MAXN or MAXN_SUPER, whatever
# its id) replaces the mode id, whose meaning differs per module (mode 0 is MAXN on an AGX Orin, 15W on an
# Orin Nano 8GB); the clocks' share of their module's top clock.
FEATURE_SCHEMA_VERSION = 5
# The reference device of gpu_share_ref: round figures of the AGX Orin class (FP32 peak at ~60% achieved,
# tensor cores 4x for half precision, DRAM bandwidth, a kernel's launch gap, the host's cycles per launch
# and clock). A reference, not a board: the module's own figures enter as module columns.
REF_FLOPS, REF_TENSOR, REF_BYTES_PER_S, REF_KERNEL_S = 5e12 * 0.6, 4.0, 150e9, 5e-6
REF_LAUNCH_CYCLES, REF_CPU_HZ = 40000.0, 2.2e9
REF_SMS, REF_GPU_GHZ = 16, 1.3  # the reference's FP32 rate is that of 16 SMs at 1.3 GHz (AGX Orin 64GB)
FAMILIES = ZOO_FAMILIES

# Workload columns. `log` marks scale features: pipelines that care about scale take their log.
WORKLOAD_COLUMNS: tuple[tuple[str, bool], ...] = (
    ("params", True),
    ("trainable_params", True),
    ("trainable_fraction", True),  # 1 for full fine-tuning; BitFit, head-only and LoRA train a sliver
    ("seq_len", True),
    ("batch_size", True),
    ("precision_half", False),  # fp16 or bf16: tensor cores, half the bytes of a value
    ("precision_bf16", False),
    ("flops", True),
    ("bytes", True),
    ("kernels", True),
    ("arithmetic_intensity", True),
    ("host_cycles", True),
    ("flops_per_sample", True),
    ("bytes_per_sample", True),
    ("flops_per_kernel", True),  # work per launch: how busy the GPU is against the host issuing it
    ("bytes_per_kernel", True),
    ("host_cycles_per_sample", True),
    # The loop's serial host work (the trace's serial_cycles, 0 for the lean loop), which the GPU waits
    # for: its share of the step's host cycles, and those cycles with it per sample (positive either way,
    # so its log is defined for both loops).
    ("serial_share", False),
    ("loop_host_cycles_per_sample", True),
    ("gpu_share_ref", False),
    # How the step's work splits between op groups (engine.core.trace.OP_KINDS): matrix work may
    # run on tensor cores, the rest is bound by bandwidth or by launches.
    *((f"{kind}_{what}_share", False) for kind in OP_KINDS for what in ("flops", "bytes", "kernels")),
)
SETTING_COLUMNS: tuple[tuple[str, bool], ...] = (
    ("gpu_governor", False),
    ("gpu_ghz", True),
    ("cpu_governor", False),
    ("cpu_ghz", True),
    ("emc_governor", False),
    ("emc_ghz", True),
    ("uncapped_mode", False),  # the board's uncapped mode (MAXN, MAXN_SUPER), not its id: a capped mode's caps
    ("jetson_clocks", False),  # enter the nominal clocks
    ("gpu_of_top", False),  # the nominal clocks as shares of the module's top step
    ("emc_of_top", False),
)
# The module's columns (numbers, not one-hot, so a module the selector never saw is described in the same
# terms): from the device profile of the board's module (DeviceIdentity.module_profile on a board).
MODULE_COLUMNS: tuple[tuple[str, bool], ...] = (
    ("module_sms", True),
    ("module_gpu_top_ghz", True),
    ("module_bandwidth_gbps", True),
    ("module_memory_gb", True),
    ("module_cpu_cores", True),
    ("module_cpu_top_ghz", True),
    ("module_power_limit_w", True),
)
_ALL_COLUMNS = WORKLOAD_COLUMNS + SETTING_COLUMNS + MODULE_COLUMNS
FEATURE_COLUMNS: tuple[str, ...] = tuple(n for n, _ in _ALL_COLUMNS)
LOG_COLUMNS: tuple[int, ...] = tuple(i for i, (_, lg) in enumerate(_ALL_COLUMNS) if lg)
MODULE_COLUMN_NAMES: tuple[str, ...] = tuple(n for n, _ in MODULE_COLUMNS)
N_WORKLOAD_COLUMNS = len(WORKLOAD_COLUMNS)
_ROOFLINE_INPUTS = ("flops", "bytes", "precision_half", "gpu_ghz", "emc_of_top", "module_sms", "module_bandwidth_gbps")


def log_columns(x: np.ndarray, columns: Sequence[int] = LOG_COLUMNS) -> np.ndarray:
    """Natural log of the scale columns (clipped at 1e-12; they are positive by construction)."""
    out = np.array(x, dtype=float, copy=True)
    cols = [c for c in columns if c < out.shape[1]]
    out[:, cols] = np.log(np.maximum(out[:, cols], 1e-12))
    return out


def roofline_column(x: np.ndarray) -> np.ndarray:
    """Log of a step's compute time over its memory time at each row's GPU and EMC clocks on its module:
    the reference's FP32 rate per SM and GHz (tensor cores for half precision) times the module's SMs
    and the row's GPU clock, against the module's bandwidth at the row's share of the top EMC step.
    Where a step turns from compute- to memory-bound moves with both clocks and the module; trees on the
    raw columns learn that product only from the families they saw."""
    col = {name: np.asarray(x[:, FEATURE_COLUMNS.index(name)], dtype=float) for name in _ROOFLINE_INPUTS}
    rate = REF_FLOPS / (REF_SMS * REF_GPU_GHZ) * np.maximum(col["module_sms"], 1.0) * col["gpu_ghz"]
    rate = rate * np.where(col["precision_half"] > 0, REF_TENSOR, 1.0)
    bandwidth = col["module_bandwidth_gbps"] * 1e9 * col["emc_of_top"]
    compute = col["flops"] / np.maximum(rate, 1e-30)
    memory = col["bytes"] / np.maximum(bandwidth, 1e-30)
    return np.log(np.maximum(compute, 1e-30) / np.maximum(memory, 1e-30))


def log_roofline_columns(x: np.ndarray) -> np.ndarray:
    """log_columns, then the roofline column (the hist-gb-roofline candidate's second member's input)."""
    return np.column_stack([log_columns(x), roofline_column(x)])


def workload_part(x: np.ndarray, source_column: bool) -> np.ndarray:
    """The workload columns of feature rows, and every column after the schema's (the source column,
    when present)."""
    cols = list(range(N_WORKLOAD_COLUMNS)) + list(range(len(FEATURE_COLUMNS), x.shape[1]))
    return x[:, cols]


def feature_schema() -> dict[str, Any]:
    """What a saved selector records, and what loading compares against."""
    return {
        "version": FEATURE_SCHEMA_VERSION,
        "columns": list(FEATURE_COLUMNS),
        "log_columns": [FEATURE_COLUMNS[i] for i in LOG_COLUMNS],
        "workload_columns": N_WORKLOAD_COLUMNS,
    }


@dataclass(frozen=True)
class WorkloadFeatures:
    """One fine-tuning workload as the selector sees it (trace totals are twin estimates
    from a meta-tensor trace, not measurements). The family, layers, hidden size, heads and
    task describe the workload (and group it: leave-one-family-out); they are no columns."""

    model: str
    task: str
    family: str  # one of engine.workload.zoo.FAMILIES
    params: int
    layers: int
    hidden: int
    heads: int
    seq_len: int
    batch_size: int
    precision: Precision
    flops: float
    bytes: float
    kernels: int
    arithmetic_intensity: float
    host_cycles: float
    trainable_params: int = 0  # 0: same as params
    mode: Mode = "full"
    task_num_labels: int = 2
    task_regression: bool = False
    ops: tuple[OpCost, ...] = ()  # the trace's op groups (a record written before them has none)
    # What else tells two workloads apart in the store's key (no feature columns):
    padding: Padding = "max_length"
    lora: LoraSettings | None = None  # mode "lora": the adapters' settings (None: the defaults)
    grad_checkpointing: bool = False
    loop: Loop = DEFAULT_LOOP  # the training loop (engine/workload/trace/loop.py); features from before it: lean
    # The trace's serial_cycles: the loop's serial host work per step (a feature column). None: a
    # record written before it, whose trace carried the loop's work at its shape (loop_serial_cycles).
    serial_cycles: float | None = None

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ConfigError(f"workload family {self.family!r} is not one the selector knows",
                              f"use a model of family {' or '.join(FAMILIES)}")
        for name in ("params", "layers", "hidden", "heads", "seq_len", "batch_size"):
            if int(getattr(self, name)) <= 0:
                raise ConfigError(f"workload {self.model}: {name} must be positive, got {getattr(self, name)!r}",
                                  "describe the workload with describe_workload()")
        if not self.trainable_params:
            object.__setattr__(self, "trainable_params", int(self.params))
        object.__setattr__(self, "ops", tuple(self.ops))
        if self.serial_cycles is None:
            object.__setattr__(self, "serial_cycles",
                               loop_serial_cycles(self.loop, int(self.batch_size), int(self.seq_len)))
        elif not float(self.serial_cycles) >= 0.0:  # NaN fails too
            raise ConfigError(f"workload {self.model}: serial_cycles must be 0 or more, got {self.serial_cycles!r}",
                              "describe the workload with describe_workload()")

    @property
    def spec(self) -> WorkloadSpec:
        """The workload these features describe (named: the model as the store names it)."""
        return WorkloadSpec(model=self.model, name=self.model, task=self.task, batch_size=self.batch_size,
                            seq_len=self.seq_len, precision=self.precision, mode=self.mode, lora=self.lora,
                            grad_checkpointing=self.grad_checkpointing, padding=self.padding, loop=self.loop)

    @property
    def key(self) -> str:
        """The store's workload key (WorkloadSpec.key)."""
        return self.spec.key

    @property
    def shape_key(self) -> str:
        """The workload without its task or loop. GLUE tasks change only the classification head, so
        tasks of one shape have (nearly) the same costs, and the two loops of one shape the same model
        work: cross-validation keeps them together (a fold never learns a shape from its other loop)."""
        return f"{self.model}|{self.batch_size}|{self.seq_len}|{self.precision}|{self.mode}"

    def op_shares(self) -> list[float]:
        """Each op group's share of the step's FLOPs, bytes and kernels, in WORKLOAD_COLUMNS order."""
        if not self.ops:
            raise ConfigError(f"workload {self.model}: the record holds no op groups of its step trace "
                              "(written by an older slm-dvfs)",
                              "describe the workload again with describe_workload() (or `slm-dvfs select`)")
        totals = {kind: [0.0, 0.0, 0.0] for kind in OP_KINDS}
        for op in self.ops:
            group = totals[op.kind if op.kind in totals else "other"]
            group[0] += op.flops
            group[1] += op.bytes
            group[2] += op.kernels
        sums = [max(sum(g[i] for g in totals.values()), 1e-30) for i in range(3)]
        return [totals[kind][i] / sums[i] for kind in OP_KINDS for i in range(3)]

    def loop_host(self) -> tuple[float, float]:
        """The loop's serial host work as columns: its share of the step's host cycles, and the
        step's host cycles with it per sample (serial_share, loop_host_cycles_per_sample)."""
        serial = float(self.serial_cycles or 0.0)
        total = float(self.host_cycles) + serial
        return (serial / total if total > 0 else 0.0), total / self.batch_size

    def gpu_share_ref(self) -> float:
        """The GPU's share of a step's time on a reference device: no device's figure, a workload-only
        mix of the trace's totals that tells a GPU-bound step from one waiting on the host."""
        peak = REF_FLOPS * (REF_TENSOR if self.precision in ("fp16", "bf16") else 1.0)
        gpu = float(self.flops) / peak + float(self.bytes) / REF_BYTES_PER_S + self.kernels * REF_KERNEL_S
        host = (self.kernels * REF_LAUNCH_CYCLES + float(self.host_cycles) + float(self.serial_cycles or 0.0)) / REF_CPU_HZ
        return gpu / (gpu + host) if gpu + host > 0 else 0.0

    def row(self) -> list[float]:
        """The workload columns, in WORKLOAD_COLUMNS order."""
        return [
            float(self.params),
            float(self.trainable_params),
            float(self.trainable_params) / float(self.params),
            float(self.seq_len),
            float(self.batch_size),
            float(self.precision in ("fp16", "bf16")),
            float(self.precision == "bf16"),
            float(self.flops),
            float(self.bytes),
            float(self.kernels),
            float(self.arithmetic_intensity),
            float(self.host_cycles),
            float(self.flops) / self.batch_size,
            float(self.bytes) / self.batch_size,
            float(self.flops) / max(self.kernels, 1),
            float(self.bytes) / max(self.kernels, 1),
            float(self.host_cycles) / self.batch_size,
            *self.loop_host(),
            self.gpu_share_ref(),
            *self.op_shares(),
        ]

    def to_json(self) -> JsonObject:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "WorkloadFeatures":
        names = set(cls.__dataclass_fields__)
        unknown = set(data) - names
        if unknown:
            raise ConfigError(f"unknown workload feature(s) {', '.join(sorted(unknown))}",
                              "the record was written by a newer slm-dvfs")
        fields = dict(data)
        fields["ops"] = tuple(op if isinstance(op, OpCost) else OpCost.from_json(op) for op in fields.get("ops", ()))
        lora = fields.get("lora")
        if lora is not None and not isinstance(lora, LoraSettings):
            fields["lora"] = LoraSettings.from_json(lora)
        return cls(**fields)


def features_of(workload: Workload) -> WorkloadFeatures:
    """The selector's features of a resolved workload: its step trace (an average step with dynamic
    padding) and its model's shape, from its config."""
    from engine.workload.glue import get_task
    from engine.workload.zoo import dims

    trace, glue = workload.trace, get_task(workload.task)
    # the config as resolved; a workload built by hand from a trace has none: its model's, by name
    shape = dims(workload.config if workload.config is not None else workload.spec.resolved_model().config)
    return WorkloadFeatures(
        model=workload.model, task=glue.name, family=workload.family, params=int(workload.total_params),
        layers=int(shape["num_hidden_layers"]), hidden=int(shape["hidden_size"]),
        heads=int(shape["num_attention_heads"]), seq_len=trace.seq_len, batch_size=trace.batch_size,
        precision=trace.precision, flops=trace.flops, bytes=trace.bytes, kernels=trace.kernels,
        arithmetic_intensity=trace.arithmetic_intensity, host_cycles=trace.host_cycles,
        trainable_params=int(trace.params or workload.total_params), mode=workload.mode,
        task_num_labels=glue.num_labels, task_regression=glue.is_regression, ops=trace.ops,
        padding=workload.padding, lora=workload.lora, grad_checkpointing=workload.grad_checkpointing,
        loop=workload.loop, serial_cycles=trace.serial_cycles,
    )


def describe_workload(model: str, task: str, *, batch_size: int | None = None, seq_len: int | None = None,
                      precision: Precision | None = None, mode: Mode = "full",
                      config: Mapping[str, Any] | None = None, lora: LoraSettings | None = None,
                      grad_checkpointing: bool = False,
                      padding: Padding = "max_length",
                      loop: Loop = DEFAULT_LOOP, mem_total_bytes: int | None = None) -> tuple[WorkloadFeatures, StepTrace]:
    """Features and step trace of fine-tuning `model` on `task`, with no data and no weights: the
    workload resolved as a run resolves it (engine.workload.resolve.resolve_workload: traces are cached,
    and a cached one is found without building the model). `model` is a zoo name, hub id, checkpoint
    folder or config.json; or any name when `config` gives the architecture. Batch, length and
    precision default to the zoo entry's (else 32, 128, fp32). With `padding="dynamic"` the trace is an
    average step (StepMix.mean_trace) over the lengths the task's batches pad to; "max_length" (the
    default here, what the shipped selector was trained on) traces every step at `seq_len`. The loop is
    a WorkloadSpec's (lean unless given: the twin zoo and `select` name theirs). `mem_total_bytes`: the
    MemTotal of the board it must fit (None: the AGX Orin 64GB's)."""
    from engine.workload.resolve import resolve_workload

    workload = resolve_workload(WorkloadSpec(
        model=model, task=task, batch_size=batch_size, seq_len=seq_len, precision=precision, mode=mode,
        lora=lora, grad_checkpointing=grad_checkpointing, padding=padding, loop=loop, config=config),
        mem_total_bytes=mem_total_bytes)
    return features_of(workload), workload.trace


# --------------------------------------------------------------------------- settings


@dataclass(frozen=True)
class SettingEncoder:
    """Turns a DvfsSetting into numbers, against one module's clock tables, mode caps and facts.

    Settings are in the selector's terms: mode 0 is the board's uncapped mode (MAXN, MAXN_SUPER),
    whatever its id on the board (`to_selector` swaps the two ids, `to_board` swaps them back), so
    engine.device.setting.MAXN is every module's baseline and the settings of two modules compare."""

    gpu_max_hz: int
    cpu_max_hz: int
    emc_max_hz: int
    mode_caps: Mapping[int, tuple[int | None, int | None, int | None]] = field(default_factory=dict)  # gpu, cpu, emc
    profile: str | None = None
    # The module (schema 5): its name, its uncapped mode's id on the board, and its module columns.
    module: str | None = None
    uncapped_id: int = 0
    sms: int = 0
    bandwidth_gbps: float = 0.0
    memory_gb: float = 0.0
    cpu_cores: int = 0
    power_limit_w: float = 0.0

    @classmethod
    def from_profile(cls, profile: TwinProfile) -> "SettingEncoder":
        """From a device profile (its tables, nvpmodel modes and module facts): the module the data came
        from, or the one a choice is made for. Mode caps are keyed in the selector's terms."""
        from engine.device.baseline import uncapped_mode

        base = int(uncapped_mode(profile.modes).id)
        caps = {swap_uncapped(int(m.id), base): (m.gpu_max_hz, m.cpu_max_hz, m.emc_max_hz) for m in profile.modes}
        facts = profile.module
        emc_top = int(max(profile.emc.table_hz))
        bandwidth = (facts.memory_bandwidth_gbps if facts is not None and facts.memory_bandwidth_gbps
                     else profile.emc.bytes_per_cycle * emc_top / 1e9)  # the bus's peak where the sheet is not given
        return cls(int(max(profile.gpu.table_hz)), int(max(profile.cpu.table_hz)), emc_top, caps, str(profile.name),
                   module=profile.identity.module, uncapped_id=base, sms=int(profile.gpu.sms),
                   bandwidth_gbps=float(bandwidth), memory_gb=float(profile.memory_total_mb or 0.0) / 1024.0,
                   cpu_cores=int(profile.cpu.cores), power_limit_w=float(profile.module_power_limit_mw) / 1000.0)

    def to_selector(self, setting: DvfsSetting) -> DvfsSetting:
        """A board's setting in the selector's terms (its uncapped mode as mode 0)."""
        mode = setting.nvpmodel
        return setting if mode is None or not self.uncapped_id else replace(setting, nvpmodel=swap_uncapped(mode, self.uncapped_id))

    def to_board(self, setting: DvfsSetting) -> DvfsSetting:
        """A setting in the selector's terms on this module's board (mode 0 as its uncapped mode's id)."""
        return self.to_selector(setting)  # the swap is its own inverse

    def nominal(self, setting: DvfsSetting) -> tuple[int, int, int]:
        """GPU, CPU, EMC clocks: the pinned value, else the highest clock the mode allows."""
        caps = self.mode_caps.get(setting.nvpmodel if setting.nvpmodel is not None else 0, (None, None, None))
        tops = (self.gpu_max_hz, self.cpu_max_hz, self.emc_max_hz)
        out = []
        for pinned, top, cap in zip((setting.gpu_hz, setting.cpu_hz, setting.emc_hz), tops, caps):
            out.append(pinned if pinned is not None else (top if cap is None else min(top, cap)))
        return out[0], out[1], out[2]

    def module_row(self) -> list[float]:
        """The module columns, in MODULE_COLUMNS order."""
        return [float(self.sms), self.gpu_max_hz / 1e9, self.bandwidth_gbps, self.memory_gb, float(self.cpu_cores),
                self.cpu_max_hz / 1e9, self.power_limit_w]

    def row(self, setting: DvfsSetting) -> list[float]:
        """The setting columns, then the module columns."""
        gpu, cpu, emc = self.nominal(setting)
        return [
            float(setting.gpu_hz is None and not setting.jetson_clocks), gpu / 1e9,
            float(setting.cpu_hz is None and not setting.jetson_clocks), cpu / 1e9,
            float(setting.emc_hz is None and not setting.jetson_clocks), emc / 1e9,
            float((setting.nvpmodel or 0) == 0),
            float(setting.jetson_clocks),
            gpu / self.gpu_max_hz, emc / self.emc_max_hz,
            *self.module_row(),
        ]

    def to_json(self) -> JsonObject:
        return {"gpu_max_hz": self.gpu_max_hz, "cpu_max_hz": self.cpu_max_hz, "emc_max_hz": self.emc_max_hz,
                "mode_caps": {str(k): list(v) for k, v in sorted(self.mode_caps.items())}, "profile": self.profile,
                "module": self.module, "uncapped_id": self.uncapped_id, "sms": self.sms,
                "bandwidth_gbps": self.bandwidth_gbps, "memory_gb": self.memory_gb, "cpu_cores": self.cpu_cores,
                "power_limit_w": self.power_limit_w}

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> "SettingEncoder":
        def hz(v: object) -> int | None:
            return None if v is None else as_int(v)

        caps = {int(k): (hz(c[0]), hz(c[1]), hz(c[2]))
                for k, c in ((k, as_list(v)) for k, v in as_object(data.get("mode_caps") or {}).items())}
        profile, module = data.get("profile"), data.get("module")
        return cls(as_int(data["gpu_max_hz"]), as_int(data["cpu_max_hz"]), as_int(data["emc_max_hz"]), caps,
                   None if profile is None else str(profile), module=None if module is None else str(module),
                   uncapped_id=as_int(data.get("uncapped_id", 0)), sms=as_int(data.get("sms", 0)),
                   bandwidth_gbps=_num(data.get("bandwidth_gbps")), memory_gb=_num(data.get("memory_gb")),
                   cpu_cores=as_int(data.get("cpu_cores", 0)), power_limit_w=_num(data.get("power_limit_w")))


def _num(value: object) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


def feature_matrix(workloads: Sequence[WorkloadFeatures], settings: Sequence[DvfsSetting],
                   encoder: SettingEncoder | Sequence[SettingEncoder]) -> np.ndarray:
    """One row per (workload, setting) pair, in FEATURE_COLUMNS order; `encoder` one module's, or each
    row's own (rows of several modules: each encoded against its own module's tables)."""
    encoders = [encoder] * len(workloads) if isinstance(encoder, SettingEncoder) else list(encoder)
    if len(workloads) != len(settings) or len(encoders) != len(workloads):
        raise ConfigError(f"{len(workloads)} workloads but {len(settings)} settings",
                          "pair every workload with one setting")
    wrows: dict[WorkloadFeatures, list[float]] = {}
    srows: dict[tuple[DvfsSetting, int], list[float]] = {}  # by encoder identity (its caps are a dict)
    out = np.empty((len(workloads), len(FEATURE_COLUMNS)), dtype=float)
    for i, (w, s, enc) in enumerate(zip(workloads, settings, encoders)):
        wr = wrows.get(w)
        if wr is None:
            wr = wrows[w] = w.row()
        sr = srows.get((s, id(enc)))
        if sr is None:
            sr = srows[(s, id(enc))] = enc.row(s)
        out[i, :N_WORKLOAD_COLUMNS] = wr
        out[i, N_WORKLOAD_COLUMNS:] = sr
    return out


def schema_digest(schema: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(schema, sort_keys=True).encode()).hexdigest()[:16]
