"""GLUE metrics against scikit-learn and SciPy references."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import pearsonr, spearmanr
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

from engine.core.errors import ConfigError
from engine.workload.glue import TASKS
from engine.workload.training.metrics import compute_metrics


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def _noisy_labels(rng, gold, num_labels, flip=0.3):
    pred = gold.copy()
    mask = rng.random(len(gold)) < flip
    pred[mask] = rng.integers(0, num_labels, mask.sum())
    return pred


def test_every_task_reports_its_official_metrics(rng):
    for task in TASKS.values():
        n = 50
        if task.is_regression:
            out = compute_metrics(task, rng.normal(size=n), rng.uniform(0, 5, n))
        else:
            out = compute_metrics(task, rng.normal(size=(n, task.num_labels)),
                                  rng.integers(0, task.num_labels, n))
        assert set(out) == set(task.metrics), task.name
        assert task.primary_metric in out
        assert all(isinstance(v, float) for v in out.values())


def test_cola_matthews_matches_sklearn(rng):
    gold = rng.integers(0, 2, 300)
    pred = _noisy_labels(rng, gold, 2)
    out = compute_metrics("CoLA", pred, gold)
    assert out["matthews_correlation"] == pytest.approx(matthews_corrcoef(gold, pred), abs=1e-12)


def test_multiclass_matthews_matches_sklearn(rng):
    from engine.workload.training.metrics import matthews_correlation

    gold = rng.integers(0, 3, 400)
    pred = _noisy_labels(rng, gold, 3, flip=0.5)
    assert matthews_correlation(pred, gold) == pytest.approx(matthews_corrcoef(gold, pred),
                                                             abs=1e-12)


@pytest.mark.parametrize("task", ["mrpc", "qqp"])
def test_f1_and_accuracy_from_logits_match_sklearn(rng, task):
    gold = rng.integers(0, 2, 257)
    logits = rng.normal(size=(257, 2))
    logits[np.arange(257), gold] += 0.8  # better than chance, not perfect
    pred = logits.argmax(-1)
    out = compute_metrics(task, logits, gold)
    assert out["f1"] == pytest.approx(f1_score(gold, pred), abs=1e-12)
    assert out["accuracy"] == pytest.approx(accuracy_score(gold, pred), abs=1e-12)
    assert 0.5 < out["accuracy"] < 1.0


def test_mnli_accuracy_from_class_ids_and_tensors(rng):
    gold = rng.integers(0, 3, 99)
    pred = _noisy_labels(rng, gold, 3)
    expected = accuracy_score(gold, pred)
    assert compute_metrics("mnli", pred, gold)["accuracy"] == pytest.approx(expected)
    logits = torch.nn.functional.one_hot(torch.as_tensor(pred), 3).float()
    assert compute_metrics("MNLI", logits, torch.as_tensor(gold))["accuracy"] == pytest.approx(
        expected)


def test_stsb_pearson_and_spearman_match_scipy_including_ties(rng):
    gold = np.round(rng.uniform(0, 5, 200), 1)  # rounding makes ties, as real STS-B has
    pred = gold + rng.normal(scale=1.0, size=200)
    pred[:20] = 2.5  # ties in predictions too
    out = compute_metrics("STS-B", pred.reshape(-1, 1), gold)
    assert out["pearson"] == pytest.approx(pearsonr(pred, gold)[0], abs=1e-10)
    assert out["spearman"] == pytest.approx(spearmanr(pred, gold)[0], abs=1e-10)
    assert out["pearson"] != pytest.approx(out["spearman"], abs=1e-6)


def test_perfect_and_degenerate_predictions():
    gold = np.array([0, 1, 1, 0, 1])
    assert compute_metrics("mrpc", gold, gold) == {"f1": 1.0, "accuracy": 1.0}
    assert compute_metrics("cola", gold, gold)["matthews_correlation"] == pytest.approx(1.0)
    # A constant prediction has no correlation: 0.0, as scikit-learn reports, never NaN.
    assert compute_metrics("cola", np.ones(5), gold)["matthews_correlation"] == 0.0
    assert compute_metrics("qqp", np.zeros(5, dtype=int), gold)["f1"] == 0.0
    assert compute_metrics("stsb", np.full(5, 3.0), [1.0, 2.0, 3.0, 4.0, 5.0])["pearson"] == 0.0


def test_mismatched_lengths_and_bad_shapes_are_clear_errors():
    with pytest.raises(ConfigError, match="3 predictions for 2 labels"):
        compute_metrics("sst2", [0, 1, 1], [0, 1])
    with pytest.raises(ConfigError, match="shape"):
        compute_metrics("sst2", np.zeros((2, 2, 2)), [0, 1])
    with pytest.raises(ConfigError, match="unknown GLUE task"):
        compute_metrics("imdb", [0], [0])
