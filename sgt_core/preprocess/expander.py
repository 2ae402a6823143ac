"""Random near-Ramanujan regular expander graphs built from Hamiltonian cycles.

One concept, kept in one file although it is long: the expander, from drawing its cycles to checking its
spectral gap.
"""

from __future__ import annotations

import functools
import logging
import math
import operator
import warnings
from dataclasses import dataclass

import numpy as np
import scipy.linalg
import torch

from sgt_core.errors import ConfigError, DatasetError
from sgt_core.preprocess.adjacency import sorted_csr

__all__ = ["DEFAULT_LANCZOS_STEPS", "ExpanderResult", "SpectralEstimate", "hamiltonian_expander",
           "second_eigenvalue_estimate"]

log = logging.getLogger(__name__)

# Graphs with at most this many nodes get a dense eigendecomposition: exact, and cheaper than Lanczos.
_DENSE_EIG_MAX_NODES = 64
# Lanczos steps of the spectral check unless the caller says otherwise (preprocess.expander.spectral_check_steps).
DEFAULT_LANCZOS_STEPS = 100
# Repair rounds allowed for one cycle before the whole graph is redrawn (counts as one try).
_MAX_REPAIR_ROUNDS = 200
# Random swap partners scored per clash during repair.
_REPAIR_CANDIDATES = 64
# Rows of the neighbour table compared at a time with a new cycle (bounds the scratch).
_ROW_CHUNK = 1 << 20
# Seed of the Lanczos start vector: acceptance must not depend on anything but the graph.
_START_SEED = 0


@dataclass(frozen=True)
class SpectralEstimate:
    """The second-largest |adjacency eigenvalue| of a d-regular graph, and how it was obtained.

    Attributes:
        value: exact (``steps == 0``, dense eigendecomposition) or the Lanczos estimate, a lower bound.
        steps: Lanczos steps taken (0 for the dense solver).
        residual: the Lanczos residual ``||B q - value q||`` of the Ritz pair behind ``value``, with
            ``B = A - (d / n) 11^T`` (0 for the dense solver); in exact arithmetic some eigenvalue of B lies
            within this distance of ``value``.
    """

    value: float
    steps: int
    residual: float


@dataclass(frozen=True, eq=False)
class ExpanderResult:
    """An accepted expander: its edges and the spectral certificate that accepted it."""

    neighbours: np.ndarray  # int32 (int64 past 2^31 nodes) [num_nodes, degree]: each row ascending
    second_eigenvalue: float  # second-largest |eigenvalue| of the adjacency matrix (see SpectralEstimate)
    bound: float  # 2 * sqrt(degree - 1) + ramanujan_slack
    tries: int  # graphs generated, the accepted one included
    spectral: SpectralEstimate  # how second_eigenvalue was obtained

    @property
    def edge_index(self) -> np.ndarray:
        """int64 [2, num_nodes * degree]: both directions of every edge, sorted by (dst, src)."""
        n, d = self.neighbours.shape
        return np.stack([self.neighbours.ravel().astype(np.int64), np.repeat(np.arange(n, dtype=np.int64), d)])


class _RepairFailed(Exception):
    """Internal: a cycle's clashes could not be repaired within the round budget."""


