"""The LPE component on many graphs: each real node's rows are its own graph's eigenpairs; added nodes masked."""

from __future__ import annotations

import numpy as np

from sgt_core.preprocess.laplacian import normalized_laplacian
from tests.preprocess.components.built import M, built, graph_set


def test_rows_hold_each_graphs_own_spectrum():
    data, graph = graph_set(), built()
    ptr = data.graph_ptr.numpy()
    edges = data.edge_index.numpy()
    for g in range(ptr.size - 1):
        lo, hi = ptr[g], ptr[g + 1]
        inside = (edges[0] >= lo) & (edges[0] < hi)
        values = np.linalg.eigvalsh(normalized_laplacian(edges[:, inside] - lo, hi - lo).toarray())
        r = min(M, hi - lo)
        np.testing.assert_allclose(graph.eigenvalues[lo:hi, :r].numpy(), np.broadcast_to(values[:r], (hi - lo, r)),
                                   atol=1e-5)
        assert graph.eigen_mask[lo:hi, :r].all() and not graph.eigen_mask[lo:hi, r:].any()
    assert not graph.eigen_mask[data.num_nodes :].any()
    assert graph.stats["lpe_padded_graphs"] == int(np.count_nonzero(np.diff(ptr) < M))
