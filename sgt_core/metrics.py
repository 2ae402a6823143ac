"""Evaluation metrics as the literature computes them: accuracy, ROC-AUC, class-weighted accuracy, MAE, AP.

Written in torch rather than imported from scikit-learn, whose import alone costs the training stages
~70 MB of resident memory; tests/test_metrics.py checks each against scikit-learn's definition. Which
metric a dataset reports, and how, is its task's business (`sgt_core.tasks`).
"""

from __future__ import annotations

import torch
from torch import Tensor

UNDEFINED = "undefined"  # reported in place of a metric that a split's labels leave undefined


def roc_auc(scores: Tensor, labels: Tensor) -> float:
    """Area under the ROC curve of `scores` [M] for binary `labels` [M], ties counted half.

    The Mann-Whitney form: AUC = (sum of the positives' ranks - P(P+1)/2) / (P * N), with tied scores
    sharing their average rank. NaN when the labels hold one class only.
    """
    scores, labels = scores.double().flatten(), labels.flatten().bool()
    positives = int(labels.sum())
    negatives = labels.numel() - positives
    if positives == 0 or negatives == 0:  # undefined on a one-class split
        return float("nan")
    order = torch.argsort(scores)
    _, group, counts = torch.unique_consecutive(scores[order], return_inverse=True, return_counts=True)
    ends = counts.cumsum(0)
    average_rank = (ends - counts + 1 + ends).double() / 2  # 1-based ranks start..end, averaged per tie group
    ranks = torch.empty_like(scores)
    ranks[order] = average_rank[group]
    return float((ranks[labels].sum() - positives * (positives + 1) / 2) / (positives * negatives))


def average_precision(scores: Tensor, labels: Tensor) -> float:
    """Average precision of `scores` [M] for binary `labels` [M]: sum over thresholds of (R_k - R_{k-1}) P_k.

    scikit-learn's `average_precision_score`: the thresholds are the distinct scores, highest first, so
    tied scores enter together. NaN without a positive label.
    """
    scores, labels = scores.double().flatten(), labels.flatten().double()
    positives = float(labels.sum())
    if positives == 0:
        return float("nan")
    order = torch.argsort(scores, descending=True, stable=True)
    scores, labels = scores[order], labels[order]
    # The last position of each run of equal scores is where that threshold's counts are read.
    last = torch.ones_like(scores, dtype=torch.bool)
    last[:-1] = scores[1:] != scores[:-1]
    true_positives = labels.cumsum(0)[last]  # [K] at each distinct threshold
    predicted = torch.arange(1, scores.numel() + 1, dtype=torch.float64)[last]  # [K]
    precision = true_positives / predicted
    recall_gain = torch.diff(true_positives, prepend=true_positives.new_zeros(1)) / positives
    return float((recall_gain * precision).sum())


def accuracy(logits: Tensor, labels: Tensor) -> float:
    """Share of rows whose highest logit is the label."""
    return float((logits.detach().argmax(dim=-1).cpu() == labels.cpu()).float().mean())


def weighted_accuracy(logits: Tensor, labels: Tensor) -> float:
    """The mean over the classes present in `labels` of each class's accuracy (its recall).

    PATTERN's and CLUSTER's leaderboard metric (Dwivedi et al., Benchmarking GNNs), which is scikit-learn's
    `balanced_accuracy_score`. Benchmarking GNNs divides by the classes of its confusion matrix, which
    also counts a class only predicted, never present; on PATTERN and CLUSTER every class is present in
    every split, where the two agree.
    """
    predicted, labels = logits.detach().argmax(dim=-1).cpu(), labels.cpu()
    classes = max(int(labels.max()), int(predicted.max())) + 1
    present = torch.bincount(labels, minlength=classes)  # [C]
    hits = torch.bincount(labels[predicted == labels], minlength=classes)  # [C]
    seen = present > 0
    return float((hits[seen].double() / present[seen]).mean())


def mean_absolute_error(predictions: Tensor, targets: Tensor) -> float:
    """Mean |prediction - target| over every entry whose target is known (not NaN)."""
    predictions, targets = predictions.detach().double().cpu(), targets.double().cpu()
    known = ~targets.isnan()
    return float((predictions[known] - targets[known]).abs().mean())


def per_task_mean(metric, scores: Tensor, labels: Tensor) -> float:
    """OGB's evaluators for multi-task binary labels: `metric` on each task column over its known labels
    (not NaN), averaged over the columns where both classes occur. NaN when no column qualifies.

    Shapes:
        scores [M, T], labels [M, T] in {0, 1, NaN}.
    """
    scores, labels = scores.detach().double().cpu(), labels.double().cpu()
    values = []
    for column in range(labels.shape[1]):  # over tasks (tens), never over rows
        known = ~labels[:, column].isnan()
        column_labels = labels[known, column]
        if 0 < column_labels.sum() < column_labels.numel():
            values.append(metric(scores[known, column], column_labels))
    return sum(values) / len(values) if values else float("nan")
