"""Small random datasets of many graphs for the per-graph preprocessing tests (`build_graph_set`)."""

from __future__ import annotations

import numpy as np
from torch_geometric.data import Data

from sgt_core.data.many_graphs import build_graph_set
from sgt_core.preprocess.many_graphs.layout import GraphSet


def _one_graph(n: int, kind: str, rng: np.random.Generator) -> np.ndarray:
    """Undirected pairs [e, 2] (local ids) of one random graph of n nodes."""
    if n == 1:
        return np.zeros((0, 2), dtype=np.int64)
    if kind == "tree":
        parent = (rng.random(n - 1) * np.arange(1, n)).astype(np.int64)
        pairs = np.stack([parent, np.arange(1, n)], axis=1)
    elif kind == "ring":  # a cycle with a few chords and pendant edges: molecule-like
        pairs = np.stack([np.arange(n), (np.arange(n) + 1) % n], axis=1) if n > 2 else np.array([[0, 1]])
    elif kind == "dense":
        u, v = np.triu_indices(n, 1)
        pairs = np.stack([u, v], axis=1)[rng.random(u.size) < 0.45]
    else:  # "split": two random trees side by side, plus an isolated node when there is room
        cut = max(1, n // 2)
        first = _one_graph(cut, "tree", rng)
        second = _one_graph(max(1, n - cut - (n > 3)), "tree", rng) + cut
        pairs = np.concatenate([first, second])
    extra = rng.integers(0, n, size=(max(0, n // 6), 2)) if kind in ("tree", "ring") else np.zeros((0, 2), np.int64)
    pairs = np.concatenate([pairs, extra]).astype(np.int64)
    return pairs[pairs[:, 0] != pairs[:, 1]]


def random_graph_set(num_graphs: int = 60, seed: int = 0, min_nodes: int = 1, max_nodes: int = 40,
                     sizes: list[int] | None = None, kinds: tuple[str, ...] = ("tree", "ring", "dense", "split"),
                     task: str = "graph_regression") -> Data:
    """A dataset of random graphs (trees, rings, dense, disconnected; sizes min..max, a few tiny ones)."""
    rng = np.random.default_rng(seed)
    if sizes is None:
        sizes = rng.integers(min_nodes, max_nodes + 1, num_graphs)
        sizes[: min(3, num_graphs)] = [1, 2, 3][: min(3, num_graphs)]  # the tiny ones
        sizes = rng.permutation(sizes).tolist()
    ptr = np.concatenate([[0], np.cumsum(sizes)])
    parts = [_one_graph(n, kinds[rng.integers(len(kinds))], rng) + ptr[g] for g, n in enumerate(sizes)]
    edge_index = np.concatenate(parts).T
    count = len(sizes)
    split = np.arange(count) % 4
    num_nodes = int(ptr[-1])
    if task.startswith("graph"):
        y = rng.standard_normal(count).astype(np.float32)
        masks = {"train_mask": split < 2, "val_mask": split == 2, "test_mask": split == 3}
    else:
        y = rng.integers(0, 2, num_nodes)
        node_split = np.arange(num_nodes) % 4
        masks = {"train_mask": node_split < 2, "val_mask": node_split == 2, "test_mask": node_split == 3}
    return build_graph_set("random graph set", task=task, graph_ptr=ptr, edge_index=edge_index, y=y,
                           x=rng.standard_normal((num_nodes, 3)).astype(np.float32), **masks)


def graph_set_of(data: Data) -> GraphSet:
    return GraphSet.from_union(data.graph_ptr.numpy(), data.edge_index.numpy())
