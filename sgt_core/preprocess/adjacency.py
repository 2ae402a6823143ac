"""The simple undirected adjacency of an edge list, validated once for every preprocessing component."""

from __future__ import annotations

import operator

import numpy as np
import scipy.sparse as sp

from sgt_core.errors import DatasetError


def simple_adjacency(edge_index: np.ndarray, num_nodes: int, where: str) -> sp.csr_matrix:
    """Symmetric binary CSR adjacency [n, n] with no self-loops or repeats; sorted column indices.

    Args:
        edge_index: int [2, E] pairs in either or both directions.
        num_nodes: n.
        where: the caller's name, for error messages.

    Raises:
        DatasetError: for a wrong shape, non-integer ids, or ids outside [0, n).
    """
    n = operator.index(num_nodes)
    if n < 0:
        raise DatasetError(f"{where}: num_nodes must be >= 0; got {n}")
    ei = np.asarray(edge_index)
    if ei.ndim != 2 or ei.shape[0] != 2:
        raise DatasetError(f"{where}: edge_index must have shape [2, E]; got {ei.shape}")
    if ei.size and not np.issubdtype(ei.dtype, np.integer):
        raise DatasetError(f"{where}: edge_index must hold integers; got dtype {ei.dtype}")
    ei = ei.astype(np.int64, copy=False)
    if ei.size and (ei.min() < 0 or ei.max() >= n):
        raise DatasetError(
            f"{where}: edge_index names node ids in [{ei.min()}, {ei.max()}], outside [0, {n}) for num_nodes={n}"
        )
    src, dst = ei[:, ei[0] != ei[1]]
    adj = sp.csr_matrix((np.ones(src.size, dtype=np.float32), (src, dst)), shape=(n, n))
    adj = (adj + adj.T).tocsr()  # both directions; duplicates summed
    adj.sum_duplicates()
    adj.sort_indices()
    adj.data[:] = 1.0
    return adj
