"""Peak memory of a fine-tuning step, estimated from the config.json alone (no torch).

    peak = weights + gradients + AdamW state + max(activations + 16-bit weight copies,
           AdamW step scratch) + workspace

- weights: 4 bytes a parameter (fp32 master weights; 16-bit autocast keeps them fp32), the
  LoRA A/B matrices and peft's copy of the head included. Parameters come from `arch.architecture` (exact for the zoo),
  or the caller's exact count (`params=`, e.g. a trace cache's total_params).
- gradients 4, AdamW m and v 8 bytes per trainable parameter: full = all; bitfit = the biases
  and the head; head = the head; lora = the A/B matrices and the head.
- AdamW step scratch: torch's default (foreach) AdamW makes one temporary list the size of the
  trainable parameters (the sqrt of v) while it steps, when the activations are already freed.
- activations, per sample (`activations_per_sample`, bytes a layer keeps for backward, summed
  over layers): the fp32 residual stream at each norm's input, the projections' inputs, Q, K
  and V as attention sees them (transformers repeats grouped-query K/V to every query head on
  CUDA when a padding mask is present, so GQA saves weights, not these), the MLP's saved
  tensors (two of the intermediate width for GELU, one for ReLU, four for a gated MLP or GPT-2's
  tanh GELU written in Python ops), dropout masks (1 byte), plus per sample the attention mask
  and the embeddings/final norm. Attention: the families transformers runs through SDPA
  (memory-efficient kernel on CUDA) keep no length x length scores; those it runs eagerly
  (DeBERTa-v2, Gemma-2: `arch.EAGER_ATTENTION`) keep heads x length^2 softmax outputs (fp32,
  plus the 16-bit copy the next matmul saves under autocast, plus dropout's mask and output).
  16-bit autocast halves what matmuls save; norms and softmax stay fp32.
  Classification has no language-model head, so the vocabulary adds no logits.
- 16-bit weight copies: under autocast each linear layer saves its 16-bit weight for backward
  (2 bytes a linear weight, whether it trains or not, once a graph is being recorded).
- gradient checkpointing keeps each layer's input (the fp32 residual stream) and recomputes one
  layer at a time in backward; `head` mode records no graph in the frozen backbone, so only one
  layer's working set is alive at once.
- workspace: the CUDA context with its kernel images, cuBLAS/cuDNN handles and workspaces and
  the Python process (torch, transformers, the tokenizer, the data): WORKSPACE_BYTES; plus
  FRAGMENTATION of what the caching allocator churns each step (activations, copies, gradients).

It is an estimate, not a measurement: it sums gradients with all activations (the start of
backward), which overstates a little; kernels' own scratch is not modelled.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Literal, Mapping

from engine.core.constants import Mode, Precision
from engine.core.units import format_bytes
from engine.workload.sizing.arch import Architecture, architecture

if TYPE_CHECKING:
    from engine.workload.lora import LoraSettings

GIB = 1024**3
MIB = 1024**2
DEFAULT_BOARD_MEMORY_BYTES = 64 * GIB  # the AGX Orin 64GB's unified LPDDR5, shared by CPU and GPU
# MemTotal L4T reports on the AGX Orin 64GB (tegrastats `RAM 2371/62841MB`, a real board's line
# in the interface spec): the 64 GiB less what firmware carves out before Linux starts.
ORIN_MEMTOTAL_BYTES = 62_841 * MIB
# What L4T, its services and a desktop session hold (an estimate): the idle AGX Orin above uses
# 2.3 GiB (no desktop session open); 3 GiB leaves room for a desktop. Not measured with one open.
OS_RESERVE_BYTES = 3 * GIB
# On a smaller board the OS holds less (fewer page tables and buffers, the same services): idle
# Orin Nano 8GB developer kits show `RAM 848/7620MB` and `RAM 929/7620MB` in tegrastats lines
# published in public repositories (headless). A fifth of MemTotal, at least 1 GiB and at most
# OS_RESERVE_BYTES, leaves such a board that and ~0.5 GiB for a desktop (estimate: not measured
# with one open); every board of 16 GB or more keeps the 3 GiB (sizing.fit.os_reserve_bytes).
OS_RESERVE_SHARE = 0.2
OS_RESERVE_MIN_BYTES = 1 * GIB
DEFAULT_BUDGET_BYTES = ORIN_MEMTOTAL_BYTES - OS_RESERVE_BYTES
# Fixed per-process cost (an assumption; only its CPU part was measured): PyTorch's CUDA
# context with its kernel images (lazy module loading, the default since CUDA 12.2 / JetPack 6,
# loads only the kernels used), cuBLAS/cuDNN handles and workspaces (torch's default cuBLAS
# workspace is 8 x 4 MiB), and the Python process: torch and transformers imported with this
# trainer hold 250 MiB resident on an x86 host with the CPU build of torch (ru_maxrss); the
# CUDA build also maps libtorch_cuda, cuBLAS and cuDNN. On the Orin all of it comes from the
# same unified memory.
WORKSPACE_BYTES = 3 * GIB // 2
# The caching allocator's fragmentation, as a share of what it allocates and frees each step
# (a round figure: PyTorch's allocator typically reserves 5-20 % above what is allocated).
FRAGMENTATION = 0.10
FP32_BYTES = 4


class _Keep(Enum):
    """with_changes' default for lora, where None means something (LoRA's default settings)."""

    KEEP = "keep"


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes a fine-tuning step holds at its peak (estimated), by part, and what it was asked."""

    params: int  # every parameter of the model as trained (LoRA's included)
    trainable: int
    weights: int
    gradients: int
    optimizer: int  # AdamW's m and v
    activations: int  # = activations_per_sample * batch_size
    activations_per_sample: int
    weight_copies: int  # 16-bit copies of the linear weights autocast keeps for backward
    scratch: int  # AdamW step's temporaries (counted only where above activations + copies)
    workspace: int
    batch_size: int = 1
    seq_len: int = 128
    precision: Precision = "fp32"
    mode: Mode = "full"
    checkpointing: bool = False
    lora_rank: int | None = None  # None: not a LoRA run
    exact_params: int | None = None  # the caller's exact count of the model's parameters, if given
    config: Mapping[str, object] = field(default_factory=dict, compare=False, repr=False)
    lora: LoraSettings | None = field(default=None, compare=False, repr=False)  # the LoraSettings used, if any

    @property
    def step_peak(self) -> int:
        """The larger of the forward/backward peak and the optimizer step's scratch."""
        return max(self.activations + self.weight_copies, self.scratch)

    @property
    def total(self) -> int:
        return self.weights + self.gradients + self.optimizer + self.step_peak + self.workspace

    def parts(self) -> tuple[tuple[str, int], ...]:
        """(label, bytes) of each part of the total; "activations" includes autocast's 16-bit
        weight copies, and gives way to the AdamW step's scratch where that is larger."""
        fwd = self.activations + self.weight_copies
        step = ("activations", fwd) if fwd >= self.scratch else ("AdamW step scratch", self.scratch)
        return (("weights", self.weights), ("gradients", self.gradients), ("AdamW state", self.optimizer),
                step, ("workspace", self.workspace))

    def describe(self) -> str:
        """`3.2 GiB (weights 17 MiB, gradients 17 MiB, ...)`: each part with its unit (a small
        model's parts are MiB, which one GiB decimal would show as 0.0)."""
        return f"{self.total / GIB:,.1f} GiB (" + ", ".join(f"{k} {format_bytes(v)}" for k, v in self.parts()) + ")"

    def with_changes(self, *, batch_size: int | None = None, seq_len: int | None = None,
                     precision: Precision | None = None, mode: Mode | None = None, checkpointing: bool | None = None,
                     lora: LoraSettings | None | Literal[_Keep.KEEP] = _Keep.KEEP) -> "MemoryEstimate":
        """The estimate of the same workload with some inputs changed (None, and lora not given: as
        it was; lora=None: LoraSettings() defaults for mode "lora")."""
        return estimate_memory(
            self.config, self.batch_size if batch_size is None else batch_size,
            self.seq_len if seq_len is None else seq_len, self.precision if precision is None else precision,
            self.mode if mode is None else mode, lora=self.lora if lora is _Keep.KEEP else lora,
            checkpointing=self.checkpointing if checkpointing is None else checkpointing, params=self.exact_params)


