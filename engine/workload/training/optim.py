"""What a run trains and how: the parameter mode (full, BitFit, head, LoRA), gradient
checkpointing, AdamW with no decay on biases and norms, the linear warm-up schedule, and
the torch device and precision a host can actually use."""

from __future__ import annotations

import contextlib
import logging

import torch

from engine.core.constants import Mode, Precision
from engine.core.errors import ConfigError
from engine.workload.lora import LoraSettings, is_peft_model, wrap_lora


log = logging.getLogger(__name__)

# Modules that form the task head: trained in BitFit as well (transformers' names).
HEAD_NAMES = ("classifier", "score", "pre_classifier", "qa_outputs", "head")


def head_module_names(model: torch.nn.Module) -> tuple[str, ...]:
    """The model's top-level modules that form the classification head (freshly initialised:
    they train in every mode). DeBERTa's context pooler sits beside its classifier."""
    return tuple(name for name, _ in model.named_children() if name in (*HEAD_NAMES, "pooler"))


def apply_mode(model: torch.nn.Module, mode: Mode) -> int:
    """Set requires_grad for `mode`; returns the number of trainable parameters.

    BitFit trains the bias terms only, plus the task head (standard practice: a
    freshly initialised head must learn); `head` trains the task head alone on a frozen
    backbone; `lora` expects the model wrapped by peft (`prepare_model` does it) and keeps
    what peft trains (the adapters and the head).
    """
    if mode == "lora":
        if not is_peft_model(model):
            raise ConfigError(f"mode 'lora' needs the model wrapped with LoRA adapters ({type(model).__name__} is not)",
                              "prepare it with engine.workload.training.optim.prepare_model(model, 'lora')")
        return _trainable(model)
    if mode == "head":
        heads = set(head_module_names(model))
        if not heads:
            raise ConfigError(
                f"found no task head in {type(model).__name__} to train on its frozen backbone",
                f"name the head module one of {', '.join(HEAD_NAMES)}, or train in mode 'full' or 'lora'")
        for name, param in model.named_parameters():
            param.requires_grad_(name.split(".")[0] in heads)
        return _trainable(model)
    head_found = False
    for name, param in model.named_parameters():
        if mode == "full":
            param.requires_grad_(True)
            continue
        in_head = name.split(".")[0] in HEAD_NAMES
        head_found |= in_head
        param.requires_grad_(in_head or name.endswith("bias"))
    if mode == "bitfit" and not head_found:
        raise ConfigError(
            f"BitFit found no task head in {type(model).__name__}",
            f"name the head module one of {', '.join(HEAD_NAMES)}, or train in mode 'full'",
        )
    return _trainable(model)


