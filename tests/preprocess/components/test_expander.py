"""The expander component on many graphs: inside each graph, regular at the degree each graph got, near-Ramanujan,
disjoint from the graph's own edges; per component still available."""

from __future__ import annotations

import math

import numpy as np
import torch

from sgt_core.config.preprocess import ExpanderConfig
from tests.preprocess.components.built import build, built, edges_of, graph_set


def test_regular_inside_each_graph_with_its_spectral_gap():
    data, graph = graph_set(), built()
    ptr = data.graph_ptr.numpy()
    src, dst = edges_of(graph, "expander")
    own = set(zip(*data.edge_index.numpy().tolist()))
    assert not own & set(zip(src.tolist(), dst.tolist()))
    in_degree = np.bincount(dst, minlength=data.num_nodes)
    checked = 0
    for g in range(ptr.size - 1):
        lo, hi = ptr[g], ptr[g + 1]
        degrees = np.unique(in_degree[lo:hi])
        inside = (dst >= lo) & (dst < hi)
        adjacency = np.zeros((hi - lo, hi - lo))
        adjacency[dst[inside] - lo, src[inside] - lo] = 1
        assert np.array_equal(adjacency, adjacency.T)
        if degrees.size == 1 and degrees[0] >= 3 and hi - lo > degrees[0] + 1:  # a regular cycle union
            d = int(degrees[0])
            magnitudes = np.sort(np.abs(np.linalg.eigvalsh(adjacency)))
            assert magnitudes[-2] <= 2 * math.sqrt(d - 1) + 0.1 + 1e-9
            checked += 1
    assert checked > 10
    assert graph.stats["expander_graphs"] == ptr.size - 1 and graph.stats["expander_over_bound_graphs"] == 0
    assert graph.stats["expander_complete_graphs"] >= 2  # the graphs of one and two nodes


def test_per_component_expanders_stay_inside_components_and_graphs():
    data = graph_set()
    graph = build(expander=ExpanderConfig(degree=4, per_component=True), anchors=None, substructure_tokens=None)
    src, dst = edges_of(graph, "expander")
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    edges = data.edge_index.numpy()
    _, component = connected_components(coo_matrix((np.ones(edges.shape[1]), tuple(edges)),
                                                   shape=(data.num_nodes,) * 2).tocsr(), directed=False)
    assert np.array_equal(component[src], component[dst])
    assert graph.stats["expander_components"] == component.max() + 1
    assert torch.equal(graph.node_graph[src], graph.node_graph[dst])
