"""Tests for the Hamiltonian-cycle expander generator."""

import math

import numpy as np
import pytest

from sgt_core.errors import ConfigError, DatasetError
from sgt_core.preprocess.expander import ExpanderResult, hamiltonian_expander

SIZES = [(3, 2), (10, 4), (50, 6), (1000, 10), (2000, 30)]


def _make(n, d, seed=0, **kwargs):
    return hamiltonian_expander(n, d, generator=np.random.default_rng(seed), **kwargs)


def _grid_edges(rows, cols):
    """Undirected 4-neighbour grid edges, one direction each, int64 [2, E]."""
    idx = np.arange(rows * cols).reshape(rows, cols)
    right = np.stack([idx[:, :-1].ravel(), idx[:, 1:].ravel()])
    down = np.stack([idx[:-1, :].ravel(), idx[1:, :].ravel()])
    return np.concatenate([right, down], axis=1).astype(np.int64)


def _assert_simple_regular_symmetric(ei, n, d):
    assert ei.dtype == np.int64
    assert ei.shape == (2, n * d)
    src, dst = ei
    assert src.min() >= 0 and src.max() < n and dst.min() >= 0 and dst.max() < n
    assert np.all(np.bincount(src, minlength=n) == d)
    assert np.all(np.bincount(dst, minlength=n) == d)
    assert not np.any(src == dst), "self-loop"
    fwd = src * n + dst
    assert np.unique(fwd).size == fwd.size, "duplicate (src, dst)"
    assert np.array_equal(np.sort(fwd), np.sort(dst * n + src)), "not symmetric"
    # sorted by (dst, src)
    assert np.all(np.diff(dst * n + src) > 0)


def _dense_spectrum(ei, n):
    adj = np.zeros((n, n))
    adj[ei[1], ei[0]] = 1.0
    return np.linalg.eigvalsh(adj)


@pytest.mark.parametrize(("n", "d"), SIZES)
def test_regular_simple_symmetric_and_within_bound(n, d):
    res = _make(n, d)
    assert isinstance(res, ExpanderResult)
    _assert_simple_regular_symmetric(res.edge_index, n, d)
    assert res.bound == pytest.approx(2 * math.sqrt(d - 1) + 0.1)
    # Random regular graphs are near-Ramanujan with high probability (Friedman), so with the default slack
    # the first draw passes: a generator that drew poor expanders would show here as extra tries.
    assert res.tries == 1

    eig = _dense_spectrum(res.edge_index, n)  # ascending
    assert eig[-1] == pytest.approx(d, abs=1e-8)
    second = np.sort(np.abs(eig))[-2]
    assert second <= res.bound + 1e-8
    assert res.second_eigenvalue == pytest.approx(second, abs=1e-6)


def test_avoids_forbidden_edges_and_stays_regular():
    rows, cols, d = 30, 40, 8
    n = rows * cols
    grid = _grid_edges(rows, cols)
    # give the forbidden pairs in both directions, plus a self-loop, which must be tolerated
    forbidden = np.concatenate([grid, grid[::-1], np.array([[5], [5]])], axis=1)
    res = _make(n, d, forbidden_edge_index=forbidden)
    _assert_simple_regular_symmetric(res.edge_index, n, d)
    grid_keys = np.minimum(grid[0], grid[1]) * n + np.maximum(grid[0], grid[1])
    src, dst = res.edge_index
    exp_keys = np.minimum(src, dst) * n + np.maximum(src, dst)
    assert not np.isin(exp_keys, grid_keys).any()
    assert res.second_eigenvalue <= res.bound


def test_dense_forbidden_set_still_regular():
    # every node forbids ~half of the others: many clashes per cycle, all repaired locally
    n, d = 200, 10
    rng = np.random.default_rng(7)
    iu = np.triu_indices(n, 1)
    keep = rng.random(iu[0].size) < 0.5
    forbidden = np.stack([iu[0][keep], iu[1][keep]]).astype(np.int64)
    res = _make(n, d, forbidden_edge_index=forbidden)
    _assert_simple_regular_symmetric(res.edge_index, n, d)
    src, dst = res.edge_index
    keys = np.minimum(src, dst) * n + np.maximum(src, dst)
    assert not np.isin(keys, forbidden[0] * n + forbidden[1]).any()


