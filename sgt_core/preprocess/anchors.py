"""AnchorGT's receptive field: k-dominating-set anchors, k-hop pairs and their shortest-path distances.

One concept, kept in one file although it is long: the receptive field R(v) below, its anchors, pairs and
distances being the parts of one construction.

AnchorGT (Zhu et al., 2024, "AnchorGT: Efficient and Flexible Attention Architecture for Scalable Graph
Transformers", https://arxiv.org/abs/2405.03481) lets every node v attend to

    R(v) = N_k(v) ∪ S,    N_k(v) = {u : SPD(v, u) <= k},

where S is a k-dominating set (every node lies within k hops of an anchor), with the shortest-path
distance SPD(v, u) as relative structural encoding (Graphormer's spatial encoding).

Edges follow the interaction graph's convention: (src, dst) means dst attends to src, so u in R(v) becomes
the edge (src=u, dst=v). The pairs of R(v) are split over edge types that never overlap, so no (src, dst)
pair appears twice once they are merged with the builder's edges:

    ======== ============================================== ===================
    type     pairs (src=u, dst=v)                           SPD(u, v)
    ======== ============================================== ===================
    self     u = v                                          0      (builder)
    graph    u adjacent to v                                1      (builder)
    khop     u not an anchor                                2 .. k (this module)
    anchor   u in S                                         >= 2 or unreachable
    ======== ============================================== ===================

Without a cap their union is exactly R(v) ∪ {v}. An anchor adjacent to v is left to the graph type (its
SPD is 1 anyway), and an anchor within k hops is an anchor edge, not a k-hop edge.

Edges are treated as undirected (both directions are used whatever the input holds) and self-loops are
ignored; the loaders already give both directions of every edge and no self-loops.
"""

from __future__ import annotations

import itertools
import math
import operator

import numpy as np
import scipy.sparse as sp
from scipy.sparse import csgraph

from sgt_core.errors import ConfigError, DatasetError
from sgt_core.preprocess.adjacency import simple_adjacency

__all__ = ["k_dominating_set", "receptive_field_edges"]

# First window scanned for the next uncovered node in the greedy order; it doubles up to the cap while a
# search keeps finding covered nodes, so finding all anchors costs O(n) element work in few numpy calls.
_SCAN_WINDOW = 64
_SCAN_WINDOW_MAX = 1 << 16
# Anchor SPDs are computed for this many (anchor, node) entries at a time (bounds the float64 scratch).
_SPD_BLOCK_ENTRIES = 1 << 22
# Destinations are expanded in chunks whose estimated walk count stays near this budget, so dense graphs
# keep bounded memory (a chunk holds at least one node).
_KHOP_WALK_BUDGET = 1 << 22
# Anchor SPDs are stored as int16 while building the edges.
_MAX_SPD_LIMIT = np.iinfo(np.int16).max


def k_dominating_set(
    edge_index: np.ndarray, num_nodes: int, k: int, generator: np.random.Generator
) -> np.ndarray:
    """Greedy k-dominating set: AnchorGT's Algorithm 1 (Appendix B), after Nguyen et al. (2020).

    Repeatedly takes the uncovered node of highest degree as the next anchor and marks every node within
    k hops of it as covered, until every node is covered. Degrees never change, so the nodes are sorted
    once by (degree descending, random priority) and scanned in that order, skipping covered ones: the
    node reached is always a highest-degree uncovered node, and ties are broken by a priority drawn from
    ``generator`` (Algorithm 1's RandomSelect). Each anchor costs one hop-limited BFS through the CSR
    adjacency, so the whole run is O(n log n + sum of the anchors' k-hop ball sizes).

    Isolated nodes cannot be covered by another node; they sort last and each becomes its own anchor.

    Args:
        edge_index: int [2, E] (src, dst) pairs, read as undirected edges.
        num_nodes: number of nodes n.
        k: hop radius (>= 1).
        generator: the only source of randomness (tie-breaks); the same seed gives the same anchors.

    Returns:
        int64 [A] anchor ids in selection order (isolated nodes last). Every node is within k hops of
        one of them, and no two anchors are within k hops of each other.

    Raises:
        ConfigError: k < 1.
        DatasetError: ``edge_index`` is malformed or names nodes outside ``[0, num_nodes)``.
    """
    adj = simple_adjacency(edge_index, num_nodes, "k_dominating_set")
    k = _check_k(k, "k_dominating_set")
    n = adj.shape[0]
    indptr = adj.indptr.astype(np.int64, copy=False)
    indices = adj.indices.astype(np.int64, copy=False)
    degree = np.diff(indptr)  # [n] distinct neighbours

    # Primary key: degree descending; secondary: a random priority (lexsort sorts by the last key first).
    order = np.lexsort((generator.random(n), -degree))  # [n]
    num_connected = int(np.count_nonzero(degree))  # isolated nodes form the tail of `order`

    covered = np.zeros(n, dtype=bool)
    mark = np.full(n, -1, dtype=np.int64)  # mark[u] = id of the last BFS that reached u
    anchors: list[int] = []
    pos = 0
    while True:
        pos = _next_uncovered(order, covered, pos, num_connected)
        if pos == num_connected:
            break
        anchor = int(order[pos])
        covered[_ball(indptr, indices, anchor, k, mark, len(anchors))] = True
        anchors.append(anchor)
    return np.concatenate([np.asarray(anchors, dtype=np.int64), order[num_connected:]])


