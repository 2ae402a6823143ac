"""DeepGraph's coverage-balanced substructure sampling run inside every graph, all graphs stepping together."""

from __future__ import annotations

import operator

import numpy as np

from sgt_core.errors import ConfigError
from sgt_core.preprocess.adjacency import segment_positions
from sgt_core.preprocess.substructures.instances import Substructures

__all__ = ["coverage_balanced_sample_per_graph"]


def coverage_balanced_sample_per_graph(
    substructures: Substructures,
    instance_graph: np.ndarray,
    node_graph: np.ndarray,
    threshold: int,
    generator: np.random.Generator,
) -> np.ndarray:
    """`coverage.coverage_balanced_sample`'s rule inside every graph, one pick per graph per step.

    Per graph: take the type used least so far among the graph's types that still have a useful candidate
    (cnt > 0: it holds a node of the graph covered fewer than `threshold` times), ties between types in a
    fixed random order per graph, and within it a candidate with the largest cnt, ties at random; stop when
    every node of the graph is covered `threshold` times or no candidate helps. All graphs take their next
    pick in the same vectorised step (a graph's picks never change another graph's counts: instances lie in
    one graph), so the steps number the largest graph's picks, not the sum.

    Cost per step: O(number of (graph, type) groups + the candidates of the chosen groups + the memberships
    of the nodes that reach the threshold).

    Args:
        substructures: the candidates.
        instance_graph: int64 [S] the graph of each candidate.
        node_graph: int64 [N] the graph of each node.
        threshold: target coverage per node (>= 0; 0 selects nothing).
        generator: breaks ties.

    Returns:
        int64 [T] indices into `substructures`, graph by graph, each graph's in pick order.
    """
    threshold = operator.index(threshold)
    if threshold < 0:
        raise ConfigError(f"coverage threshold must be >= 0; got {threshold}")
    num_subs, num_nodes = len(substructures), node_graph.size
    num_graphs = int(node_graph.max(initial=-1)) + 1
    if threshold == 0 or num_subs == 0:
        return np.empty(0, dtype=np.int64)
    # Permuted index space: candidates grouped by (graph, type), shuffled inside a group, so a group is one
    # slice of `cnt` and argmax's first-max rule is a random tie-break.
    # one float key (exact: graph * types + type < 2^52) sorts far faster than a three-key lexsort
    group = instance_graph * (int(substructures.type_id.max()) + 1) + substructures.type_id  # [S]
    perm = np.argsort(group + generator.random(num_subs))  # [S] permuted -> original
    pos_of = np.empty(num_subs, dtype=np.int64)
    pos_of[perm] = np.arange(num_subs)
    group_key = group[perm]  # [S] ascending
    starts = np.flatnonzero(np.concatenate([[True], group_key[1:] != group_key[:-1]]))  # [Q] group starts
    ends = np.concatenate([starts[1:], [num_subs]])
    group_graph = instance_graph[perm][starts]  # [Q] ascending
    # each graph's fixed random order of its types: a random priority per group, ranked inside the graph
    tie = generator.random(starts.size)  # [Q]

    members = substructures.members
    cnt = substructures.sizes[perm].astype(np.int64)  # every node starts under-covered
    owner = pos_of[substructures.instance_of_member]  # [M] the permuted candidate of each membership
    by_node = np.argsort(members, kind="stable")
    node_owner = owner[by_node]
    node_ptr = np.concatenate([[0], np.cumsum(np.bincount(members, minlength=num_nodes))]).astype(np.int64)

    coverage = np.zeros(num_nodes, dtype=np.int64)
    under = np.bincount(node_graph, minlength=num_graphs)  # [G] nodes covered fewer than threshold times
    used = np.zeros(starts.size, dtype=np.int64)  # [Q] picks of the group's type in its graph
    active = np.ones(starts.size, dtype=bool)  # [Q] groups that may still help
    picked_flag = np.iinfo(np.int64).min // 2
    picks, pick_graph = [], []
    having = np.unique(group_graph)  # [G'] the graphs with candidates
    having_first = np.searchsorted(group_graph, having)  # [G'] each one's first group
    group_slot = np.searchsorted(having, group_graph)  # [Q] its graph's place in `having`
    while True:
        live = active & (under[group_graph] > 0)  # [Q]
        if not live.any():
            break
        # per graph, its least-used live group, ties by the random priority: the minimum of used + tie
        key = np.where(live, used + tie, np.inf)  # [Q] tie < 1, so used decides first
        graph_min = np.minimum.reduceat(key, having_first)  # [G']
        chosen = np.flatnonzero(live & (key == graph_min[group_slot]))  # [C] at most one group per graph
        lengths = ends[chosen] - starts[chosen]
        flat = segment_positions(starts[chosen], lengths)  # [sum] the chosen groups' candidates
        values = cnt[flat]
        offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        best_value = np.maximum.reduceat(values, offsets)  # [C]
        # first position reaching the maximum in each group (the random order breaks ties)
        hits = np.flatnonzero(values == np.repeat(best_value, lengths))
        first_hit = hits[np.searchsorted(hits, offsets)]
        useless = best_value <= 0
        active[chosen[useless]] = False  # cnt only decreases: this type stays useless in this graph
        take = flat[first_hit[~useless]]  # [P] permuted candidates picked this step, one per graph at most
        if take.size == 0:
            continue
        used[chosen[~useless]] += 1
        cnt[take] = picked_flag
        original = perm[take]
        picks.append(original)
        pick_graph.append(instance_graph[original])
        lengths = substructures.ptr[original + 1] - substructures.ptr[original]
        mem = members[segment_positions(substructures.ptr[original], lengths)]  # distinct: one graph each
        coverage[mem] += 1
        reached = mem[coverage[mem] == threshold]  # nodes that just reached the threshold
        if reached.size:
            np.subtract.at(under, node_graph[reached], 1)
            lo = node_ptr[reached]
            np.subtract.at(cnt, node_owner[segment_positions(lo, node_ptr[reached + 1] - lo)], 1)
    if not picks:
        return np.empty(0, dtype=np.int64)
    picks, pick_graph = np.concatenate(picks), np.concatenate(pick_graph)
    return picks[np.argsort(pick_graph, kind="stable")]
