"""Per-graph anchors and SPDs: a greedy k-dominating set inside each graph, edges and SPD buckets from each graph's
own distances (scipy's shortest paths), nothing across graphs."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import shortest_path

from sgt_core.preprocess.many_graphs import layout
from sgt_core.preprocess.many_graphs.anchors import hop_distances, receptive_fields_per_graph
from tests.preprocess.many_graphs.graph_sets import graph_set_of, random_graph_set

K, MAX_SPD = 2, 5


def _spd(graphs, g):
    n = int(graphs.sizes[g])
    edges = graphs.graph_edges(g)
    return shortest_path(coo_matrix((np.ones(edges.shape[1]), tuple(edges)), shape=(n, n)).tocsr(), unweighted=True)


def _fields(graphs, seed=0, khop=None, anchors=None):
    return receptive_fields_per_graph(graphs, K, max_khop_per_node=khop, max_anchors_per_node=anchors,
                                      max_spd=MAX_SPD, generator=np.random.default_rng(seed))


def _by_graph(graphs, src, dst, spd):
    """{graph: {(dst, src) local: spd}}, checking that no pair crosses graphs."""
    node_graph = graphs.node_graph
    assert np.array_equal(node_graph[src], node_graph[dst]), "an edge joins two graphs"
    out = {g: {} for g in range(graphs.num_graphs)}
    for s, d, value in zip(src.tolist(), dst.tolist(), spd.tolist()):
        g = int(node_graph[s])
        out[g][(d - graphs.ptr[g], s - graphs.ptr[g])] = value
    return out


def test_hop_distances_match_scipy():
    graphs = graph_set_of(random_graph_set(50, seed=1))
    for n, chunk in graphs.size_groups():
        dist = hop_distances(graphs.dense_adjacency(chunk, n), MAX_SPD)
        for b, g in enumerate(chunk.tolist()):
            np.testing.assert_array_equal(dist[b], np.minimum(_spd(graphs, g), MAX_SPD))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_greedy_dominating_set_per_graph(seed):
    graphs = graph_set_of(random_graph_set(60, seed=seed))
    fields = _fields(graphs, seed)
    anchor_graph = graphs.node_graph[fields.anchors]
    assert np.all(np.diff(anchor_graph) >= 0)  # graph by graph
    for g in range(graphs.num_graphs):
        spd = _spd(graphs, g)
        anchors = fields.anchors[anchor_graph == g] - graphs.ptr[g]
        assert anchors.size and np.unique(anchors).size == anchors.size
        assert (spd[:, anchors] <= K).any(axis=1).all(), f"graph {g}: a node farther than {K} from every anchor"
        between = spd[np.ix_(anchors, anchors)]
        assert (between[~np.eye(anchors.size, dtype=bool)] > K).all(), "two anchors within k hops"
        # the greedy bound at k = 2: anchors' closed neighbourhoods are disjoint, so they fit in the graph
        degree = (spd == 1).sum(axis=1)
        assert (1 + degree[anchors]).sum() <= spd.shape[0]
        # AnchorGT's Algorithm 1: each anchor was a highest-degree node among those still uncovered
        covered = np.zeros(spd.shape[0], dtype=bool)
        for anchor in anchors.tolist():
            assert not covered[anchor] and degree[anchor] == degree[~covered].max()
            covered |= spd[anchor] <= K
    assert fields.stats["num_uncovered_nodes"] == 0 and fields.stats["num_anchors"] == fields.anchors.size


def test_uncapped_edges_and_spd_are_each_graphs_own():
    graphs = graph_set_of(random_graph_set(60, seed=3))
    fields = _fields(graphs)
    anchor_pairs = _by_graph(graphs, fields.anchor_src, fields.anchor_dst, fields.anchor_spd)
    khop_pairs = _by_graph(graphs, fields.khop_src, fields.khop_dst, fields.khop_spd)
    anchor_graph = graphs.node_graph[fields.anchors]
    for g in range(graphs.num_graphs):
        spd = _spd(graphs, g)
        anchors = fields.anchors[anchor_graph == g] - graphs.ptr[g]
        bucket = np.minimum(spd, MAX_SPD).astype(int)
        n = spd.shape[0]
        expected_anchor = {(v, a): int(bucket[a, v]) for a in anchors.tolist() for v in range(n) if spd[a, v] >= 2}
        assert anchor_pairs[g] == expected_anchor
        non_anchor = np.setdiff1d(np.arange(n), anchors)
        expected_khop = {(v, u): int(spd[u, v]) for u in non_anchor.tolist() for v in range(n) if 2 <= spd[u, v] <= K}
        assert khop_pairs[g] == expected_khop


@pytest.mark.parametrize(("khop", "anchors"), [(1, 1), (3, 2), (0, 0)])
def test_caps_keep_the_nearest(khop, anchors):
    graphs = graph_set_of(random_graph_set(60, seed=4))
    full, capped = _fields(graphs), _fields(graphs, khop=khop, anchors=anchors)
    for name, cap in (("anchor", anchors), ("khop", khop)):
        every = _by_graph(graphs, getattr(full, f"{name}_src"), getattr(full, f"{name}_dst"),
                          getattr(full, f"{name}_spd"))
        kept = _by_graph(graphs, getattr(capped, f"{name}_src"), getattr(capped, f"{name}_dst"),
                         getattr(capped, f"{name}_spd"))
        for g in range(graphs.num_graphs):
            assert kept[g].items() <= every[g].items()
            for v in {dst for dst, _ in every[g]}:
                candidates = sorted(value for (dst, _), value in every[g].items() if dst == v)
                chosen = sorted(value for (dst, _), value in kept[g].items() if dst == v)
                assert chosen == candidates[: min(cap, len(candidates))]  # nearest first, as many as the cap


def test_large_graphs_take_the_one_graph_path(monkeypatch):
    graphs = graph_set_of(random_graph_set(20, seed=5, min_nodes=4, max_nodes=40))
    monkeypatch.setattr(layout, "DENSE_MAX_NODES", 12)
    assert 0 < graphs.large_graphs().size < graphs.num_graphs
    fields = _fields(graphs)
    anchor_graph = graphs.node_graph[fields.anchors]
    anchor_pairs = _by_graph(graphs, fields.anchor_src, fields.anchor_dst, fields.anchor_spd)
    for g in range(graphs.num_graphs):
        spd = _spd(graphs, g)
        anchors = fields.anchors[anchor_graph == g] - graphs.ptr[g]
        assert (spd[:, anchors] <= K).any(axis=1).all()
        assert all(value == min(spd[a, v], MAX_SPD) for (v, a), value in anchor_pairs[g].items())


def test_seeded():
    graphs = graph_set_of(random_graph_set(40, seed=6))
    first, again = _fields(graphs, seed=1, khop=2, anchors=1), _fields(graphs, seed=1, khop=2, anchors=1)
    for name in ("anchors", "anchor_src", "anchor_dst", "khop_src", "khop_dst"):
        assert np.array_equal(getattr(first, name), getattr(again, name))
