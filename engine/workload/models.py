"""Turn a model spec into a sequence-classification model, offline by default.

A spec is a zoo name, a hub id, a local checkpoint folder, or a config.json alone.
Weights come from the folder or the local Hugging Face cache when present; otherwise
the model is built from its configuration with random weights and says so
(`weights="random"`): time and energy per step stay faithful, accuracy does not.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Mapping, NamedTuple, TypedDict

from engine.core.errors import ConfigError, SlmDvfsError
from engine.core.jsontypes import as_int
from engine.core.text import shown
from engine.core.userinput import check_name, load_json, read_user_file
from engine.workload.sizing import check_config
from engine.workload import zoo
from engine.workload.glue import GlueTask, get_task

if TYPE_CHECKING:  # torch is imported where a model is built: resolving a spec needs none of it
    import torch
    from transformers import PreTrainedModel

log = logging.getLogger(__name__)

# Pythia checkpoints have no pad token; id 1 is "<|padding|>" in the GPT-NeoX tokenizer
# and in the tokenizers we train, and GPTNeoX classification pools the last non-pad token.
PYTHIA_PAD_TOKEN_ID = 1
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json",
                "pytorch_model.bin", "pytorch_model.bin.index.json")
# Keys of a saved config.json that are bookkeeping, not architecture.
_NOT_ARCHITECTURE = ("_name_or_path", "transformers_version", "architectures",
                     "torch_dtype", "dtype", "id2label", "label2id", "num_labels", "problem_type")


def architecture(config: Mapping[str, object]) -> dict[str, object]:
    """A config without its bookkeeping keys: two configs that build the same model are equal here."""
    return {k: v for k, v in config.items() if k not in _NOT_ARCHITECTURE}


@dataclass(frozen=True)
class ModelInfo:
    name: str
    family: str  # one of zoo.FAMILIES
    params: int  # parameters of the built classification model
    weights: str  # "pretrained" | "random"
    origin: str  # "zoo:bert-tiny" | "hub:<id>" | "dir:/path" | "config:/path/config.json"
    config: Mapping[str, object]  # architecture + pad_token_id, num_labels, problem_type
    num_layers: int
    hidden_size: int
    num_heads: int
    vocab_size: int

    @property
    def max_positions(self) -> int:
        return as_int(self.config.get("max_position_embeddings", 512))


class ResolvedModel(NamedTuple):
    """Where a spec points, before anything is built."""

    origin: str  # as ModelInfo.origin
    config: Mapping[str, object]  # config.json contents, including model_type
    family: str
    name: str  # short display name
    weights_from: str | None  # hub id or folder to try for pretrained weights; None: none
    entry: zoo.ZooEntry | None  # the zoo entry, when the spec is (or matches) one


def resolve_model(spec: str, *, allow_download: bool = False) -> ResolvedModel:
    """Find a spec's architecture without building it or touching the network
    (unless allow_download and not HF_HUB_OFFLINE, to fetch a hub id's config.json)."""
    spec = str(spec).strip()
    if not spec:
        raise ConfigError("no model given", "name a zoo model (e.g. bert-tiny), a hub id, "
                                            "a checkpoint folder or a config.json")
    spec = check_name(spec, "model")  # bounded, one printable line: it is quoted back in errors
    path = Path(spec).expanduser()
    try:
        is_file, is_dir = path.is_file(), path.is_dir()
    except OSError as exc:  # a path the kernel refuses to look up (EACCES on a parent, ...)
        raise ConfigError(f"cannot look at {shown(spec)}: {exc.strerror or exc}",
                          "check the path, or give a zoo name or hub id instead") from None
    if is_file:
        config = _read_config(path)
        name = path.stem if path.stem != "config" else (path.resolve().parent.name or "config")
        return ResolvedModel(f"config:{path.resolve()}", config, _family(config, spec),
                             name, None, None)
    if is_dir:
        cfg_path = path / "config.json"
        if not cfg_path.is_file():
            raise ConfigError(
                f"the folder {path} has no config.json",
                "point at a checkpoint folder (config.json and weights, as save_pretrained "
                "writes them), or at a config.json file",
            )
        config = _read_config(cfg_path)
        return ResolvedModel(f"dir:{path.resolve()}", config, _family(config, spec),
                             path.resolve().name, str(path.resolve()), None)
    if spec.endswith(".json") or spec.startswith((".", "/", "~")):
        raise ConfigError(f"no such file or folder: {shown(spec)}",
                          "check the path, or give a zoo name or hub id instead")
    try:
        entry = zoo.get_entry(spec)
    except ConfigError as not_in_zoo:
        by_hub_id = zoo.find_by_hub_id(spec)
        if by_hub_id is not None:
            return ResolvedModel(f"hub:{spec}", by_hub_id.config, by_hub_id.family, by_hub_id.name,
                                 spec, by_hub_id)
        hub_config = _hub_config(spec, allow_download)
        if hub_config is None:
            if "/" not in spec:
                raise not_in_zoo from None
            raise ConfigError(
                f"{shown(spec)!r} is neither in the model zoo nor in the local Hugging Face cache",
                "download it once (`--download`, allow_download=True, network needed), copy "
                "a checkpoint folder onto the board, or use a zoo model (`slm-dvfs models`)",
            ) from None
        return ResolvedModel(f"hub:{spec}", hub_config, _family(hub_config, spec),
                             spec.rsplit("/", 1)[-1], spec, None)
    return ResolvedModel(f"zoo:{entry.name}", entry.config, entry.family, entry.name,
                         entry.hub_id, entry)


def load_model(spec: str | ResolvedModel, task: GlueTask | str, *, allow_download: bool = False,
               seed: int = 0) -> tuple[PreTrainedModel, ModelInfo]:
    """A classification model for `task`, with pretrained weights where available; `spec` a model
    reference, or the model as resolved already (not looked up again)."""
    task = get_task(task)
    resolved = spec if isinstance(spec, ResolvedModel) else resolve_model(spec, allow_download=allow_download)
    model = None
    weights = "random"
    if resolved.weights_from is not None:
        model = _try_pretrained(resolved, task, allow_download, seed)
        if model is not None:
            weights = "pretrained"
    if model is None:
        model = build_model(resolved.config, task, seed=seed)
        log.info("%s: no checkpoint available, built with random weights (energy and time "
                 "stay faithful, accuracy does not)", resolved.name)
    return model, model_info(resolved, model, weights)


def build_model(config: Mapping[str, object], task: GlueTask | str, *, seed: int = 0,
                device: str | torch.device | None = None) -> PreTrainedModel:
    """A classification model from an architecture alone, with random weights.
    `device="meta"` builds it without allocating memory (for counting parameters)."""
    import torch
    from transformers import AutoConfig, AutoModelForSequenceClassification

    task = get_task(task)
    arch = architecture(config)
    model_type = str(arch.pop("model_type"))
    arch.update(head_kwargs(config, task))
    hf_config = AutoConfig.for_model(model_type, **arch)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if device is not None:
            with torch.device(device):
                return AutoModelForSequenceClassification.from_config(hf_config)
        return AutoModelForSequenceClassification.from_config(hf_config)


class HeadKwargs(TypedDict, total=False):
    """The config overrides head_kwargs gives (transformers' PretrainedConfig fields)."""

    num_labels: int
    problem_type: str
    id2label: dict[int, str]
    label2id: dict[str, int]
    pad_token_id: int


def head_kwargs(config: Mapping[str, object], task: GlueTask) -> HeadKwargs:
    """Config overrides that give a backbone the task's head (and a decoder a pad token)."""
    kwargs: HeadKwargs = {}
    if task.is_regression:
        kwargs["num_labels"] = 1
        kwargs["problem_type"] = "regression"
    else:  # id2label sets num_labels; passing both makes transformers warn of a conflict
        kwargs["problem_type"] = "single_label_classification"
        kwargs["id2label"] = dict(enumerate(task.label_names))
        kwargs["label2id"] = {name: i for i, name in enumerate(task.label_names)}
    family = zoo.MODEL_TYPE_FAMILY.get(str(config.get("model_type")))
    if family is not None and zoo.is_decoder(family):
        kwargs["pad_token_id"] = decoder_pad_token_id(config, family)
    return kwargs


def decoder_pad_token_id(config: Mapping[str, object], family: str) -> int:
    """The pad token of a decoder's classification head: its own, else end-of-text, as
    Hugging Face's examples do (`pad_token = eos_token`); the head pools the last other token."""
    pad = config.get("pad_token_id")
    if isinstance(pad, int):
        return pad
    if family == "pythia":
        return PYTHIA_PAD_TOKEN_ID
    eos = config.get("eos_token_id")
    if isinstance(eos, list) and eos:  # Llama 3: several end tokens, the first is end-of-text
        eos = eos[0]
    return int(eos) if isinstance(eos, int) else PYTHIA_PAD_TOKEN_ID


def model_info(resolved: ResolvedModel, model: PreTrainedModel, weights: str) -> ModelInfo:
    cfg = model.config
    config = dict(resolved.config)
    config.update(pad_token_id=cfg.pad_token_id, num_labels=cfg.num_labels,
                  problem_type=cfg.problem_type)
    return ModelInfo(
        name=resolved.name,
        family=resolved.family,
        params=sum(p.numel() for p in model.parameters()),
        weights=weights,
        origin=resolved.origin,
        config=config,
        num_layers=int(cfg.num_hidden_layers),
        hidden_size=int(cfg.hidden_size),
        num_heads=int(cfg.num_attention_heads),
        vocab_size=int(cfg.vocab_size),
    )


def _try_pretrained(resolved: ResolvedModel, task: GlueTask, allow_download: bool,
                    seed: int) -> PreTrainedModel | None:
    import torch
    from transformers import AutoModelForSequenceClassification

    source = resolved.weights_from
    assert source is not None
    if resolved.origin.startswith("dir:") and not any(
        (Path(source) / name).is_file() for name in WEIGHT_FILES
    ):
        log.info("%s has a config.json but no weights file", source)
        return None
    online = zoo.downloads_allowed(allow_download)
    try:
        with torch.random.fork_rng(devices=[]), _quiet_progress():
            torch.manual_seed(seed)  # the new head's initial weights
            # fp32 master weights: mixed precision is the trainer's business.
            return AutoModelForSequenceClassification.from_pretrained(
                source, local_files_only=not online, dtype=torch.float32,
                # transformers 5 looks for a peft adapter without passing local_files_only on:
                # offline, that lookup would try the network (and retry) before giving up
                adapter_kwargs={"local_files_only": not online},
                ignore_mismatched_sizes=True,  # a head fine-tuned for another task
                **head_kwargs(resolved.config, task),
            )
    except (OSError, ValueError) as exc:  # not cached, no network, unreadable checkpoint
        where = "" if online or resolved.origin.startswith("dir:") else " in the local cache"
        log.info("no pretrained weights for %s%s (%s)", source, where,
                 str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
        return None


@contextlib.contextmanager
def _quiet_progress() -> Iterator[None]:
    """No tqdm bars from transformers while loading: they would scribble over a TUI."""
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


def _hub_config(hub_id: str, allow_download: bool) -> dict[str, object] | None:
    """A hub id's config.json from the local cache (or the hub, when allowed)."""
    try:
        from huggingface_hub import hf_hub_download, try_to_load_from_cache
    except ImportError:  # pragma: no cover - a dependency of transformers
        return None
    try:
        cached = try_to_load_from_cache(hub_id, "config.json")
    except ValueError:  # not a valid repo id
        return None
    if isinstance(cached, str):
        return _read_config(Path(cached))
    if not zoo.downloads_allowed(allow_download):
        return None
    try:
        return _read_config(Path(hf_hub_download(hub_id, "config.json")))
    except Exception as exc:  # noqa: BLE001 - any hub failure means "not available"
        raise ConfigError(f"could not fetch the configuration of {hub_id!r}: {exc}",
                          "check the hub id and the network, or use a zoo model") from None


MAX_CONFIG_BYTES = 4 << 20  # a Hugging Face config.json is a few KB (with a tokenizer's id maps, under 1 MB)


def _read_config(path: Path) -> dict[str, object]:
    remedy = "give a valid config.json (as save_pretrained writes it)"
    try:
        raw = read_user_file(path, "model configuration", max_bytes=MAX_CONFIG_BYTES, remedy=remedy)
        config = load_json(raw.decode("utf-8"), f"cannot read the model configuration {path}: the file", remedy)
    except UnicodeDecodeError as exc:
        raise ConfigError(f"cannot read the model configuration {path}: {exc}", remedy) from None
    except SlmDvfsError as exc:
        raise ConfigError(exc.what, exc.remedy) from None
    if not isinstance(config, dict) or "model_type" not in config:
        raise ConfigError(f"{path} has no model_type",
                          "give a Hugging Face config.json (it names its model_type)")
    return config


def _family(config: Mapping[str, object], spec: str) -> str:
    family = zoo.MODEL_TYPE_FAMILY.get(str(config.get("model_type")))
    if family is None:
        raise ConfigError(
            f"{spec}: model_type {config.get('model_type')!r} is not supported",
            "use a model of a supported model_type: " + ", ".join(sorted(zoo.MODEL_TYPE_FAMILY)),
        )
    check_config(config, spec)  # impossible dimensions fail here, before transformers or torch see them
    return family
