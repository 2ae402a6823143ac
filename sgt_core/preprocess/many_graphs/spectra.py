"""SAN's Laplacian eigenpairs per graph: the m lowest of each graph's own normalised Laplacian, in batches."""

from __future__ import annotations

import numpy as np
import torch

from sgt_core.preprocess.laplacian import SIGN_TIE_TOL, laplacian_eigenpairs
from sgt_core.preprocess.many_graphs.layout import GraphSet, solve_in_threads

__all__ = ["laplacian_eigenpairs_per_graph"]


def laplacian_eigenpairs_per_graph(graphs: GraphSet, m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The m lowest eigenpairs of every graph's normalised Laplacian, one row per node of the union.

    The Laplacian, clipping and sign convention are `laplacian.laplacian_eigenpairs`'s (Chung's
    L = I' - D^{-1/2} A D^{-1/2}; each eigenvector's largest-magnitude entry positive, the graph's lowest
    node winning ties), so a graph's rows are what that function gives on the graph alone, up to the basis
    of repeated eigenvalues. Graphs of one size are stacked and solved by one batched dense eigendecomposition
    (`torch.linalg.eigh`, float64) per chunk of `GraphSet.size_groups`, the chunks side by side on the cores
    (`solve_in_threads`); graphs above its dense limit are
    solved one by one by `laplacian_eigenpairs`. A graph of n < m nodes has n pairs, the rest padded (0) and
    masked, as SAN pads.

    Cost: O(n^3) per graph of n nodes in the dense batches, so O(N * n_max^2) in all.

    Args:
        graphs: the union's graphs.
        m: eigenpairs per node (>= 1).

    Returns:
        ``(eigenvalues, eigenvectors, mask)``, each [N, m]: float32 eigenvalues (a graph's row repeated on
        each of its nodes, ascending in [0, 2]), float32 eigenvector entries (row j: node j's entry of each of
        its graph's eigenvectors), bool mask (False on padding).
    """
    n_total = graphs.num_nodes
    eigenvalues = np.zeros((n_total, m), dtype=np.float32)
    eigenvectors = np.zeros((n_total, m), dtype=np.float32)
    mask = np.zeros((n_total, m), dtype=bool)

    def solve(group: tuple[int, np.ndarray]) -> None:
        n, chunk = group
        r = min(m, n)
        values, vectors = _batched_lowest(graphs.dense_adjacency(chunk, n), r)  # [B, r], [B, n, r]
        rows = graphs.node_ids(chunk, n).ravel()  # [B * n], distinct across chunks: threads write apart
        eigenvalues[rows, :r] = np.repeat(values, n, axis=0)
        eigenvectors[rows, :r] = vectors.reshape(-1, r)
        mask[rows, :r] = True

    solve_in_threads(solve, graphs.size_groups())
    for graph in graphs.large_graphs().tolist():
        lo, hi = graphs.ptr[graph], graphs.ptr[graph + 1]
        values, vectors, valid = laplacian_eigenpairs(graphs.graph_edges(graph), int(hi - lo), m)
        eigenvalues[lo:hi], eigenvectors[lo:hi], mask[lo:hi] = values, vectors, valid
    return eigenvalues, eigenvectors, mask


def _batched_lowest(adjacency: np.ndarray, r: int) -> tuple[np.ndarray, np.ndarray]:
    """The r lowest eigenpairs of B normalised Laplacians of n nodes: values [B, r], vectors [B, n, r]."""
    a = torch.from_numpy(adjacency).double()  # [B, n, n]
    degree = a.sum(dim=2)  # [B, n]
    inv_sqrt = torch.where(degree > 0, degree.clamp_min(1.0).rsqrt(), 0.0)  # [B, n]
    laplacian = -(inv_sqrt[:, :, None] * a * inv_sqrt[:, None, :])  # [B, n, n]
    laplacian.diagonal(dim1=1, dim2=2).add_((degree > 0).double())  # I': 0 on isolated nodes
    values, vectors = torch.linalg.eigh(laplacian)  # ascending: [B, n], [B, n, n] (one thread: solve_in_threads)
    values, vectors = values[:, :r].clamp(0.0, 2.0).numpy(), vectors[:, :, :r].numpy()
    # Sign convention: the first entry whose magnitude ties the largest (within SIGN_TIE_TOL) is positive.
    magnitude = np.abs(vectors)  # [B, n, r]
    first = np.argmax(magnitude >= magnitude.max(axis=1, keepdims=True) - SIGN_TIE_TOL, axis=1)  # [B, r]
    peak = np.take_along_axis(vectors, first[:, None, :], axis=1)  # [B, 1, r]
    return values, vectors * np.where(peak < 0, -1.0, 1.0)
