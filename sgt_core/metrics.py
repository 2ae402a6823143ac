"""The dataset's evaluation metric: ROC-AUC for binary tasks, accuracy otherwise."""

from __future__ import annotations

import torch
from torch import Tensor


def metric_name(num_classes: int) -> str:
    """The metric the literature reports for a task with `num_classes` classes."""
    return "roc_auc" if num_classes == 2 else "accuracy"


def roc_auc(scores: Tensor, labels: Tensor) -> float:
    """Area under the ROC curve of `scores` [M] for binary `labels` [M], ties counted half.

    The Mann-Whitney form: AUC = (sum of the positives' ranks - P(P+1)/2) / (P * N), with tied scores
    sharing their average rank. Written in torch rather than imported from scikit-learn, whose import
    alone costs the training stages ~70 MB of resident memory.
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


def accuracy(logits: Tensor, labels: Tensor) -> float:
    """Share of rows whose highest logit is the label."""
    return float((logits.detach().argmax(dim=-1).cpu() == labels.cpu()).float().mean())


def all_metrics(logits: Tensor, labels: Tensor, num_classes: int) -> dict[str, float]:
    """The task metric and, for binary tasks, accuracy beside ROC-AUC."""
    metrics = {metric_name(num_classes): evaluate(logits, labels, num_classes)}
    metrics.setdefault("accuracy", accuracy(logits, labels))
    return metrics


def evaluate(logits: Tensor, labels: Tensor, num_classes: int) -> float:
    """The task metric of `logits` [M, C] against `labels` [M] (the rows of the nodes being scored)."""
    logits, labels = logits.detach().float().cpu(), labels.cpu()
    if num_classes == 2:
        return roc_auc(logits[:, 1] - logits[:, 0], labels)  # the log-odds orders nodes like P(class 1)
    return accuracy(logits, labels)
