"""The nine GLUE tasks: their text fields, label sets and official metrics; and one example.

Field and label names follow the hub dataset (`nyu-mll/glue`), so an example means the
same thing whichever source (hub, local GLUE folder, synthetic) it came from.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from engine.core.text import shown
from engine.core.errors import ConfigError


@dataclass(frozen=True)
class GlueTask:
    name: str  # canonical lower-case key: "cola", "sst2", ...
    display: str  # "SST-2": also the folder name in the original GLUE layout
    text_fields: tuple[str, ...]
    num_labels: int  # 1 for the regression task (STS-B)
    is_regression: bool
    label_names: tuple[str, ...]  # index i is label i; () for regression
    metrics: tuple[str, ...]  # keys `compute_metrics` returns
    primary_metric: str
    eval_splits: tuple[str, ...]  # ("validation",) or MNLI's matched/mismatched pair
    train_size: int = 0  # examples in the real train split (for sizing, and to show the user)
    eval_sizes: tuple[int, ...] = ()  # examples in each real eval split, same order as eval_splits

    @property
    def is_pair(self) -> bool:
        return len(self.text_fields) == 2


@dataclass(frozen=True)
class Example:
    """One labelled example, whichever source it came from."""

    texts: tuple[str, ...]  # in the order of task.text_fields
    label: float | int  # class index, or the score for regression


_ACC = ("accuracy",)
_F1_ACC = ("f1", "accuracy")
_VAL = ("validation",)

TASKS: dict[str, GlueTask] = {
    t.name: t
    for t in (
        GlueTask("cola", "CoLA", ("sentence",), 2, False, ("unacceptable", "acceptable"),
                 ("matthews_correlation",), "matthews_correlation", _VAL, 8551, (1043,)),
        GlueTask("sst2", "SST-2", ("sentence",), 2, False, ("negative", "positive"),
                 _ACC, "accuracy", _VAL, 67349, (872,)),
        GlueTask("mrpc", "MRPC", ("sentence1", "sentence2"), 2, False,
                 ("not_equivalent", "equivalent"), _F1_ACC, "f1", _VAL, 3668, (408,)),
        GlueTask("qqp", "QQP", ("question1", "question2"), 2, False,
                 ("not_duplicate", "duplicate"), _F1_ACC, "f1", _VAL, 363846, (40430,)),
        # STS-B: the BERT paper and GLUE leaderboard lead with Spearman correlation.
        GlueTask("stsb", "STS-B", ("sentence1", "sentence2"), 1, True, (),
                 ("pearson", "spearman"), "spearman", _VAL, 5749, (1500,)),
        GlueTask("mnli", "MNLI", ("premise", "hypothesis"), 3, False,
                 ("entailment", "neutral", "contradiction"), _ACC, "accuracy",
                 ("validation_matched", "validation_mismatched"), 392702, (9815, 9832)),
        GlueTask("qnli", "QNLI", ("question", "sentence"), 2, False,
                 ("entailment", "not_entailment"), _ACC, "accuracy", _VAL, 104743, (5463,)),
        GlueTask("rte", "RTE", ("sentence1", "sentence2"), 2, False,
                 ("entailment", "not_entailment"), _ACC, "accuracy", _VAL, 2490, (277,)),
        GlueTask("wnli", "WNLI", ("sentence1", "sentence2"), 2, False,
                 ("not_entailment", "entailment"), _ACC, "accuracy", _VAL, 635, (71,)),
    )
}


def _key(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


_ALIASES = {_key(t.name): t.name for t in TASKS.values()} | {
    _key(t.display): t.name for t in TASKS.values()
}
_ALIASES |= {"mnlim": "mnli", "mnlimm": "mnli", "sts": "stsb"}


def get_task(name: str | GlueTask) -> GlueTask:
    """A task by any common spelling: "SST-2", "sst2", "sst-2", "STS-B", "mnli"."""
    if isinstance(name, GlueTask):
        return name
    canonical = _ALIASES.get(_key(str(name)))
    if canonical is None:
        raise ConfigError(
            f"unknown GLUE task {shown(name)!r}",
            "use one of " + ", ".join(t.display for t in TASKS.values()),
        )
    return TASKS[canonical]
