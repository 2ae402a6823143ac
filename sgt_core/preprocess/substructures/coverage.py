"""Coverage sampling: picks substructures until every node is covered about `threshold` times (Appendix D)."""

from __future__ import annotations

import operator

import numpy as np

from sgt_core.errors import ConfigError, DatasetError
from sgt_core.preprocess.adjacency import segment_positions
from sgt_core.preprocess.substructures.instances import Substructures

__all__ = ["coverage_balanced_sample"]


def coverage_balanced_sample(
    substructures: Substructures,
    num_nodes: int,
    threshold: int,
    generator: np.random.Generator,
) -> np.ndarray:
    """Greedily picks substructures until every node is covered `threshold` times (DeepGraph Appendix D).

    Rule: keep ``cnt_i`` = the number of members of candidate i that are covered fewer than `threshold`
    times so far. At each step take the type used least so far among types that still have a useful
    candidate (cnt > 0), ties between types in a fixed random order (so types are used round-robin), and
    within it a candidate with the largest cnt, ties broken at random. Stop when every node is covered
    `threshold` times or no candidate covers an under-covered node any more (so nodes that no instance
    contains never block termination). With this rule the used counts of the types that stay available
    differ by at most one.

    This is the deterministic, one-at-a-time form of the paper's scheme (which draws ``n_sample`` of the
    top-k candidates per round after ``n_init`` random picks). ``cnt`` is kept exact incrementally: when a
    node reaches the threshold, each candidate containing it loses one, through a node -> instances
    index, so a step costs O(largest type's candidate count + touched memberships).

    Args:
        substructures: the candidates (e.g. from `match_substructures`).
        num_nodes: number of nodes n; member ids must lie in [0, n).
        threshold: target coverage per node (>= 0; 0 selects nothing).
        generator: breaks ties.

    Returns:
        int64 [T]: indices into `substructures` in pick order; ``substructures.select(result)`` gives them.
    """
    n = operator.index(num_nodes)
    threshold = operator.index(threshold)
    if threshold < 0:
        raise ConfigError(f"coverage threshold must be >= 0; got {threshold}")
    num_subs = len(substructures)
    members = substructures.members
    if members.size and (int(members.min()) < 0 or int(members.max()) >= n):
        raise DatasetError(
            f"coverage_balanced_sample: member ids lie in [{int(members.min())}, {int(members.max())}], "
            f"outside [0, {n})"
        )
    if threshold == 0 or num_subs == 0:
        return np.empty(0, dtype=np.int64)

    # Work in a permuted index space where candidates are grouped by type and shuffled within a type,
    # so a type is one contiguous slice of `cnt` and argmax's first-max rule is a random tie-break.
    perm = np.lexsort((generator.random(num_subs), substructures.type_id))  # [S] permuted -> original
    pos_of = np.empty(num_subs, dtype=np.int64)
    pos_of[perm] = np.arange(num_subs)  # original -> permuted
    sorted_types = substructures.type_id[perm]
    present = np.unique(sorted_types)
    seg_start = np.searchsorted(sorted_types, present, side="left")
    seg_end = np.searchsorted(sorted_types, present, side="right")

    sizes = substructures.sizes
    cnt = sizes[perm].astype(np.int64)  # every node starts under-covered
    # node -> the (permuted) candidates that contain it, CSR over nodes.
    owner = pos_of[substructures.instance_of_member]  # [M]
    by_node = np.argsort(members, kind="stable")
    node_owner = owner[by_node]  # [M]
    node_ptr = np.concatenate([[0], np.cumsum(np.bincount(members, minlength=n))]).astype(np.int64)

    coverage = np.zeros(n, dtype=np.int64)
    under = n  # nodes covered fewer than `threshold` times
    used = np.zeros(present.size, dtype=np.int64)
    type_order = generator.permutation(present.size)  # fixed tie order between equally used types
    active = np.ones(present.size, dtype=bool)
    picked_flag = np.iinfo(np.int64).min // 2
    picks: list[int] = []
    while under > 0 and active.any():
        # Least-used active type; among equals, the first in `type_order`.
        candidates = type_order[active[type_order]]
        t = int(candidates[np.argmin(used[candidates])])
        seg = cnt[seg_start[t] : seg_end[t]]
        j = int(np.argmax(seg))
        if seg[j] <= 0:
            active[t] = False  # cnt only decreases, so this type stays useless
            continue
        s = int(seg_start[t]) + j
        cnt[s] = picked_flag
        used[t] += 1
        original = int(perm[s])
        picks.append(original)
        mem = members[substructures.ptr[original] : substructures.ptr[original + 1]]
        coverage[mem] += 1
        reached = mem[coverage[mem] == threshold]  # nodes that just reached the threshold
        if reached.size:
            under -= int(reached.size)
            lo = node_ptr[reached]
            flat = segment_positions(lo, node_ptr[reached + 1] - lo)  # [memberships of `reached`]
            np.subtract.at(cnt, node_owner[flat], 1)
    return np.asarray(picks, dtype=np.int64)
