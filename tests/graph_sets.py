"""Small datasets of many graphs for tests: random trees with chords, categorical atoms and bonds, any task."""

from __future__ import annotations

import numpy as np
from torch_geometric.data import Data

from sgt_core.data.many_graphs import build_graph_set


def toy_graph_set(task: str = "graph_regression", num_graphs: int = 60, seed: int = 0, sizes=(3, 16)) -> Data:
    """`num_graphs` connected graphs of `sizes` nodes (a random tree plus a few chords), two categorical node
    columns (5 codes each) and one bond column (3 codes); the target depends on both, so a network learns it.

    graph_regression: a count of code-1 atoms; graph_classification: whether that count is large;
    node_classification (many graphs, PATTERN-like): whether a node has more than two neighbours.
    """
    rng = np.random.default_rng(seed)
    node_counts = rng.integers(sizes[0], sizes[1], num_graphs)
    ptr = np.concatenate([[0], np.cumsum(node_counts)])
    num_nodes = int(ptr[-1])
    graph_of = np.repeat(np.arange(num_graphs), node_counts)
    local = np.arange(num_nodes) - ptr[graph_of]
    child = np.flatnonzero(local > 0)  # each non-first node joins an earlier node of its graph: a tree
    parent = ptr[graph_of[child]] + (rng.random(child.size) * local[child]).astype(np.int64)
    chord_graphs = rng.integers(0, num_graphs, num_graphs)
    ends = ptr[chord_graphs, None] + (rng.random((num_graphs, 2)) * node_counts[chord_graphs, None]).astype(np.int64)
    edge_index = np.concatenate([np.stack([child, parent]), ends.T], axis=1)
    x_cat = rng.integers(0, 5, (num_nodes, 2))
    bonds = rng.integers(0, 3, (edge_index.shape[1], 1))
    split = rng.random(num_graphs)
    split[:4] = [0.1, 0.2, 0.7, 0.9]  # two training graphs, one validation, one test at least
    masks = {"train_mask": split < 0.6, "val_mask": (split >= 0.6) & (split < 0.8), "test_mask": split >= 0.8}
    count = np.add.reduceat((x_cat[:, 0] == 1).astype(np.float64), ptr[:-1])
    metric = None
    if task == "graph_regression":
        y = count / 3
    elif task == "graph_classification":
        y = (count > node_counts / 5).astype(np.int64)
        y[:2] = [0, 1]  # both classes in training
    else:
        degree = np.bincount(edge_index.ravel(), minlength=num_nodes)
        y, metric = (degree > 2).astype(np.int64), "weighted_accuracy"
        masks = {name: np.repeat(mask, node_counts) for name, mask in masks.items()}
    return build_graph_set(f"toy {task}", task=task, graph_ptr=ptr, edge_index=edge_index, y=y, x_cat=x_cat,
                           x_cat_sizes=[5, 5], edge_attr_cat=bonds, edge_attr_cat_sizes=[3], metric=metric, **masks)
