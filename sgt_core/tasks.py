"""A learning task as data: what is predicted, its loss, its metrics, and which way is better.

The dataset declares its task (`data.task`, `data.metric`); the estimate and the train stage both read it
from the interaction graph, so one definition decides both stages' loss, metrics and best epoch:

| task | targets | loss | metrics (first: the one that selects the best epoch) |
|---|---|---|---|
| node_classification | class id per node [N] | cross entropy (or weighted, below) | roc_auc (2 classes) or accuracy; weighted_accuracy where the dataset asks; accuracy |
| node_multilabel | 0/1/NaN per node and task [N, T] | binary cross entropy, NaN masked | roc_auc averaged over tasks (OGB), ap |
| graph_classification | class id per graph [G] | cross entropy | as node_classification |
| graph_regression | value per graph and task [G, T] | L1 (ZINC's) or MSE, NaN masked | mae (lower is better) |
| graph_multilabel | 0/1/NaN per graph and task [G, T] | binary cross entropy, NaN masked | ap averaged over tasks (OGB), roc_auc |

MLflow metric names are `val_<metric>` and `test_<metric>` (`val_mae`, `test_ap`, `val_weighted_accuracy`, ...).

A classification task may train with Benchmarking GNNs' weighted cross entropy instead (`weighted_cross_entropy`,
what SAN, GraphGPS and Exphormer train PATTERN and CLUSTER with, whose weighted accuracy averages the classes'
recalls): each class weighs (V - n_c) / V in a batch of V rows of which n_c are of class c, 0 if absent.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from sgt_core.metrics import (
    UNDEFINED,
    accuracy,
    average_precision,
    mean_absolute_error,
    per_task_mean,
    roc_auc,
    weighted_accuracy,
)

log = logging.getLogger(__name__)

TASKS: tuple[str, ...] = (
    "node_classification", "node_multilabel", "graph_classification", "graph_regression", "graph_multilabel",
)
# The metrics a task may select by; every one but mae is maximised.
METRICS: tuple[str, ...] = ("accuracy", "roc_auc", "weighted_accuracy", "mae", "ap")
REGRESSION_LOSSES: tuple[str, ...] = ("l1", "mse")
CLASSIFICATION_LOSSES: tuple[str, ...] = ("cross_entropy", "weighted_cross_entropy")
# The metrics each kind of task reports, the selecting one first unless the dataset names another.
_REPORTED = {
    "classification": ("accuracy",),
    "multilabel": ("roc_auc", "ap"),
    "regression": ("mae",),
}


def default_metric(task: str, num_outputs: int) -> str:
    """The metric the literature reports for a task when its dataset names none."""
    kind = task_kind(task)
    if kind == "classification":
        return "roc_auc" if num_outputs == 2 else "accuracy"
    if kind == "regression":
        return "mae"
    return "ap" if task.startswith("graph") else "roc_auc"  # OGB: ogbg-molpcba/peptides AP, ogbn-proteins ROC-AUC


def task_kind(task: str) -> str:
    """classification, multilabel or regression."""
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; expected one of {', '.join(TASKS)}")
    return task.split("_", 1)[1]


@dataclass(frozen=True)
class Task:
    """One dataset's task: the loss, the metrics and the selection direction both stages use.

    Attributes:
        name: one of `TASKS`.
        metric: the metric that selects the best epoch (one of `METRICS`).
        num_outputs: the network's output columns: classes, or tasks T for multilabel and regression.
        regression_loss: l1 or mse (regression only).
        classification_loss: cross_entropy or weighted_cross_entropy (classification only; see the module's
            docstring).
    """

    name: str
    metric: str
    num_outputs: int
    regression_loss: str = "l1"
    classification_loss: str = "cross_entropy"

    def __post_init__(self) -> None:
        task_kind(self.name)
        if self.metric not in METRICS:
            raise ValueError(f"unknown metric {self.metric!r}; expected one of {', '.join(METRICS)}")
        if self.regression_loss not in REGRESSION_LOSSES:
            raise ValueError(f"unknown regression loss {self.regression_loss!r}; expected l1 or mse")
        if self.classification_loss not in CLASSIFICATION_LOSSES:
            raise ValueError(f"unknown classification loss {self.classification_loss!r}; expected "
                             f"{' or '.join(CLASSIFICATION_LOSSES)}")
        fits = {"classification": ("accuracy", "weighted_accuracy", "roc_auc", "ap"),
                "multilabel": ("roc_auc", "ap"), "regression": ("mae",)}[self.kind]
        if self.metric not in fits or (self.kind == "classification" and self.metric in ("roc_auc", "ap")
                                       and self.num_outputs != 2):
            raise ValueError(f"metric {self.metric!r} does not fit the task {self.name} with {self.num_outputs} "
                             f"outputs; it takes {', '.join(fits)} (roc_auc and ap: two classes only)")

    @property
    def kind(self) -> str:
        return task_kind(self.name)

    @property
    def level(self) -> str:
        """node or graph: what one target belongs to."""
        return self.name.split("_", 1)[0]

    @property
    def maximise(self) -> bool:
        """Whether a larger value of `metric` is better (all but MAE)."""
        return self.metric != "mae"

    @property
    def reported(self) -> tuple[str, ...]:
        """Every metric reported, the selecting one first."""
        return (self.metric, *(name for name in _REPORTED[self.kind] if name != self.metric))

    def loss(self, outputs: Tensor, targets: Tensor) -> Tensor:
        """The training loss of `outputs` [U, O] against `targets` ([U] class ids, or [U, T] with NaN unknown)."""
        if self.kind == "classification":
            return F.cross_entropy(outputs, targets, weight=self.class_weights(targets, outputs.dtype))
        targets = targets.view(outputs.shape)
        known = ~targets.isnan()
        if self.kind == "multilabel":
            return F.binary_cross_entropy_with_logits(outputs[known], targets[known])
        if self.regression_loss == "l1":
            return F.l1_loss(outputs[known], targets[known])
        return F.mse_loss(outputs[known], targets[known])

    def class_weights(self, targets: Tensor, dtype: torch.dtype = torch.float32) -> Tensor | None:
        """Weighted cross entropy's weights [C] for a batch's class ids `targets` [V]: (V - n_c) / V for the
        classes present, 0 for the absent; None with plain cross entropy.

        A batch of one class only would weigh it 0 (a loss of 0 / 0); it weighs 1 then, which is plain cross
        entropy, as any weight of a lone class is.
        """
        if self.classification_loss != "weighted_cross_entropy":
            return None
        counts = torch.bincount(targets, minlength=self.num_outputs).to(dtype)  # [C]
        present = counts > 0
        weights = torch.where(present, (targets.shape[0] - counts) / targets.shape[0], torch.zeros_like(counts))
        return torch.where(present.sum() < 2, present.to(dtype), weights)  # [C]

    def loss_sum(self, outputs: Tensor, targets: Tensor) -> Tensor:
        """The loss summed over the targets' rows (a row's known entries averaged as in `loss`): what a
        rank of a distributed run adds up before scaling by the global batch's row count."""
        if self.kind == "classification":
            if self.classification_loss == "weighted_cross_entropy":
                # the share's weighted mean per row: one share alone gives `loss`; each rank of a
                # distributed run weighs its classes by its own share, a batch of its own
                return self.loss(outputs, targets) * targets.shape[0]
            return F.cross_entropy(outputs, targets, reduction="sum")
        targets = targets.view(outputs.shape)
        known = ~targets.isnan()
        per_entry = (F.binary_cross_entropy_with_logits if self.kind == "multilabel" else
                     F.l1_loss if self.regression_loss == "l1" else F.mse_loss)
        return per_entry(outputs[known], targets[known], reduction="sum") / outputs.shape[1]

    def prior(self, targets: Tensor) -> Tensor:
        """What the outputs [C] should be before any learning, from the training targets: the classes' log
        prior (centred), each task's log-odds, or each regression target's mean.

        With weighted cross entropy the best constant output weighs class c by its weight too: over V
        targets, n_c of class c, p_c is proportional to n_c (V - n_c) (uniform for two classes).
        """
        if self.kind == "classification":
            counts = torch.bincount(targets.cpu(), minlength=self.num_outputs).float()  # [C]
            if self.classification_loss == "weighted_cross_entropy":
                counts = counts * (targets.shape[0] - counts)
            log_prior = counts.clamp_min(1).log()
            return log_prior - log_prior.mean()
        targets = targets.view(targets.shape[0], -1).float().cpu()
        mean = torch.nanmean(targets, dim=0).nan_to_num(0.0)  # [T]
        if self.kind == "regression":
            return mean
        rate = mean.clamp(1e-4, 1 - 1e-4)
        return (rate / (1 - rate)).log()

    def value(self, name: str, outputs: Tensor, targets: Tensor) -> float:
        """Metric `name` of `outputs` [U, O] against `targets`; NaN where the targets leave it undefined."""
        outputs = outputs.detach().float().cpu()
        targets = targets.cpu()
        if name == "accuracy":
            return accuracy(outputs, targets)
        if name == "weighted_accuracy":
            return weighted_accuracy(outputs, targets)
        if name == "mae":
            return mean_absolute_error(outputs, targets.view(outputs.shape))
        if self.kind == "multilabel":
            metric = roc_auc if name == "roc_auc" else average_precision
            return per_task_mean(metric, outputs, targets.view(outputs.shape))
        if name == "roc_auc":  # binary classification: the log-odds orders rows like P(class 1)
            return roc_auc(outputs[:, 1] - outputs[:, 0], targets)
        return average_precision(outputs[:, 1] - outputs[:, 0], targets)

    def metrics(self, outputs: Tensor, targets: Tensor) -> dict[str, float | str]:
        """Every reported metric by name; one the targets leave undefined is `UNDEFINED`."""
        values = {name: self.value(name, outputs, targets) for name in self.reported}
        return {name: UNDEFINED if math.isnan(value) else value for name, value in values.items()}

    def undefined(self, targets: Tensor) -> str | None:
        """Why `metric` is undefined on a split with these targets (e.g. ROC-AUC on one class), else None."""
        if targets.shape[0] == 0:
            return "no targets in it"
        if self.metric in ("roc_auc", "ap"):
            if self.kind == "classification":
                present = torch.unique(targets.cpu())
                return None if present.numel() >= 2 else f"only class {int(present[0])} in it"
            labels = targets.view(targets.shape[0], -1).cpu()
            positives, known = torch.nan_to_num(labels).sum(0), (~labels.isnan()).sum(0)
            if not bool(((positives > 0) & (positives < known)).any()):
                return "no task with both labels in it"
        return None

    def splits_without_metric(self, targets: dict[str, Tensor], stage: str) -> dict[str, str]:
        """The evaluation splits (name -> its targets) on which `metric` is undefined, each with a warning.

        Such a split's metric is reported as `undefined`; with the validation metric undefined, the best
        epoch is the one of lowest validation loss.
        """
        undefined = {}
        for split, split_targets in targets.items():
            reason = self.undefined(split_targets)
            if reason is not None:
                undefined[split] = reason
                log.warning("%s: the %s split has %s: its %s is undefined and reported as %r%s", stage, split,
                            reason, self.metric, UNDEFINED,
                            "; the best epoch is chosen by validation loss" if split == "val" else "")
        return undefined


class BestEpoch:
    """The best epoch so far by the validation metric in its task's direction (or lowest validation loss
    when that metric is undefined on the validation split): the rule both stages select by."""

    def __init__(self, task: Task, val_undefined: bool) -> None:
        self.task, self.by_loss = task, val_undefined
        self.epoch, self.best = -1, -math.inf

    @property
    def selected_by(self) -> str:
        """The history column that selects: `val_<metric>`, or `val_loss`."""
        return "val_loss" if self.by_loss else f"val_{self.task.metric}"

    def improves(self, epoch: int, row: dict) -> bool:
        """Whether `row` (an evaluated epoch's history row) beats every earlier one; if so it becomes the best."""
        value = row[self.selected_by]
        oriented = -value if (self.by_loss or not self.task.maximise) else value
        if oriented > self.best:
            self.epoch, self.best = epoch, oriented
            return True
        return False
