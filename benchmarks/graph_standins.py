"""Seeded stand-ins for the graph-level benchmark sets, generated here: ZINC-like molecules and PATTERN-like SBMs.

They reproduce the sizes and densities the preprocessing cost depends on, not the chemistry or the task:

- `zinc_like`: molecule-shaped graphs of 9-38 nodes (mean ~23, as ZINC's 23.2): chains and 5- or 6-rings
  bonded at atoms of free valence (degree <= 4), ~2.15 edges per node counted both ways (ZINC: 49.8 directed
  edges per 23.2 nodes), 28 atom codes, one regression target per graph.
- `pattern_like`: Benchmarking GNNs' PATTERN: a stochastic block model of 5 communities of 5-34 nodes, p = 0.5
  inside and q = 0.35 across, plus a random pattern of 5-34 nodes (internal p = 0.5, joined to the rest with
  p = 0.5); ~119 nodes and ~5,700 directed edges per graph; node labels: 1 on the pattern.
"""

from __future__ import annotations

import numpy as np
from torch_geometric.data import Data

from sgt_core.data.many_graphs import build_graph_set


def _splits(count: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    part = rng.permutation(count) % 6  # 4/6 train, 1/6 val, 1/6 test
    return {"train_mask": part < 4, "val_mask": part == 4, "test_mask": part == 5}


def _molecule(n: int, rng: np.random.Generator) -> np.ndarray:
    """Undirected pairs [e, 2] of one molecule-shaped graph of n nodes: chains and 5- or 6-rings, each new
    fragment bonded to an atom with a free valence (of 4), mostly a recent one, as chains grow."""
    pairs = []
    free = np.zeros(n, dtype=np.int64)
    free[0] = 4
    count = 1
    while count < n:
        open_atoms = np.flatnonzero(free[:count] > 0)
        recent = open_atoms[open_atoms >= count - 6]
        anchor = int(rng.choice(recent if recent.size and rng.random() < 0.7 else open_atoms))
        room = n - count
        if room >= 5 and rng.random() < 0.45:
            size = 6 if room >= 6 and rng.random() < 0.6 else 5
            ring = np.arange(count, count + size)
            pairs += list(zip(ring.tolist(), np.roll(ring, -1).tolist()))
            free[ring] = 2
        else:
            size = min(room, int(rng.integers(1, 4)))
            ring = np.arange(count, count + size)
            pairs += list(zip(ring[:-1].tolist(), ring[1:].tolist()))
            free[ring] = 3
            free[ring[1:-1]] = 2
        pairs.append((anchor, count))
        free[anchor] -= 1
        free[count] -= 1
        count += size
    return np.asarray(pairs, dtype=np.int64).reshape(-1, 2)


def zinc_like(num_graphs: int = 12_000, seed: int = 0) -> Data:
    """ZINC-shaped molecules (see the module docstring) as a validated graph set."""
    rng = np.random.default_rng(seed)
    sizes = np.clip(np.rint(rng.normal(23.2, 4.5, num_graphs)), 9, 38).astype(np.int64)
    ptr = np.concatenate([[0], np.cumsum(sizes)])
    pairs = np.concatenate([_molecule(n, rng) + ptr[g] for g, n in enumerate(sizes.tolist())])
    num_nodes = int(ptr[-1])
    return build_graph_set(
        "zinc-like stand-in", task="graph_regression", graph_ptr=ptr, edge_index=pairs.T,
        y=rng.standard_normal(num_graphs).astype(np.float32), x_cat=rng.integers(0, 28, (num_nodes, 1)),
        x_cat_sizes=[28], **_splits(num_graphs, rng),
    )


def pattern_like(num_graphs: int = 14_000, seed: int = 0) -> Data:
    """PATTERN-shaped SBM graphs (see the module docstring) as a validated graph set (node classification)."""
    rng = np.random.default_rng(seed)
    parts, labels, sizes = [], [], []
    offset = 0
    for _ in range(num_graphs):
        community = np.repeat(np.arange(5), rng.integers(5, 35, 5))
        pattern = int(rng.integers(5, 35))
        block = np.concatenate([community, np.full(pattern, 5)])
        n = block.size
        probability = np.where(block[:, None] == block[None, :], 0.5, 0.35)
        probability[(block[:, None] == 5) | (block[None, :] == 5)] = 0.5  # the pattern: 0.5 inside and out
        u, v = np.triu_indices(n, 1)
        keep = rng.random(u.size) < probability[u, v]
        order = rng.permutation(n)  # nodes shuffled
        parts.append(np.stack([order[u[keep]], order[v[keep]]], axis=1) + offset)
        label = np.zeros(n, dtype=np.int64)
        label[order[block == 5]] = 1
        labels.append(label)
        sizes.append(n)
        offset += n
    ptr = np.concatenate([[0], np.cumsum(sizes)])
    num_nodes = int(ptr[-1])
    return build_graph_set(
        "pattern-like stand-in", task="node_classification", graph_ptr=ptr, edge_index=np.concatenate(parts).T,
        y=np.concatenate(labels), x=rng.integers(0, 3, (num_nodes, 3)).astype(np.float32),
        **_splits(num_nodes, rng),
    )
