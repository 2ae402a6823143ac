"""Tests for AnchorGT's k-dominating-set anchors and receptive-field edges, checked against scipy's SPDs."""

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.sparse.csgraph import shortest_path

from sgt_core.errors import ConfigError, DatasetError
from sgt_core.preprocess.adjacency import simple_adjacency
from sgt_core.preprocess.anchors import k_dominating_set, receptive_field_edges


def _both_ways(a, b):
    a, b = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
    return np.stack([np.concatenate([a, b]), np.concatenate([b, a])])


def _erdos_renyi(n, p, seed):
    rng = np.random.default_rng(seed)
    i, j = np.triu_indices(n, 1)
    keep = rng.random(i.size) < p
    return _both_ways(i[keep], j[keep]), n


def _grid(rows, cols):
    idx = np.arange(rows * cols).reshape(rows, cols)
    a = np.concatenate([idx[:, :-1].ravel(), idx[:-1, :].ravel()])
    b = np.concatenate([idx[:, 1:].ravel(), idx[1:, :].ravel()])
    return _both_ways(a, b), rows * cols


def _path(n):
    return _both_ways(np.arange(n - 1), np.arange(1, n)), n


def _star(leaves):
    return _both_ways(np.zeros(leaves, dtype=np.int64), np.arange(1, leaves + 1)), leaves + 1


def _disconnected():
    """A path, a triangle, a star and four isolated nodes (ids 20..23)."""
    path, _ = _path(6)
    tri = _both_ways([6, 7, 8], [7, 8, 6])
    star = _both_ways([9] * 10, np.arange(10, 20))
    return np.concatenate([path, tri, star], axis=1), 24


GRAPHS = {
    "erdos_renyi": _erdos_renyi(60, 0.06, seed=3),
    "grid": _grid(7, 9),
    "path": _path(25),
    "star": _star(12),
    "disconnected": _disconnected(),
}


def _spd(edge_index, n):
    adj = sp.csr_matrix((np.ones(edge_index.shape[1]), (edge_index[0], edge_index[1])), shape=(n, n))
    return shortest_path(adj, unweighted=True, directed=False)  # [n, n] float, inf = unreachable


@pytest.mark.parametrize("name", sorted(GRAPHS))
@pytest.mark.parametrize("k", [1, 2, 3])
def test_greedy_k_dominating_set(name, k):
    edge_index, n = GRAPHS[name]
    spd = _spd(edge_index, n)
    degree = np.bincount(edge_index[0], minlength=n)
    anchors = k_dominating_set(edge_index, n, k, np.random.default_rng(0))

    assert anchors.dtype == np.int64 and np.unique(anchors).size == anchors.size
    assert np.all(spd[anchors].min(axis=0) <= k), "some node is farther than k from every anchor"
    assert degree[anchors[0]] == degree.max()
    # Replay the greedy rule: each anchor was uncovered and of maximum degree among uncovered nodes.
    covered = np.zeros(n, dtype=bool)
    for a in anchors:
        assert not covered[a]
        assert degree[a] == degree[~covered].max()
        covered |= spd[a] <= k
    isolated = np.flatnonzero(degree == 0)
    assert set(isolated) <= set(anchors.tolist())


def test_k_dominating_set_deterministic_and_seed_dependent():
    edge_index, n = _grid(10, 10)
    runs = [k_dominating_set(edge_index, n, 2, np.random.default_rng(seed)) for seed in (7, 7, 8)]
    assert np.array_equal(runs[0], runs[1])
    assert not np.array_equal(runs[0], runs[2])  # a grid is full of degree ties


def test_star_needs_one_anchor():
    edge_index, n = _star(12)
    assert k_dominating_set(edge_index, n, 1, np.random.default_rng(0)).tolist() == [0]


def _pairs(edge_index, n):
    return set((edge_index[1] * n + edge_index[0]).tolist())  # keys dst * n + src


