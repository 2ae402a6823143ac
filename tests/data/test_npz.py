"""The .npz loader on tiny hand-made files of both formats and on the real files of ../shared/datasets."""

from pathlib import Path

import numpy as np
import pytest
import torch

from sgt_core.data import load_dataset
from sgt_core.data.npz import load_npz

# ../shared/datasets relative to the repository root (tests/data/test_npz.py -> parents[2]).
SHARED_DATASETS = Path(__file__).resolve().parents[2] / ".." / "shared" / "datasets"
SPLIT = {"train": 0.6, "val": 0.2, "test": 0.2}


def npz_config(path: Path, split_index: int = 0) -> dict:
    """The npz dataset config, as Hydra hands it over."""
    return {"name": "npz", "path": str(path), "split_index": split_index, "split": SPLIT}


def write_heterophilous(tmp_path: Path, masks_2d: bool = True) -> Path:
    """A 4-node cycle 0-1-2-3-0, each edge stored once, with two splits (or one 1-D split)."""
    # Each train split holds both classes.
    train = np.array([[1, 1, 0, 0], [0, 0, 1, 1]], dtype=bool)
    val = np.array([[0, 0, 1, 0], [1, 0, 0, 0]], dtype=bool)
    test = np.array([[0, 0, 0, 1], [0, 1, 0, 0]], dtype=bool)
    if not masks_2d:
        train, val, test = train[0], val[0], test[0]
    path = tmp_path / "cycle.npz"
    np.savez(
        path,
        node_features=np.eye(4, dtype=np.float32),
        node_labels=np.array([0, 1, 1, 0]),
        edges=np.array([[0, 1], [1, 2], [2, 3], [3, 0]]),
        train_masks=train,
        val_masks=val,
        test_masks=test,
    )
    return path


def write_gnn_benchmark(tmp_path: Path, num_nodes: int = 40) -> Path:
    """A directed ring i -> i+1 with a self-loop on node 0, an explicit zero entry, and 2 sparse features."""
    rows = np.concatenate([np.arange(num_nodes), [0, 5]])
    cols = np.concatenate([(np.arange(num_nodes) + 1) % num_nodes, [0, 9]])
    values = np.concatenate([np.ones(num_nodes), [1, 0]]).astype(np.float32)  # (5, 9) is stored but zero
    order = np.lexsort((cols, rows))
    rows, cols, values = rows[order], cols[order], values[order]
    path = tmp_path / "ring.npz"
    np.savez(
        path,
        adj_data=values,
        adj_indices=cols.astype(np.int32),
        adj_indptr=np.searchsorted(rows, np.arange(num_nodes + 1)).astype(np.int32),
        adj_shape=np.array([num_nodes, num_nodes]),
        # Node i has feature i % 2 set to i.
        attr_data=np.arange(num_nodes, dtype=np.float32),
        attr_indices=(np.arange(num_nodes) % 2).astype(np.int32),
        attr_indptr=np.arange(num_nodes + 1, dtype=np.int32),
        attr_shape=np.array([num_nodes, 2]),
        labels=(np.arange(num_nodes) % 3).astype(np.int8),
        node_names=np.array([f"n{i}" for i in range(num_nodes)]),
    )
    return path


def undirected_pairs(edge_index: torch.Tensor) -> set[tuple[int, int]]:
    """The set of {u, v} pairs, each as (min, max)."""
    low, high = edge_index.min(dim=0).values, edge_index.max(dim=0).values
    return set(zip(low.tolist(), high.tolist()))


def test_heterophilous_adds_reverse_edges(tmp_path):
    graph = load_dataset(npz_config(write_heterophilous(tmp_path)), seed=0)
    assert graph.edge_index.shape == (2, 8) and graph.is_undirected()
    assert undirected_pairs(graph.edge_index) == {(0, 1), (1, 2), (2, 3), (0, 3)}
    assert graph.train_mask.tolist() == [True, True, False, False]
    assert graph.num_classes == 2 and graph.source == str(tmp_path / "cycle.npz")


def test_heterophilous_split_index_picks_the_split(tmp_path):
    graph = load_dataset(npz_config(write_heterophilous(tmp_path), split_index=1), seed=0)
    assert graph.train_mask.tolist() == [False, False, True, True]
    assert graph.test_mask.tolist() == [False, True, False, False]


def test_heterophilous_single_1d_split(tmp_path):
    graph = load_npz(write_heterophilous(tmp_path, masks_2d=False))
    assert graph.val_mask.tolist() == [False, False, True, False]