def test_determinism():
    a = _make(500, 6, seed=3)
    b = _make(500, 6, seed=3)
    c = _make(500, 6, seed=4)
    assert np.array_equal(a.edge_index, b.edge_index)
    assert a.second_eigenvalue == b.second_eigenvalue and a.tries == b.tries
    assert not np.array_equal(a.edge_index, c.edge_index)


@pytest.mark.parametrize("degree", [3, 5, 0, -2, 1])
def test_bad_degree(degree):
    with pytest.raises(ConfigError, match=rf"even integer >= 2.*degree={degree}"):
        _make(20, degree)


def test_degree_too_large_for_n():
    with pytest.raises(ConfigError, match=r"degree 10 is too large.*num_nodes=10.*<= 9"):
        _make(10, 10)


def test_degree_too_large_given_forbidden_edges():
    # node 0 forbids 6 partners, so at most 19 - 6 = 13 remain; 14 is impossible
    forbidden = np.stack([np.zeros(6, dtype=np.int64), np.arange(1, 7)])
    with pytest.raises(ConfigError, match=r"6 forbidden.*<= 13"):
        _make(20, 14, forbidden_edge_index=forbidden)
    _assert_simple_regular_symmetric(_make(20, 12, forbidden_edge_index=forbidden).edge_index, 20, 12)


@pytest.mark.parametrize("n", [0, 1, 2])
def test_too_few_nodes(n):
    with pytest.raises(ConfigError, match="at least 3 nodes"):
        _make(n, 2)


def test_impossible_slack_fails_after_max_tries():
    msg = r"bound .*in 3 tries; best second eigenvalue found was [0-9.]+; raise ramanujan_slack"
    with pytest.raises(ConfigError, match=msg):
        _make(100, 6, ramanujan_slack=-5.0, max_tries=3)


def test_malformed_forbidden_edges():
    with pytest.raises(DatasetError, match="shape"):
        _make(10, 4, forbidden_edge_index=np.zeros((3, 2), dtype=np.int64))
    with pytest.raises(DatasetError, match="outside"):
        _make(10, 4, forbidden_edge_index=np.array([[0], [10]]))


def test_forbidden_pairs_given_one_way_and_unsorted_are_avoided_both_ways():
    rows, cols, d = 20, 25, 6
    n = rows * cols
    grid = _grid_edges(rows, cols)[:, ::-1]  # one direction only, in no particular order
    res = _make(n, d, forbidden_edge_index=grid[::-1])
    _assert_simple_regular_symmetric(res.edge_index, n, d)
    src, dst = res.edge_index
    grid_keys = np.minimum(grid[0], grid[1]) * n + np.maximum(grid[0], grid[1])
    assert not np.isin(np.minimum(src, dst) * n + np.maximum(src, dst), grid_keys).any()


def test_tries_counts_the_draws_up_to_the_first_within_the_bound():
    """With a tight bound (slack -0.3) seed 0 rejects 6 draws: capped one draw short, the same generator fails;
    capped at exactly `tries`, it returns the same graph."""
    res = _make(50, 6, ramanujan_slack=-0.3)
    assert res.tries == 7
    with pytest.raises(ConfigError, match="in 6 tries"):
        _make(50, 6, ramanujan_slack=-0.3, max_tries=res.tries - 1)
    again = _make(50, 6, ramanujan_slack=-0.3, max_tries=res.tries)
    assert again.tries == res.tries and np.array_equal(again.edge_index, res.edge_index)
    assert res.second_eigenvalue <= res.bound == pytest.approx(2 * math.sqrt(5) - 0.3)
