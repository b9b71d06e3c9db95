"""GLUE text from the hub, a local GLUE folder, or generated offline; and its encoding.

Three sources, one result (`GlueText`):
- "hub": `nyu-mll/glue` through `datasets`, from the local cache unless downloads are
  allowed (and HF_HUB_OFFLINE is not set);
- a folder in the original GLUE layout (`SST-2/train.tsv`, `MNLI/dev_matched.tsv`, ...),
  read with the columns of the original files;
- "synthetic": generated text with the task's schema and a signal a model can learn
  (sentiment words, word overlap, negation), labelled `synthetic=True`.
`generate_glue_folder` writes synthetic data in the original layout, for tests and demos.
"""

from __future__ import annotations

import contextlib
import csv
import logging
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import torch
from torch.utils.data import Dataset

from engine.core.constants import PADDINGS, SYNTHETIC_EVAL_MAX, SYNTHETIC_TRAIN_MAX
from engine.core.errors import ConfigError
from engine.workload import zoo
from engine.workload.glue import TASKS, GlueTask, get_task

log = logging.getLogger(__name__)

HUB_REPOS = ("nyu-mll/glue", "glue")
SYNTHETIC_MARKER = "SYNTHETIC.txt"  # generate_glue_folder leaves this, so loads stay labelled


@dataclass(frozen=True)
class Example:
    texts: tuple[str, ...]  # in the order of task.text_fields
    label: float | int  # class index, or the score for regression


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


def load_glue_text(task: str | GlueTask, source: str | Path = "synthetic", *,
                   train_samples: int | None = None, eval_samples: int | None = None,
                   seed: int = 0, allow_download: bool = False) -> GlueText:
    """A task's train and eval examples. `train_samples`/`eval_samples` take a seeded
    random subset (file order kept); for synthetic data they are the sizes generated."""
    task = get_task(task)
    for name, value in (("train_samples", train_samples), ("eval_samples", eval_samples)):
        if value is not None and value <= 0:
            raise ConfigError(f"{name} must be positive, not {value}",
                              f"leave {name} unset to use the whole split")
    if isinstance(source, str) and source == "synthetic":
        n_train = train_samples or min(task.train_size, SYNTHETIC_TRAIN_MAX)
        sizes = [eval_samples or min(size, SYNTHETIC_EVAL_MAX) for size in task.eval_sizes]
        train, evals = _synthetic_splits(task, n_train, sizes, seed)
        return GlueText(task, train, evals, "synthetic", True)
    if isinstance(source, str) and source == "hub":
        train, evals, origin = _from_hub(task, allow_download)
        synthetic = False
    else:
        train, evals, origin, synthetic = _from_folder(task, Path(source).expanduser())
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
    import datasets

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
def _patched(obj: Any, name: str, value: Any):
    old = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, old)


# --------------------------------------------------------------------------- GLUE folder


@dataclass(frozen=True)
class _Layout:
    """How a task's files look in the original GLUE download."""

    header: tuple[str, ...] | None  # None: no header row (CoLA)
    text_cols: tuple[int, ...]
    label_col: int
    dev_header: tuple[str, ...] | None = None  # when dev differs from train (MNLI)


_MNLI_COMMON = ("index", "promptID", "pairID", "genre", "sentence1_binary_parse",
                "sentence2_binary_parse", "sentence1_parse", "sentence2_parse",
                "sentence1", "sentence2")
LAYOUTS: dict[str, _Layout] = {
    # source, label, original judgement ("*" when unacceptable), sentence
    "cola": _Layout(None, (3,), 1),
    "sst2": _Layout(("sentence", "label"), (0,), 1),
    "mrpc": _Layout(("Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"), (3, 4), 0),
    "qqp": _Layout(("id", "qid1", "qid2", "question1", "question2", "is_duplicate"), (3, 4), 5),
    "stsb": _Layout(("index", "genre", "filename", "year", "old_index", "source1", "source2",
                     "sentence1", "sentence2", "score"), (7, 8), -1),
    "mnli": _Layout(_MNLI_COMMON + ("label1", "gold_label"), (8, 9), -1,
                    dev_header=_MNLI_COMMON + ("label1", "label2", "label3", "label4",
                                               "label5", "gold_label")),
    "qnli": _Layout(("index", "question", "sentence", "label"), (1, 2), -1),
    "rte": _Layout(("index", "sentence1", "sentence2", "label"), (1, 2), -1),
    "wnli": _Layout(("index", "sentence1", "sentence2", "label"), (1, 2), -1),
}