def _trainable(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def model_params(model: torch.nn.Module) -> int:
    """The parameters of the model itself: a peft wrapper's adapters and its trained copy of the
    head are not counted (they are the trainable ones)."""
    if not is_peft_model(model):
        return sum(p.numel() for p in model.parameters())
    return sum(p.numel() for name, p in model.named_parameters()
               if "lora_" not in name and ".modules_to_save." not in name)


def prepare_model(model: torch.nn.Module, mode: Mode, *, lora: LoraSettings | None = None,
                  checkpointing: bool = False, seed: int = 0) -> tuple[torch.nn.Module, int]:
    """The model as `mode` trains it, and its trainable parameter count: LoRA wraps it with
    peft's adapters (`lora`: the settings, default LoraSettings(); initialised from `seed`, so
    that a run is repeatable); `checkpointing` turns on gradient checkpointing (activations
    recomputed in the backward pass)."""
    if mode == "lora" and not is_peft_model(model):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = wrap_lora(model, lora or LoraSettings(), modules_to_save=head_module_names(model))
    trainable = apply_mode(model, mode)
    if checkpointing:
        enable_checkpointing(model)
    return model, trainable


def enable_checkpointing(model: torch.nn.Module) -> None:
    """Gradient (activation) checkpointing, non-reentrant, on a transformers model."""
    from transformers import PreTrainedModel

    base = model.get_base_model() if is_peft_model(model) else model
    if not isinstance(base, PreTrainedModel) or not base.supports_gradient_checkpointing:
        raise ConfigError(f"{type(base).__name__} does not support gradient checkpointing",
                          "drop --grad-checkpointing (or use a smaller batch or length to fit memory)")
    config = base.config
    if getattr(config, "use_cache", False):  # a training step keeps no KV cache; transformers would warn
        config.use_cache = False
    enable = getattr(base, "activation_checkpointing_enable", None)  # transformers >= 5.2x
    if enable is not None:
        enable(activation_checkpointing_kwargs={"use_reentrant": False})
    else:
        base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


def is_checkpointing(model: torch.nn.Module) -> bool:
    """Whether any layer of `model` recomputes its activations in the backward pass."""
    return any(getattr(m, "gradient_checkpointing", False) is True for m in model.modules())


def _no_decay(model: torch.nn.Module) -> set[int]:
    """Biases and normalisation weights take no weight decay."""
    skip: set[int] = set()
    for module in model.modules():
        is_norm = isinstance(module, (torch.nn.LayerNorm, torch.nn.GroupNorm)) or \
            "LayerNorm" in type(module).__name__ or "RMSNorm" in type(module).__name__
        for pname, param in module.named_parameters(recurse=False):
            if is_norm or pname == "bias":
                skip.add(id(param))
    return skip


def build_optimizer(model: torch.nn.Module, device: torch.device, *, learning_rate: float,
                    weight_decay: float) -> torch.optim.Optimizer:
    """AdamW over the trainable parameters, biases and norms without decay; the two figures it takes
    from the trainer's TrainConfig (not the config itself: the trainer imports this module)."""
    skip = _no_decay(model)
    trainable = [p for p in model.parameters() if p.requires_grad]
    if not trainable:
        raise ConfigError("the model has no trainable parameters", "train in mode 'full', 'lora' or 'head'")
    groups = [
        {"params": [p for p in trainable if id(p) not in skip], "weight_decay": weight_decay},
        {"params": [p for p in trainable if id(p) in skip], "weight_decay": 0.0},
    ]
    groups = [g for g in groups if g["params"]]
    if device.type == "cpu":
        # The fused CPU kernel (torch >= 2.4) is several times faster than the loop.
        with contextlib.suppress(RuntimeError, TypeError, ValueError):
            return torch.optim.AdamW(groups, lr=learning_rate, fused=True)
    # On CUDA keep torch's default (foreach): it is what the step tracer models.
    return torch.optim.AdamW(groups, lr=learning_rate)


class LinearWarmup:
    """Linear warm-up to the peak rate, then linear decay to zero (transformers' schedule).

    A class rather than a closure so that the scheduler's state is picklable.
    """

    def __init__(self, warmup_steps: int, total_steps: int) -> None:
        self.warmup_steps = warmup_steps
        self.total_steps = total_steps

    def __call__(self, step: int) -> float:
        if step < self.warmup_steps:
            return step / max(1, self.warmup_steps)
        return max(0.0, (self.total_steps - step) / max(1, self.total_steps - self.warmup_steps))


def resolve_device(requested: str | None) -> torch.device:
    """The torch device to train on: `requested` (e.g. "cpu", "cuda", "cuda:1") once checked
    to exist on this host, else CUDA when available, else the CPU."""
    if not requested:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(requested)
    except (RuntimeError, ValueError, TypeError):
        raise ConfigError(f"--device {requested!r} is not a torch device",
                          f"use cpu, or cuda (cuda:N for one GPU){_cuda_hint()}") from None
    if device.type == "cpu":
        return device
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ConfigError(f"--device {requested} asks for CUDA, but this PyTorch sees no CUDA GPU",
                              "use --device cpu (or leave --device out), or install a CUDA build of PyTorch "
                              "(on a Jetson: NVIDIA's JetPack wheel)")
        if device.index is not None and device.index >= count:
            raise ConfigError(f"--device {requested}: this host has {count} CUDA GPU(s)",
                              f"use cuda:0 to cuda:{count - 1}, or leave --device out")
        return device
    backend = getattr(torch, device.type, None)
    if device.type == "mps":
        backend = getattr(torch.backends, "mps", None)
    available = getattr(backend, "is_available", None)
    if not (callable(available) and available()):
        raise ConfigError(f"--device {requested}: no {device.type} device is available on this host",
                          f"use --device cpu (or leave --device out){_cuda_hint()}")
    return device


def _cuda_hint() -> str:
    return "; CUDA is available here" if torch.cuda.is_available() else ""


def resolve_precision(requested: Precision, device: torch.device) -> Precision:
    """The precision a run on `device` can use: 16-bit autocast needs CUDA."""
    if requested == "fp32":
        return "fp32"
    if device.type != "cuda":
        log.warning("%s needs CUDA; training in fp32 on %s instead", requested, device)
        return "fp32"
    if requested == "bf16" and not torch.cuda.is_bf16_supported():
        log.warning("this GPU has no bf16; training in fp16 instead")
        return "fp16"
    return requested
