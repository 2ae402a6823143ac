"""Sparse adjacency matrices of edge lists: the validated simple undirected one of every preprocessing
component (also as bare CSR arrays), a row-sorted CSR built in linear time, and CSR segment positions."""

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


def simple_csr(edge_index: np.ndarray, num_nodes: int, where: str) -> tuple[np.ndarray, np.ndarray]:
    """(indptr [n+1], indices [E']) of the simple undirected graph: symmetrised, no loops, no repeats."""
    adj = simple_adjacency(edge_index, num_nodes, where)
    return adj.indptr.astype(np.int64), adj.indices.astype(np.int64)


def sorted_csr(rows: np.ndarray, cols: np.ndarray, values: np.ndarray, num_nodes: int) -> sp.csr_matrix:
    """CSR matrix [n, n] with entry (rows[i], cols[i]) = values[i]: rows sorted, repeats summed. O(n + E).

    Entries already grouped by row (a sorted edge list, or a block built in row order) only need the row
    pointer; others go through a counting sort by row (scipy's COO to CSR). Either way a row's columns are
    sorted only if they are not yet, so a sorted edge list costs a few passes and no sort at all. The
    arguments are never modified (the result may share them).
    """
    if rows.size < 2 or bool(np.all(rows[1:] >= rows[:-1])):
        indptr = np.zeros(num_nodes + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows, minlength=num_nodes), out=indptr[1:])
        matrix = sp.csr_matrix((values, cols, indptr), shape=(num_nodes, num_nodes))  # may share the arrays
        if not matrix.has_canonical_format:  # one checking pass; sorting and summing work in place, so copy
            matrix = matrix.copy()
            matrix.sum_duplicates()
        return matrix
    return sp.coo_matrix((values, (rows, cols)), shape=(num_nodes, num_nodes)).tocsr()


def segment_positions(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Flat positions starts[i] + 0..lengths[i]-1 of several CSR segments, back to back: int64 [sum]."""
    if lengths.size == 0:
        return np.empty(0, dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    return np.repeat(starts - offsets, lengths) + np.arange(int(lengths.sum()), dtype=np.int64)
