"""The Minesweeper generator and the stratified split, checked against hand-computed values."""

import numpy as np
import pytest
import torch

from sgt_core.data import load_dataset
from sgt_core.data.minesweeper import generate_minesweeper, grid_edges, neighbour_mine_counts
from sgt_core.data.splits import stratified_split
from sgt_core.errors import ConfigError

SPLIT = {"train": 0.5, "val": 0.25, "test": 0.25}
CONFIG = {
    "name": "minesweeper",
    "height": 100,
    "width": 100,
    "mine_fraction": 0.2,
    "hidden_fraction": 0.5,
    "split": SPLIT,
}


@pytest.fixture(scope="module")
def grid_100():
    """The default 100×100 graph, generated once for the tests that only read it."""
    return load_dataset(CONFIG, seed=0)


def test_3x3_grid_edges():
    # Per row 2 horizontal edges (6), per column 2 vertical (6), 2 diagonals in each of 4 squares (8).
    edges = grid_edges(3, 3)
    assert edges.shape == (2, 20)
    pairs = {tuple(sorted(pair)) for pair in edges.T.tolist()}
    assert len(pairs) == 20
    assert {(0, 4), (2, 4), (6, 4), (8, 4)} <= {(a, b) if b == 4 else (b, a) for a, b in pairs}
    degree = np.bincount(edges.ravel(), minlength=9)
    # Corners touch 3 cells, edge cells 5, the centre 8.
    assert degree.tolist() == [3, 5, 3, 5, 8, 5, 3, 5, 3]


def test_neighbour_mine_counts_by_hand():
    is_mine = np.array([[1, 0, 0], [0, 0, 1], [0, 0, 0]], dtype=bool)
    # E.g. the centre sees the mines at (0,0) and (1,2); (1,2) sees none, as a cell never counts itself.
    expected = [[0, 2, 1], [1, 2, 0], [0, 1, 1]]
    assert neighbour_mine_counts(is_mine).tolist() == expected


def test_small_graph_features_agree_with_edges():
    graph = generate_minesweeper(7, 5, mine_fraction=0.3, hidden_fraction=0.4, split=SPLIT, seed=3)
    # Count neighbouring mines a second way, through the edges, and compare with the one-hot features.
    source, target = graph.edge_index
    mines_seen = torch.zeros(35, dtype=torch.long).index_add_(0, target, graph.y[source])
    visible = graph.x[:, 9] == 0
    assert torch.equal(graph.x[visible, :9].argmax(dim=1), mines_seen[visible])


def test_100x100_counts(grid_100):
    assert grid_100.num_nodes == 10_000
    assert grid_100.edge_index.shape[1] == 2 * 39_402
    assert int(grid_100.y.sum()) == 2_000
    assert grid_100.num_classes == 2
    assert grid_100.x.shape == (10_000, 10) and grid_100.x.dtype == torch.float32
    assert grid_100.is_undirected() and not grid_100.has_self_loops()


def test_hidden_nodes_show_only_the_flag(grid_100):
    hidden = grid_100.x[:, 9] == 1
    assert int(hidden.sum()) == 5_000
    assert (grid_100.x[hidden, :9] == 0).all()
    # Visible nodes carry exactly one count and no flag.
    assert (grid_100.x[~hidden, :9].sum(dim=1) == 1).all()
    assert set(grid_100.x[:, 9].unique().tolist()) == {0.0, 1.0}


def test_same_seed_same_graph_different_seed_different_mines(grid_100):
    again = load_dataset(CONFIG, seed=0)
    for key in ("x", "y", "edge_index", "train_mask", "val_mask", "test_mask"):
        assert torch.equal(grid_100[key], again[key]), key
    other = load_dataset(CONFIG, seed=1)
    assert not torch.equal(grid_100.y, other.y)


def test_split_is_stratified_within_one_node_per_class(grid_100):
    masks = (grid_100.train_mask, grid_100.val_mask, grid_100.test_mask)
    assert int(sum(mask.long() for mask in masks).max()) == 1  # disjoint
    for label in (0, 1):
        in_class = grid_100.y == label
        for mask, fraction in zip(masks, SPLIT.values()):
            assert abs(int((mask & in_class).sum()) - fraction * int(in_class.sum())) <= 1


@pytest.mark.parametrize(
    "split", [{"train": 0.6, "val": 0.2, "test": 0.2}, {"train": 0.5, "val": 0.25, "test": 0.1}]
)
def test_stratified_split_on_uneven_classes(split):
    labels = np.repeat([0, 1, 2], [7, 3, 11])
    masks = stratified_split(labels, split, np.random.default_rng(0))
    for label, size in enumerate((7, 3, 11)):
        for mask, fraction in zip(masks, split.values()):
            assert abs(int(mask[labels == label].sum()) - fraction * size) <= 1
    assigned = masks[0].astype(int) + masks[1] + masks[2]
    assert assigned.max() == 1  # disjoint
    if sum(split.values()) == 1:
        assert assigned.min() == 1  # nobody lost to rounding


def test_tiny_classes_still_fill_every_split():
    # Two classes of two nodes split 50/25/25: val and test must each get one node, not both go to val.
    masks = stratified_split(np.array([0, 0, 1, 1]), SPLIT, np.random.default_rng(0))
    assert [int(mask.sum()) for mask in masks] == [2, 1, 1]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"height": 0}, "dataset.height must be a positive integer"),
        ({"width": 2.5}, "dataset.width must be a positive integer"),
        ({"mine_fraction": 1.5}, r"dataset.mine_fraction must be a number in \[0, 1\]"),
        ({"split": {"train": 0.5, "valid": 0.5}}, "dataset.split must have exactly the keys train, val"),
        ({"split": {"train": 0.8, "val": 0.2, "test": 0.2}}, "fractions must sum to at most 1"),
        ({"depth": 3}, r"dataset 'minesweeper' does not take keys \['depth'\]"),
        ({"name": "minesweeper2"}, "unknown dataset 'minesweeper2'; known datasets: minesweeper, npz, pyg"),
    ],
)
def test_bad_config(change, message):
    with pytest.raises(ConfigError, match=message):
        load_dataset({**CONFIG, **change}, seed=0)


def test_missing_config_key():
    config = {key: value for key, value in CONFIG.items() if key != "hidden_fraction"}
    with pytest.raises(ConfigError, match=r"dataset 'minesweeper' needs keys \['hidden_fraction'\]"):
        load_dataset(config, seed=0)
