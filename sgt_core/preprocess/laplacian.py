"""The lowest eigenpairs of the normalised graph Laplacian, laid out per node for SAN's learned PE.

SAN (Kreuzer et al., 2021, "Rethinking Graph Transformers with Spectral Attention",
https://arxiv.org/abs/2106.03893) feeds each node j the m lowest eigenvalues λ_i together with its own
eigenvector entries φ_{i,j}; graphs with fewer than m eigenpairs are padded and masked.

Which Laplacian: the symmetric normalised one,

    L = I' - D^{-1/2} A D^{-1/2},    I'_{uu} = 1 if deg(u) > 0 else 0   (Chung's convention),

as in SAN. Its spectrum lies in [0, 2] whatever the degrees, so the eigenvalue half of each LPE token has
the same scale on every graph; the combinatorial Laplacian D - A would scale with the largest degree.
An isolated node gets L_uu = 0 (not 1, as some libraries use), so the multiplicity of eigenvalue 0 is
exactly the number of connected components, isolated nodes included. On a graph with at least m
components (Cora has 78) all m pairs therefore have λ = 0 and describe only component membership.
"""

from __future__ import annotations

import operator

import numpy as np
import scipy.linalg
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from scipy.sparse import csgraph

from sgt_core.errors import ConfigError
from sgt_core.preprocess.adjacency import simple_adjacency

__all__ = ["laplacian_eigenpairs", "normalized_laplacian"]

# Graphs up to this size use a dense eigensolver (exact, and fast enough at this size).
DENSE_MAX_NODES = 2000
# Shift-invert around -SHIFT: L + SHIFT*I is positive definite, and the lowest eigenvalues of L become the
# largest, well separated eigenvalues 1 / (λ + SHIFT) of the inverse.
_SHIFT = 1e-3
# Shift-invert only when the LU fill is bounded by this many entries (about 12 bytes each, L and U).
_SHIFT_INVERT_MAX_FILL = 20_000_000
# Lanczos on 2I - L: residual tolerance relative to 2 - λ (loose tolerances miss repeated eigenvalues).
_LANCZOS_TOL = 1e-8
# Krylov basis size at least, and spare eigenpairs requested beyond the wanted ones.
_LANCZOS_NCV = 128
_EXTRA_PAIRS = 8
# Entries this close to an eigenvector's largest magnitude count as tied for the sign convention.
SIGN_TIE_TOL = 1e-6
# Seed of the fixed ARPACK start vector (determinism).
_V0_SEED = 0


