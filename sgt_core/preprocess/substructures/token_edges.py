"""Token edges: joins each selected substructure's token node both ways to its member nodes."""

from __future__ import annotations

import operator

import numpy as np

from sgt_core.errors import DatasetError
from sgt_core.preprocess.substructures.instances import Substructures

__all__ = ["substructure_token_edges"]


def substructure_token_edges(selection: Substructures, num_nodes: int) -> tuple[np.ndarray, int]:
    """Joins token node ``num_nodes + t`` (for selected instance t) both ways to each of its members.

    Args:
        selection: the selected instances (e.g. ``subs.select(coverage_balanced_sample(...))``).
        num_nodes: number of graph nodes n; tokens get ids n, n + 1, ..., n + T - 1.

    Returns:
        (edge_index int64 [2, 2M] as (src, dst): first member -> token for every membership, then
        token -> member in the same order; num_tokens T). The caller tags them with its `substructure`
        edge type and re-sorts with the other edge blocks.
    """
    n = operator.index(num_nodes)
    members = selection.members.astype(np.int64)
    if members.size and (int(members.min()) < 0 or int(members.max()) >= n):
        raise DatasetError(
            f"substructure_token_edges: member ids lie in [{int(members.min())}, {int(members.max())}], "
            f"outside [0, {n})"
        )
    tokens = n + selection.instance_of_member  # [M]
    to_token = np.stack([members, tokens])  # [2, M]
    return np.concatenate([to_token, to_token[::-1]], axis=1), len(selection)