def split_file(task: GlueTask, split: str) -> str:
    """The file name of a split in the GLUE layout."""
    if split == "train":
        return "train.tsv"
    if split.startswith("validation_"):
        return "dev_" + split[len("validation_"):] + ".tsv"
    return "dev.tsv"


def _task_dir(task: GlueTask, root: Path) -> Path:
    if not root.exists():
        raise ConfigError(
            f"the GLUE folder {root} does not exist",
            "give the folder that holds CoLA/, SST-2/, ... (as GLUE's download_glue_data.py "
            "writes it), or use --data synthetic (generated GLUE-shaped text, nothing to download)",
        )
    for candidate in (root / task.display, root / "glue_data" / task.display, root):
        if (candidate / "train.tsv").is_file():
            return candidate
    raise ConfigError(
        f"no {task.display}/train.tsv under {root}",
        f"put GLUE's {task.display} folder (train.tsv and "
        f"{', '.join(split_file(task, s) for s in task.eval_splits)}) in {root}",
    )


def _from_folder(task: GlueTask, root: Path):
    folder = _task_dir(task, root)
    train = _read_split(task, folder / "train.tsv", dev=False)
    evals = {}
    for split in task.eval_splits:
        path = folder / split_file(task, split)
        if not path.is_file():
            raise ConfigError(f"{path} is missing",
                              f"{task.display} needs train.tsv and "
                              f"{', '.join(split_file(task, s) for s in task.eval_splits)}")
        evals[split] = _read_split(task, path, dev=True)
    synthetic = (folder / SYNTHETIC_MARKER).is_file() or (root / SYNTHETIC_MARKER).is_file()
    return train, evals, f"dir:{folder.resolve()}", synthetic


def _read_split(task: GlueTask, path: Path, *, dev: bool) -> tuple[Example, ...]:
    layout = LAYOUTS[task.name]
    header = (layout.dev_header if dev and layout.dev_header else layout.header)
    with open(path, encoding="utf-8-sig", newline="") as f:
        # GLUE files are not CSV-quoted: quotes are part of the text.
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    if header is not None:
        if not rows or rows[0][:1] != [header[0]]:
            got = "\\t".join(rows[0][:4]) if rows else "an empty file"
            raise ConfigError(
                f"{path} does not look like GLUE's {task.display} file: expected a header "
                f"starting {header[0]!r}, found {got!r}",
                f"use the original GLUE files; {task.display} columns are: "
                + " ".join(header),
            )
        rows = rows[1:]
    width = max(max(layout.text_cols), layout.label_col if layout.label_col >= 0 else 0) + 1
    out, skipped = [], 0
    for row in rows:
        if len(row) < width:
            skipped += 1  # QQP's train.tsv has a few broken lines; GLUE's loaders skip them too
            continue
        label = _parse_label(task, row[layout.label_col])
        if label is None:
            skipped += 1
            continue
        out.append(Example(tuple(row[i] for i in layout.text_cols), label))
    if skipped:
        log.warning("%s: skipped %d malformed or unlabelled rows", path, skipped)
    if not out:
        raise ConfigError(f"{path} has no usable {task.display} examples",
                          "check that the file is GLUE's original, with labels")
    return tuple(out)


def _parse_label(task: GlueTask, raw: str) -> float | int | None:
    raw = raw.strip()
    try:
        if task.is_regression:
            return float(raw)
        if raw in task.label_names:
            return task.label_names.index(raw)
        value = int(raw)
    except ValueError:
        return None
    return value if 0 <= value < task.num_labels else None


