"""GLUE text from the hub, a local GLUE folder, or generated offline; and its encoding.

Three sources, one result (`GlueText`):
- "hub": `nyu-mll/glue` through `datasets`, from the local cache unless downloads are
  allowed (and HF_HUB_OFFLINE is not set);
- a folder in the original GLUE layout (`SST-2/train.tsv`, `MNLI/dev_matched.tsv`, ...),
  read with the columns of the original files (`glue_folder.py`);
- "synthetic": generated text with the task's schema and a signal a model can learn
  (sentiment words, word overlap, negation), labelled `synthetic=True` (`synthetic.py`).
`glue_folder.generate_glue_folder` writes synthetic data in the original layout, for tests and demos.
"""

from __future__ import annotations

import contextlib
import logging
import random
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Sequence, Union

import torch
from torch.utils.data import Dataset

from engine.core.constants import SYNTHETIC_EVAL_MAX, Padding, SYNTHETIC_TRAIN_MAX
from engine.core.errors import ConfigError
from engine.core.optional import import_optional
from engine.workload import zoo
from engine.workload.glue import Example, GlueTask, get_task
from engine.workload.data.glue_folder import read_folder, task_folder
from engine.workload.data.synthetic import synthetic_splits

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

log = logging.getLogger(__name__)

HUB_REPOS = ("nyu-mll/glue", "glue")

@dataclass(frozen=True)
class GlueText:
    task: GlueTask
    train: tuple[Example, ...]
    eval: Mapping[str, tuple[Example, ...]]  # by task.eval_splits
    source: str  # "synthetic" | "hub:nyu-mll/glue" | "dir:/path/SST-2"
    synthetic: bool

    def train_texts(self) -> list[str]:
        """Every training text, for training a tokenizer."""
        return [t for ex in self.train for t in ex.texts]


# --------------------------------------------------------------------------- loading


def check_source(task: str | GlueTask, source: str | Path = "synthetic", *, train_samples: int | None = None,
                 eval_samples: int | None = None) -> GlueTask:
    """Refuse what can be refused before any text is read (an experiment asks before it records a
    run): a sample count under 1, a GLUE folder that does not exist or holds no train split of the
    task. Returns the task."""
    task = get_task(task)
    for name, value in (("train_samples", train_samples), ("eval_samples", eval_samples)):
        if value is not None and value <= 0:
            raise ConfigError(f"{name} must be positive, not {value}",
                              f"leave {name} unset to use the whole split")
    if not (isinstance(source, str) and source in ("synthetic", "hub")):
        task_folder(task, Path(source).expanduser())
    return task


def load_glue_text(task: str | GlueTask, source: str | Path = "synthetic", *,
                   train_samples: int | None = None, eval_samples: int | None = None,
                   seed: int = 0, allow_download: bool = False) -> GlueText:
    """A task's train and eval examples. `train_samples`/`eval_samples` take a seeded
    random subset (file order kept); for synthetic data they are the sizes generated."""
    task = check_source(task, source, train_samples=train_samples, eval_samples=eval_samples)
    if isinstance(source, str) and source == "synthetic":
        n_train = train_samples or min(task.train_size, SYNTHETIC_TRAIN_MAX)
        sizes = [eval_samples or min(size, SYNTHETIC_EVAL_MAX) for size in task.eval_sizes]
        train, evals = synthetic_splits(task, n_train, sizes, seed)
        return GlueText(task, train, evals, "synthetic", True)
    if isinstance(source, str) and source == "hub":
        train, evals, origin = _from_hub(task, allow_download)
        synthetic = False
    else:
        train, evals, origin, synthetic = read_folder(task, Path(source).expanduser())
    rng = random.Random(seed)
    train = _subset(train, train_samples, rng, f"{task.display} train")
    evals = {s: _subset(ex, eval_samples, rng, f"{task.display} {s}") for s, ex in evals.items()}
    return GlueText(task, train, evals, origin, synthetic)


def _subset(examples: Sequence[Example], n: int | None, rng: random.Random,
            what: str) -> tuple[Example, ...]:
    if n is None or n >= len(examples):
        if n is not None and n > len(examples):
            log.warning("%s has only %d examples (%d asked for); using all", what,
                        len(examples), n)
        return tuple(examples)
    keep = sorted(rng.sample(range(len(examples)), n))
    return tuple(examples[i] for i in keep)


# --------------------------------------------------------------------------- hub


def _from_hub(task: GlueTask, allow_download: bool
              ) -> tuple[tuple[Example, ...], dict[str, tuple[Example, ...]], str]:
    datasets = import_optional("datasets", "GLUE from the hub", "pip install -e . (datasets is a dependency of "
                               "slm-dvfs), or point at a local GLUE folder, or use synthetic data")

    online = zoo.downloads_allowed(allow_download)
    errors = []
    for repo in HUB_REPOS:
        # Without permission, datasets may only use what it cached before.
        offline = (contextlib.nullcontext() if online
                   else _patched(datasets.config, "HF_HUB_OFFLINE", True))
        try:
            with offline:
                dsd = datasets.load_dataset(repo, task.name)
        except Exception as exc:  # noqa: BLE001 - datasets raises many kinds; all mean "not here"
            first_line = str(exc).splitlines()[0] if str(exc) else ""
            errors.append(f"{repo}: {type(exc).__name__}: {first_line}")
            continue
        missing = [s for s in ("train", *task.eval_splits) if s not in dsd]
        if missing:
            errors.append(f"{repo}: no split(s) {', '.join(missing)}")
            continue
        train = _hub_split(task, dsd["train"])
        evals = {s: _hub_split(task, dsd[s]) for s in task.eval_splits}
        return train, evals, f"hub:{repo}"
    remedy = ("allow a download once (`--download`, allow_download=True, network needed), "
              "point at a local GLUE folder, or use synthetic data" if not online else
              "check the network, or point at a local GLUE folder, or use synthetic data")
    raise ConfigError(f"GLUE {task.display} is not available from the hub "
                      f"({'; '.join(errors)})", remedy)


