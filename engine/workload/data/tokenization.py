"""Tokenizers: the checkpoint's own when present, else one trained on the task's text.

With no tokenizer in the model folder or the local Hugging Face cache (and no download
allowed), a WordPiece (BERT-like encoders) or byte-level BPE (decoders and RoBERTa)
tokenizer is trained on the
training text with the `tokenizers` library and cached under
`cache_dir()/tokenizers/<family>-<task>-<digest>`, so the next run reuses it.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Sequence

from engine.core import paths
from engine.core.errors import ConfigError
from engine.core.jsontypes import as_int
from engine.workload import zoo
from engine.workload.glue import GlueTask, get_task
from engine.workload.models import PYTHIA_PAD_TOKEN_ID, ModelInfo

if TYPE_CHECKING:  # transformers is imported lazily: it is slow to import
    from transformers import PreTrainedTokenizerFast

log = logging.getLogger(__name__)

# Bump when the training recipe changes, so stale cached tokenizers are not reused.
RECIPE_VERSION = 1
BERT_SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")  # ids 0..4
# Same ids as the GPT-NeoX-20B tokenizer Pythia ships with: 0 end of text, 1 padding.
PYTHIA_SPECIALS = ("<|endoftext|>", "<|padding|>")
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt")
# Families whose trained stand-in is WordPiece ([PAD] is id 0, as in their configs); the
# rest get byte-level BPE with <|padding|> at id 1 (RoBERTa's and OPT's pad id too).
WORDPIECE_FAMILIES = frozenset({"bert", "distilbert", "electra", "deberta"})


def tokenizer_kind(family: str) -> str:
    """"wordpiece" or "bpe": the kind of tokenizer trained for a family with none of its own."""
    if family not in zoo.FAMILIES:
        raise ConfigError(f"no tokenizer recipe for family {family!r}",
                          "use a model of a supported family: " + ", ".join(zoo.FAMILIES))
    return "wordpiece" if family in WORDPIECE_FAMILIES else "bpe"


def load_tokenizer(spec: str, info: ModelInfo, train_texts: Iterable[str], *,
                   allow_download: bool = False, task: GlueTask | str | None = None
                   ) -> PreTrainedTokenizerFast:
    """A fast tokenizer for the model `info` describes, with its pad token set.

    `spec` is the model spec given to load_model; `task` only names the cache folder."""
    tokenizer = _load_existing(spec, info, allow_download)
    trained = tokenizer is None
    if trained:
        tokenizer = _trained(info, list(train_texts), task)
    _set_pad_token(tokenizer, info, trained=trained)
    if len(tokenizer) > info.vocab_size:
        raise ConfigError(
            f"the tokenizer for {info.name} has {len(tokenizer)} tokens but the model embeds "
            f"only {info.vocab_size}",
            "use the tokenizer that belongs to the checkpoint, or a model with a larger vocab",
        )
    return tokenizer


def tokenizer_cache_path(family: str, task: GlueTask | str | None, texts: Sequence[str],
                         vocab_size: int) -> Path:
    """Where a tokenizer trained on `texts` lives: a digest of everything that shapes it."""
    digest = hashlib.sha256()
    digest.update(f"{RECIPE_VERSION}|{family}|{vocab_size}|{len(texts)}\n".encode())
    for text in texts:
        digest.update(text.encode("utf-8", "surrogatepass"))
        digest.update(b"\0")
    task_key = get_task(task).name if task is not None else "text"
    return paths.cache_dir() / "tokenizers" / f"{family}-{task_key}-{digest.hexdigest()[:16]}"


def train_tokenizer(family: str, texts: Sequence[str], vocab_size: int,
                    max_length: int) -> PreTrainedTokenizerFast:
    """Train a tokenizer of the family's kind on `texts` (no caching)."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    from tokenizers import trainers
    from transformers import PreTrainedTokenizerFast

    kind = tokenizer_kind(family)
    if kind == "wordpiece":
        tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
        tok.normalizer = normalizers.BertNormalizer(lowercase=True)
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tok.decoder = decoders.WordPiece()
        trainer: trainers.Trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, show_progress=False,
                                            special_tokens=list(BERT_SPECIALS))
        tok.train_from_iterator(texts, trainer)
        cls_id, sep_id = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
        tok.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
            special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)],
        )
        return PreTrainedTokenizerFast(
            tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
            sep_token="[SEP]", mask_token="[MASK]", model_max_length=max_length,
            padding_side="right", model_input_names=["input_ids", "token_type_ids",
                                                     "attention_mask"],
        )
    if kind == "bpe":
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False,
                                      special_tokens=list(PYTHIA_SPECIALS),
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        tok.train_from_iterator(texts, trainer)
        eos, pad = PYTHIA_SPECIALS
        return PreTrainedTokenizerFast(
            tokenizer_object=tok, bos_token=eos, eos_token=eos, unk_token=eos, pad_token=pad,
            model_max_length=max_length, padding_side="right",
            model_input_names=["input_ids", "attention_mask"],
        )
    raise AssertionError(f"tokenizer kind {kind!r} has no recipe")  # tokenizer_kind names only these


