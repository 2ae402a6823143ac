"""The dataset's evaluation metric: ROC-AUC for binary tasks, accuracy otherwise."""

from __future__ import annotations

import logging

import torch
from torch import Tensor

log = logging.getLogger(__name__)

UNDEFINED = "undefined"  # reported in place of a metric that a split's labels leave undefined


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


def undefined_metric(labels: Tensor, num_classes: int) -> str | None:
    """Why the task metric is undefined on a split with these labels (ROC-AUC on one class), else None."""
    if num_classes != 2:
        return None
    present = torch.unique(labels.cpu())
    if present.numel() >= 2:
        return None
    return f"only class {int(present[0])} in it" if present.numel() else "no nodes in it"


def splits_without_metric(y: Tensor, masks: dict[str, Tensor], num_classes: int, stage: str) -> dict[str, str]:
    """The evaluation splits on which the task metric is undefined, by name, each with a warning logged.

    Such a split's metric is reported as `undefined` (accuracy still is reported); with the validation
    metric undefined, the best epoch is the one of lowest validation loss.
    """
    undefined = {}
    for split, mask in masks.items():
        reason = undefined_metric(y[mask], num_classes)
        if reason is not None:
            undefined[split] = reason
            log.warning("%s: the %s split has %s: its %s is undefined and reported as %r (accuracy is still "
                        "reported)%s", stage, split, reason, metric_name(num_classes), UNDEFINED,
                        "; the best epoch is chosen by validation loss" if split == "val" else "")
    return undefined


def evaluate(logits: Tensor, labels: Tensor, num_classes: int) -> float:
    """The task metric of `logits` [M, C] against `labels` [M] (the rows of the nodes being scored)."""
    logits, labels = logits.detach().float().cpu(), labels.cpu()
    if num_classes == 2:
        return roc_auc(logits[:, 1] - logits[:, 0], labels)  # the log-odds orders nodes like P(class 1)
    return accuracy(logits, labels)
