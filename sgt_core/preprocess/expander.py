"""Random near-Ramanujan regular expander graphs built from Hamiltonian cycles."""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from sgt_core.errors import ConfigError, DatasetError

__all__ = ["ExpanderResult", "hamiltonian_expander"]

# Graphs with at most this many nodes get a dense eigendecomposition (ARPACK is unreliable on tiny matrices).
_DENSE_EIG_MAX_NODES = 64
# Repair rounds allowed for one cycle before the whole graph is redrawn (counts as one try).
_MAX_REPAIR_ROUNDS = 200
# Random swap partners scored per clash during repair.
_REPAIR_CANDIDATES = 64


@dataclass(frozen=True, eq=False)
class ExpanderResult:
    """An accepted expander: its edges and the spectral certificate that accepted it."""

    edge_index: np.ndarray  # int64 [2, num_nodes * degree], both directions, sorted by (dst, src)
    second_eigenvalue: float  # second-largest |eigenvalue| of the adjacency matrix
    bound: float  # 2 * sqrt(degree - 1) + ramanujan_slack
    tries: int  # graphs generated, the accepted one included


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
) -> ExpanderResult:
    """Draw a simple ``degree``-regular near-Ramanujan graph as the union of ``degree/2`` Hamiltonian cycles.

    This is the "Hamiltonian cycle variant" of Exphormer (Shirzad et al., 2023, Appendix C), analysed by
    Friedman (2003, Theorem 1.2; Exphormer's Theorem C.3): with high probability every non-trivial
    adjacency eigenvalue satisfies ``|lambda_i| <= 2 * sqrt(degree - 1) + eps`` for i >= 2. Graphs whose
    second-largest absolute eigenvalue exceeds ``bound = 2 * sqrt(degree - 1) + ramanujan_slack`` are
    redrawn, up to ``max_tries`` graphs (a bipartite draw has eigenvalue ``-degree`` and is rejected).

    Unlike the paper's multigraph process, the union here is kept simple (no self-loops, no repeated
    edge) and disjoint from ``forbidden_edge_index`` (undirected pairs, either direction, e.g. the input
    graph's edges), so every node has exactly ``degree`` neighbours.

    Args:
        num_nodes: number of nodes n (>= 3).
        degree: even degree d with 2 <= d <= n - 1 - (largest forbidden degree).
        generator: the only source of randomness; the same seed gives the same graph.
        forbidden_edge_index: int array [2, E] of node pairs the expander must not contain.
        ramanujan_slack: eps in the acceptance bound above.
        max_tries: how many graphs to draw before giving up.

    Returns:
        ExpanderResult whose ``edge_index`` is int64 ``[2, n * d]`` holding both directions of every
        undirected edge, sorted by (dst = row 1, src = row 0).

    Raises:
        ConfigError: bad degree / size, or no graph within the bound after ``max_tries`` draws.
        DatasetError: ``forbidden_edge_index`` is malformed or names nodes outside ``[0, n)``.
    """
    n = operator.index(num_nodes)
    d = operator.index(degree)
    max_tries = operator.index(max_tries)
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

    forbidden_keys = _forbidden_keys(forbidden_edge_index, n)
    max_forbidden_degree = 0
    if forbidden_keys.size:
        counts = np.bincount(forbidden_keys // n, minlength=n) + np.bincount(forbidden_keys % n, minlength=n)
        max_forbidden_degree = int(counts.max())
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
            keys = _draw_cycle_union(n, d // 2, forbidden_keys, generator)
        except _RepairFailed:
            repair_failures += 1
            continue
        second = _second_abs_eigenvalue(keys, n)
        best = min(best, second)
        if second <= bound:
            return ExpanderResult(
                edge_index=_keys_to_edge_index(keys, n),
                second_eigenvalue=second,
                bound=bound,
                tries=tries,
            )

    if repair_failures == max_tries:
        raise ConfigError(
            f"could not draw {d // 2} edge-disjoint Hamiltonian cycles on {n} nodes avoiding the "
            f"{forbidden_keys.size} forbidden edges in {max_tries} tries; use a smaller expander degree "
            f"(degrees close to the number of allowed neighbours are hard to fill with random cycles)"
        )
    raise ConfigError(
        f"no {d}-regular expander on {n} nodes met the near-Ramanujan bound {bound:.4f} "
        f"(2*sqrt({d}-1) + ramanujan_slack={slack}) in {max_tries} tries; best second eigenvalue "
        f"found was {best:.4f}; raise ramanujan_slack (or max_tries)"
    )


def _forbidden_keys(forbidden_edge_index: np.ndarray | None, n: int) -> np.ndarray:
    """Sorted unique undirected keys min*n+max of the forbidden pairs, self-loops dropped."""
    if forbidden_edge_index is None:
        return np.empty(0, dtype=np.int64)
    fe = np.asarray(forbidden_edge_index)
    if fe.ndim != 2 or fe.shape[0] != 2:
        raise DatasetError(f"forbidden_edge_index must have shape [2, E]; got {fe.shape}")
    if fe.size == 0:
        return np.empty(0, dtype=np.int64)
    if not np.issubdtype(fe.dtype, np.integer):
        raise DatasetError(f"forbidden_edge_index must hold integers; got dtype {fe.dtype}")
    fe = fe.astype(np.int64, copy=False)
    lo_id, hi_id = int(fe.min()), int(fe.max())
    if lo_id < 0 or hi_id >= n:
        raise DatasetError(
            f"forbidden_edge_index names node ids in [{lo_id}, {hi_id}], outside [0, {n}) for num_nodes={n}"
        )
    lo = np.minimum(fe[0], fe[1])
    hi = np.maximum(fe[0], fe[1])
    keep = lo != hi
    keys = np.sort(lo[keep] * n + hi[keep])
    if keys.size:
        keys = keys[np.concatenate([[True], keys[1:] != keys[:-1]])]
    return keys


def _is_member(sorted_keys: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """Boolean mask: which queries occur in the sorted array."""
    if sorted_keys.size == 0:
        return np.zeros(queries.shape, dtype=bool)
    pos = np.searchsorted(sorted_keys, queries)
    np.minimum(pos, sorted_keys.size - 1, out=pos)
    return sorted_keys[pos] == queries


def _cycle_keys(order: np.ndarray, n: int) -> np.ndarray:
    """Undirected keys of the cycle edges (order[i], order[i+1 mod n])."""
    nxt = np.roll(order, -1)
    return np.minimum(order, nxt) * n + np.maximum(order, nxt)


def _draw_cycle_union(
    n: int, num_cycles: int, forbidden_keys: np.ndarray, generator: np.random.Generator
) -> np.ndarray:
    """Undirected keys of num_cycles edge-disjoint Hamiltonian cycles that avoid the forbidden keys."""
    taken = forbidden_keys
    cycles = []
    for _ in range(num_cycles):
        order = generator.permutation(n).astype(np.int64, copy=False)
        # Why repair locally instead of rejecting the cycle: with d/2 cycles plus a forbidden set of
        # hundreds of thousands of edges, a fresh random cycle almost surely clashes somewhere (the
        # expected number of clashes is about the number of edges already taken per node, i.e. tens to
        # hundreds), so rejecting whole cycles would essentially never terminate. Swapping the endpoint
        # of a clashing edge with another node changes only four cycle edges and keeps `order` a
        # permutation, i.e. still a Hamiltonian cycle; a few vectorised rounds remove every clash.
        keys = _repair_cycle(order, taken, n, generator)
        # A Hamiltonian cycle on n >= 3 nodes has n distinct non-loop edges, so `keys` has no repeats.
        keys = np.sort(keys)
        cycles.append(keys)
        # Both inputs are sorted, so the stable sort (timsort) is effectively a linear merge.
        taken = np.sort(np.concatenate([taken, keys]), kind="stable")
    union = np.sort(np.concatenate(cycles), kind="stable")
    if union.size > 1 and bool(np.any(union[1:] == union[:-1])):  # pragma: no cover - invariant guard
        raise RuntimeError("internal error: expander cycles share an edge after repair")
    return union


def _repair_cycle(order: np.ndarray, taken: np.ndarray, n: int, generator: np.random.Generator) -> np.ndarray:
    """Swap nodes in ``order`` (in place) until no cycle edge is in ``taken``; return the cycle's keys.

    For a clash at edge position i, node order[i+1] is swapped with order[r]; of a batch of random
    candidates r, one that leaves the fewest clashes among the (up to four) touched edges is taken, ties
    broken at random. Scoring candidates keeps the repair converging when ``taken`` is dense, where a
    blind swap would create more clashes than it removes.
    """
    num_candidates = min(n, _REPAIR_CANDIDATES)
    for _round in range(_MAX_REPAIR_ROUNDS):
        keys = _cycle_keys(order, n)
        clashes = np.flatnonzero(_is_member(taken, keys))
        if clashes.size == 0:
            return keys
        for i in clashes.tolist():  # loops over the few clashing positions, never over all nodes
            p = i + 1 if i + 1 < n else 0
            a, b = order[i], order[p]
            if not _is_member(taken, np.array([min(a, b) * n + max(a, b)]))[0]:
                continue  # already fixed by an earlier swap in this round
            rs = generator.integers(0, n, size=num_candidates)
            # touched edge positions per candidate: i, p, r-1, r  (edge j joins order[j], order[j+1])
            pos = np.stack([np.full_like(rs, i), np.full_like(rs, p), (rs - 1) % n, rs], axis=1)
            valid = np.ones(pos.shape, dtype=bool)
            valid[:, 2:] = (pos[:, 2:] != i) & (pos[:, 2:] != p)  # count each touched edge once
            nxt = (pos + 1) % n
            old = _edge_clash(order[pos], order[nxt], taken, n)
            col_r = rs[:, None]
            new_lo = np.where(pos == p, order[col_r], np.where(pos == col_r, order[p], order[pos]))
            new_hi = np.where(nxt == p, order[col_r], np.where(nxt == col_r, order[p], order[nxt]))
            new = _edge_clash(new_lo, new_hi, taken, n)
            delta = (new & valid).sum(axis=1) - (old & valid).sum(axis=1)
            delta[rs == p] = np.iinfo(delta.dtype).max  # a no-op swap
            best = np.flatnonzero(delta == delta.min())
            r = int(rs[best[generator.integers(best.size)]])
            order[p], order[r] = order[r], order[p]
    raise _RepairFailed


def _edge_clash(u: np.ndarray, v: np.ndarray, taken: np.ndarray, n: int) -> np.ndarray:
    return _is_member(taken, np.minimum(u, v) * n + np.maximum(u, v))


def _adjacency(keys: np.ndarray, n: int) -> sp.csr_matrix:
    u, v = keys // n, keys % n
    rows = np.concatenate([u, v])
    cols = np.concatenate([v, u])
    return sp.csr_matrix((np.ones(rows.size, dtype=np.float64), (rows, cols)), shape=(n, n))


def _second_abs_eigenvalue(keys: np.ndarray, n: int) -> float:
    """Second-largest absolute adjacency eigenvalue of the simple graph given by undirected keys."""
    adj = _adjacency(keys, n)
    if n <= _DENSE_EIG_MAX_NODES:
        mags = np.sort(np.abs(np.linalg.eigvalsh(adj.toarray())))
        return float(mags[-2])
    # Fixed start vector: acceptance must not depend on ARPACK's internal random start.
    v0 = np.random.default_rng(0).standard_normal(n)
    vals = spla.eigsh(adj, k=3, which="LM", v0=v0, return_eigenvectors=False)
    return float(np.sort(np.abs(vals))[-2])


def _keys_to_edge_index(keys: np.ndarray, n: int) -> np.ndarray:
    """Both directions of each undirected key, sorted by (dst, src), as int64 [2, 2 * len(keys)]."""
    u, v = keys // n, keys % n
    src = np.concatenate([u, v])
    dst = np.concatenate([v, u])
    directed = np.sort(dst * n + src)
    return np.stack([directed % n, directed // n]).astype(np.int64, copy=False)
