"""GLUE in its original folder layout (`SST-2/train.tsv`, `MNLI/dev_matched.tsv`, ...):
reading a task's splits with the columns of the original files, and writing synthetic
data in that layout (`generate_glue_folder`, for tests and demos)."""

from __future__ import annotations

import csv
import logging
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from engine.core.errors import ConfigError
from engine.workload.glue import TASKS, Example, GlueTask, get_task
from engine.workload.data.synthetic import synthetic_splits

log = logging.getLogger(__name__)

SYNTHETIC_MARKER = "SYNTHETIC.txt"  # generate_glue_folder leaves this, so loads stay labelled
_MNLI_GENRES = {False: ("fiction", "government", "slate", "telephone", "travel"),  # matched
                True: ("facetoface", "letters", "nineeleven", "oup", "verbatim")}


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


def task_folder(task: GlueTask, root: Path) -> Path:
    """The folder under `root` that holds the task's train.tsv (a clear error when none does)."""
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


def read_folder(task: GlueTask, root: Path
                ) -> tuple[tuple[Example, ...], dict[str, tuple[Example, ...]], str, bool]:
    """A task's train and eval splits from a GLUE folder, where they came from, and whether
    generate_glue_folder wrote them (synthetic)."""
    folder = task_folder(task, root)
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
        "Generated by slm-dvfs (engine.workload.data.glue_folder.generate_glue_folder): synthetic text in "
        "the original GLUE layout. Not real GLUE data.\n", encoding="utf-8")
    for name in tasks:
        task = get_task(name)
        train, evals = synthetic_splits(task, train_size, [dev_size] * len(task.eval_splits),
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

