"""The anchor cap (a deviation from AnchorGT): each node keeps its nearest anchors by SPD, random ties."""

from __future__ import annotations

import numpy as np
import pytest

from sgt_core.errors import ConfigError
from sgt_core.preprocess.anchors import k_dominating_set, receptive_field_edges
from tests.preprocess.test_anchors import _erdos_renyi, _path


def keys(edge_index, n):
    return set((edge_index[1] * n + edge_index[0]).tolist())


@pytest.mark.parametrize("cap", [0, 1, 3, 100])
def test_anchor_cap_keeps_the_nearest_anchors(cap):
    edge_index, n = _erdos_renyi(80, 0.07, seed=5)
    anchors = k_dominating_set(edge_index, n, 2, np.random.default_rng(0))
    full = receptive_field_edges(edge_index, n, anchors, 2, max_spd=6)
    capped = receptive_field_edges(edge_index, n, anchors, 2, max_spd=6, max_anchors_per_node=cap,
                                   generator=np.random.default_rng(1))
    full_e, cap_e = full["anchor_edge_index"], capped["anchor_edge_index"]
    assert keys(cap_e, n) <= keys(full_e, n)
    assert np.all(np.diff(cap_e[1] * n + cap_e[0]) > 0)  # still sorted by (dst, src)
    np.testing.assert_array_equal(np.bincount(cap_e[1], minlength=n),
                                  np.minimum(np.bincount(full_e[1], minlength=n), cap))
    for v in range(n):
        kept = capped["anchor_spd"][cap_e[1] == v]
        every = np.sort(full["anchor_spd"][full_e[1] == v])
        if 0 < kept.size < every.size:
            assert kept.max() <= every[kept.size], f"node {v} kept a farther anchor over a nearer one"
    # k-hop edges and the anchor set do not depend on the anchor cap
    np.testing.assert_array_equal(capped["khop_edge_index"], full["khop_edge_index"])
    assert capped["stats"]["num_anchor_edges"] == cap_e.shape[1]


def test_anchor_cap_by_hand_and_errors():
    # 0 - 1 - ... - 9, anchors {0, 9}: node 4 is 4 from anchor 0 and 5 from anchor 9
    edge_index, n = _path(10)
    out = receptive_field_edges(edge_index, n, np.array([0, 9]), 2, max_spd=8, max_anchors_per_node=1,
                                generator=np.random.default_rng(0))
    nearest = dict(zip(out["anchor_edge_index"][1].tolist(), out["anchor_edge_index"][0].tolist()))
    assert nearest[4] == 0 and nearest[5] == 9
    # anchors at SPD 0 (itself) or 1 (a graph edge) do not count: nodes 0 and 1 get the far anchor 9
    assert nearest[0] == 9 and nearest[1] == 9 and len(nearest) == n
    with pytest.raises(ConfigError, match="generator"):
        receptive_field_edges(edge_index, n, np.array([0]), 2, max_anchors_per_node=1)
    with pytest.raises(ConfigError, match="max_anchors_per_node"):
        receptive_field_edges(edge_index, n, np.array([0]), 2, max_anchors_per_node=-1,
                              generator=np.random.default_rng(0))