def test_gnn_benchmark_symmetrises_and_densifies(tmp_path):
    graph = load_npz(write_gnn_benchmark(tmp_path), split=SPLIT, seed=0)
    # The ring's 40 directed edges become 40 undirected ones; the self-loop and the stored zero are dropped.
    assert graph.edge_index.shape == (2, 80) and graph.is_undirected() and not graph.has_self_loops()
    assert undirected_pairs(graph.edge_index) == {tuple(sorted((i, (i + 1) % 40))) for i in range(40)}
    assert graph.x.dtype == torch.float32 and graph.x.shape == (40, 2)
    assert graph.x[7].tolist() == [0.0, 7.0] and graph.x[8].tolist() == [8.0, 0.0]
    assert graph.y.dtype == torch.int64 and graph.num_classes == 3


def test_gnn_benchmark_split_is_seeded_and_stratified(tmp_path):
    path = write_gnn_benchmark(tmp_path)
    first, again, other = (load_npz(path, split=SPLIT, seed=seed) for seed in (0, 0, 1))
    assert torch.equal(first.train_mask, again.train_mask) and torch.equal(first.test_mask, again.test_mask)
    assert not torch.equal(first.train_mask, other.train_mask)
    for label in range(3):
        in_class = first.y == label
        for mask, fraction in zip((first.train_mask, first.val_mask, first.test_mask), SPLIT.values()):
            assert abs(int((mask & in_class).sum()) - fraction * int(in_class.sum())) <= 1


def test_relative_path_is_resolved_in_the_source(tmp_path, monkeypatch):
    write_heterophilous(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert load_npz("cycle.npz").source == str(tmp_path / "cycle.npz")


# --- the real files of ../shared/datasets (README: nodes, undirected edges, features, classes) -------------


@pytest.fixture
def shared_datasets() -> Path:
    if not SHARED_DATASETS.is_dir():
        where = SHARED_DATASETS.resolve()
        pytest.skip(f"real datasets not available: {where} is absent (a fresh clone has no ../shared)")
    return SHARED_DATASETS


@pytest.mark.parametrize(
    ("file", "nodes", "edges", "features", "classes"),
    [("minesweeper.npz", 10_000, 39_402, 7, 2), ("tolokers.npz", 11_758, 519_000, 10, 2)],
)
def test_real_heterophilous_files(shared_datasets, file, nodes, edges, features, classes):
    graph = load_dataset(npz_config(shared_datasets / file), seed=0)
    assert graph.x.shape == (nodes, features) and graph.num_classes == classes
    assert graph.edge_index.shape[1] == 2 * edges and graph.is_undirected()
    # The stored split 0 uses 50/25/25 of the nodes.
    assert int(graph.train_mask.sum()) == pytest.approx(nodes / 2, abs=1)
    assert int(graph.val_mask.sum()) == pytest.approx(nodes / 4, abs=1)


@pytest.mark.parametrize(
    ("file", "nodes", "directed_entries", "undirected_edges", "features", "classes"),
    [("cora.npz", 2_708, 5_429, 5_278, 1_433, 7), ("citeseer.npz", 3_312, 4_715, 4_536, 3_703, 6)],
)
def test_real_gnn_benchmark_files(
    shared_datasets, file, nodes, directed_entries, undirected_edges, features, classes
):
    raw = np.load(shared_datasets / file, allow_pickle=False)
    assert raw["adj_data"].size == directed_entries  # the README's edge count is the stored directed one
    # Independently of the loader: the unordered, non-loop pairs the directed entries make.
    rows = np.repeat(np.arange(nodes), np.diff(raw["adj_indptr"]))
    cols = raw["adj_indices"]
    expected = {(min(u, v), max(u, v)) for u, v in zip(rows.tolist(), cols.tolist()) if u != v}
    # Fewer than the directed entries: some pairs are stored in both directions, some are self-loops.
    assert len(expected) == undirected_edges

    graph = load_dataset(npz_config(shared_datasets / file), seed=0)
    assert graph.x.shape == (nodes, features) and graph.num_classes == classes
    assert graph.is_undirected() and not graph.has_self_loops()
    assert undirected_pairs(graph.edge_index) == expected
    assert graph.edge_index.shape[1] == 2 * len(expected)
    assert int(graph.train_mask.sum()) == pytest.approx(0.6 * nodes, abs=classes)
