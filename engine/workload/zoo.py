"""The shipped model zoo (profiles/models.toml): architectures that build with no network.

Also the one rule for reaching the Hugging Face hub, which models, tokenizers and
data all follow: never, unless the caller asked for it and HF_HUB_OFFLINE is not set.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 (JetPack 6)
    import tomli as tomllib

from engine.core.constants import Precision, parse_precision
from engine.core import paths
from engine.core.text import shown
from engine.core.errors import ConfigError, ProfileError, UnknownChoiceError

FAMILIES = ("bert", "pythia", "roberta", "distilbert", "electra", "deberta", "gpt2", "opt", "llama",
            "qwen", "gemma", "phi")
# model_type in a config.json -> our family ("bert" and "pythia" name what they always have)
MODEL_TYPE_FAMILY = {
    "bert": "bert", "gpt_neox": "pythia", "roberta": "roberta", "distilbert": "distilbert",
    "electra": "electra", "deberta-v2": "deberta", "gpt2": "gpt2", "opt": "opt", "llama": "llama",
    "qwen2": "qwen", "qwen3": "qwen", "gemma": "gemma", "gemma2": "gemma", "phi3": "phi",
}
# Causal decoders: their classification head pools the last token that is not padding,
# so they need a pad token (many checkpoints ship none).
DECODER_FAMILIES = frozenset({"pythia", "gpt2", "opt", "llama", "qwen", "gemma", "phi"})
# Config keys some architectures name differently (GPT-2, DistilBERT) -> the usual name.
_DIM_ALIASES = {
    "hidden_size": ("n_embd", "dim", "d_model"),
    "num_hidden_layers": ("n_layer", "n_layers"),
    "num_attention_heads": ("n_head", "n_heads"),
    "intermediate_size": ("n_inner", "hidden_dim", "ffn_dim"),
}

_TRUE = {"1", "true", "yes", "on"}


@dataclass(frozen=True)
class ZooEntry:
    name: str
    hub_id: str
    family: str  # one of FAMILIES
    config: Mapping[str, object]  # the full architecture, as in the checkpoint's config.json
    params: int  # parameters of the model fine-tuned for a 2-label task (backbone + head)
    batch_size: int
    seq_len: int
    precision: Precision

    @property
    def model_type(self) -> str:
        return str(self.config["model_type"])


def dims(config: Mapping[str, object]) -> dict[str, int]:
    """hidden_size, num_hidden_layers, num_attention_heads (and intermediate_size when given)
    of a config.json, whatever the architecture calls them; a missing one is left out."""
    out: dict[str, int] = {}
    for key, aliases in _DIM_ALIASES.items():
        for name in (key, *aliases):
            value = config.get(name)
            if isinstance(value, int) and not isinstance(value, bool):
                out[key] = value
                break
    return out


def is_decoder(family: str) -> bool:
    return family in DECODER_FAMILIES


def downloads_allowed(allow_download: bool) -> bool:
    """Whether this call may reach the hub: only when asked, and never under HF_HUB_OFFLINE."""
    if not allow_download:
        return False
    return not any(
        os.environ.get(var, "").strip().lower() in _TRUE
        for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE")
    )


def zoo_path() -> Path:
    return paths.profiles_dir() / "models.toml"


def load_zoo(path: Path | None = None) -> dict[str, ZooEntry]:
    """Every entry of the zoo, by name. A corrupt or incomplete file is a ProfileError."""
    path = Path(path) if path is not None else zoo_path()
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ProfileError(
            f"the model zoo {path} is missing",
            "reinstall slm-dvfs, or restore profiles/models.toml from the repository",
        ) from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ProfileError(
            f"the model zoo {path} is not valid TOML: {exc}",
            "fix the file by hand, or restore profiles/models.toml from the repository",
        ) from None
    models = data.get("models")
    if not isinstance(models, dict) or not models:
        raise ProfileError(
            f"the model zoo {path} has no [models.<name>] tables",
            "restore profiles/models.toml from the repository",
        )
    return {name: _entry(path, name, body) for name, body in models.items()}


def get_entry(name: str) -> ZooEntry:
    zoo = load_zoo()
    if name in zoo:
        return zoo[name]
    lowered = {key.lower(): entry for key, entry in zoo.items()}
    if name.lower() in lowered:
        return lowered[name.lower()]
    raise ConfigError(
        f"{shown(name)!r} is not in the model zoo",
        "use one of " + ", ".join(zoo) + "; a hub id (e.g. prajjwal1/bert-tiny), a local "
        "checkpoint folder or a config.json (architecture only, random weights) also work",
    )


def find_by_hub_id(hub_id: str) -> ZooEntry | None:
    for entry in load_zoo().values():
        if entry.hub_id.lower() == hub_id.lower():
            return entry
    return None


def _entry(path: Path, name: str, body: object) -> ZooEntry:
    where = f"[models.{name}] in {path}"
    remedy = "fix that table, or restore profiles/models.toml from the repository"
    if not isinstance(body, dict):
        raise ProfileError(f"{where} is not a table", remedy)
    required = {"hub_id": str, "family": str, "config": dict, "params": int,
                "batch_size": int, "seq_len": int, "precision": str}
    for key, kind in required.items():
        value = body.get(key)
        if not isinstance(value, kind) or isinstance(value, bool):
            raise ProfileError(f"{where}: {key!r} is missing or not a {kind.__name__}", remedy)
    if body["family"] not in FAMILIES:
        raise ProfileError(f"{where}: family {body['family']!r} is not one of {FAMILIES}", remedy)
    try:
        precision = parse_precision(body["precision"])
    except UnknownChoiceError as exc:
        raise ProfileError(f"{where}: {exc.what}", f"{exc.remedy}; or {remedy}") from None
    config = body["config"]
    if MODEL_TYPE_FAMILY.get(config.get("model_type")) != body["family"]:
        raise ProfileError(
            f"{where}: config.model_type {config.get('model_type')!r} does not match "
            f"family {body['family']!r}",
            remedy,
        )
    shape = {**dims(config), "vocab_size": config.get("vocab_size")}
    for key in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads"):
        if not isinstance(shape.get(key), int):
            raise ProfileError(f"{where}: config.{key} is missing or not an integer", remedy)
    for key in ("params", "batch_size", "seq_len"):
        if body[key] <= 0:
            raise ProfileError(f"{where}: {key} must be positive", remedy)
    if body["seq_len"] > config.get("max_position_embeddings", body["seq_len"]):
        raise ProfileError(f"{where}: seq_len exceeds config.max_position_embeddings", remedy)
    return ZooEntry(
        name=name,
        hub_id=body["hub_id"],
        family=body["family"],
        config=dict(config),
        params=body["params"],
        batch_size=body["batch_size"],
        seq_len=body["seq_len"],
        precision=precision,
    )
