"""Token edges: each token node joined both ways to exactly its members."""

from __future__ import annotations

import numpy as np

from sgt_core.preprocess.substructures.instances import Substructures
from sgt_core.preprocess.substructures.token_edges import substructure_token_edges


def test_token_edges_join_each_token_to_exactly_its_members():
    subs = Substructures.from_lists([[0, 1, 2], [2, 3], [4, 5, 6, 7]], [0, 5, 17])
    selection = subs.select(np.array([2, 0]))
    edge_index, num_tokens = substructure_token_edges(selection, 8)
    assert num_tokens == 2 and edge_index.dtype == np.int64 and edge_index.shape == (2, 14)
    pairs = set(map(tuple, edge_index.T.tolist()))
    assert len(pairs) == 14
    for t, members in enumerate([[4, 5, 6, 7], [0, 1, 2]]):
        token = 8 + t
        assert {s for s, d in pairs if d == token} == set(members)
        assert {d for s, d in pairs if s == token} == set(members)
    assert all(s >= 8 or d >= 8 for s, d in pairs)  # no member-member edges
