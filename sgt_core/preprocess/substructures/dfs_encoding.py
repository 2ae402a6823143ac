"""DFS encoding: each substructure's induced adjacency in a degree-ordered depth-first order (Appendix E)."""

from __future__ import annotations

import operator
from collections.abc import Callable

import numpy as np

from sgt_core.errors import ConfigError, DatasetError
from sgt_core.preprocess.adjacency import simple_csr
from sgt_core.preprocess.substructures.instances import Substructures

__all__ = ["dfs_adjacency_encoding", "dfs_adjacency_encodings", "dfs_order", "dfs_orders"]

# Instances of one size encoded together (bounds the [B, s, s] scratch).
_BATCH = 1 << 14


def _edge_keys(edge_index: np.ndarray, num_nodes: int, where: str) -> np.ndarray:
    """Sorted unique keys u * n + v of the simple symmetrised graph (both directions present)."""
    indptr, indices = simple_csr(edge_index, num_nodes, where)
    src = np.repeat(np.arange(num_nodes, dtype=np.int64), np.diff(indptr))
    return src * num_nodes + indices  # already sorted by (src, dst)


def dfs_order(node_ids: list[int], neighbours: list[list[int]]) -> list[int]:
    """Degree-ordered depth-first order of a small graph (DeepGraph Appendix E, deterministic variant).

    Nodes are ranked by a label-free colour: the degree, refined by colour refinement (1-WL) until
    stable, so that equal-degree nodes in different structural roles (the middle of a path versus a node
    next to an end) are still told apart; since the refinement keeps the degree as the primary key,
    "higher colour" always means "higher degree first". The DFS starts at the highest-coloured node and
    visits unvisited neighbours by descending colour; remaining ties are broken by the smaller
    ``node_ids`` entry. A disconnected graph restarts from the best unvisited node.

    The paper starts at a least-degree node and permutes ties at random (then pools over orders); here the
    start is a highest-degree node and ties are broken deterministically, so one encoding per token.

    Args:
        node_ids: global id of each local node (tie-breaker only).
        neighbours: local adjacency lists.

    Returns:
        Local indices in visiting order.
    """
    size = len(neighbours)
    colour = [len(nb) for nb in neighbours]
    classes = len(set(colour))
    for _ in range(size):
        signature = [(colour[i], tuple(sorted(colour[j] for j in neighbours[i]))) for i in range(size)]
        palette = {sig: c for c, sig in enumerate(sorted(set(signature)))}
        refined = [palette[sig] for sig in signature]
        colour = refined
        if len(palette) == classes:
            break
        classes = len(palette)

    def key(i: int) -> tuple[int, int]:
        return (-colour[i], node_ids[i])

    visited = [False] * size
    order: list[int] = []
    for start in sorted(range(size), key=key):
        if visited[start]:
            continue
        visited[start] = True
        order.append(start)
        stack = [iter(sorted(neighbours[start], key=key))]
        while stack:
            for w in stack[-1]:
                if not visited[w]:
                    visited[w] = True
                    order.append(w)
                    stack.append(iter(sorted(neighbours[w], key=key)))
                    break
            else:
                stack.pop()
    return order