@pytest.mark.parametrize("name", sorted(GRAPHS))
@pytest.mark.parametrize("k", [1, 2, 3])
def test_receptive_field_edges_exact(name, k):
    edge_index, n = GRAPHS[name]
    spd = _spd(edge_index, n)
    anchors = k_dominating_set(edge_index, n, k, np.random.default_rng(1))
    out = receptive_field_edges(edge_index, n, anchors, k, max_spd=k + 3)
    is_anchor = np.zeros(n, dtype=bool)
    is_anchor[anchors] = True

    for key in ("anchor_edge_index", "anchor_spd", "khop_edge_index", "khop_spd"):
        assert out[key].dtype == np.int64
    ae, ke = out["anchor_edge_index"], out["khop_edge_index"]
    for ei in (ae, ke):  # sorted by (dst, src), no repeats
        assert np.all(np.diff(ei[1] * n + ei[0]) > 0)

    src, dst = np.meshgrid(np.arange(n), np.arange(n), indexing="xy")  # src[v, u] = u, dst[v, u] = v
    expected_khop = (spd >= 2) & (spd <= k) & ~is_anchor[src]
    assert _pairs(ke, n) == set((dst * n + src)[expected_khop].tolist())
    expected_anchor = (spd >= 2) & is_anchor[src]
    assert _pairs(ae, n) == set((dst * n + src)[expected_anchor].tolist())
    assert not _pairs(ae, n) & _pairs(ke, n)

    np.testing.assert_array_equal(out["khop_spd"], spd[ke[0], ke[1]])
    true_anchor_spd = np.minimum(spd[ae[0], ae[1]], k + 3)  # inf (unreachable) -> the cap
    np.testing.assert_array_equal(out["anchor_spd"], true_anchor_spd)

    # graph + self + khop + anchor = R(v) ∪ {v}, with R(v) = N_k(v) ∪ S.
    union = _pairs(ae, n) | _pairs(ke, n) | _pairs(edge_index, n) | {v * n + v for v in range(n)}
    in_field = (spd <= k) | is_anchor[src]
    assert union == set((dst * n + src)[in_field].tolist())

    stats = out["stats"]
    assert stats["num_anchors"] == anchors.size
    assert stats["num_khop_edges"] == ke.shape[1] and stats["num_khop_saturated_nodes"] == 0
    assert stats["num_uncovered_nodes"] == 0


