"""DFS encoding: invariant to relabelling, by hand on a star and a path, batch equals single."""

from __future__ import annotations

import numpy as np
import pytest

from sgt_core.preprocess.substructures.dfs_encoding import (
    dfs_adjacency_encoding,
    dfs_adjacency_encodings,
    dfs_order,
    dfs_orders,
)
from sgt_core.preprocess.substructures.instances import Substructures
from tests.preprocess.substructures.graphs import both_ways, grid, path


def _relabelled(pairs, num_nodes, rng, total=50):
    """The same small graph with its nodes mapped to random distinct ids in [0, total)."""
    ids = rng.choice(total, size=num_nodes, replace=False)
    return both_ways([(ids[u], ids[v]) for u, v in pairs]), ids


SHAPES = {
    "star": [(0, i) for i in range(1, 6)],
    "path": [(i, i + 1) for i in range(6)],
    "cycle": [(i, (i + 1) % 7) for i in range(7)],
    "spider": [(0, 1), (1, 2), (0, 3), (3, 4), (4, 5), (0, 6)],
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_dfs_encoding_is_invariant_to_relabelling(shape):
    pairs = SHAPES[shape]
    num = max(max(p) for p in pairs) + 1
    rng = np.random.default_rng(0)
    codes = []
    for _ in range(6):
        edge_index, ids = _relabelled(pairs, num, rng)
        # Extra edges elsewhere in the graph must not matter.
        others = np.setdiff1d(np.arange(50), ids)[:4]
        extra = both_ways([(others[0], others[1]), (others[2], ids[0])])
        edge_index = np.concatenate([edge_index, extra], axis=1)
        codes.append(dfs_adjacency_encoding(ids, edge_index, 9))
    for code in codes[1:]:
        np.testing.assert_array_equal(code, codes[0])
    block = codes[0].reshape(9, 9)
    assert block.sum() == 2 * len(pairs) and np.array_equal(block, block.T)
    assert block[num:].sum() == 0 and block[:, num:].sum() == 0  # padding stays zero


def test_dfs_encoding_of_a_star_and_a_path_by_hand():
    star_code = dfs_adjacency_encoding(np.arange(4), both_ways([(3, 0), (3, 1), (3, 2)]), 4).reshape(4, 4)
    expected = np.zeros((4, 4), dtype=np.float32)
    expected[0, 1:] = expected[1:, 0] = 1  # centre first, then the leaves
    np.testing.assert_array_equal(star_code, expected)
    # Path 0-1-2-3-4: start at the middle (2), then 1 (smaller id) down to 0, then 3, 4.
    path_code = dfs_adjacency_encoding(np.arange(5), path(5)[0], 5).reshape(5, 5)
    order = [2, 1, 0, 3, 4]
    adj = np.zeros((5, 5), dtype=np.float32)
    for i in range(4):
        adj[i, i + 1] = adj[i + 1, i] = 1
    np.testing.assert_array_equal(path_code, adj[np.ix_(order, order)])


def test_dfs_batch_matches_single_and_truncates():
    edge_index, n = grid(4, 4, king=True)
    subs = Substructures.from_lists([[0, 1, 4, 5], [0, 1, 2, 3, 4, 5, 6, 7], [10]], [1, 16, 17])
    batch = dfs_adjacency_encodings(subs, edge_index, n, 6)
    assert batch.shape == (3, 36) and batch.dtype == np.float32
    for i in range(3):
        np.testing.assert_array_equal(batch[i], dfs_adjacency_encoding(subs.instance(i), edge_index, 6))
    assert batch[0].reshape(6, 6)[:4, :4].sum() == 12  # a king-grid 2x2 block is a K4
    assert batch[1].reshape(6, 6).sum() > 0 and batch[2].sum() == 0


def test_batched_orders_equal_the_one_by_one_order():
    rng = np.random.default_rng(0)
    for size in range(1, 23):  # past 16 the signatures take more than two integer keys
        for density in (0.15, 0.4, 0.8):
            upper = np.triu(rng.random((40, size, size)) < density, 1)
            adjacency = upper | upper.transpose(0, 2, 1)  # [40, s, s]
            found = dfs_orders(adjacency)
            for b in range(adjacency.shape[0]):
                neighbours = [np.flatnonzero(row).tolist() for row in adjacency[b]]
                assert found[b].tolist() == dfs_order(list(range(size)), neighbours), (size, density, b)


def test_batched_encodings_equal_the_one_by_one_encoding():
    edge_index, n = grid(6, 7, king=True)
    rng = np.random.default_rng(1)
    instances = [np.sort(rng.choice(n, size=int(rng.integers(1, 12)), replace=False)) for _ in range(300)]
    subs = Substructures.from_lists(instances, np.zeros(len(instances), dtype=np.int64))
    found = dfs_adjacency_encodings(subs, edge_index, n, 8).reshape(-1, 8, 8)
    pairs = set(zip(*edge_index.tolist()))
    for code, members in zip(found, instances):
        block = np.array([[(u, v) in pairs for v in members] for u in members], dtype=np.float32)
        order = dfs_order(members.tolist(), [np.flatnonzero(row).tolist() for row in block])[:8]
        expected = np.zeros((8, 8), dtype=np.float32)
        expected[: len(order), : len(order)] = block[np.ix_(order, order)]
        np.testing.assert_array_equal(code, expected)
