"""The lowest eigenpairs of the normalised graph Laplacian, laid out per node for SAN's learned PE.

SAN (Kreuzer et al., 2021, "Rethinking Graph Transformers with Spectral Attention",
https://arxiv.org/abs/2106.03893) feeds each node j the m lowest eigenvalues λ_i together with its own
eigenvector entries φ_{i,j}; graphs with fewer than m eigenpairs are padded and masked.

Which Laplacian: the symmetric normalised one,

    L = I' - D^{-1/2} A D^{-1/2},    I'_{uu} = 1 if deg(u) > 0 else 0   (Chung's convention),

as in SAN. Its spectrum lies in [0, 2] whatever the degrees, so the eigenvalue half of each LPE token has
the same scale on every graph; the combinatorial Laplacian D - A would scale with the largest degree.
An isolated node gets L_uu = 0 (not 1, as some libraries use), so the multiplicity of eigenvalue 0 is
exactly the number of connected components, isolated nodes included.
"""

from __future__ import annotations

import operator

import numpy as np
import scipy.linalg
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from scipy.sparse import csgraph

from sgt_core.errors import ConfigError, DatasetError

__all__ = ["laplacian_eigenpairs", "normalized_laplacian"]

# Graphs up to this size use a dense eigensolver (exact, and fast enough at this size).
DENSE_MAX_NODES = 2000
# Shift-invert around -SHIFT: L + SHIFT*I is positive definite, and the lowest eigenvalues of L become the
# largest, well separated eigenvalues 1 / (λ + SHIFT) of the inverse.
_SHIFT = 1e-3
# Seed of the fixed ARPACK start vector (determinism).
_V0_SEED = 0


def laplacian_eigenpairs(
    edge_index: np.ndarray, num_nodes: int, m: int, *, dense_max_nodes: int = DENSE_MAX_NODES
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The m lowest eigenpairs of the normalised Laplacian, one row per node.

    Solvers: ``scipy.linalg.eigh`` on the dense matrix when ``num_nodes <= dense_max_nodes`` (or when m
    is nearly n); otherwise the null space is written down directly (per connected component C, the unit
    vector proportional to D^{1/2} 1_C) and the lowest non-zero eigenpairs come from ARPACK (``eigsh``)
    in shift-invert mode, restricted to the orthogonal complement of that null space. Deflating the null
    space this way stays correct for graphs with many components, where a Krylov solver would miss
    copies of the highly repeated eigenvalue 0.

    Each eigenvector's sign is fixed by making its largest-magnitude entry positive (a convention only:
    the LPE flips signs at random during training). Bases of repeated eigenvalues are arbitrary but
    deterministic. The ARPACK start vector is fixed, so results are deterministic.

    Args:
        edge_index: int [2, E] (src, dst) pairs, read as undirected unweighted edges; self-loops ignored.
        num_nodes: number of nodes n.
        m: number of eigenpairs per node (>= 1).
        dense_max_nodes: largest n solved densely.

    Returns:
        ``(eigenvalues, eigenvectors, mask)``, each [n, m]: ``eigenvalues`` float32, every row the same
        ascending λ_0 <= ... <= λ_{m-1} in [0, 2]; ``eigenvectors`` float32, row j holds φ_{i,j}, the
        node's entry of eigenvector i (unit norm, mutually orthogonal); ``mask`` bool, False on the
        padding columns i >= n when the graph has fewer than m eigenpairs (padding values are 0).

    Raises:
        ConfigError: m < 1.
        DatasetError: ``edge_index`` is malformed or names nodes outside ``[0, num_nodes)``.
    """
    where = "laplacian_eigenpairs"
    m = operator.index(m)
    if m < 1:
        raise ConfigError(f"{where}: m (eigenpairs per node) must be >= 1; got {m}")
    lap, degree = _laplacian_and_degree(edge_index, num_nodes, where)
    n = lap.shape[0]
    r = min(m, n)  # eigenpairs that exist

    if n <= dense_max_nodes or r >= n - 1:
        values, vectors = scipy.linalg.eigh(lap.toarray(), subset_by_index=[0, r - 1]) if r else _empty(n)
    else:
        values, vectors = _sparse_lowest(lap, degree, r)
    values = np.clip(values, 0.0, 2.0)

    if r:
        # Sign convention: the largest-magnitude entry of every eigenvector is positive.
        peak = vectors[np.argmax(np.abs(vectors), axis=0), np.arange(r)]  # [r]
        vectors = vectors * np.where(peak < 0, -1.0, 1.0)

    eigenvalues = np.zeros((n, m), dtype=np.float32)
    eigenvectors = np.zeros((n, m), dtype=np.float32)
    mask = np.zeros((n, m), dtype=bool)
    eigenvalues[:, :r] = values  # broadcast: the same spectrum on every row
    eigenvectors[:, :r] = vectors
    mask[:, :r] = True
    return eigenvalues, eigenvectors, mask


def normalized_laplacian(edge_index: np.ndarray, num_nodes: int) -> sp.csr_matrix:
    """L = I' - D^{-1/2} A D^{-1/2} (float64 CSR [n, n]) of the undirected, unweighted, loop-free graph."""
    return _laplacian_and_degree(edge_index, num_nodes, "normalized_laplacian")[0]


