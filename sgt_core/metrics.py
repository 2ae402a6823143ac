"""The dataset's evaluation metric: ROC-AUC for binary tasks, accuracy otherwise."""

from __future__ import annotations

import torch
from sklearn.metrics import roc_auc_score
from torch import Tensor


def metric_name(num_classes: int) -> str:
    """The metric the literature reports for a task with `num_classes` classes."""
    return "roc_auc" if num_classes == 2 else "accuracy"


def evaluate(logits: Tensor, labels: Tensor, num_classes: int) -> float:
    """The task metric of `logits` [M, C] against `labels` [M] (the rows of the nodes being scored)."""
    logits, labels = logits.detach().float().cpu(), labels.cpu()
    if num_classes == 2:
        if labels.unique().numel() < 2:  # AUC is undefined on a one-class split
            return float("nan")
        positive_probability = torch.softmax(logits, dim=-1)[:, 1]
        return float(roc_auc_score(labels.numpy(), positive_probability.numpy()))
    return float((logits.argmax(dim=-1) == labels).float().mean())
