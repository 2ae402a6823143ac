"""The multi-label generator: shapes, seeding, the unknown labels, and a signal carried by the edge features."""

import numpy as np
import pytest
import torch
from scipy import sparse
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score

from sgt_core.config import compose_config
from sgt_core.data import load_dataset
from sgt_core.errors import ConfigError

CONFIG = {"name": "synthetic_multilabel", "num_nodes": 3000, "avg_degree": 16, "num_tasks": 6, "num_features": 8,
          "num_edge_features": 8, "unknown_fraction": 0.2, "split": {"train": 0.6, "val": 0.2, "test": 0.2}}


def generate(seed: int = 0, **changes):
    return load_dataset({**CONFIG, **changes}, seed=seed)


@pytest.fixture(scope="module")
def graph():
    return generate()


def test_one_graph_with_edge_features_and_multilabel_targets(graph):
    assert graph.task == "node_multilabel" and graph.metric == "roc_auc" and graph.num_tasks == 6
    assert graph.graph_ptr.tolist() == [0, 3000]
    assert graph.x.shape == (3000, 8) and graph.y.shape == (3000, 6) and graph.y.dtype == torch.float32
    assert graph.edge_index.shape == (2, 3000 * 16)  # round(N d / 2) undirected edges, both directions
    assert graph.edge_attr.shape == (3000 * 16, 8) and graph.edge_attr.dtype == torch.float32
    assert float(graph.edge_attr.min()) >= 0 and float(graph.edge_attr.max()) <= 1
    # both directions of an edge carry the same features
    forward = {(a, b): row for (a, b), row in zip(graph.edge_index.T.tolist(), graph.edge_attr.tolist())}
    assert all(forward[(b, a)] == row for (a, b), row in list(forward.items())[:500])
    known = graph.y[~graph.y.isnan()]
    assert set(known.unique().tolist()) == {0.0, 1.0}
    positive = torch.nanmean(graph.y, dim=0)
    assert float(positive.min()) > 0.08 and float(positive.max()) < 0.52  # shares drawn in [0.1, 0.5]
    split = torch.stack([graph.train_mask, graph.val_mask, graph.test_mask]).sum(dim=1).tolist()
    assert split == [1800, 600, 600]


def test_the_unknown_share_is_nan(graph):
    assert abs(float(graph.y.isnan().float().mean()) - 0.2) < 0.01
    assert not generate(unknown_fraction=0.0).y.isnan().any()


def test_same_seed_same_graph_other_seed_differs(graph):
    again, other = generate(), generate(seed=1)
    for key in ("x", "edge_index", "edge_attr", "train_mask"):
        assert torch.equal(graph[key], again[key]), key
    assert torch.equal(graph.y.nan_to_num(-1), again.y.nan_to_num(-1))
    assert not torch.equal(graph.x, other.x) and not torch.equal(graph.edge_index, other.edge_index)


def mean_roc_auc(features: np.ndarray, graph) -> float:
    """Test ROC-AUC averaged over tasks of one logistic regression per task, fitted on the known train labels."""
    y, train, test = graph.y.numpy(), graph.train_mask.numpy(), graph.test_mask.numpy()
    scores = []
    for task in range(y.shape[1]):
        known = ~np.isnan(y[:, task])
        model = LogisticRegression(max_iter=1000).fit(features[train & known], y[train & known, task])
        scores.append(roc_auc_score(y[test & known, task], model.decision_function(features[test & known])))
    return float(np.mean(scores))


def test_the_edge_features_carry_the_signal(graph):
    x, (source, target), edges = graph.x.numpy().astype(np.float64), graph.edge_index.numpy(), graph.edge_attr.numpy()
    num_nodes = x.shape[0]
    adjacency = sparse.csr_matrix((np.ones(source.size), (target, source)), shape=(num_nodes, num_nodes))
    degree = np.maximum(np.asarray(adjacency.sum(axis=1)).ravel(), 1)[:, None]
    neighbours = adjacency @ x / degree  # [N, F] mean of the neighbours' features
    weighted = (edges[:, :, None] * x[source][:, None, :]).reshape(source.size, -1)  # [E, Fe*F] e_ij (x) x_j
    through_edges = sparse.csr_matrix((np.ones(source.size), (target, np.arange(source.size))),
                                      shape=(num_nodes, source.size)) @ weighted / degree
    without = mean_roc_auc(np.hstack([x, neighbours]), graph)
    with_edges = mean_roc_auc(np.hstack([x, neighbours, through_edges]), graph)
    assert 0.55 < without < 0.8, without  # the own features alone tell something
    assert with_edges > 0.85 and with_edges > without + 0.12, (without, with_edges)


@pytest.mark.parametrize("key, value, message", [
    ("num_nodes", 5, r"^dataset\.num_nodes: must be an integer >= 10, found 5"),
    ("avg_degree", 2000, r"^dataset\.avg_degree: must be a number in \(0, 1499\.5\] with num_nodes=3000"),
    ("unknown_fraction", 1.0, r"^dataset\.unknown_fraction: must be a number in \[0, 1\), found 1\.0"),
    ("num_edge_features", 0, r"^dataset\.num_edge_features: must be an integer >= 1, found 0"),
])
def test_bad_values_are_named(key, value, message):
    with pytest.raises(ConfigError, match=message):
        generate(**{key: value})


def test_the_shipped_config_loads():
    dataset = compose_config(["dataset=synthetic_multilabel", "dataset.num_nodes=200", "dataset.avg_degree=4"])
    graph = load_dataset(dataset["dataset"], seed=0)
    assert graph.num_tasks == 16 and graph.edge_attr.shape[1] == 8 and graph.edge_index.shape[1] == 800
