"""The torch ROC-AUC agrees with scikit-learn's, ties included; accuracy for multi-class tasks."""

from __future__ import annotations

import math

import pytest
import torch
from sklearn.metrics import roc_auc_score

from sgt_core.metrics import evaluate, metric_name, roc_auc


@pytest.mark.parametrize("seed", range(5))
def test_roc_auc_matches_sklearn(seed):
    generator = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 2, (500,), generator=generator)
    scores = torch.randn(500, generator=generator) + labels * 0.7
    scores = (scores * 4).round() / 4  # many ties
    assert roc_auc(scores, labels) == pytest.approx(roc_auc_score(labels.numpy(), scores.numpy()), abs=1e-12)


def test_roc_auc_edge_cases():
    assert roc_auc(torch.tensor([0.1, 0.9]), torch.tensor([0, 1])) == 1.0
    assert roc_auc(torch.tensor([0.9, 0.1]), torch.tensor([0, 1])) == 0.0
    assert roc_auc(torch.tensor([0.5, 0.5]), torch.tensor([0, 1])) == 0.5
    assert math.isnan(roc_auc(torch.tensor([0.1, 0.2]), torch.tensor([1, 1])))


def test_evaluate_picks_the_metric():
    assert metric_name(2) == "roc_auc" and metric_name(7) == "accuracy"
    logits = torch.tensor([[2.0, 0.0, 0.0], [0.0, 3.0, 0.0], [0.0, 0.0, 1.0], [5.0, 0.0, 0.0]])
    assert evaluate(logits, torch.tensor([0, 1, 1, 0]), 3) == 0.75
    binary = torch.tensor([[0.0, 1.0], [1.0, 0.0], [0.0, 2.0]])
    assert evaluate(binary, torch.tensor([1, 0, 1]), 2) == 1.0