def hamiltonian_expander(
    num_nodes: int,
    degree: int,
    *,
    generator: np.random.Generator,
    forbidden_edge_index: np.ndarray | None = None,
    ramanujan_slack: float = 0.1,
    max_tries: int = 20,
    spectral_check_steps: int = DEFAULT_LANCZOS_STEPS,
) -> ExpanderResult:
    """Draw a simple ``degree``-regular near-Ramanujan graph as the union of ``degree/2`` Hamiltonian cycles.

    This is the "Hamiltonian cycle variant" of Exphormer (Shirzad et al., 2023, Appendix C), analysed by
    Friedman (2003, Theorem 1.2; Exphormer's Theorem C.3): with high probability every non-trivial
    adjacency eigenvalue satisfies ``|lambda_i| <= 2 * sqrt(degree - 1) + eps`` for i >= 2. Graphs whose
    second-largest absolute eigenvalue exceeds ``bound = 2 * sqrt(degree - 1) + ramanujan_slack`` are
    redrawn, up to ``max_tries`` graphs (a bipartite draw has eigenvalue ``-degree`` and is rejected).
    That eigenvalue comes from ``second_eigenvalue_estimate``: exact on small graphs, otherwise a Lanczos
    estimate of ``spectral_check_steps`` Lanczos steps, so the check costs O(steps * n * d) whatever n. The
    estimate is a lower bound, short of the true value by ~5e-3 or less at the default 100 steps on graphs
    up to 10^6 nodes (see there): a graph can pass whose true value exceeds the bound by that much.

    Unlike the paper's multigraph process, the union here is kept simple (no self-loops, no repeated
    edge) and disjoint from ``forbidden_edge_index`` (undirected pairs, either direction, e.g. the input
    graph's edges), so every node has exactly ``degree`` neighbours.

    Cost: O(d * n + E_forbidden) time and memory besides the spectral check, plus a small Python loop
    over the clashes of each cycle (about as many as a node has forbidden or earlier neighbours).

    Args:
        num_nodes: number of nodes n (>= 3).
        degree: even degree d with 2 <= d <= n - 1 - (largest forbidden degree).
        generator: the only source of randomness; the same seed gives the same graph.
        forbidden_edge_index: int array [2, E] of node pairs the expander must not contain.
        ramanujan_slack: eps in the acceptance bound above.
        max_tries: how many graphs to draw before giving up.
        spectral_check_steps: Lanczos steps of the spectral check on graphs too large for the dense solver.

    Returns:
        ExpanderResult: the neighbour table ``[n, d]`` (rows ascending), whose ``edge_index`` is int64
        ``[2, n * d]`` holding both directions of every undirected edge, sorted by (dst = row 1, src = row 0).

    Raises:
        ConfigError: bad degree / size / step count, or no graph within the bound after ``max_tries``.
        DatasetError: ``forbidden_edge_index`` is malformed or names nodes outside ``[0, n)``.
    """
    n = operator.index(num_nodes)
    d = operator.index(degree)
    max_tries = operator.index(max_tries)
    if (isinstance(spectral_check_steps, bool) or not isinstance(spectral_check_steps, int | np.integer)
            or spectral_check_steps < 1):
        raise ConfigError(f"preprocess.expander.spectral_check_steps must be an integer >= 1 (Lanczos steps); "
                          f"got {spectral_check_steps!r}")
    steps = int(spectral_check_steps)
    if d < 2 or d % 2:
        raise ConfigError(
            f"expander degree must be an even integer >= 2 (it is the union of degree/2 Hamiltonian "
            f"cycles); got degree={d}"
        )
    if n < 3:
        raise ConfigError(
            f"an expander of degree {d} needs at least 3 nodes (a Hamiltonian cycle); got num_nodes={n}"
        )
    if max_tries < 1:
        raise ConfigError(f"max_tries must be >= 1; got {max_tries}")
    slack = float(ramanujan_slack)
    if not math.isfinite(slack):
        raise ConfigError(f"ramanujan_slack must be finite; got {ramanujan_slack!r}")

    forbidden_keys, max_forbidden_degree = _forbidden_keys(forbidden_edge_index, n)
    if d > n - 1 - max_forbidden_degree:
        raise ConfigError(
            f"expander degree {d} is too large: with num_nodes={n}, a node can have at most {n - 1} "
            f"neighbours, and the busiest node already has {max_forbidden_degree} forbidden ones, so the "
            f"degree must be <= {n - 1 - max_forbidden_degree}"
        )

    bound = 2.0 * math.sqrt(d - 1) + slack
    best = math.inf
    repair_failures = 0
    for tries in range(1, max_tries + 1):
        try:
            neighbours = _draw_cycle_union(n, d // 2, forbidden_keys, generator)
        except _RepairFailed:
            repair_failures += 1
            continue
        estimate = second_eigenvalue_estimate(neighbours, steps)
        log.info(
            "expander try %d: second |eigenvalue| %.4f (%s), bound %.4f",
            tries, estimate.value,
            f"Lanczos lower bound: {estimate.steps} steps, residual {estimate.residual:.2e}"
            if estimate.steps else "exact", bound,
        )
        best = min(best, estimate.value)
        if estimate.value <= bound:
            return ExpanderResult(
                neighbours=neighbours,
                second_eigenvalue=estimate.value,
                bound=bound,
                tries=tries,
                spectral=estimate,
            )

    if repair_failures == max_tries:
        raise ConfigError(
            f"could not draw {d // 2} edge-disjoint Hamiltonian cycles on {n} nodes avoiding the "
            f"{forbidden_keys.size // 2} forbidden edges in {max_tries} tries; use a smaller expander degree "
            f"(degrees close to the number of allowed neighbours are hard to fill with random cycles)"
        )
    raise ConfigError(
        f"no {d}-regular expander on {n} nodes met the near-Ramanujan bound {bound:.4f} "
        f"(2*sqrt({d}-1) + ramanujan_slack={slack}) in {max_tries} tries; best second eigenvalue "
        f"found was {best:.4f}; raise ramanujan_slack (or max_tries)"
    )


def second_eigenvalue_estimate(neighbours: np.ndarray, steps: int = DEFAULT_LANCZOS_STEPS) -> SpectralEstimate:
    """Second-largest |eigenvalue| of the adjacency A of a d-regular graph given as a neighbour table.

    The all-ones vector is A's top eigenvector (eigenvalue d), so the wanted value is the spectral norm of
    ``B = A - (d / n) 11^T``, i.e. of A restricted to the vectors orthogonal to 1: both ends of B's
    spectrum, ``max(lambda_2, -lambda_n)``.

    Up to ``_DENSE_EIG_MAX_NODES`` nodes it is computed exactly (dense ``eigvalsh``). Above, it is the
    largest |Ritz value| of ``steps`` Lanczos steps on B from a fixed random start vector (the start and
    every iterate are projected orthogonally to 1, so rounding never brings back the eigenvalue d). Ritz
    values lie inside B's spectrum, so the estimate is a lower bound of the true value (up to rounding),
    which it approaches from below as steps grow: fast for an isolated extreme eigenvalue (a bipartite
    graph's -d is found in a few steps), and at error O(width / steps^2) for the continuous edge of a
    random regular graph's spectrum: with 100 steps on random 30-regular graphs, ~1e-8 at 2000 nodes,
    ~5e-4 at 10^5 and ~5e-3 at 10^6 (width 4 sqrt(d - 1) ~ 21.5). The cost is
    ``steps`` products with A, O(steps * n * d) time and O(n * d) memory: Lanczos without
    reorthogonalisation keeps three vectors (lost orthogonality only repeats converged Ritz values).
    ``residual`` is the Lanczos residual ``beta_k |s_k|`` of the reported Ritz pair.

    Args:
        neighbours: int [n, d] the neighbours of each node (each undirected edge in both rows).
        steps: Lanczos steps (>= 1); the Krylov space of dimension min(steps, n - 1) is searched.
    """
    n, d = neighbours.shape
    if n <= _DENSE_EIG_MAX_NODES:
        adjacency = np.zeros((n, n))
        np.add.at(adjacency, (np.repeat(np.arange(n), d), neighbours.ravel()), 1.0)
        magnitudes = np.sort(np.abs(np.linalg.eigvalsh(adjacency)))
        return SpectralEstimate(value=float(magnitudes[-2]), steps=0, residual=0.0)
    alphas, betas = _lanczos(neighbours, min(steps, n - 1))
    ritz, vectors = scipy.linalg.eigh_tridiagonal(alphas, betas[:-1])
    extreme = int(np.argmax(np.abs(ritz)))
    residual = abs(betas[-1] * vectors[-1, extreme])
    return SpectralEstimate(value=float(abs(ritz[extreme])), steps=int(alphas.size), residual=float(residual))


def _lanczos(neighbours: np.ndarray, steps: int) -> tuple[np.ndarray, np.ndarray]:
    """Diagonal and off-diagonal (plus the final beta) of the Lanczos tridiagonal of A on 1-perp."""
    n, d = neighbours.shape
    index_dtype = torch.int32 if n * d < 2**31 else torch.int64
    # float32 products: the matrix is exact (ones) and their rounding (~1e-7 relative) is far below the
    # estimate's own error, while the random reads of the vector, which dominate, move half the bytes.
    # torch's CSR product runs on all cores (scipy's on one).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "sparse CSR support is in beta"
        adjacency = torch.sparse_csr_tensor(
            torch.arange(0, n * d + 1, d, dtype=index_dtype),
            torch.from_numpy(neighbours.ravel()).to(index_dtype),
            torch.ones(n * d, dtype=torch.float32),
            size=(n, n),
        )
    q = torch.from_numpy(np.random.default_rng(_START_SEED).standard_normal(n))
    q -= q.mean()
    q /= torch.linalg.vector_norm(q)
    q_prev = torch.zeros(n, dtype=torch.float64)
    alphas, betas = [], []
    beta = 0.0
    for _ in range(steps):
        w = (adjacency @ q.float()).double()
        w -= w.mean()  # back onto 1-perp: rounding would otherwise grow the eigenvalue-d component
        alpha = float(q @ w)
        w -= alpha * q + beta * q_prev
        beta = float(torch.linalg.vector_norm(w))
        alphas.append(alpha)
        betas.append(beta)
        if beta <= 1e-10 * max(abs(alpha), 1.0):
            break  # an invariant subspace: its Ritz values are exact eigenvalues
        q_prev, q = q, w / beta
    return np.asarray(alphas), np.asarray(betas)


def _forbidden_keys(forbidden_edge_index: np.ndarray | None, n: int) -> tuple[np.ndarray, int]:
    """Sorted keys u*n+v of the forbidden pairs in both directions (self-loops dropped), and the largest
    number of forbidden partners of a node.

    Linear time: the pattern is a sparse matrix (no sort for the usual input, a graph's sorted edge list),
    its transpose one counting sort, and their sum merges sorted rows.
    """
    if forbidden_edge_index is None:
        return np.empty(0, dtype=np.int64), 0
    fe = np.asarray(forbidden_edge_index)
    if fe.ndim != 2 or fe.shape[0] != 2:
        raise DatasetError(f"forbidden_edge_index must have shape [2, E]; got {fe.shape}")
    if fe.size == 0:
        return np.empty(0, dtype=np.int64), 0
    if not np.issubdtype(fe.dtype, np.integer):
        raise DatasetError(f"forbidden_edge_index must hold integers; got dtype {fe.dtype}")
    lo_id, hi_id = int(fe.min()), int(fe.max())
    if lo_id < 0 or hi_id >= n:
        raise DatasetError(
            f"forbidden_edge_index names node ids in [{lo_id}, {hi_id}], outside [0, {n}) for num_nodes={n}"
        )
    src, dst = fe
    loops = src == dst
    if loops.any():
        src, dst = src[~loops], dst[~loops]
    del loops
    pattern = sorted_csr(src, dst, np.ones(src.size, dtype=np.int8), n)
    pattern.data[:] = 1  # repeats were summed
    pattern = (pattern + pattern.T).tocsr()  # both directions; rows stay sorted
    degree = np.diff(pattern.indptr)
    keys = np.repeat(np.arange(n, dtype=np.int64), degree)  # the rows, then (in place) row * n + column
    keys *= n
    keys += pattern.indices
    return keys, int(degree.max())


def _is_member(sorted_keys: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """Boolean mask of the queries' shape: which queries occur in the sorted array.

    Sorted queries are much faster (~10x on a graph's worth of keys): the binary searches then walk the
    array in order and hit cached memory.
    """
    if sorted_keys.size == 0:
        return np.zeros(queries.shape, dtype=bool)
    pos = np.searchsorted(sorted_keys, queries)
    np.minimum(pos, sorted_keys.size - 1, out=pos)
    return sorted_keys[pos] == queries


def _clashes(
    u: np.ndarray, v: np.ndarray, forbidden_keys: np.ndarray, neighbours: np.ndarray, filled: int, n: int
) -> np.ndarray:
    """Which pairs (u, v) (small arrays of one shape) are forbidden or edges of the earlier cycles.

    The earlier cycles are the first ``filled`` columns of the neighbour table.
    """
    hit = _is_member(forbidden_keys, u * n + v)
    if filled:
        hit |= (neighbours[u, :filled] == v[..., None]).any(axis=-1)
    return hit


def _clashing_positions(
    order: np.ndarray, forbidden_keys: np.ndarray, neighbours: np.ndarray, filled: int, n: int
) -> np.ndarray:
    """Ascending positions j whose cycle edge (order[j], order[j+1]) is forbidden or already taken.

    Each edge is checked from its first node, in node order: the queries u * n + successor(u) are then
    sorted, and the table is read row after row, so a whole cycle costs O(n * d) and no sort.
    """
    successor = np.empty(n, dtype=np.int64)
    successor[order] = np.roll(order, -1)
    clash = _is_member(forbidden_keys, np.arange(n, dtype=np.int64) * n + successor)  # [n] per first node
    if filled:
        for start in range(0, n, _ROW_CHUNK):
            rows = slice(start, start + _ROW_CHUNK)
            clash[rows] |= (neighbours[rows, :filled] == successor[rows, None]).any(axis=1)
    return np.flatnonzero(clash[order])


def _draw_cycle_union(
    n: int, num_cycles: int, forbidden_keys: np.ndarray, generator: np.random.Generator
) -> np.ndarray:
    """Neighbour table [n, 2 * num_cycles] of edge-disjoint Hamiltonian cycles avoiding the forbidden keys.

    Cycle c fills columns 2c and 2c + 1 (each node's successor and predecessor on it); rows come back
    sorted. int32 where the ids fit, to halve the table.
    """
    neighbours = np.empty((n, 2 * num_cycles), dtype=np.int32 if n < 2**31 else np.int64)
    for c in range(num_cycles):
        order = generator.permutation(n).astype(np.int64, copy=False)
        # Why repair locally instead of rejecting the cycle: with d/2 cycles plus a forbidden set of
        # hundreds of thousands of edges, a fresh random cycle almost surely clashes somewhere (the
        # expected number of clashes is about the number of edges already taken per node, i.e. tens to
        # hundreds), so rejecting whole cycles would essentially never terminate. Swapping the endpoint
        # of a clashing edge with another node changes only four cycle edges and keeps `order` a
        # permutation, i.e. still a Hamiltonian cycle; a few vectorised rounds remove every clash.
        filled = 2 * c
        clash = functools.partial(_clashes, forbidden_keys=forbidden_keys, neighbours=neighbours, filled=filled, n=n)
        _repair_cycle(order, clash, _clashing_positions(order, forbidden_keys, neighbours, filled, n), generator)
        neighbours[order, filled] = np.roll(order, -1)
        neighbours[order, filled + 1] = np.roll(order, 1)
    neighbours.sort(axis=1)
    if num_cycles and bool(np.any(neighbours[:, 1:] == neighbours[:, :-1])):  # pragma: no cover - guard
        raise RuntimeError("internal error: expander cycles share an edge after repair")
    return neighbours


def _repair_cycle(order: np.ndarray, clash, clashes: np.ndarray, generator: np.random.Generator) -> None:
    """Swap nodes in ``order`` (in place) until no cycle edge clashes (``clash(u, v)`` is False everywhere).

    ``clashes`` are the ascending positions that clash at first (edge j joins order[j] and order[j+1]).

    For a clash at edge position i, node order[i+1] is swapped with order[r]; of a batch of random
    candidates r, one that leaves the fewest clashes among the (up to four) touched edges is taken, ties
    broken at random. Scoring candidates keeps the repair converging when the taken pairs are dense,
    where a blind swap would create more clashes than it removes. Later rounds re-check only the edges
    the swaps touched, since no other edge changed (the loop is over the few clashing positions, never
    over all nodes).
    """
    n = order.size
    num_candidates = min(n, _REPAIR_CANDIDATES)
    for _round in range(_MAX_REPAIR_ROUNDS):
        if clashes.size == 0:
            return
        touched = []
        for i in clashes.tolist():
            p = i + 1 if i + 1 < n else 0
            if not clash(order[i : i + 1], order[p : p + 1])[0]:
                continue  # already fixed by an earlier swap in this round
            rs = generator.integers(0, n, size=num_candidates)
            # touched edge positions per candidate: i, p, r-1, r
            pos = np.stack([np.full_like(rs, i), np.full_like(rs, p), (rs - 1) % n, rs], axis=1)
            valid = np.ones(pos.shape, dtype=bool)
            valid[:, 2:] = (pos[:, 2:] != i) & (pos[:, 2:] != p)  # count each touched edge once
            nxt = (pos + 1) % n
            old = clash(order[pos], order[nxt])
            col_r = rs[:, None]
            new_lo = np.where(pos == p, order[col_r], np.where(pos == col_r, order[p], order[pos]))
            new_hi = np.where(nxt == p, order[col_r], np.where(nxt == col_r, order[p], order[nxt]))
            new = clash(new_lo, new_hi)
            delta = (new & valid).sum(axis=1) - (old & valid).sum(axis=1)
            delta[rs == p] = np.iinfo(delta.dtype).max  # a no-op swap
            best = np.flatnonzero(delta == delta.min())
            r = int(rs[best[generator.integers(best.size)]])
            order[p], order[r] = order[r], order[p]
            touched += [i, p, (r - 1) % n, r]
        suspects = np.unique(np.asarray(touched, dtype=np.int64))  # no other edge changed
        clashes = suspects[clash(order[suspects], order[(suspects + 1) % n])]
    raise _RepairFailed
