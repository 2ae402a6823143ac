"""The synthetic generator: seeded, the requested size and homophily, and a class signal in the neighbours."""

import numpy as np
import pytest
import torch
from sklearn.linear_model import LogisticRegression
from torch_geometric.utils import to_undirected

from sgt_core.config import compose_config
from sgt_core.data import load_dataset
from sgt_core.data.synthetic import generate_synthetic
from sgt_core.errors import ConfigError

CONFIG = {
    "name": "synthetic",
    "num_nodes": 3000,
    "avg_degree": 20,
    "num_classes": 5,
    "num_features": 16,
    "homophily": 0.3,
    "feature_signal": 1.0,
    "split": {"train": 0.5, "val": 0.25, "test": 0.25},
    "standardize": False,
}


def synthetic(seed: int = 0, **changes):
    return load_dataset({**CONFIG, **changes}, seed=seed)


def edge_homophily(graph) -> float:
    source, target = graph.edge_index
    return float((graph.y[source] == graph.y[target]).double().mean())


@pytest.fixture(scope="module")
def graph():
    """The default-sized test graph, generated once for the tests that only read it."""
    return synthetic()


def test_same_seed_same_graph_other_seed_differs(graph):
    again, other = synthetic(), synthetic(seed=1)
    for key in ("x", "y", "edge_index", "train_mask", "val_mask", "test_mask"):
        assert torch.equal(graph[key], again[key]), key
    assert not torch.equal(graph.y, other.y)
    assert not torch.equal(graph.x, other.x)
    assert graph.edge_index.shape != other.edge_index.shape or not torch.equal(
        graph.edge_index, other.edge_index
    )


def test_contract_and_sizes(graph):
    assert graph.x.dtype == torch.float32 and graph.x.shape == (3000, 16)
    assert graph.y.dtype == torch.int64 and graph.num_classes == 5
    assert torch.bincount(graph.y).tolist() == [600] * 5  # balanced classes
    assert graph.edge_index.dtype == torch.int64
    # Exactly round(N * d / 2) undirected edges, each stored both ways.
    assert graph.edge_index.shape == (2, 2 * 30_000)
    source, target = graph.edge_index
    assert not (source == target).any()
    # PyG's to_undirected symmetrises, sorts and deduplicates: a graph already in that form is unchanged.
    assert torch.equal(to_undirected(graph.edge_index, num_nodes=3000), graph.edge_index)
    masks = torch.stack([graph.train_mask, graph.val_mask, graph.test_mask])
    assert masks.dtype == torch.bool and (masks.sum(dim=0) == 1).all()
    assert masks.sum(dim=1).tolist() == [1500, 750, 750]
    # Ends are uniform within their class, so degrees stay near d (binomial, no isolated nodes at d = 20).
    degree = torch.bincount(source, minlength=3000)
    assert degree.min() > 0 and abs(degree.double().mean() - 20) < 1e-9


@pytest.mark.parametrize("homophily", [0.1, 0.8])
def test_edge_homophily_follows_the_setting(homophily):
    assert edge_homophily(synthetic(homophily=homophily)) == pytest.approx(homophily, abs=0.02)


def test_heterophilous_edges_follow_a_ring_of_classes(graph):
    # Each class's cross-class neighbours are its two ring neighbours: 2 of the 4 other classes.
    source, target = graph.edge_index
    pair_counts = torch.zeros(5, 5, dtype=torch.long).index_put_(
        (graph.y[source], graph.y[target]), torch.ones_like(source), accumulate=True
    )
    off_diagonal = pair_counts - torch.diag(pair_counts.diag())
    assert ((off_diagonal > 0).sum(dim=1) == 2).all()


def neighbour_mean(graph) -> torch.Tensor:
    source, target = graph.edge_index
    degree = torch.bincount(target, minlength=graph.num_nodes).clamp(min=1)
    return torch.zeros_like(graph.x).index_add_(0, target, graph.x[source]) / degree[:, None]


def test_the_neighbours_carry_signal_the_features_lack(graph):
    # Logistic regression on a node's own features vs on [features, mean of the neighbours' features]; at
    # homophily 0.3 most neighbours are of other classes, yet which classes they are tells the node's class.
    labels, train, test = graph.y.numpy(), graph.train_mask.numpy(), graph.test_mask.numpy()

    def test_accuracy(inputs: np.ndarray) -> float:
        model = LogisticRegression(max_iter=1000).fit(inputs[train], labels[train])
        return model.score(inputs[test], labels[test])

    features_only = test_accuracy(graph.x.numpy())
    with_neighbours = test_accuracy(torch.cat([graph.x, neighbour_mean(graph)], dim=1).numpy())
    assert 0.25 < features_only < 0.5  # above chance (0.2): the features carry some signal
    assert with_neighbours > features_only + 0.12


def test_defaults_compose_and_override():
    cfg = compose_config(["dataset=synthetic", "dataset.num_nodes=1000"])
    dataset = cfg["dataset"]
    assert dataset["name"] == "synthetic" and dataset["num_nodes"] == 1000
    graph = load_dataset(dataset, seed=0)
    assert graph.num_nodes == 1000 and graph.edge_index.shape[1] == 1000 * dataset["avg_degree"]


@pytest.mark.parametrize(
    ("changes", "key"),
    [
        ({"num_nodes": 1}, "dataset.num_nodes"),
        ({"num_nodes": 10.5}, "dataset.num_nodes"),
        ({"num_classes": 1}, "dataset.num_classes"),
        ({"num_features": 0}, "dataset.num_features"),
        ({"homophily": 1.5}, "dataset.homophily"),
        ({"homophily": -0.1}, "dataset.homophily"),
        ({"feature_signal": -1}, "dataset.feature_signal"),
        ({"avg_degree": -2}, "dataset.avg_degree"),
        ({"avg_degree": 400}, "dataset.avg_degree"),  # denser than 600-node classes allow
        ({"split": {"train": 0.5, "val": 0.6, "test": 0.1}}, "dataset.split"),
    ],
)
def test_bad_values_raise_config_error(changes, key):
    with pytest.raises(ConfigError, match=key):
        synthetic(**changes)


def test_no_edges_at_degree_zero():
    graph = generate_synthetic(20, 0, 2, 3, 0.5, 1.0, {"train": 0.5, "val": 0.25, "test": 0.25}, seed=0)
    assert graph.edge_index.shape == (2, 0)
