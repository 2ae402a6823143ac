"""AnchorGT's receptive field per graph: k-dominating-set anchors, anchor and k-hop edges with their SPDs."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from sgt_core.preprocess.anchors import k_dominating_set, receptive_field_edges
from sgt_core.preprocess.many_graphs.layout import GraphSet

__all__ = ["ReceptiveFields", "hop_distances", "receptive_fields_per_graph"]


@dataclass(frozen=True, eq=False)
class ReceptiveFields:
    """Every graph's anchors and the anchor and k-hop edges of its receptive field (global ids).

    Attributes:
        anchors: int64 [A] anchor ids, graph by graph, each graph's in the greedy selection order.
        anchor_src: int64 [E_a] the anchor edges' sources (an anchor of dst's graph).
        anchor_dst: int64 [E_a] the anchor edges' destinations.
        anchor_spd: int64 [E_a] the SPD bucket of each anchor edge (2..max_spd, max_spd also standing for
            farther or unreachable).
        khop_src: int64 [E_k] the k-hop edges' sources (2 <= SPD <= k, src not an anchor).
        khop_dst: int64 [E_k] the k-hop edges' destinations.
        khop_spd: int64 [E_k] the SPD of each k-hop edge.
        stats: `receptive_field_edges`'s counts, summed over graphs.
    """

    anchors: np.ndarray
    anchor_src: np.ndarray
    anchor_dst: np.ndarray
    anchor_spd: np.ndarray
    khop_src: np.ndarray
    khop_dst: np.ndarray
    khop_spd: np.ndarray
    stats: dict


def receptive_fields_per_graph(
    graphs: GraphSet,
    k: int,
    *,
    max_khop_per_node: int | None,
    max_anchors_per_node: int | None,
    max_spd: int,
    generator: np.random.Generator,
) -> ReceptiveFields:
    """AnchorGT's R(v) = N_k(v) ∪ S inside every graph: `anchors.receptive_field_edges`'s edges, per graph.

    Each graph gets its own greedy k-dominating set (AnchorGT's Algorithm 1: the uncovered node of highest
    degree next, ties by a random priority), and each node attends only to its own graph's anchors and
    k-hop nodes; SPDs are the graph's own. The rules (edge types, SPD buckets, nearest-first caps with random
    ties) are `receptive_field_edges`'s. Graphs of one size are stacked: hop distances up to max_spd - 1 from
    batched boolean matrix products ([B, n, n] per chunk, `hop_distances`); the greedy runs in parallel over
    the graphs of a chunk, one anchor per graph per step (as many steps as the chunk's largest anchor set);
    the caps are per-row partitions. Graphs above the dense limit take the one-graph functions one by one.

    Cost: O(n^3 * levels) per graph of n nodes (the distance products, levels <= max_spd - 1 and fewer when
    every graph's eccentricity is reached), O(n^2) memory per graph in a chunk.

    Args:
        graphs: the union's graphs.
        k: hop radius of the dominating set and of the k-hop edges (k < max_spd).
        max_khop_per_node: as `receptive_field_edges`'s.
        max_anchors_per_node: as `receptive_field_edges`'s.
        max_spd: as `receptive_field_edges`'s.
        generator: the only source of randomness (greedy ties, cap ties).
    """
    parts: dict[str, list[np.ndarray]] = {name: [] for name in (
        "anchors", "anchor_src", "anchor_dst", "anchor_spd", "khop_src", "khop_dst", "khop_spd")}
    saturated = uncovered = 0
    # Two streams: the anchors (greedy ties) must not depend on the caps' draws.
    tie_generator, cap_generator = generator.spawn(2)
    for n, chunk in graphs.size_groups():
        first = graphs.ptr[chunk]  # [B] each graph's first node
        dist = hop_distances(graphs.dense_adjacency(chunk, n), max_spd)  # int16 [B, n, n]
        degree = (dist == 1).sum(axis=2)  # [B, n]
        row, local = _greedy_dominating_set(dist <= k, degree, tie_generator.random(degree.shape))
        parts["anchors"].append(first[row] + local)
        is_anchor = np.zeros(degree.shape, dtype=bool)  # [B, n]
        is_anchor[row, local] = True
        uncovered += int(np.count_nonzero(~((dist <= k) & is_anchor[:, None, :]).any(axis=2)))
        for name, (b, dst, src, spd) in (
            ("anchor", _anchor_pairs(dist, row, local, max_anchors_per_node, cap_generator)),
            ("khop", _khop_pairs(dist, k, is_anchor, max_khop_per_node, cap_generator)),
        ):
            parts[f"{name}_src"].append(first[b] + src)
            parts[f"{name}_dst"].append(first[b] + dst)
            parts[f"{name}_spd"].append(spd)
        saturated += _khop_saturated(dist, k, is_anchor, max_khop_per_node)
    for graph in graphs.large_graphs().tolist():  # rare: the one-graph functions, one graph at a time
        edges, offset, size = graphs.graph_edges(graph), graphs.ptr[graph], int(graphs.sizes[graph])
        anchors = k_dominating_set(edges, size, k, tie_generator)
        field = receptive_field_edges(edges, size, anchors, k, max_khop_per_node, cap_generator, max_spd=max_spd,
                                      max_anchors_per_node=max_anchors_per_node)
        parts["anchors"].append(anchors + offset)
        for name in ("anchor", "khop"):
            parts[f"{name}_src"].append(field[f"{name}_edge_index"][0] + offset)
            parts[f"{name}_dst"].append(field[f"{name}_edge_index"][1] + offset)
            parts[f"{name}_spd"].append(field[f"{name}_spd"])
        saturated += field["stats"]["num_khop_saturated_nodes"]
        uncovered += field["stats"]["num_uncovered_nodes"]
    arrays = {name: np.concatenate(values).astype(np.int64) if values else np.empty(0, dtype=np.int64)
              for name, values in parts.items()}
    # the chunks came by size: put the anchors back graph by graph (stable: each graph's selection order kept)
    anchor_graph = np.searchsorted(graphs.ptr, arrays["anchors"], side="right") - 1
    arrays["anchors"] = arrays["anchors"][np.argsort(anchor_graph, kind="stable")]
    stats = {
        "num_anchors": int(arrays["anchors"].size),
        "num_anchor_edges": int(arrays["anchor_src"].size),
        "num_khop_edges": int(arrays["khop_src"].size),
        "num_khop_saturated_nodes": int(saturated),
        "mean_khop_per_node": arrays["khop_src"].size / max(graphs.num_nodes, 1),
        "num_uncovered_nodes": int(uncovered),
    }
    return ReceptiveFields(**arrays, stats=stats)


def hop_distances(adjacency: np.ndarray, max_spd: int) -> np.ndarray:
    """Hop distances of B graphs of n nodes, exact below max_spd, max_spd for farther or unreachable pairs.

    A level-synchronous BFS from every node at once: the frontier [B, n, n] times the adjacency, one batched
    float32 product per level (exact: the entries count walks, far below 2^24), stopping early once no graph
    of the batch reaches a new pair.

    Args:
        adjacency: bool [B, n, n] symmetric, zero diagonal.
        max_spd: the last bucket (>= 1).

    Returns:
        int16 [B, n, n] dist[b, u, v] = min(SPD(u, v), max_spd).
    """
    count, n, _ = adjacency.shape
    a = torch.from_numpy(adjacency).float()  # [B, n, n]
    dist = torch.full((count, n, n), max_spd, dtype=torch.int16)
    reached = torch.eye(n, dtype=torch.bool).expand(count, n, n).clone()  # [B, n, n]
    dist[reached] = 0
    frontier = reached.float()
    for hop in range(1, max_spd):
        new = (torch.bmm(frontier, a) > 0) & ~reached  # [B, n, n] pairs first reached at this hop
        if not bool(new.any()):
            break
        dist[new] = hop
        reached |= new
        frontier = new.float()
    return dist.numpy()


def _greedy_dominating_set(cover: np.ndarray, degree: np.ndarray, priority: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """AnchorGT's greedy k-dominating set of B graphs at once: (graph row [A], local anchor id [A]).

    `cover` [B, n, n] says which nodes each node covers (within k hops). Each step, every graph with an
    uncovered node takes its uncovered node of highest degree, the lowest priority among equals (the order
    `anchors.k_dominating_set` scans in), and covers its k-hop ball; isolated nodes come last, each its own
    anchor. Anchors come graph row by graph row, each graph's in selection order.
    """
    count, n = degree.shape
    key = -degree + 0.5 * priority  # [B, n] smaller first: degree descending, then priority ascending
    covered = np.zeros((count, n), dtype=bool)
    rows, picks = [], []
    active = np.arange(count)
    while active.size:
        masked = np.where(covered[active], np.inf, key[active])  # [B', n]
        pick = np.argmin(masked, axis=1)  # [B'] the next anchor of each graph still uncovered
        rows.append(active)
        picks.append(pick)
        covered[active] |= cover[active, pick]
        active = active[~covered[active].all(axis=1)]
    row, local = np.concatenate(rows), np.concatenate(picks)
    order = np.argsort(row, kind="stable")
    return row[order], local[order]


def _anchor_pairs(dist: np.ndarray, row: np.ndarray, local: np.ndarray, cap: int | None,
                  generator: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(graph row, dst, anchor src, SPD bucket) for every node and every anchor of its graph at SPD >= 2 (or
    unreachable), capped to the `cap` nearest per node (random ties), as `anchors._anchor_edges`."""
    count, n, _ = dist.shape
    per_graph = np.bincount(row, minlength=count)  # [B]
    width = int(per_graph.max(initial=0))
    slot = np.arange(row.size) - np.repeat(np.cumsum(per_graph) - per_graph, per_graph)  # rank inside its graph
    anchor = np.zeros((count, width), dtype=np.int64)  # [B, A] local anchor ids, padded with 0
    valid = np.zeros((count, width), dtype=bool)
    anchor[row, slot], valid[row, slot] = local, True
    spd = np.take_along_axis(dist, np.broadcast_to(anchor[:, None, :], (count, n, width)), axis=2)  # [B, n, A]
    keep = valid[:, None, :] & (spd >= 2)  # SPD 0 and 1 are the self and graph edges
    if cap is not None and cap < width:
        keep = _nearest(spd, keep, cap, generator)
    b, dst, j = np.nonzero(keep)
    return b, dst, anchor[b, j], spd[b, dst, j].astype(np.int64)


def _khop_pairs(dist: np.ndarray, k: int, is_anchor: np.ndarray, cap: int | None,
                generator: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(graph row, dst, src, SPD) of the k-hop pairs 2 <= SPD <= k whose src is no anchor, capped per dst to the
    nearest `cap` (the last shell a random subset), as `anchors._khop_edges`."""
    keep = (dist >= 2) & (dist <= k) & ~is_anchor[:, None, :]  # [B, dst, src]
    if cap is not None and cap < dist.shape[2]:
        keep = _nearest(dist, keep, cap, generator)
    b, dst, src = np.nonzero(keep)
    return b, dst, src, dist[b, dst, src].astype(np.int64)


def _khop_saturated(dist: np.ndarray, k: int, is_anchor: np.ndarray, cap: int | None) -> int:
    """Destinations holding exactly `cap` >= 1 k-hop edges (their candidates reached the cap)."""
    if cap is None or cap < 1:
        return 0
    candidates = ((dist >= 2) & (dist <= k) & ~is_anchor[:, None, :]).sum(axis=2)  # [B, n]
    return int(np.count_nonzero(candidates >= cap))


def _nearest(spd: np.ndarray, keep: np.ndarray, cap: int, generator: np.random.Generator) -> np.ndarray:
    """Narrows `keep` [B, n, w] to each row's `cap` smallest SPDs among the kept entries, ties at random."""
    if cap == 0:
        return np.zeros_like(keep)
    key = spd.astype(np.float32) + generator.random(spd.shape, dtype=np.float32)  # [B, n, w] random ties
    key[~keep] = np.inf
    threshold = np.partition(key, cap - 1, axis=2)[:, :, cap - 1 : cap]  # [B, n, 1] the cap-th smallest key
    return keep & (key <= threshold)
