"""The anchor component on many graphs: k-hop and anchor edges with each graph's own SPDs, anchors covering every
node of their graph, expander pairs taking precedence."""

from __future__ import annotations

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import shortest_path

from sgt_core.config.preprocess import AnchorsConfig
from sgt_core.preprocess.interaction_graph import EDGE_TYPES
from tests.preprocess.components.built import ANCHORS, build, built, graph_set


def _spd(data):
    edges = data.edge_index.numpy()
    n = data.num_nodes
    return shortest_path(coo_matrix((np.ones(edges.shape[1]), tuple(edges)), shape=(n, n)).tocsr(), unweighted=True)


def test_spd_buckets_are_each_graphs_own_distances():
    data, graph = graph_set(), built()
    spd = _spd(data)  # the union's distances: infinite across graphs
    src, dst = graph.edge_index.numpy()
    kind = graph.edge_type.numpy()
    for name in ("anchor", "khop"):
        mask = kind == EDGE_TYPES.index(name)
        assert mask.any()
        distance = spd[src[mask], dst[mask]]
        assert np.isfinite(distance[graph.node_graph.numpy()[src[mask]] != graph.node_graph.numpy()[dst[mask]]]).all()
        expected = np.minimum(distance, ANCHORS.max_spd)  # within one graph; unreachable inside it -> max_spd
        assert np.array_equal(graph.edge_spd.numpy()[mask], expected)
    khop = kind == EDGE_TYPES.index("khop")
    assert (spd[src[khop], dst[khop]] <= ANCHORS.k).all()
    assert np.bincount(dst[khop], minlength=graph.num_nodes).max() <= ANCHORS.max_khop_per_node
    assert graph.stats["num_uncovered_nodes"] == 0


def test_every_node_reaches_an_anchor_of_its_own_graph():
    data = graph_set()
    uncapped = AnchorsConfig(k=ANCHORS.k, max_khop_per_node=None, max_anchors_per_node=None, max_spd=ANCHORS.max_spd)
    graph = build(expander=None, substructure_tokens=None, virtual_nodes=0, anchors=uncapped)
    spd = _spd(data)
    src, _ = graph.edge_index.numpy()
    node_graph = graph.node_graph.numpy()
    anchors = np.unique(src[graph.edge_type.numpy() == EDGE_TYPES.index("anchor")])  # those at SPD >= 2 of a node
    for v in range(data.num_nodes):
        same = anchors[node_graph[anchors] == node_graph[v]]
        # (a graph whose anchors are all within one hop of every node has no anchor edges at all)
        assert same.size == 0 or v in same or (spd[v, same] <= ANCHORS.k).any(), v
    assert graph.stats["num_uncovered_nodes"] == 0


def test_expander_pairs_take_precedence():
    graph = built()
    src, dst = graph.edge_index
    key = dst * graph.num_nodes + src
    assert key.unique().numel() == key.numel()
    expander = graph.edge_type == EDGE_TYPES.index("expander")
    assert graph.stats["anchor_khop_pairs_on_expander"] >= 0
    assert (graph.edge_spd[expander] == 0).all()