def laplacian_eigenpairs(
    edge_index: np.ndarray, num_nodes: int, m: int, *, dense_max_nodes: int = DENSE_MAX_NODES
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The m lowest eigenpairs of the normalised Laplacian, one row per node.

    Solvers: ``scipy.linalg.eigh`` on the dense matrix when ``num_nodes <= dense_max_nodes`` (or when m
    is nearly n); otherwise the null space is written down directly (per connected component C, the unit
    vector proportional to D^{1/2} 1_C) and the lowest non-zero eigenpairs come from ARPACK (``eigsh``)
    restricted to the orthogonal complement of that null space: shift-invert when a sparse LU is cheap
    (mesh-like graphs), Lanczos on 2I - L otherwise (see ``_sparse_lowest``). Deflating the null space
    this way stays correct for graphs with many components, where a Krylov solver would miss copies of
    the highly repeated eigenvalue 0.

    Each eigenvector's sign is fixed by making its largest-magnitude entry positive, the lowest node id
    winning ties (a convention only: the LPE flips signs at random during training). Bases of repeated
    eigenvalues are arbitrary; the ARPACK start vector is fixed, so results are deterministic.

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
        # Sign convention: the first entry whose magnitude ties the largest (within a tolerance, since
        # symmetric graphs give exact ties that round-off would otherwise break arbitrarily) is positive.
        magnitude = np.abs(vectors)  # [n, r]
        first = np.argmax(magnitude >= magnitude.max(axis=0) - SIGN_TIE_TOL, axis=0)  # [r]
        peak = vectors[first, np.arange(r)]  # [r]
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


def _laplacian_and_degree(
    edge_index: np.ndarray, num_nodes: int, where: str
) -> tuple[sp.csr_matrix, np.ndarray]:
    """The normalised Laplacian and the degrees (distinct neighbours, float64 [n]), after validation."""
    adj = simple_adjacency(edge_index, num_nodes, where).astype(np.float64)
    n = adj.shape[0]
    degree = np.diff(adj.indptr).astype(np.float64)  # [n]
    inv_sqrt = np.zeros(n)
    np.divide(1.0, np.sqrt(degree), out=inv_sqrt, where=degree > 0)
    scale = sp.diags(inv_sqrt)
    lap = (sp.diags((degree > 0).astype(np.float64)) - scale @ adj @ scale).tocsr()
    return lap, degree


def _sparse_lowest(lap: sp.csr_matrix, degree: np.ndarray, r: int) -> tuple[np.ndarray, np.ndarray]:
    """Lowest r eigenpairs of a large normalised Laplacian: exact null space, then deflated ARPACK.

    The non-zero part is computed on the orthogonal complement of the null space (P: the projector onto
    it), by one of two ARPACK modes chosen from the graph's shape:

    - shift-invert, the top eigenvectors of P (L + shift I)^{-1} P, when a sparse LU of L + shift I is
      cheap. Nodes are put in reverse Cuthill-McKee order and factorised without further reordering, so
      the fill stays inside the envelope (profile) of that order, which is computed first and must fit
      ``_SHIFT_INVERT_MAX_FILL``. This is the mesh-like case (grids, roads, long paths), whose tiny
      spectral gaps make plain Lanczos crawl while shift-invert converges in a few steps.
    - Lanczos on P (2I - L) P, whose largest eigenvalues 2 - λ are L's lowest non-zero ones, otherwise.
      It needs only products with L (memory O(n * ncv)); this is the expander-like case (social, citation,
      random graphs), whose wide envelope would make the LU fill up, and whose large gaps make Lanczos fast.

    Both ask for spare eigenpairs and keep the lowest, since a Krylov method can converge before picking up
    a second copy of a repeated eigenvalue.
    """
    n = lap.shape[0]
    null = _null_space(lap, degree)  # [n, c] sparse, orthonormal columns
    c = null.shape[1]
    if c >= r:
        return np.zeros(r), null[:, :r].toarray()
    null_t = null.T.tocsr()

    def project(x: np.ndarray) -> np.ndarray:
        return x - null @ (null_t @ x)  # remove the null-space component; L commutes with this projector

    v0 = project(np.random.default_rng(_V0_SEED).standard_normal(n))
    wanted = min(r - c + max(r - c, _EXTRA_PAIRS), n - c - 1)
    ncv = min(n, max(2 * wanted + 1, _LANCZOS_NCV))

    perm = csgraph.reverse_cuthill_mckee(lap, symmetric_mode=True).astype(np.int64)  # [n]
    shifted = (lap + _SHIFT * sp.eye(n))[perm][:, perm].tocsc()  # [n, n], nodes in RCM order
    if _envelope_size(shifted) <= _SHIFT_INVERT_MAX_FILL:
        # L + shift I is positive definite: diagonal pivots need no row exchanges, so no fill outside
        # the envelope.
        lu = spla.splu(shifted, permc_spec="NATURAL", diag_pivot_thresh=0.0, options={"SymmetricMode": True})

        def solve(x: np.ndarray) -> np.ndarray:
            out = np.empty_like(x)
            out[perm] = lu.solve(x[perm])
            return out

        # On range(P) the top eigenvectors of P (L + shift I)^{-1} P are L's lowest non-null ones.
        operator_ = spla.LinearOperator(
            (n, n), matvec=lambda x: project(solve(project(x.ravel()))), dtype=np.float64
        )
        _, vectors = spla.eigsh(operator_, k=wanted, which="LA", v0=v0, ncv=ncv)
    else:
        operator_ = spla.LinearOperator(
            (n, n), matvec=lambda x: project(2.0 * x.ravel() - lap @ project(x.ravel())), dtype=np.float64
        )
        _, vectors = spla.eigsh(operator_, k=wanted, which="LA", v0=v0, ncv=ncv, tol=_LANCZOS_TOL)
    vectors = project(vectors)
    vectors /= np.linalg.norm(vectors, axis=0, keepdims=True)
    values = np.einsum("ij,ij->j", vectors, lap @ vectors)  # Rayleigh quotients
    order = np.argsort(values, kind="stable")[: r - c]
    values = np.concatenate([np.zeros(c), values[order]])
    vectors = np.concatenate([null.toarray(), vectors[:, order]], axis=1)
    return values, vectors


def _envelope_size(matrix: sp.csc_matrix) -> int:
    """Entries in the lower envelope of a structurally symmetric matrix: sum over rows i of i - min j + 1."""
    coo = matrix.tocoo()
    first = np.arange(matrix.shape[0])  # [n] leftmost column of each row, the diagonal at worst
    np.minimum.at(first, coo.row, coo.col)
    return int((np.arange(matrix.shape[0]) - first).sum()) + matrix.shape[0]


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