def generate_glue_folder(root: Path, tasks: Iterable[str | GlueTask] = tuple(TASKS),
                         train_size: int = 64, dev_size: int = 32, seed: int = 0) -> Path:
    """Write synthetic data in the original GLUE layout under `root` (one folder per task).
    Reading it back gives the same examples as synthetic data of the same sizes and seed."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    (root / SYNTHETIC_MARKER).write_text(
        "Generated by slm-dvfs (engine.workload.data.generate_glue_folder): synthetic text in "
        "the original GLUE layout. Not real GLUE data.\n", encoding="utf-8")
    for name in tasks:
        task = get_task(name)
        train, evals = _synthetic_splits(task, train_size, [dev_size] * len(task.eval_splits),
                                         seed)
        folder = root / task.display
        folder.mkdir(exist_ok=True)
        rng = random.Random(seed)
        _write_split(task, folder / "train.tsv", train, "train", rng)
        for split, examples in evals.items():
            _write_split(task, folder / split_file(task, split), examples, split, rng)
    return root


def _write_split(task: GlueTask, path: Path, examples: Sequence[Example], split: str,
                 rng: random.Random) -> None:
    layout = LAYOUTS[task.name]
    dev = split != "train"
    header = layout.dev_header if dev and layout.dev_header else layout.header
    lines = [] if header is None else ["\t".join(header)]
    for i, ex in enumerate(examples):
        lines.append("\t".join(_row(task, i, ex, split, rng)))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _row(task: GlueTask, i: int, ex: Example, split: str, rng: random.Random) -> list[str]:
    texts = ex.texts
    dev = split != "train"
    name = task.name
    if name == "cola":
        return [rng.choice(["gj04", "bc01", "ks08", "r-67"]), str(ex.label),
                "" if ex.label else "*", texts[0]]
    if name == "sst2":
        return [texts[0], str(ex.label)]
    if name == "mrpc":
        return [str(ex.label), str(100000 + 2 * i), str(100001 + 2 * i), texts[0], texts[1]]
    if name == "qqp":
        return [str(i), str(2 * i + 1), str(2 * i + 2), texts[0], texts[1], str(ex.label)]
    if name == "stsb":
        return [str(i), "main-captions", "MSRvid", "2012test", f"{i + 1:04d}", "none", "none",
                texts[0], texts[1], f"{float(ex.label):.3f}"]
    if name == "mnli":
        gold = task.label_names[int(ex.label)]
        parses = [_binary_parse(texts[0]), _binary_parse(texts[1]), _parse(texts[0]),
                  _parse(texts[1])]
        labels = [gold] * (5 if dev else 1)
        genre = rng.choice(_MNLI_GENRES[split == "validation_mismatched"])
        return [str(i), str(10000 + i), f"{10000 + i}e", genre,
                *parses, texts[0], texts[1], *labels, gold]
    if name in ("qnli", "rte"):
        return [str(i), texts[0], texts[1], task.label_names[int(ex.label)]]
    if name == "wnli":
        return [str(i), texts[0], texts[1], str(ex.label)]
    raise AssertionError(name)


def _binary_parse(text: str) -> str:
    return "( " + " ".join(text.split()) + " )"


def _parse(text: str) -> str:
    return "(ROOT (S " + " ".join(f"(X {w})" for w in text.split()) + "))"


# --------------------------------------------------------------------------- synthetic

_MNLI_GENRES = {False: ("fiction", "government", "slate", "telephone", "travel"),  # matched
                True: ("facetoface", "letters", "nineeleven", "oup", "verbatim")}
_SUBJECTS = ("the critic", "my friend", "the audience", "our teacher", "the director",
             "a reviewer", "the children", "her neighbour", "the manager", "his sister",
             "the pilot", "an engineer", "the farmer", "my uncle", "the students")
_NOUNS = ("movie", "film", "story", "plot", "cast", "soundtrack", "script", "ending",
          "performance", "show", "novel", "album", "play", "series", "documentary")
_POSITIVE = ("wonderful", "brilliant", "moving", "delightful", "charming", "superb",
             "gripping", "funny", "beautiful", "clever", "touching", "fresh")
_NEGATIVE = ("dull", "boring", "awful", "clumsy", "tedious", "bland", "messy", "weak",
             "painful", "forgettable", "stale", "dreadful")
_FILLERS = ("", "", "honestly", "at times", "overall", "in the end", "from start to finish",
            "for the most part", "without a doubt", "in many ways")
# (base, past) verbs and the objects they go with, by "genre" so MNLI can mismatch.
_VERBS = (("watch", "watched"), ("review", "reviewed"), ("buy", "bought"), ("see", "saw"),
          ("paint", "painted"), ("repair", "repaired"), ("visit", "visited"),
          ("describe", "described"), ("carry", "carried"), ("sell", "sold"),
          ("build", "built"), ("clean", "cleaned"))
_OBJECTS = {False: ("car", "house", "bridge", "garden", "letter", "boat", "report", "painting",
                    "kitchen", "fence", "bicycle", "window"),
            True: ("contract", "budget", "satellite", "museum", "harbour", "violin",
                   "tractor", "laboratory", "manuscript", "stadium", "telescope", "orchard")}
_PLACES = {False: ("park", "city", "village", "office", "station", "market", "school"),
           True: ("embassy", "factory", "hospital", "airport", "library", "island", "canyon")}
_ADJS = ("old", "new", "red", "small", "large", "famous", "quiet", "broken", "shiny", "empty")
_REASONS = ("it was raining", "the deadline was near", "a friend asked", "it was cheap",
            "the weather was fine", "nobody else could")
_SYNONYMS = {"bought": "purchased", "saw": "noticed", "repaired": "fixed", "large": "big",
             "small": "little", "visited": "toured", "sold": "traded", "built": "constructed",
             "cleaned": "washed", "described": "explained", "famous": "well known",
             "quiet": "calm", "old": "aged", "new": "recent", "carried": "moved"}
_WNLI_PAIRS = (("the lawyer", "the witness"), ("the cat", "the mouse"),
               ("the teacher", "the student"), ("the dog", "the postman"),
               ("the captain", "the sailor"), ("the giant", "the child"))
_WNLI_FIRST = ("angry", "impatient", "strong", "hungry")  # describe the one who acts
_WNLI_SECOND = ("frightened", "weak", "small", "tired")  # describe the one acted on


def _synthetic_splits(task: GlueTask, n_train: int, eval_sizes: Sequence[int], seed: int):
    gen = _GENERATORS[task.name]
    train = tuple(gen(random.Random(seed * 7919 + 1), n_train, False))
    evals = {}
    for k, (split, size) in enumerate(zip(task.eval_splits, eval_sizes)):
        mismatched = split == "validation_mismatched"
        evals[split] = tuple(gen(random.Random(seed * 7919 + 101 + k), size, mismatched))
    return train, evals


def _clause(rng: random.Random, other: bool = False) -> dict[str, str]:
    verb_base, verb_past = rng.choice(_VERBS)
    return {"subj": rng.choice(_SUBJECTS), "base": verb_base, "past": verb_past,
            "adj": rng.choice(_ADJS), "obj": rng.choice(_OBJECTS[other]),
            "place": rng.choice(_PLACES[other])}


def _sentence(c: Mapping[str, str]) -> str:
    return f"{c['subj']} {c['past']} the {c['adj']} {c['obj']} in the {c['place']}"


def _paraphrase(rng: random.Random, c: Mapping[str, str]) -> str:
    words = [_SYNONYMS.get(w, w) if rng.random() < 0.7 else w
             for w in (c["past"], c["adj"])]
    if rng.random() < 0.5:
        return f"in the {c['place']} , {c['subj']} {words[0]} the {words[1]} {c['obj']}"
    return f"the {words[1]} {c['obj']} was {words[0]} by {c['subj']} in the {c['place']}"


def _gen_sst2(rng: random.Random, n: int, _other: bool) -> Iterable[Example]:
    for _ in range(n):
        positive = rng.random() < 0.55
        adj = rng.choice(_POSITIVE if positive else _NEGATIVE)
        negated = rng.random() < 0.15  # "not good" is negative: a model must read context
        filler = rng.choice(_FILLERS)
        verb = "was not" if negated else "was"
        text = f"{rng.choice(_SUBJECTS)} said the {rng.choice(_NOUNS)} {verb} {adj} {filler}"
        yield Example((text.strip() + " .",), int(positive != negated))


def _gen_cola(rng: random.Random, n: int, _other: bool) -> Iterable[Example]:
    for _ in range(n):
        c = _clause(rng)
        good = f"{c['subj']} {c['past']} the {c['adj']} {c['obj']}"
        acceptable = rng.random() < 0.7  # CoLA is about 70% acceptable
        if acceptable:
            text = good
        else:
            kind = rng.random()
            if kind < 0.35:  # a doubled verb
                text = f"{c['subj']} {c['base']} {c['past']} the {c['adj']} {c['obj']}"
            elif kind < 0.7:  # the determiner after its noun
                text = f"{c['subj']} {c['past']} {c['adj']} {c['obj']} the"
            else:  # scrambled order
                words = good.split()
                while " ".join(words) == good:
                    rng.shuffle(words)
                text = " ".join(words)
        yield Example((text[0].upper() + text[1:] + ".",), int(acceptable))


def _gen_mrpc(rng: random.Random, n: int, _other: bool) -> Iterable[Example]:
    for _ in range(n):
        c = _clause(rng)
        equivalent = rng.random() < 0.68
        s2 = _paraphrase(rng, c) if equivalent else _sentence(
            dict(_clause(rng), subj=c["subj"]))
        yield Example((_sentence(c) + " .", s2 + " ."), int(equivalent))


def _gen_qqp(rng: random.Random, n: int, _other: bool) -> Iterable[Example]:
    templates = ("how do i {v} a {o} ?", "what is the best way to {v} a {o} ?",
                 "how can someone {v} a {o} quickly ?", "what should i know before i {v} a {o} ?")
    for _ in range(n):
        (v, _past), o = rng.choice(_VERBS), rng.choice(_OBJECTS[False])
        t1, t2 = rng.sample(templates, 2)
        q1 = t1.format(v=v, o=o)
        duplicate = rng.random() < 0.37
        if not duplicate:  # same template family, different action or thing
            if rng.random() < 0.5:
                o = rng.choice([x for x in _OBJECTS[False] if x != o])
            else:
                v = rng.choice([x for x, _ in _VERBS if x != v])
        yield Example((q1, t2.format(v=v, o=o)), int(duplicate))


def _gen_stsb(rng: random.Random, n: int, _other: bool) -> Iterable[Example]:
    slots = ("subj", "past", "adj", "obj", "place")
    for _ in range(n):
        c = _clause(rng)
        d = _clause(rng)
        keep = rng.randint(0, len(slots))
        kept = set(rng.sample(slots, keep))
        mixed = {k: (c[k] if k in kept else d[k]) for k in c}
        same = sum(mixed[k] == c[k] for k in slots) / len(slots)
        score = min(5.0, max(0.0, 5.0 * same + rng.gauss(0.0, 0.3)))
        yield Example((_sentence(c) + " .", _sentence(mixed) + " ."), round(score, 3))


def _nli_hypothesis(rng: random.Random, c: Mapping[str, str], label: str, other: bool) -> str:
    if label == "entailment":
        return rng.choice((f"{c['subj']} {c['past']} a {c['obj']}",
                           f"someone {c['past']} something in the {c['place']}",
                           f"{c['subj']} was in the {c['place']}"))
    if label == "contradiction":
        return rng.choice((f"{c['subj']} did not {c['base']} the {c['obj']}",
                           f"nobody {c['past']} anything in the {c['place']}",
                           f"{c['subj']} never went to the {c['place']}"))
    d = _clause(rng, other)
    return rng.choice((f"{c['subj']} {c['past']} the {c['obj']} because {rng.choice(_REASONS)}",
                       f"{c['subj']} also {d['past']} a {d['obj']}",
                       f"the {c['obj']} cost a lot of money"))


def _gen_mnli(rng: random.Random, n: int, other: bool) -> Iterable[Example]:
    names = TASKS["mnli"].label_names
    for _ in range(n):
        c = _clause(rng, other)
        label = rng.randrange(3)
        yield Example((_sentence(c) + " .", _nli_hypothesis(rng, c, names[label], other) + " ."),
                      label)


def _gen_rte(rng: random.Random, n: int, _other: bool) -> Iterable[Example]:
    for _ in range(n):
        c = _clause(rng)
        entails = rng.random() < 0.5
        kind = "entailment" if entails else rng.choice(("contradiction", "neutral"))
        yield Example((_sentence(c) + " .", _nli_hypothesis(rng, c, kind, False) + " ."),
                      0 if entails else 1)  # RTE: 0 entailment, 1 not_entailment


def _gen_qnli(rng: random.Random, n: int, _other: bool) -> Iterable[Example]:
    for _ in range(n):
        c = _clause(rng)
        question = f"what did {c['subj']} {c['base']} in the {c['place']} ?"
        entails = rng.random() < 0.5
        if entails:
            sentence = _sentence(c)
        else:
            d = _clause(rng)
            sentence = _sentence(dict(d, place=c["place"])) if rng.random() < 0.5 else (
                f"{c['subj']} lived near the {d['place']} for many years")
        yield Example((question, sentence + " ."), 0 if entails else 1)


def _gen_wnli(rng: random.Random, n: int, _other: bool) -> Iterable[Example]:
    for _ in range(n):
        first, second = rng.choice(_WNLI_PAIRS)
        refers_first = rng.random() < 0.5
        adj = rng.choice(_WNLI_FIRST if refers_first else _WNLI_SECOND)
        verb = rng.choice(("chased", "called", "followed", "warned"))
        s1 = f"{first} {verb} {second} because it was {adj} ."
        named = first if rng.random() < 0.5 else second
        entails = (named == first) == refers_first
        yield Example((s1[0].upper() + s1[1:], f"{named[0].upper() + named[1:]} was {adj} ."),
                      int(entails))  # WNLI: 1 entailment


_GENERATORS: dict[str, Callable[[random.Random, int, bool], Iterable[Example]]] = {
    "cola": _gen_cola, "sst2": _gen_sst2, "mrpc": _gen_mrpc, "qqp": _gen_qqp,
    "stsb": _gen_stsb, "mnli": _gen_mnli, "qnli": _gen_qnli, "rte": _gen_rte,
    "wnli": _gen_wnli,
}


# --------------------------------------------------------------------------- encoding


class EncodedSplit(Dataset):
    """Tokenized examples; item i is a dict of tensors (input_ids, attention_mask,
    token_type_ids for BERT, labels)."""

    def __init__(self, features: Mapping[str, Any], labels: torch.Tensor) -> None:
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
    train: Dataset
    eval: Mapping[str, Dataset]
    task: GlueTask
    collate: Callable[[Sequence[Mapping[str, torch.Tensor]]], dict[str, torch.Tensor]]
    max_seq_len: int = 0
    padding: str = "max_length"
    synthetic: bool = False
    source: str = ""


def encode(text: GlueText, tokenizer: Any, max_seq_len: int,
           padding: str = "max_length") -> EncodedGlue:
    """Tokenize every split. padding="max_length" pads each example to max_seq_len (the
    shape the energy profile was measured at); "dynamic" leaves padding to the collate."""
    if padding not in PADDINGS:
        raise ConfigError(f"unknown padding {padding!r}", f"use one of {', '.join(PADDINGS)}")
    if max_seq_len < 8:
        raise ConfigError(f"max_seq_len {max_seq_len} is too short", "use 8 tokens or more")
    if tokenizer.pad_token_id is None:
        raise ConfigError("the tokenizer has no pad token",
                          "load it with engine.workload.tokenization.load_tokenizer")
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


def _encode_split(task: GlueTask, examples: Sequence[Example], tokenizer: Any,
                  max_seq_len: int, padding: str) -> EncodedSplit:
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
    features: dict[str, Any] = {}
    for name in names:
        rows = enc[name]
        if padding == "max_length":
            features[name] = torch.tensor(rows, dtype=torch.long).reshape(len(rows), max_seq_len)
        else:
            features[name] = [torch.tensor(r, dtype=torch.long) for r in rows]
    dtype = torch.float32 if task.is_regression else torch.long
    labels = torch.tensor([ex.label for ex in examples], dtype=dtype)
    return EncodedSplit(features, labels)