def _trained(info: ModelInfo, texts: list[str], task: GlueTask | str | None):
    from transformers import PreTrainedTokenizerFast

    if not texts:
        raise ConfigError(
            f"no tokenizer for {info.name} is available and there is no text to train one on",
            "pass the task's training text, or use a checkpoint that ships its tokenizer",
        )
    vocab_size = info.vocab_size
    target = tokenizer_cache_path(info.family, task, texts, vocab_size)
    if (target / "tokenizer.json").is_file():
        log.info("reusing the tokenizer trained earlier at %s", target)
        return PreTrainedTokenizerFast.from_pretrained(str(target))
    log.info("no tokenizer for %s; training a %s tokenizer on %d texts", info.name,
             "WordPiece" if tokenizer_kind(info.family) == "wordpiece" else "byte-level BPE", len(texts))
    tokenizer = train_tokenizer(info.family, texts, vocab_size, info.max_positions)
    # Write to a temporary sibling, then rename: a crash never leaves half a tokenizer.
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=target.parent))
    try:
        tokenizer.save_pretrained(str(tmp))
        os.replace(tmp, target)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        if not (target / "tokenizer.json").is_file():  # not a concurrent writer's win
            raise
    return tokenizer


def _load_existing(spec: str, info: ModelInfo, allow_download: bool):
    """The checkpoint's own tokenizer: from its folder, or the hub cache (or hub, if allowed)."""
    from transformers import AutoTokenizer

    kind, _, where = info.origin.partition(":")
    if kind == "dir":
        if not any((Path(where) / name).is_file() for name in _TOKENIZER_FILES):
            return None
        source, local_only = where, True
    elif kind in ("zoo", "hub"):
        source = where if kind == "hub" else zoo.get_entry(where).hub_id
        local_only = not zoo.downloads_allowed(allow_download)
    else:  # a config.json alone: architecture only
        return None
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=local_only)
    except (OSError, ValueError) as exc:
        log.info("no tokenizer for %s (%s)", spec, str(exc).splitlines()[0])
        return None
    if not getattr(tokenizer, "is_fast", False):
        log.info("the tokenizer of %s is not a fast tokenizer; training one instead", spec)
        return None
    return tokenizer


def _set_pad_token(tokenizer, info: ModelInfo, *, trained: bool = False) -> None:
    """Give the tokenizer the pad token the model was configured with (a tokenizer trained
    here keeps its own: the fine-tune path gives the model that id, align_pad_token)."""
    want = info.config.get("pad_token_id")
    if want is None and info.family == "pythia":
        want = PYTHIA_PAD_TOKEN_ID
    if tokenizer.pad_token is None:
        if want is not None and as_int(want) < len(tokenizer):
            tokenizer.pad_token = tokenizer.convert_ids_to_tokens(as_int(want))
        elif tokenizer.eos_token is not None:
            tokenizer.pad_token = tokenizer.eos_token
        else:
            raise ConfigError(f"the tokenizer of {info.name} has no pad or end-of-text token",
                              "use a checkpoint whose tokenizer defines one")
    if want is not None and tokenizer.pad_token_id != want and not trained:
        # BERT masks padding anyway; GPT-NeoX pools the last token that is not padding.
        log.warning("%s: tokenizer pads with id %s but the model expects %s",
                    info.name, tokenizer.pad_token_id, want)
    tokenizer.padding_side = "right"