def receptive_field_edges(
    edge_index: np.ndarray,
    num_nodes: int,
    anchors: np.ndarray,
    k: int,
    max_khop_per_node: int | None = None,
    generator: np.random.Generator | None = None,
    *,
    max_spd: int = 20,
    max_anchors_per_node: int | None = None,
) -> dict:
    """The anchor and k-hop attention edges of AnchorGT's receptive field R(v), with their SPDs.

    Anchor edges: (src=a, dst=v) for every anchor a and node v with SPD(a, v) >= 2 (unreachable
    included), i.e. all anchor pairs except self-pairs and graph edges (see the module docstring).
    Their SPD is reported exactly up to ``max_spd``; farther and unreachable pairs get ``max_spd``.
    Because ``max_spd > k``, an anchor outside N_k(v) always has SPD > k, which keeps the encoding
    anchor-distinguishable in AnchorGT's sense (Definition 4.2).

    k-hop edges: (src=u, dst=v) for every non-anchor u with 2 <= SPD(u, v) <= k.

    Cap rule (``max_khop_per_node``), applied per destination v to the k-hop edges only (anchor edges have
    their own cap, below): nearest first by hop distance, i.e.
    all of v's 2-hop pairs, then 3-hop pairs, ..., and in the shell where the cap falls a uniformly random
    subset drawn from ``generator``. Closer nodes are kept because the local structure is what the k-hop
    part is for; sampling the boundary shell at random avoids a bias towards low node ids.

    Anchor cap (``max_anchors_per_node``, a deviation from AnchorGT, which joins every node to every anchor):
    per destination v, only its ``max_anchors_per_node`` nearest anchor edges by SPD are kept, ties broken
    uniformly at random (from ``generator``). On a 100 x 100 king grid with k = 2 the greedy set has ~780
    anchors, so the uncapped field is ~7.8M anchor edges, far more than the estimator can afford. Nearest
    first keeps v's closest anchor (with a cap >= 1), which a k-dominating set puts within k hops, so every
    node still reaches the anchor set in one attention step; anchors at SPD 0 or 1 are v's self and graph
    edges and do not count against the cap.

    Cost: one BFS per anchor (limited to ``max_spd`` hops) and O(N * A) memory for the anchor edges, as in
    AnchorGT; the k-hop search is a row-chunked sparse BFS costing O(sum_v |N_k(v)|). With a cap, a
    destination's search stops after the shell that fills it, but that shell is enumerated in full (to
    sample it uniformly), so at k = 2 the cap bounds the output, not the work. Output arrays are sorted
    by (dst, src), and the result is deterministic given ``generator``'s state.

    Args:
        edge_index: int [2, E] (src, dst) pairs, read as undirected edges.
        num_nodes: number of nodes n.
        anchors: int [A] distinct anchor ids, any order, e.g. from
            [`k_dominating_set`][sgt_core.preprocess.anchors.k_dominating_set].
        k: hop radius (>= 1) of N_k(v).
        max_khop_per_node: at most this many k-hop edges per destination; None keeps all.
        generator: draws the boundary-shell subsets; required when ``max_khop_per_node`` is set.
        max_spd: SPD bucket for anchors farther than this or unreachable; must satisfy k < max_spd <= 32767.
        max_anchors_per_node: at most this many anchor edges per destination (nearest first); None keeps all.

    Returns:
        dict of numpy arrays and stats:
            ``anchor_edge_index`` int64 [2, E_a], ``anchor_spd`` int64 [E_a] (2 .. max_spd),
            ``khop_edge_index`` int64 [2, E_k], ``khop_spd`` int64 [E_k] (2 .. k),
            ``stats``: ``num_anchors``, ``num_anchor_edges`` (after the anchor cap), ``num_khop_edges``,
            ``num_khop_saturated_nodes`` (destinations holding exactly ``max_khop_per_node`` >= 1 k-hop
            edges; 0 without a cap), ``mean_khop_per_node``, ``num_uncovered_nodes`` (nodes farther than
            k from every anchor: 0 for a k-dominating set).

    Raises:
        ConfigError: bad k, max_spd or caps, or a cap without a generator.
        DatasetError: malformed ``edge_index`` or ``anchors``.
    """
    where = "receptive_field_edges"
    adj = simple_adjacency(edge_index, num_nodes, where)
    n = adj.shape[0]
    k = _check_k(k, where)
    max_spd = operator.index(max_spd)
    if not k < max_spd <= _MAX_SPD_LIMIT:
        raise ConfigError(
            f"{where}: max_spd must satisfy k < max_spd <= {_MAX_SPD_LIMIT} (anchors beyond k hops must stay "
            f"distinguishable from k-hop ones); got max_spd={max_spd} with k={k}"
        )
    cap = _check_cap(max_khop_per_node, "max_khop_per_node", "to draw the kept subset", generator, where)
    anchor_cap = _check_cap(max_anchors_per_node, "max_anchors_per_node", "for SPD ties", generator, where)
    anchors = _check_anchors(anchors, n, where)

    anchor_edge_index, anchor_spd, min_anchor_spd = _anchor_edges(
        adj, anchors, max_spd, anchor_cap, generator
    )
    is_anchor = np.zeros(n, dtype=bool)
    is_anchor[anchors] = True
    khop_edge_index, khop_spd, saturated = _khop_edges(adj, k, is_anchor, cap, generator)

    stats = {
        "num_anchors": int(anchors.size),
        "num_anchor_edges": int(anchor_spd.size),
        "num_khop_edges": int(khop_spd.size),
        "num_khop_saturated_nodes": saturated,
        "mean_khop_per_node": khop_spd.size / n if n else 0.0,
        "num_uncovered_nodes": int(np.count_nonzero(min_anchor_spd > k)),
    }
    return {
        "anchor_edge_index": anchor_edge_index,
        "anchor_spd": anchor_spd,
        "khop_edge_index": khop_edge_index,
        "khop_spd": khop_spd,
        "stats": stats,
    }


