"""Each task's metrics against scikit-learn's and OGB's definitions, its loss, and its selection direction."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from sklearn.metrics import (
    average_precision_score,
    balanced_accuracy_score,
    mean_absolute_error,
    roc_auc_score,
)

from sgt_core.metrics import UNDEFINED, average_precision, weighted_accuracy
from sgt_core.tasks import BestEpoch, Task, default_metric


@pytest.mark.parametrize("seed", range(4))
def test_average_precision_matches_sklearn_with_ties(seed):
    generator = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 2, (400,), generator=generator)
    scores = ((torch.randn(400, generator=generator) + labels) * 3).round() / 3  # many ties
    expected = average_precision_score(labels.numpy(), scores.numpy())
    assert average_precision(scores, labels) == pytest.approx(expected, abs=1e-12)


@pytest.mark.filterwarnings("ignore:y_pred contains classes not in y_true")  # class 5: predicted, never present
def test_weighted_accuracy_is_balanced_accuracy():
    generator = torch.Generator().manual_seed(0)
    labels = torch.randint(0, 6, (500,), generator=generator)
    labels[labels == 5] = 0  # an unbalanced class mix
    logits = torch.randn(500, 6, generator=generator) + 2 * torch.nn.functional.one_hot(labels, 6)
    expected = balanced_accuracy_score(labels.numpy(), logits.argmax(1).numpy())
    assert weighted_accuracy(logits, labels) == pytest.approx(expected, abs=1e-12)


def test_multilabel_metrics_average_ogb_style_over_tasks_with_both_labels():
    generator = torch.Generator().manual_seed(1)
    labels = torch.randint(0, 2, (200, 5), generator=generator).float()
    labels[torch.rand(200, 5, generator=generator) < 0.2] = float("nan")  # unknown labels
    labels[:, 4] = 1.0  # a task with one class only: left out of the average, as OGB's evaluator does
    scores = torch.randn(200, 5, generator=generator) + torch.nan_to_num(labels)
    task = Task("graph_multilabel", "ap", 5)
    known = ~labels.isnan()
    expected_ap = np.mean([average_precision_score(labels[known[:, t], t], scores[known[:, t], t]) for t in range(4)])
    expected_auc = np.mean([roc_auc_score(labels[known[:, t], t], scores[known[:, t], t]) for t in range(4)])
    metrics = task.metrics(scores, labels)
    assert metrics["ap"] == pytest.approx(expected_ap, abs=1e-12)
    assert metrics["roc_auc"] == pytest.approx(expected_auc, abs=1e-12)
    assert list(metrics) == ["ap", "roc_auc"]


def test_regression_mae_ignores_unknown_targets_and_loss_masks_them():
    predictions = torch.tensor([[1.0, 2.0], [3.0, 5.0], [0.0, 0.0]])
    targets = torch.tensor([[1.5, float("nan")], [2.0, 5.0], [1.0, -1.0]])
    known = ~targets.isnan()
    task = Task("graph_regression", "mae", 2)
    expected = mean_absolute_error(targets[known].numpy(), predictions[known].numpy())
    assert task.value("mae", predictions, targets) == pytest.approx(expected)
    assert task.loss(predictions, targets).item() == pytest.approx(expected)
    assert Task("graph_regression", "mae", 2, "mse").loss(predictions, targets).item() == pytest.approx(
        float(((predictions - targets)[known] ** 2).mean()))


def test_multilabel_loss_is_binary_cross_entropy_over_known_labels():
    outputs = torch.tensor([[0.5, -1.0], [2.0, 0.0]])
    targets = torch.tensor([[1.0, float("nan")], [0.0, 1.0]])
    known = ~targets.isnan()
    expected = torch.nn.functional.binary_cross_entropy_with_logits(outputs[known], targets[known])
    assert Task("node_multilabel", "roc_auc", 2).loss(outputs, targets).item() == pytest.approx(expected.item())


def test_loss_sum_divided_by_rows_is_the_mean_loss():
    generator = torch.Generator().manual_seed(2)
    outputs, targets = torch.randn(7, 3, generator=generator), torch.randn(7, 3, generator=generator)
    task = Task("graph_regression", "mae", 3)
    assert (task.loss_sum(outputs, targets) / 7).item() == pytest.approx(task.loss(outputs, targets).item())
    classes = torch.randint(0, 3, (7,), generator=generator)
    classification = Task("graph_classification", "accuracy", 3)
    assert (classification.loss_sum(outputs, classes) / 7).item() == pytest.approx(
        classification.loss(outputs, classes).item())



def benchmarking_gnns_weighted_loss(outputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Benchmarking GNNs' SBM loss, as its papers describe it, written out term by term: class c weighs
    (V - n_c) / V (0 if absent) and the loss is the weighted mean of the rows' negative log-likelihoods."""
    size, num_classes = labels.shape[0], outputs.shape[1]
    counts = [int((labels == c).sum()) for c in range(num_classes)]
    weights = [(size - n) / size if n else 0.0 for n in counts]
    log_probabilities = outputs.log_softmax(dim=1)
    numerator = sum(-weights[int(y)] * log_probabilities[row, int(y)] for row, y in enumerate(labels))
    return numerator / sum(weights[int(y)] for y in labels)