@pytest.mark.parametrize("cap", [0, 3, 10])
def test_khop_cap_keeps_nearest_first(cap):
    edge_index, n = _erdos_renyi(80, 0.07, seed=5)
    spd = _spd(edge_index, n)
    k = 3
    anchors = k_dominating_set(edge_index, n, k, np.random.default_rng(0))
    full = receptive_field_edges(edge_index, n, anchors, k)
    capped = receptive_field_edges(edge_index, n, anchors, k, cap, np.random.default_rng(2))
    np.testing.assert_array_equal(full["anchor_edge_index"], capped["anchor_edge_index"])

    full_e, cap_e = full["khop_edge_index"], capped["khop_edge_index"]
    assert _pairs(cap_e, n) <= _pairs(full_e, n)
    np.testing.assert_array_equal(capped["khop_spd"], spd[cap_e[0], cap_e[1]])
    full_count = np.bincount(full_e[1], minlength=n)
    cap_count = np.bincount(cap_e[1], minlength=n)
    np.testing.assert_array_equal(cap_count, np.minimum(full_count, cap))
    dropped = _pairs(full_e, n) - _pairs(cap_e, n)
    for v in range(n):
        kept_d = capped["khop_spd"][cap_e[1] == v]
        lost_d = [spd[key % n, v] for key in dropped if key // n == v]
        if kept_d.size and lost_d:
            assert kept_d.max() <= min(lost_d), f"node {v} kept a farther k-hop node over a nearer one"
    assert capped["stats"]["num_khop_saturated_nodes"] == int(np.count_nonzero(cap_count == cap)) * (cap > 0)

    again = receptive_field_edges(edge_index, n, anchors, k, cap, np.random.default_rng(2))
    np.testing.assert_array_equal(again["khop_edge_index"], cap_e)


def test_four_node_path_by_hand():
    # 0 - 1 - 2 - 3, anchor {1}, k = 2
    edge_index, n = _path(4)
    out = receptive_field_edges(edge_index, n, np.array([1]), 2, max_spd=3)
    assert out["anchor_edge_index"].tolist() == [[1], [3]]  # 1 -> 3 (1 -> 0 and 1 -> 2 are graph edges)
    assert out["anchor_spd"].tolist() == [2]
    # 2-hop (src, dst) pairs (2, 0), (3, 1), (0, 2), (1, 3) minus those with src = anchor 1, by dst
    assert out["khop_edge_index"].tolist() == [[2, 3, 0], [0, 1, 2]]
    assert out["khop_spd"].tolist() == [2, 2, 2]


def test_errors():
    edge_index, n = _path(5)
    anchors = np.array([2])
    with pytest.raises(ConfigError):
        k_dominating_set(edge_index, n, 0, np.random.default_rng(0))
    with pytest.raises(ConfigError, match="max_spd"):
        receptive_field_edges(edge_index, n, anchors, 2, max_spd=2)
    with pytest.raises(ConfigError, match="generator"):
        receptive_field_edges(edge_index, n, anchors, 2, 4)
    with pytest.raises(DatasetError, match="outside"):
        k_dominating_set(edge_index, 3, 1, np.random.default_rng(0))
    with pytest.raises(DatasetError, match="distinct"):
        receptive_field_edges(edge_index, n, np.array([1, 1]), 2)


def test_empty_graph():
    edge_index = np.empty((2, 0), dtype=np.int64)
    assert k_dominating_set(edge_index, 0, 2, np.random.default_rng(0)).size == 0
    anchors = k_dominating_set(edge_index, 3, 2, np.random.default_rng(0))
    assert sorted(anchors.tolist()) == [0, 1, 2]
    out = receptive_field_edges(edge_index, 3, anchors, 2, max_spd=4)
    assert out["anchor_edge_index"].shape == (2, 6) and np.all(out["anchor_spd"] == 4)
    assert out["khop_edge_index"].shape == (2, 0)


def test_chunked_work_gives_the_same_edges(monkeypatch):
    from sgt_core.preprocess import anchors as module

    edge_index, n = _erdos_renyi(70, 0.06, seed=11)
    reference_anchors = k_dominating_set(edge_index, n, 2, np.random.default_rng(4))
    reference = receptive_field_edges(edge_index, n, reference_anchors, 2)
    # Tiny scan windows, SPD blocks and k-hop chunks exercise every loop of the scalable paths.
    monkeypatch.setattr(module, "_SCAN_WINDOW", 1)
    monkeypatch.setattr(module, "_SCAN_WINDOW_MAX", 4)
    monkeypatch.setattr(module, "_SPD_BLOCK_ENTRIES", 3 * n)
    monkeypatch.setattr(module, "_KHOP_WALK_BUDGET", 40)
    assert len(module._khop_chunks(simple_adjacency(edge_index, n, "test"), 2)) > 5

    anchors = k_dominating_set(edge_index, n, 2, np.random.default_rng(4))
    np.testing.assert_array_equal(anchors, reference_anchors)
    out = receptive_field_edges(edge_index, n, anchors, 2)
    for key in ("anchor_edge_index", "anchor_spd", "khop_edge_index", "khop_spd"):
        np.testing.assert_array_equal(out[key], reference[key])
    capped = receptive_field_edges(edge_index, n, anchors, 2, 5, np.random.default_rng(6))
    assert _pairs(capped["khop_edge_index"], n) <= _pairs(out["khop_edge_index"], n)
    full_count = np.bincount(out["khop_edge_index"][1], minlength=n)
    np.testing.assert_array_equal(
        np.bincount(capped["khop_edge_index"][1], minlength=n), np.minimum(full_count, 5)
    )
