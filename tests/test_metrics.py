"""The torch ROC-AUC agrees with scikit-learn's, ties included; accuracy for multi-class tasks."""

from __future__ import annotations

import math

import pytest
import torch
from sklearn.metrics import roc_auc_score

from sgt_core.metrics import roc_auc
from sgt_core.tasks import Task, default_metric


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


def test_classification_picks_the_metric():
    assert default_metric("node_classification", 2) == "roc_auc"
    assert default_metric("node_classification", 7) == "accuracy"
    logits = torch.tensor([[2.0, 0.0, 0.0], [0.0, 3.0, 0.0], [0.0, 0.0, 1.0], [5.0, 0.0, 0.0]])
    assert Task("node_classification", "accuracy", 3).value("accuracy", logits, torch.tensor([0, 1, 1, 0])) == 0.75
    binary = torch.tensor([[0.0, 1.0], [1.0, 0.0], [0.0, 2.0]])
    assert Task("node_classification", "roc_auc", 2).value("roc_auc", binary, torch.tensor([1, 0, 1])) == 1.0