def _hub_split(task: GlueTask, split: Any) -> tuple[Example, ...]:
    columns = [split[f] for f in task.text_fields]
    labels = split["label"]
    out = []
    for i, label in enumerate(labels):
        if not task.is_regression and (label is None or int(label) < 0):
            continue  # unlabelled (test) rows
        value = float(label) if task.is_regression else int(label)
        out.append(Example(tuple(str(col[i]) for col in columns), value))
    return tuple(out)


@contextlib.contextmanager
def _patched(obj: object, name: str, value: object) -> Iterator[None]:
    old = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, old)



# --------------------------------------------------------------------------- encoding


# One feature of an encoded split: an (N, L) tensor (padded to max_length), or N 1-D tensors (dynamic).
Features = Union[torch.Tensor, list[torch.Tensor]]


class EncodedSplit(Dataset):
    """Tokenized examples; item i is a dict of tensors (input_ids, attention_mask,
    token_type_ids for BERT, labels)."""

    def __init__(self, features: Mapping[str, Features], labels: torch.Tensor) -> None:
        self.features = dict(features)  # name -> (N, L) tensor, or N 1-D tensors (dynamic)
        self.labels = labels

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        item = {name: values[i] for name, values in self.features.items()}
        item["labels"] = self.labels[i]
        return item


class PadCollator:
    """Stack items, right-padding each sequence to the longest in the batch
    (a no-op for fixed-length items). A class, not a closure: DataLoader workers pickle it."""

    def __init__(self, pad_token_id: int) -> None:
        self.pad_token_id = pad_token_id

    def __call__(self, items: Sequence[Mapping[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
        batch: dict[str, torch.Tensor] = {}
        for name in items[0]:
            values = [item[name] for item in items]
            if name == "labels":
                batch[name] = torch.stack(values)
                continue
            pad = self.pad_token_id if name == "input_ids" else 0
            length = max(v.shape[0] for v in values)
            out = torch.full((len(values), length), pad, dtype=values[0].dtype)
            for row, v in enumerate(values):
                out[row, : v.shape[0]] = v
            batch[name] = out
        return batch


@dataclass(frozen=True)
class EncodedGlue:
    train: EncodedSplit
    eval: Mapping[str, EncodedSplit]
    task: GlueTask
    collate: Callable[[Sequence[Mapping[str, torch.Tensor]]], dict[str, torch.Tensor]]
    max_seq_len: int = 0
    padding: Padding = "max_length"
    synthetic: bool = False
    source: str = ""


def encode(text: GlueText, tokenizer: PreTrainedTokenizerBase, max_seq_len: int,
           padding: Padding = "max_length") -> EncodedGlue:
    """Tokenize every split. padding="max_length" pads each example to max_seq_len (the
    shape the energy profile was measured at); "dynamic" leaves padding to the collate."""
    if max_seq_len < 8:
        raise ConfigError(f"max_seq_len {max_seq_len} is too short", "use 8 tokens or more")
    if tokenizer.pad_token_id is None:
        raise ConfigError("the tokenizer has no pad token",
                          "load it with engine.workload.data.tokenization.load_tokenizer")
    def encode_split(examples: Sequence[Example]) -> EncodedSplit:
        return _encode_split(text.task, examples, tokenizer, max_seq_len, padding)

    return EncodedGlue(
        train=encode_split(text.train),
        eval={split: encode_split(examples) for split, examples in text.eval.items()},
        task=text.task,
        collate=PadCollator(int(tokenizer.pad_token_id)),
        max_seq_len=max_seq_len,
        padding=padding,
        synthetic=text.synthetic,
        source=text.source,
    )


def _encode_split(task: GlueTask, examples: Sequence[Example], tokenizer: PreTrainedTokenizerBase,
                  max_seq_len: int, padding: Padding) -> EncodedSplit:
    first = [ex.texts[0] for ex in examples]
    second = [ex.texts[1] for ex in examples] if task.is_pair else None
    if second is not None and tokenizer.sep_token is None:
        # Decoder tokenizers (Pythia) have no separator: join the pair with end-of-text,
        # so a model can still tell where one text ends.
        joiner = f"{tokenizer.eos_token or ''} "
        first, second = [a + joiner + b for a, b in zip(first, second)], None
    with_types = "token_type_ids" in tokenizer.model_input_names
    enc = tokenizer(first, second, truncation=True, max_length=max_seq_len,
                    padding="max_length" if padding == "max_length" else False,
                    return_token_type_ids=with_types, return_attention_mask=True)
    names = ["input_ids", "attention_mask"] + (["token_type_ids"] if with_types else [])
    features: dict[str, Features] = {}
    for name in names:
        rows = enc[name]
        if padding == "max_length":
            features[name] = torch.tensor(rows, dtype=torch.long).reshape(len(rows), max_seq_len)
        else:
            features[name] = [torch.tensor(r, dtype=torch.long) for r in rows]
    dtype = torch.float32 if task.is_regression else torch.long
    labels = torch.tensor([ex.label for ex in examples], dtype=dtype)
    return EncodedSplit(features, labels)
