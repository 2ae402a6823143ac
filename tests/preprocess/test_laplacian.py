"""Tests for the normalised-Laplacian eigenpairs fed to SAN's learned positional encoding."""

import numpy as np
import pytest

from sgt_core.errors import ConfigError, DatasetError
from sgt_core.preprocess.laplacian import laplacian_eigenpairs


def _both_ways(a, b):
    a, b = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
    return np.stack([np.concatenate([a, b]), np.concatenate([b, a])])


def _grid(rows, cols, offset=0):
    idx = np.arange(rows * cols).reshape(rows, cols) + offset
    a = np.concatenate([idx[:, :-1].ravel(), idx[:-1, :].ravel()])
    b = np.concatenate([idx[:, 1:].ravel(), idx[1:, :].ravel()])
    return _both_ways(a, b)


def _dense_laplacian(edge_index, n):
    """I' - D^-1/2 A D^-1/2 built entry by entry, with L_uu = 0 for isolated nodes (Chung's convention)."""
    adj = np.zeros((n, n))
    for u, v in edge_index.T:
        if u != v:
            adj[u, v] = adj[v, u] = 1.0
    deg = adj.sum(axis=1)
    lap = np.zeros((n, n))
    for u in range(n):
        if deg[u]:
            lap[u, u] = 1.0
        for v in range(n):
            if adj[u, v]:
                lap[u, v] = -1.0 / np.sqrt(deg[u] * deg[v])
    return lap


def _disconnected():
    """A 4x5 grid, a triangle, a single edge and three isolated nodes: 6 components, 28 nodes."""
    triangle, single = _both_ways([20, 21, 22], [21, 22, 20]), _both_ways([23], [24])
    edges = np.concatenate([_grid(4, 5), triangle, single], axis=1)
    return edges, 28


GRAPHS = {
    "path": (_both_ways(np.arange(9), np.arange(1, 10)), 10),
    "grid": (_grid(5, 6), 30),
    "disconnected": _disconnected(),
    "four_nodes": (_both_ways([0, 1, 2, 0], [1, 2, 3, 2]), 4),
}


def _check_pairs(edge_index, n, m, values, vectors, mask, atol=1e-4):
    r = min(m, n)
    assert values.shape == vectors.shape == mask.shape == (n, m)
    assert values.dtype == vectors.dtype == np.float32 and mask.dtype == bool
    assert mask[:, :r].all() and not mask[:, r:].any()
    assert not values[:, r:].any() and not vectors[:, r:].any()
    lam = values[0, :r].astype(np.float64)
    assert np.all(values == values[0])
    assert np.all(np.diff(lam) >= -1e-6) and lam.min() >= 0.0 and lam.max() <= 2.0
    phi = vectors[:, :r].astype(np.float64)
    lap = _dense_laplacian(edge_index, n)
    np.testing.assert_allclose(lap @ phi, phi * lam, atol=atol)
    np.testing.assert_allclose(phi.T @ phi, np.eye(r), atol=atol)
    # They are the lowest: compare with the full spectrum of the independently built matrix.
    np.testing.assert_allclose(lam, np.linalg.eigvalsh(lap)[:r], atol=atol)


@pytest.mark.parametrize("name", sorted(GRAPHS))
@pytest.mark.parametrize("m", [3, 8, 40])
def test_dense_eigenpairs(name, m):
    edge_index, n = GRAPHS[name]
    _check_pairs(edge_index, n, m, *laplacian_eigenpairs(edge_index, n, m))


@pytest.mark.parametrize("shift_invert", [True, False])
@pytest.mark.parametrize("m", [4, 9, 12])
def test_sparse_solver_matches(m, shift_invert, monkeypatch):
    from sgt_core.preprocess import laplacian as module

    if not shift_invert:  # an LU budget of 0 forces the Lanczos branch
        monkeypatch.setattr(module, "_SHIFT_INVERT_MAX_FILL", 0)
    # 7 components: m = 4 is pure null space, m = 9 and 12 need non-zero eigenpairs from ARPACK, among
    # them the 12x12 grid's double eigenvalues.
    edge_index, n = _disconnected()
    big = np.concatenate([edge_index, _grid(12, 12, offset=n)], axis=1)
    n_big = n + 144
    values, vectors, mask = laplacian_eigenpairs(big, n_big, m, dense_max_nodes=0)
    _check_pairs(big, n_big, m, values, vectors, mask)
    dense_values, _, _ = laplacian_eigenpairs(big, n_big, m)
    np.testing.assert_allclose(values, dense_values, atol=1e-5)
    assert np.count_nonzero(values[0] < 1e-6) == min(m, 7)  # 7 components with the 12x12 grid


def test_disconnected_null_space():
    edge_index, n = _disconnected()
    values, _vectors, _ = laplacian_eigenpairs(edge_index, n, 8)
    assert np.count_nonzero(values[0] < 1e-6) == 6  # one zero per component, isolated nodes included
    assert values[0, 6] > 1e-3


def test_padding_when_fewer_nodes_than_m():
    edge_index = _both_ways([0, 1], [1, 2])  # path on 3 nodes
    values, vectors, mask = laplacian_eigenpairs(edge_index, 3, 5)
    assert mask.tolist() == [[True] * 3 + [False] * 2] * 3
    np.testing.assert_allclose(values[0, :3], [0.0, 1.0, 2.0], atol=1e-6)
    _check_pairs(edge_index, 3, 5, values, vectors, mask)


def test_deterministic_and_sign_convention():
    edge_index, n = GRAPHS["grid"]
    first = laplacian_eigenpairs(edge_index, n, 6)
    second = laplacian_eigenpairs(edge_index, n, 6)
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a, b)
    vectors = first[1][:, :6]
    magnitude = np.abs(vectors)
    for i in range(6):  # the first entry of (nearly) largest magnitude is positive; grids have exact ties
        first_peak = np.flatnonzero(magnitude[:, i] >= magnitude[:, i].max() - 1e-5)[0]
        assert vectors[first_peak, i] > 0


def test_edge_cases_and_errors():
    values, vectors, mask = laplacian_eigenpairs(np.empty((2, 0), dtype=np.int64), 0, 4)
    assert values.shape == vectors.shape == mask.shape == (0, 4)
    values, vectors, mask = laplacian_eigenpairs(np.empty((2, 0), dtype=np.int64), 1, 2)
    assert values.tolist() == [[0.0, 0.0]] and vectors.tolist() == [[1.0, 0.0]]
    assert mask.tolist() == [[True, False]]
    with pytest.raises(ConfigError):
        laplacian_eigenpairs(GRAPHS["path"][0], 10, 0)
    with pytest.raises(DatasetError, match="outside"):
        laplacian_eigenpairs(GRAPHS["path"][0], 5, 2)
