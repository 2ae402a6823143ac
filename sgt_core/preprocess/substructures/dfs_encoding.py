"""DFS encoding: each substructure's induced adjacency in a degree-ordered depth-first order (Appendix E)."""

from __future__ import annotations

import operator

import numpy as np

from sgt_core.errors import ConfigError, DatasetError
from sgt_core.preprocess.adjacency import simple_csr
from sgt_core.preprocess.substructures.instances import Substructures

__all__ = ["dfs_adjacency_encoding", "dfs_adjacency_encodings", "dfs_order"]


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


def dfs_adjacency_encodings(
    substructures: Substructures, edge_index: np.ndarray, num_nodes: int, max_size: int
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

    Returns:
        float32 [S, max_size * max_size].
    """
    n = operator.index(num_nodes)
    max_size = operator.index(max_size)
    if max_size < 1:
        raise ConfigError(f"max_size must be >= 1; got {max_size}")
    keys = _edge_keys(edge_index, n, "dfs_adjacency_encodings")
    num_subs = len(substructures)
    out = np.zeros((num_subs, max_size, max_size), dtype=np.float32)  # [S, K, K]
    sizes = substructures.sizes
    members_all = substructures.members
    if members_all.size and (int(members_all.min()) < 0 or int(members_all.max()) >= n):
        raise DatasetError(
            f"dfs_adjacency_encodings: member ids lie in [{int(members_all.min())}, "
            f"{int(members_all.max())}], outside [0, {n})"
        )
    # Batch instances of equal size: induced adjacency by looking every member pair up in `keys`.
    for size in np.unique(sizes).tolist():
        if size == 0:
            continue
        which = np.flatnonzero(sizes == size)  # [B]
        flat = substructures.ptr[which][:, None] + np.arange(size)  # [B, size]
        mem = members_all[flat]  # [B, size]
        query = mem[:, :, None] * n + mem[:, None, :]  # [B, size, size]
        if keys.size:
            pos = np.minimum(np.searchsorted(keys, query), keys.size - 1)
            dense = keys[pos] == query  # [B, size, size]
        else:
            dense = np.zeros(query.shape, dtype=bool)
        keep = min(size, max_size)
        for b, sub in enumerate(which.tolist()):
            block = dense[b]  # [size, size]
            neighbours = [np.flatnonzero(row).tolist() for row in block]
            order = dfs_order(mem[b].tolist(), neighbours)[:keep]
            out[sub, :keep, :keep] = block[np.ix_(order, order)]
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