def estimate_params(config: Mapping[str, object], num_labels: int = 2) -> int:
    """Parameters of the classification model `config` builds (backbone and head)."""
    return architecture(config, num_labels).params


def trainable_params(config: Mapping[str, object], mode: Mode = "full", *, lora: LoraSettings | None = None,
                     params: int | None = None) -> int:
    """Parameters `mode` trains (see the module's doc); `params` is an exact total when known."""
    return _trainable(architecture(config), mode, lora, params)


def estimate_memory(config: Mapping[str, object], batch_size: int, seq_len: int, precision: Precision = "fp32",
                    mode: Mode = "full", *, lora: LoraSettings | None = None, checkpointing: bool = False,
                    params: int | None = None) -> MemoryEstimate:
    """What a training step of `config` at (batch, length) holds at its peak; see the module's doc.
    `lora` applies to mode "lora" (None: LoraSettings() defaults); `params`: the exact count."""
    arch = architecture(config)
    settings = _lora_settings(lora) if mode == "lora" else None
    # LoRA's A/B matrices, and the trainable copy of the head peft keeps beside the original
    # (modules_to_save) - as peft's own count has it.
    extra = arch.lora_params(settings.targets_for(arch.family), settings.rank) + arch.head_params if settings else 0
    total = (int(params) if params else arch.params) + extra
    trained = _trainable(arch, mode, settings, params)
    sixteen = precision != "fp32"
    per_sample = _activations_per_sample(arch, seq_len, sixteen, mode, checkpointing, settings)
    activations = per_sample * batch_size
    graph = mode != "head"  # head: the frozen backbone records no graph
    copies = 2 * (arch.linear_weights + extra) if sixteen and graph else 0
    gradients, scratch = FP32_BYTES * trained, FP32_BYTES * trained
    churn = max(activations + copies, scratch) + gradients
    return MemoryEstimate(
        params=total, trainable=trained, weights=FP32_BYTES * total, gradients=gradients,
        optimizer=2 * FP32_BYTES * trained, activations=activations, activations_per_sample=per_sample,
        weight_copies=copies, scratch=scratch, workspace=WORKSPACE_BYTES + int(FRAGMENTATION * churn),
        batch_size=batch_size, seq_len=seq_len, precision=precision, mode=mode, checkpointing=checkpointing,
        lora_rank=settings.rank if settings else None, exact_params=int(params) if params else None, config=dict(config),
        lora=settings,
    )