@pytest.mark.parametrize("seed", range(3))
def test_weighted_cross_entropy_is_benchmarking_gnns_loss(seed):
    generator = torch.Generator().manual_seed(seed)
    # imbalanced, one class absent: PATTERN's and CLUSTER's batches are like this
    labels = torch.cat([torch.zeros(20, dtype=torch.long), torch.ones(5, dtype=torch.long),
                        torch.full((2,), 3, dtype=torch.long)])
    outputs = torch.randn(labels.shape[0], 4, generator=generator, dtype=torch.float64)
    task = Task("node_classification", "weighted_accuracy", 4, classification_loss="weighted_cross_entropy")
    expected = benchmarking_gnns_weighted_loss(outputs, labels)
    assert task.loss(outputs, labels).item() == pytest.approx(expected.item(), rel=1e-12)
    assert task.class_weights(labels).tolist() == pytest.approx([7 / 27, 22 / 27, 0.0, 25 / 27])
    # the minority classes weigh more than plain cross entropy gives them, so the two differ
    plain = Task("node_classification", "weighted_accuracy", 4).loss(outputs, labels)
    assert abs(plain.item() - expected.item()) > 1e-6
    # a share's loss_sum over its rows is its loss (one rank of a distributed run)
    assert (task.loss_sum(outputs, labels) / labels.shape[0]).item() == pytest.approx(expected.item(), rel=1e-12)


def test_weighted_cross_entropy_of_a_batch_of_one_class_is_plain_cross_entropy():
    outputs = torch.randn(6, 3, generator=torch.Generator().manual_seed(0))
    labels = torch.full((6,), 2, dtype=torch.long)
    weighted = Task("graph_classification", "accuracy", 3, classification_loss="weighted_cross_entropy")
    loss = weighted.loss(outputs, labels)
    assert torch.isfinite(loss)  # (V - V) / V would weigh the lone class 0: a loss of 0 / 0
    assert loss.item() == pytest.approx(torch.nn.functional.cross_entropy(outputs, labels).item())


def test_an_unknown_classification_loss_is_refused():
    with pytest.raises(ValueError, match="unknown classification loss 'focal'"):
        Task("node_classification", "accuracy", 3, classification_loss="focal")

def test_mae_is_minimised_and_others_maximised():
    mae = BestEpoch(Task("graph_regression", "mae", 1), val_undefined=False)
    assert mae.improves(0, {"val_mae": 0.5}) and mae.improves(1, {"val_mae": 0.3})
    assert not mae.improves(2, {"val_mae": 0.4}) and mae.epoch == 1
    auc = BestEpoch(Task("graph_classification", "roc_auc", 2), val_undefined=False)
    assert auc.improves(0, {"val_roc_auc": 0.6}) and not auc.improves(1, {"val_roc_auc": 0.5})
    by_loss = BestEpoch(Task("graph_classification", "roc_auc", 2), val_undefined=True)
    assert by_loss.selected_by == "val_loss"
    assert by_loss.improves(0, {"val_loss": 1.0}) and by_loss.improves(1, {"val_loss": 0.9})


def test_a_metric_that_does_not_fit_its_task_is_refused():
    with pytest.raises(ValueError, match="does not fit"):
        Task("graph_regression", "accuracy", 1)
    with pytest.raises(ValueError, match="does not fit"):
        Task("graph_classification", "roc_auc", 3)
    assert default_metric("graph_classification", 2) == "roc_auc"
    assert default_metric("graph_multilabel", 10) == "ap" and default_metric("node_multilabel", 112) == "roc_auc"


def test_undefined_metrics_are_named_and_reported_as_undefined():
    task = Task("graph_classification", "roc_auc", 2)
    assert task.undefined(torch.tensor([1, 1, 1])) == "only class 1 in it"
    assert task.metrics(torch.randn(3, 2), torch.tensor([1, 1, 1]))["roc_auc"] == UNDEFINED
    multilabel = Task("graph_multilabel", "ap", 2)
    assert multilabel.undefined(torch.tensor([[1.0, float("nan")], [1.0, 1.0]])) == "no task with both labels in it"


def test_priors():
    classes = Task("node_classification", "accuracy", 3).prior(torch.tensor([0, 0, 1]))
    assert torch.allclose(classes, torch.log(torch.tensor([2.0, 1.0, 1.0])) - math.log(2) / 3)
    mean = Task("graph_regression", "mae", 1).prior(torch.tensor([[1.0], [3.0], [float("nan")]]))
    assert torch.allclose(mean, torch.tensor([2.0]))
    odds = Task("graph_multilabel", "ap", 1).prior(torch.tensor([[1.0], [0.0], [0.0], [0.0]]))
    assert torch.allclose(odds, torch.log(torch.tensor([1 / 3])))


def test_the_weighted_prior_is_the_best_constant_output_under_weighted_cross_entropy():
    labels = torch.tensor([0] * 6 + [1] * 3 + [2] * 1)
    task = Task("node_classification", "weighted_accuracy", 3, classification_loss="weighted_cross_entropy")
    constant = task.prior(labels).double().requires_grad_()
    task.loss(constant.expand(labels.shape[0], 3), labels).backward()
    assert constant.grad.abs().max().item() < 1e-6  # the weighted loss is stationary there (and convex)
    plain_prior = Task("node_classification", "accuracy", 3).prior(labels).double().requires_grad_()
    task.loss(plain_prior.expand(labels.shape[0], 3), labels).backward()
    assert plain_prior.grad.abs().max().item() > 0.05  # the unweighted prior is not
    two_classes = Task("node_classification", "weighted_accuracy", 2, classification_loss="weighted_cross_entropy")
    assert torch.allclose(two_classes.prior(torch.tensor([0, 0, 0, 1])), torch.zeros(2))  # uniform
