"""GLUE's official metrics, in NumPy alone (no scikit-learn import on the training path).

Degenerate inputs (a constant prediction, no positive class at all) give 0.0 rather
than NaN, as scikit-learn does for MCC and F1, so a live display never shows "nan".
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

import numpy as np

from engine.core.errors import ConfigError
from engine.workload.glue import GlueTask, get_task

if TYPE_CHECKING:
    import numpy.typing as npt
    import torch


def compute_metrics(task: GlueTask | str, predictions: npt.ArrayLike | torch.Tensor,
                    labels: npt.ArrayLike | torch.Tensor) -> dict[str, float]:
    """The task's metrics. `predictions` are logits (N, C), regression outputs (N,) or
    (N, 1), or class ids (N,); tensors, arrays and lists are all accepted."""
    task = get_task(task)
    preds = _as_array(predictions)
    gold = _as_array(labels).reshape(-1)
    if task.is_regression:
        preds = preds.reshape(-1).astype(np.float64)
        gold = gold.astype(np.float64)
    else:
        if preds.ndim == 2:
            preds = preds.argmax(axis=-1)
        elif preds.ndim != 1:
            raise ConfigError(
                f"{task.display} predictions have shape {preds.shape}",
                "pass logits of shape (N, num_labels) or class ids of shape (N,)",
            )
        preds = preds.astype(np.int64)
        gold = gold.astype(np.int64)
    if preds.shape[0] != gold.shape[0]:
        raise ConfigError(
            f"{task.display}: {preds.shape[0]} predictions for {gold.shape[0]} labels",
            "evaluate predictions and labels of the same examples",
        )
    if gold.shape[0] == 0:
        raise ConfigError(f"{task.display}: no examples to score", "evaluate at least one example")
    funcs = {
        "accuracy": accuracy,
        "f1": f1,
        "matthews_correlation": matthews_correlation,
        "pearson": pearson,
        "spearman": spearman,
    }
    return {name: funcs[name](preds, gold) for name in task.metrics}


def accuracy(preds: np.ndarray, gold: np.ndarray) -> float:
    return float(np.mean(preds == gold))


def f1(preds: np.ndarray, gold: np.ndarray) -> float:
    """Binary F1 of the positive class (label 1), as GLUE scores MRPC and QQP."""
    tp = float(np.sum((preds == 1) & (gold == 1)))
    fp = float(np.sum((preds == 1) & (gold != 1)))
    fn = float(np.sum((preds != 1) & (gold == 1)))
    denom = 2 * tp + fp + fn
    return 2 * tp / denom if denom else 0.0


def matthews_correlation(preds: np.ndarray, gold: np.ndarray) -> float:
    """Multiclass MCC (Gorodkin's R_K), equal to the binary phi coefficient for two classes."""
    classes = np.union1d(preds, gold)
    index = {c: i for i, c in enumerate(classes)}
    conf = np.zeros((len(classes), len(classes)), dtype=np.float64)
    for p, g in zip(preds, gold):
        conf[index[g], index[p]] += 1
    t_k = conf.sum(axis=1)  # times each class truly occurred
    p_k = conf.sum(axis=0)  # times each class was predicted
    c = np.trace(conf)
    s = conf.sum()
    cov_ytyp = c * s - np.dot(t_k, p_k)
    cov_ypyp = s * s - np.dot(p_k, p_k)
    cov_ytyt = s * s - np.dot(t_k, t_k)
    denom = np.sqrt(cov_ytyt * cov_ypyp)
    return float(cov_ytyp / denom) if denom else 0.0


def pearson(preds: np.ndarray, gold: np.ndarray) -> float:
    x = preds - preds.mean()
    y = gold - gold.mean()
    denom = np.sqrt(np.dot(x, x) * np.dot(y, y))
    return float(np.dot(x, y) / denom) if denom else 0.0


def spearman(preds: np.ndarray, gold: np.ndarray) -> float:
    return pearson(_rank(preds), _rank(gold))


def _rank(values: np.ndarray) -> np.ndarray:
    """Ranks from 1, ties sharing their average rank (scipy's 'average' method)."""
    order = np.argsort(values, kind="mergesort")
    sorted_vals = values[order]
    # Start of each run of equal values, and the average rank of the run.
    starts = np.r_[True, sorted_vals[1:] != sorted_vals[:-1]]
    run_id = np.cumsum(starts) - 1
    bounds = np.r_[np.flatnonzero(starts), len(values)]
    avg = (bounds[:-1] + bounds[1:] + 1) / 2.0  # mean of 1-based ranks start+1 .. end
    ranks = np.empty(len(values), dtype=np.float64)
    ranks[order] = avg[run_id]
    return ranks


def _as_array(values: object) -> np.ndarray:
    if hasattr(values, "detach"):  # a torch tensor; no torch import needed here
        tensor = cast("torch.Tensor", values)
        values = tensor.detach().cpu().float().numpy() if tensor.is_floating_point() else (
            tensor.detach().cpu().numpy()
        )
    return np.asarray(values)