def _lora_settings(lora: LoraSettings | None) -> LoraSettings:
    from engine.workload.lora import LoraSettings

    return lora if lora is not None else LoraSettings()


def _trainable(arch: Architecture, mode: Mode, lora: LoraSettings | None, params: int | None) -> int:
    if mode == "full":
        return int(params) if params else arch.params
    if mode == "bitfit":
        return arch.bias_params + arch.head_params
    if mode == "head":
        return arch.head_params
    settings = _lora_settings(lora)
    return arch.lora_params(settings.targets_for(arch.family), settings.rank) + arch.head_params


def _layer_bytes(arch: Architecture, seq_len: int, sixteen: bool) -> int:
    """Bytes one layer keeps for backward, per token."""
    e = 2 if sixteen else FP32_BYTES  # what matmuls save under autocast, else fp32
    h, q, i = arch.hidden, arch.heads * arch.head_dim, arch.intermediate
    mask = 1 if arch.hidden_dropout else 0
    norm = (2 if arch.gated else 1) * FP32_BYTES * h  # RMSNorm in Python ops saves its input and output
    attn = e * h + 3 * e * q + e * q + mask * h  # projections' input, Q K V, context; output dropout
    if arch.eager_attention:
        probs = FP32_BYTES + (2 if sixteen else 0) + (1 + FP32_BYTES if arch.attention_dropout else 0)
        attn += arch.heads * seq_len * probs
    else:
        attn += arch.heads * FP32_BYTES  # the kernel's log-sum-exp
    saved = 4 if arch.gated or arch.activation == "gelu_new" else (1 if arch.activation == "relu" else 2)
    mlp = e * h + saved * e * i + mask * h
    return arch.norms_per_layer * norm + attn + mlp


def _activations_per_sample(arch: Architecture, seq_len: int, sixteen: bool, mode: Mode, checkpointing: bool,
                            lora: LoraSettings | None) -> int:
    e = 2 if sixteen else FP32_BYTES
    h, s = arch.hidden, seq_len
    layer = _layer_bytes(arch, s, sixteen)
    if lora is not None:  # each target: dropout's output and mask, its 16-bit copy, A's output
        for target in arch.lora_targets(lora.targets_for(arch.family)):
            layer += target.n_in * (FP32_BYTES + 1 + (e if sixteen else 0)) + e * lora.rank
    if mode == "head":
        kept = layer  # no graph: one layer's working set at a time
    elif checkpointing:
        kept = arch.layers * FP32_BYTES * h + layer  # each layer's input, one layer recomputed
    else:
        kept = arch.layers * layer
    if arch.embedding_norm:  # the encoders' embedding LayerNorm input and dropout mask
        kept += FP32_BYTES * h + (1 if arch.hidden_dropout else 0) * h
    else:  # decoders: the final norm, the score's input and a logit per position and label
        kept += (2 if arch.gated else 1) * FP32_BYTES * h + e * h + FP32_BYTES * 2
    mask = s * (4 if arch.eager_attention else 1)  # the 4D attention mask (float for eager, bool for SDPA)
    return s * kept + s * mask