def _laplacian_and_degree(edge_index: np.ndarray, num_nodes: int, where: str) -> tuple[sp.csr_matrix, np.ndarray]:
    """The normalised Laplacian and the degrees (distinct neighbours, float64 [n]), after validation."""
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
            f"{where}: edge_index names node ids in [{ei.min()}, {ei.max()}], outside [0, {n}) "
            f"for num_nodes={n}"
        )
    src, dst = ei[:, ei[0] != ei[1]]
    adj = sp.csr_matrix((np.ones(src.size), (src, dst)), shape=(n, n))
    adj = (adj + adj.T).tocsr()  # both directions; duplicates summed
    adj.sum_duplicates()
    adj.data[:] = 1.0
    degree = np.diff(adj.indptr).astype(np.float64)  # [n]
    inv_sqrt = np.zeros(n)
    np.divide(1.0, np.sqrt(degree), out=inv_sqrt, where=degree > 0)
    scale = sp.diags(inv_sqrt)
    lap = (sp.diags((degree > 0).astype(np.float64)) - scale @ adj @ scale).tocsr()
    return lap, degree


def _sparse_lowest(lap: sp.csr_matrix, degree: np.ndarray, r: int) -> tuple[np.ndarray, np.ndarray]:
    """Lowest r eigenpairs of a large normalised Laplacian: exact null space + deflated shift-invert ARPACK."""
    n = lap.shape[0]
    null = _null_space(lap, degree)  # [n, c] sparse, orthonormal columns
    c = null.shape[1]
    if c >= r:
        return np.zeros(r), null[:, :r].toarray()

    solve = spla.factorized((lap + _SHIFT * sp.eye(n)).tocsc())  # (L + shift I)^{-1} via sparse LU
    null_t = null.T.tocsr()

    def project(x: np.ndarray) -> np.ndarray:
        return x - null @ (null_t @ x)  # remove the null-space component

    def matvec(x: np.ndarray) -> np.ndarray:
        # P (L + shift I)^{-1} P: L commutes with P, so on range(P) its top eigenvectors are L's lowest
        # non-null eigenvectors, and the null space is mapped to 0.
        return project(solve(project(np.asarray(x).ravel())))

    inverse = spla.LinearOperator((n, n), matvec=matvec, dtype=np.float64)
    v0 = project(np.random.default_rng(_V0_SEED).standard_normal(n))
    _, vectors = spla.eigsh(inverse, k=r - c, which="LA", v0=v0)
    vectors = project(vectors)
    vectors /= np.linalg.norm(vectors, axis=0, keepdims=True)
    values = np.einsum("ij,ij->j", vectors, lap @ vectors)  # Rayleigh quotients, more exact than 1/θ - shift
    order = np.argsort(values, kind="stable")
    values = np.concatenate([np.zeros(c), values[order]])
    vectors = np.concatenate([null.toarray(), vectors[:, order]], axis=1)
    return values, vectors


def _null_space(lap: sp.csr_matrix, degree: np.ndarray) -> sp.csr_matrix:
    """Orthonormal basis [n, c] of ker L: per component C, D^{1/2} 1_C normalised (e_u for an isolated u).

    Columns are ordered by component size (largest first), then by the component's smallest node id.
    """
    n = lap.shape[0]
    num_components, labels = csgraph.connected_components(lap, directed=False)
    weights = np.where(degree > 0, np.sqrt(degree), 1.0)  # [n]
    sizes = np.bincount(labels, minlength=num_components)
    first = np.full(num_components, n, dtype=np.int64)
    np.minimum.at(first, labels, np.arange(n))
    rank = np.empty(num_components, dtype=np.int64)
    rank[np.lexsort((first, -sizes))] = np.arange(num_components)
    norms = np.sqrt(np.bincount(labels, weights=weights**2, minlength=num_components))  # [c]
    return sp.csr_matrix((weights / norms[labels], (np.arange(n), rank[labels])), shape=(n, num_components))


def _empty(n: int) -> tuple[np.ndarray, np.ndarray]:
    return np.zeros(0), np.zeros((n, 0))