def dfs_orders(adjacency: np.ndarray) -> np.ndarray:
    """`dfs_order` of B small graphs at once: int64 [B, s] local ids in visiting order.

    Ties between equal colours are broken by the lower local index, i.e. `dfs_order` with ascending
    ``node_ids`` (members are stored ascending, so this is the same order). Colour refinement runs on all
    graphs together until no graph gains a class (extra rounds leave a converged graph's colours as they
    are: they are already the ranks of a stable partition); the DFS is simulated in lockstep, every graph
    making one move per step (visit the best unvisited neighbour of the top of its stack, or pop, or restart
    from its best unvisited node), at most 3 s steps.

    Args:
        adjacency: bool [B, s, s] symmetric, zero diagonal.
    """
    count, size, _ = adjacency.shape
    if count == 0 or size == 0:
        return np.zeros((count, size), dtype=np.int64)
    colour = adjacency.sum(axis=2).astype(np.int64)  # [B, s] degrees
    classes = _class_counts(colour)  # [B]
    active = np.arange(count)  # graphs whose classes may still split
    for _ in range(size):
        refined = _refine(adjacency[active], colour[active])
        refined_classes = _class_counts(refined)
        colour[active] = refined
        # a graph whose classes did not split is stable: further rounds would give it the same ranks again
        split = refined_classes != classes[active]
        classes[active] = refined_classes
        active = active[split]
        if active.size == 0:
            break
    # priority: position in the order (colour descending, local index ascending); lower visits first
    priority = np.argsort(np.argsort(-colour * size + np.arange(size), axis=1), axis=1)  # [B, s]
    visited = np.zeros((count, size), dtype=bool)
    stack = np.zeros((count, size), dtype=np.int64)
    depth = np.zeros(count, dtype=np.int64)  # stack height
    visits = np.zeros((count, size), dtype=np.int64)
    seen = np.zeros(count, dtype=np.int64)
    rows = np.arange(count)
    unset = size  # a priority no node has
    for _ in range(3 * size):
        running = seen < size
        if not running.any():
            break
        top = stack[rows, np.maximum(depth - 1, 0)]  # [B]
        around = adjacency[rows, top] & (depth > 0)[:, None]  # [B, s] neighbours of the top, if any
        candidates = ~visited & np.where((depth > 0)[:, None], around, True)  # restart: any unvisited node
        best = np.argmin(np.where(candidates, priority, unset), axis=1)  # [B]
        move = running & candidates[rows, best]
        pop = running & ~move
        visited[rows[move], best[move]] = True
        visits[rows[move], seen[move]] = best[move]
        seen += move
        stack[rows[move], depth[move]] = best[move]
        depth += move
        depth -= pop & (depth > 0)
    return visits