def _anchor_edges(
    adj: sp.csr_matrix,
    anchors: np.ndarray,
    max_spd: int,
    cap: int | None = None,
    generator: np.random.Generator | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Anchor edges sorted by (dst, src), their capped SPDs, and every node's SPD to its nearest anchor.

    With `cap`, each destination keeps its `cap` nearest anchors among those with SPD >= 2 (random ties).
    """
    n = adj.shape[0]
    anchors = np.sort(anchors)
    spd = np.empty((n, anchors.size), dtype=np.int16)  # [n, A]: spd[v, j] = min(SPD(anchors[j], v), max_spd)
    block = max(1, _SPD_BLOCK_ENTRIES // max(n, 1))
    for start in range(0, anchors.size, block):
        sources = anchors[start : start + block]
        # Unit weights make Dijkstra a BFS; `limit` stops it past max_spd (those entries come back inf).
        dist = csgraph.dijkstra(adj, directed=True, indices=sources, unweighted=True, limit=max_spd)  # [b, n]
        spd[:, start : start + sources.size] = np.minimum(dist, max_spd).T  # inf -> max_spd
    min_spd = spd.min(axis=1) if anchors.size else np.full(n, max_spd, dtype=np.int16)  # [n]
    # SPD 0 is the self-pair and SPD 1 a graph edge: both belong to other edge types.
    keep = spd >= 2  # [n, A]
    if cap is not None and cap < anchors.size:
        keep = _nearest_anchors(spd, keep, cap, generator)
    dst, col = np.nonzero(keep)  # row-major, so already sorted by (dst, src) as anchors are sorted
    edge_index = np.stack([anchors[col], dst.astype(np.int64)])  # [2, E_a]
    return edge_index, spd[dst, col].astype(np.int64), min_spd


def _nearest_anchors(
    spd: np.ndarray, keep: np.ndarray, cap: int, generator: np.random.Generator
) -> np.ndarray:
    """Narrows `keep` [n, A] to each row's `cap` smallest-SPD kept entries, ties broken at random.

    Row blocks bound the float scratch; argpartition makes it O(n * A), no full per-row sort.
    """
    n, num_anchors = spd.shape
    narrowed = np.zeros_like(keep)  # [n, A]
    if cap == 0:
        return narrowed
    block = max(1, _SPD_BLOCK_ENTRIES // max(num_anchors, 1))
    for start in range(0, n, block):
        rows = slice(start, start + block)
        # SPD plus a U[0, 1) tie-break: a smaller key is nearer, and equal SPDs are in random order.
        key = spd[rows].astype(np.float32) + generator.random(spd[rows].shape, dtype=np.float32)  # [b, A]
        key[~keep[rows]] = np.inf
        nearest = np.argpartition(key, cap - 1, axis=1)[:, :cap]  # [b, cap] columns of the cap smallest
        chosen = np.take_along_axis(key, nearest, axis=1) < np.inf  # [b, cap] drops rows' missing entries
        local_rows = np.broadcast_to(np.arange(nearest.shape[0])[:, None], nearest.shape)
        narrowed[rows][local_rows[chosen], nearest[chosen]] = True
    return narrowed


def _khop_edges(
    adj: sp.csr_matrix,
    k: int,
    is_anchor: np.ndarray,
    cap: int | None,
    generator: np.random.Generator | None,
) -> tuple[np.ndarray, np.ndarray, int]:
    """k-hop edges (src=u, dst=v), 2 <= SPD <= k, u not an anchor; capped per dst; sorted by (dst, src).

    Also returns how many destinations hold exactly `cap` k-hop edges (0 without a cap).
    """
    dst_parts, src_parts, spd_parts = [], [], []
    saturated = 0
    for start, stop in _khop_chunks(adj, k):
        dst, src, spd = _khop_pairs(adj, start, stop, k, is_anchor, cap)
        if cap is not None and spd.size:
            # Per destination: sort by hop distance with a random key inside each shell, keep the first `cap`.
            order = np.lexsort((generator.random(spd.size), spd, dst))
            dst, src, spd = dst[order], src[order], spd[order]
            rank = np.arange(dst.size) - np.searchsorted(dst, dst)  # position inside the destination's run
            keep = rank < cap
            saturated += int(np.count_nonzero(rank == cap - 1))
            dst, src, spd = dst[keep], src[keep], spd[keep]
        order = np.lexsort((src, dst))
        dst_parts.append(dst[order])
        src_parts.append(src[order])
        spd_parts.append(spd[order])
    if not dst_parts:
        return np.empty((2, 0), dtype=np.int64), np.empty(0, dtype=np.int64), 0
    edge_index = np.stack([np.concatenate(src_parts), np.concatenate(dst_parts)])  # [2, E_k]
    return edge_index, np.concatenate(spd_parts), saturated


def _khop_chunks(adj: sp.csr_matrix, k: int) -> list[tuple[int, int]]:
    """Split destinations [0, n) into ranges whose walks of length 1..k number about _KHOP_WALK_BUDGET.

    The number of walks of length d from v, (A^d 1)[v], bounds the work and the output of the d-th hop
    of v's BFS, so it is a cheap, safe size estimate.
    """
    n = adj.shape[0]
    if n == 0:
        return []
    walks = np.ones(n)
    work = np.zeros(n)
    for _ in range(k):
        walks = adj @ walks  # [n]
        work += walks
    cumulative = np.cumsum(work + 1.0)  # +1: every destination costs something
    num_chunks = max(1, math.ceil(cumulative[-1] / _KHOP_WALK_BUDGET))
    cuts = np.searchsorted(cumulative, np.arange(1, num_chunks) * _KHOP_WALK_BUDGET, side="right")
    bounds = np.unique(np.concatenate([[0], cuts, [n]]))
    return [(int(a), int(b)) for a, b in itertools.pairwise(bounds) if b > a]


def _khop_pairs(
    adj: sp.csr_matrix, start: int, stop: int, k: int, is_anchor: np.ndarray, cap: int | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(dst, src, spd) for dst in [start, stop): level-synchronous BFS as sparse row-block products.

    With a cap, a destination's search stops after the first shell that brings it to `cap` pairs: every
    shell it would still reach is farther, so the cap would drop it anyway. The pairs of that last shell
    are all returned; the caller picks the random subset.
    """
    n = adj.shape[0]
    rows = stop - start
    found = np.zeros(rows, dtype=np.int64)  # [rows] pairs collected per destination
    reached = sp.csr_matrix(
        (np.ones(rows, dtype=adj.dtype), (np.arange(rows), np.arange(start, stop))), shape=(rows, n)
    )  # [rows, n]: nodes within d hops of each destination
    frontier = reached  # [rows, n]: nodes at exactly d hops
    dst_parts, src_parts, spd_parts = [], [], []
    for hop in range(1, k + 1):
        step = frontier @ adj  # [rows, n] walk counts
        step.data[:] = 1
        new = step - step.multiply(reached)  # drop nodes already reached at a smaller distance
        new.eliminate_zeros()
        if new.nnz == 0:
            break
        reached = reached + new
        frontier = new
        if hop >= 2:
            pairs = new.tocoo()
            keep = ~is_anchor[pairs.col]
            row = pairs.row[keep].astype(np.int64)
            dst_parts.append(row + start)
            src_parts.append(pairs.col[keep].astype(np.int64))
            spd_parts.append(np.full(row.size, hop, dtype=np.int64))
            if cap is not None and hop < k:
                # Nearest-first: a destination with `cap` pairs already never keeps a farther one, so its
                # BFS stops here (this is what keeps k >= 3 affordable on graphs with hubs).
                found += np.bincount(row, minlength=rows)
                frontier = sp.diags((found < cap).astype(adj.dtype)) @ frontier
    if not dst_parts:
        empty = np.empty(0, dtype=np.int64)
        return empty, empty, empty
    return np.concatenate(dst_parts), np.concatenate(src_parts), np.concatenate(spd_parts)


def _next_uncovered(order: np.ndarray, covered: np.ndarray, start: int, stop: int) -> int:
    """First position p >= start in order[:stop] whose node is not covered; stop if there is none."""
    width = _SCAN_WINDOW
    while start < stop:
        window = covered[order[start : min(start + width, stop)]]
        first = int(np.argmin(window))  # first False, or 0 if all True
        if not window[first]:
            return start + first
        start += window.size
        width = min(2 * width, _SCAN_WINDOW_MAX)
    return stop


def _ball(
    indptr: np.ndarray, indices: np.ndarray, source: int, k: int, mark: np.ndarray, stamp: int
) -> np.ndarray:
    """Nodes within k hops of source (with repeats possible): a hop-limited BFS over the CSR arrays."""
    mark[source] = stamp
    frontier = np.array([source], dtype=np.int64)
    parts = [frontier]
    for _ in range(k):
        nbrs = _neighbours(indptr, indices, frontier)
        nbrs = nbrs[mark[nbrs] != stamp]
        if nbrs.size == 0:
            break
        mark[nbrs] = stamp
        frontier = np.unique(nbrs)
        parts.append(frontier)
    return np.concatenate(parts)


def _neighbours(indptr: np.ndarray, indices: np.ndarray, nodes: np.ndarray) -> np.ndarray:
    """Concatenated CSR neighbour lists of `nodes`, without a Python loop."""
    starts = indptr[nodes]
    counts = indptr[nodes + 1] - starts
    # Entry j of the output sits at offset j - (start of its node's run) inside that node's CSR slice.
    run_start = np.cumsum(counts) - counts
    positions = np.repeat(starts - run_start, counts) + np.arange(int(counts.sum()))
    return indices[positions]


def _check_cap(value, name: str, purpose: str, generator, where: str) -> int | None:
    """A per-node cap: None (no cap) or an int >= 0; a cap needs the generator to break ties."""
    if value is None:
        return None
    cap = operator.index(value)
    if cap < 0:
        raise ConfigError(f"{where}: {name} must be >= 0 or None; got {cap}")
    if generator is None:
        raise ConfigError(f"{where}: {name}={cap} needs a generator {purpose}")
    return cap


def _check_k(k: int, where: str) -> int:
    k = operator.index(k)
    if k < 1:
        raise ConfigError(f"{where}: k (hop radius) must be >= 1; got {k}")
    return k


def _check_anchors(anchors: np.ndarray, n: int, where: str) -> np.ndarray:
    a = np.asarray(anchors)
    if a.ndim != 1:
        raise DatasetError(f"{where}: anchors must be a 1-D array of node ids; got shape {a.shape}")
    if a.size and not np.issubdtype(a.dtype, np.integer):
        raise DatasetError(f"{where}: anchors must hold integers; got dtype {a.dtype}")
    a = a.astype(np.int64, copy=False)
    if a.size and (a.min() < 0 or a.max() >= n):
        raise DatasetError(f"{where}: anchors name node ids in [{a.min()}, {a.max()}], outside [0, {n})")
    if np.unique(a).size != a.size:
        raise DatasetError(f"{where}: anchors must be distinct; got {a.size - np.unique(a).size} repeats")
    return a
