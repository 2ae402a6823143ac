"""Per-graph LPE: each graph's rows are its own Laplacian's lowest eigenpairs, in batches or one by one."""

from __future__ import annotations

import numpy as np
import pytest

from sgt_core.preprocess.laplacian import normalized_laplacian
from sgt_core.preprocess.many_graphs import layout
from sgt_core.preprocess.many_graphs.spectra import laplacian_eigenpairs_per_graph
from tests.preprocess.many_graphs.graph_sets import graph_set_of, random_graph_set

M = 6


def _check_each_graph(graphs, values, vectors, mask, m):
    for g in range(graphs.num_graphs):
        lo, hi = graphs.ptr[g], graphs.ptr[g + 1]
        n = int(hi - lo)
        r = min(m, n)
        expected_values, expected_vectors = np.linalg.eigh(normalized_laplacian(graphs.graph_edges(g), n).toarray())
        assert mask[lo:hi, :r].all() and not mask[lo:hi, r:].any()
        assert (values[lo:hi, r:] == 0).all() and (vectors[lo:hi, r:] == 0).all()
        # every node of the graph holds the same (the graph's) eigenvalues
        np.testing.assert_allclose(values[lo:hi, :r], np.broadcast_to(expected_values[:r], (n, r)), atol=1e-6)
        # eigenvectors up to sign and to the basis of repeated eigenvalues: equal projectors per eigenvalue
        # cluster (a cluster cut by the r-th pair is skipped: its basis inside the graph is arbitrary)
        found = vectors[lo:hi, :r].astype(np.float64)
        np.testing.assert_allclose(found.T @ found, np.eye(r), atol=1e-5)
        clusters = np.concatenate([[0], np.cumsum(np.diff(expected_values) > 1e-6)])  # [n]
        for c in np.unique(clusters[:r]):
            members = np.flatnonzero(clusters == c)
            if members.max() >= r:
                continue
            want = expected_vectors[:, members] @ expected_vectors[:, members].T
            got = found[:, members] @ found[:, members].T
            np.testing.assert_allclose(got, want, atol=1e-5)
            if members.size == 1:  # a simple eigenvalue: the sign convention of laplacian.py
                column = found[:, members[0]]
                assert column[np.argmax(np.abs(column) >= np.abs(column).max() - 1e-6)] > 0


@pytest.mark.parametrize("seed", [0, 1])
def test_each_graph_gets_its_own_eigendecomposition(seed):
    data = random_graph_set(80, seed=seed)
    graphs = graph_set_of(data)
    _check_each_graph(graphs, *laplacian_eigenpairs_per_graph(graphs, M), M)


def test_large_graphs_go_through_the_one_graph_solver(monkeypatch):
    data = random_graph_set(30, seed=2, min_nodes=5, max_nodes=40)
    monkeypatch.setattr(layout, "DENSE_MAX_NODES", 20)
    graphs = graph_set_of(data)
    assert 0 < graphs.large_graphs().size < graphs.num_graphs
    _check_each_graph(graphs, *laplacian_eigenpairs_per_graph(graphs, M), M)


def test_small_chunks_give_the_same_rows(monkeypatch):
    graphs = graph_set_of(random_graph_set(40, seed=3))
    whole = laplacian_eigenpairs_per_graph(graphs, M)
    monkeypatch.setattr(layout, "BLOCK_ENTRIES", 64)  # one graph per chunk
    for expected, found in zip(whole, laplacian_eigenpairs_per_graph(graphs, M)):
        np.testing.assert_array_equal(found, expected)