def _refine(adjacency: np.ndarray, colour: np.ndarray) -> np.ndarray:
    """One round of colour refinement of B graphs: each node's rank, inside its graph, of its signature
    (colour, neighbour colours ascending) in Python's tuple order, as `dfs_order`'s palette: [B, s].

    The signature's digits (colour, then the neighbours' colours ascending, then -1 for each non-neighbour, so
    that a shorter tuple compares smaller than its extensions) lie in [-1, s); shifted by one they are written
    in base s + 1 as a few integers (groups of digits, most significant first), which compare as the tuples.
    """
    count, size = colour.shape
    big = np.iinfo(np.int64).max
    neighbour = np.sort(np.where(adjacency, colour[:, None, :], big), axis=2)  # [B, s, s] ascending, then big
    digits = np.concatenate([colour[:, :, None], np.where(neighbour == big, -1, neighbour)], axis=2) + 1
    # float64 products through BLAS, exact while a group's value stays below 2^53
    per_key = max(1, int(53 // np.log2(size + 1)))
    digits = digits.astype(np.float64)
    groups = [digits[:, :, lo : lo + per_key] for lo in range(0, size + 1, per_key)]  # most significant first
    keys = [(group @ float(size + 1) ** np.arange(group.shape[2] - 1, -1, -1)).astype(np.int64).ravel()
            for group in groups]  # [B*s] each
    token = np.repeat(np.arange(count), size)
    order = np.lexsort((*keys[::-1], token))  # by token, then signature
    keys, token = [key[order] for key in keys], token[order]
    new = np.ones(order.size, dtype=bool)
    new[1:] = token[1:] != token[:-1]
    for key in keys:
        new[1:] |= key[1:] != key[:-1]
    rank = np.cumsum(new) - 1  # a class number over all graphs
    first = rank[np.arange(0, order.size, size)]  # [B] each graph's first class (the rows come by graph)
    refined = np.empty(order.size, dtype=np.int64)
    refined[order] = rank - first[token]
    return refined.reshape(count, size)


def _class_counts(colour: np.ndarray) -> np.ndarray:
    """Distinct values per row of [B, s]."""
    ordered = np.sort(colour, axis=1)
    return 1 + (ordered[:, 1:] != ordered[:, :-1]).sum(axis=1)


def dfs_adjacency_encodings(
    substructures: Substructures,
    edge_index: np.ndarray,
    num_nodes: int,
    max_size: int,
    adjacent: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None,
) -> np.ndarray:
    """DFS-ordered induced adjacency of every instance, padded and flattened (DeepGraph Appendix E).

    For instance i with members in `dfs_order`, entry (a, b) of its ``max_size x max_size`` block is 1 iff
    the a-th and b-th visited members are adjacent. Instances larger than `max_size` keep their first
    `max_size` visited nodes. Row-major flattening.

    Args:
        substructures: instances whose members are node ids of the graph.
        edge_index: int [2, E] graph edges (symmetrised; loops and repeats ignored).
        num_nodes: number of graph nodes n.
        max_size: side of the padded matrix.
        adjacent: whether node pairs (two int arrays of one shape) are adjacent, when the caller has a faster
            lookup than the sorted keys of `edge_index` (which are then not built).

    Returns:
        float32 [S, max_size * max_size].
    """
    n = operator.index(num_nodes)
    max_size = operator.index(max_size)
    if max_size < 1:
        raise ConfigError(f"max_size must be >= 1; got {max_size}")
    if adjacent is None:
        keys = _edge_keys(edge_index, n, "dfs_adjacency_encodings")

        def adjacent(u: np.ndarray, v: np.ndarray) -> np.ndarray:
            if keys.size == 0:
                return np.zeros(u.shape, dtype=bool)
            query = u * n + v
            pos = np.minimum(np.searchsorted(keys, query), keys.size - 1)
            return keys[pos] == query

    num_subs = len(substructures)
    out = np.zeros((num_subs, max_size, max_size), dtype=np.float32)  # [S, K, K]
    sizes = substructures.sizes
    members_all = substructures.members
    if members_all.size and (int(members_all.min()) < 0 or int(members_all.max()) >= n):
        raise DatasetError(
            f"dfs_adjacency_encodings: member ids lie in [{int(members_all.min())}, "
            f"{int(members_all.max())}], outside [0, {n})"
        )
    # Batch instances of equal size: induced adjacency by looking every member pair up, then the
    # DFS orders of the whole batch at once (`dfs_orders`, the same orders as `dfs_order` one by one).
    for size in np.unique(sizes).tolist():
        if size == 0:
            continue
        which = np.flatnonzero(sizes == size)  # [B]
        for start in range(0, which.size, _BATCH):
            part = which[start : start + _BATCH]
            flat = substructures.ptr[part][:, None] + np.arange(size)  # [B, size]
            mem = members_all[flat]  # [B, size] ascending per row
            dense = adjacent(*np.broadcast_arrays(mem[:, :, None], mem[:, None, :]))  # [B, size, size]
            keep = min(size, max_size)
            order = dfs_orders(dense)[:, :keep]  # [B, keep] local ids in visiting order
            rows = np.take_along_axis(dense, order[:, :, None], axis=1)  # [B, keep, size]
            out[part, :keep, :keep] = np.take_along_axis(rows, order[:, None, :], axis=2)  # [B, keep, keep]
    return out.reshape(num_subs, max_size * max_size)


def dfs_adjacency_encoding(members: np.ndarray, edge_index: np.ndarray, max_size: int) -> np.ndarray:
    """DFS-ordered induced adjacency of one node set, padded and flattened: float32 [max_size ** 2].

    See `dfs_adjacency_encodings` (the batch form, which is what the pipeline should call).
    """
    nodes = np.unique(np.asarray(members, dtype=np.int64))
    ei = np.asarray(edge_index, dtype=np.int64)
    n = int(max(nodes.max(initial=-1), ei.max(initial=-1))) + 1
    single = Substructures(
        members=nodes, ptr=np.array([0, nodes.size], dtype=np.int64), type_id=np.zeros(1, dtype=np.int64)
    )
    return dfs_adjacency_encodings(single, ei, max(n, 1), max_size)[0]
