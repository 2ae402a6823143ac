"""Virtual nodes on many graphs: each graph's own, joined both ways to exactly its own real nodes."""

from __future__ import annotations

import numpy as np

from tests.preprocess.components.built import VIRTUAL, build, built, edges_of, graph_set


def test_each_virtual_node_is_joined_to_exactly_its_graphs_nodes():
    data, graph = graph_set(), built()
    n, ptr = data.num_nodes, data.graph_ptr.numpy()
    src, dst = edges_of(graph, "virtual")
    pairs = set(zip(src.tolist(), dst.tolist()))
    assert len(pairs) == src.size
    expected = set()
    for g in range(ptr.size - 1):
        for j in range(VIRTUAL):
            virtual = n + g * VIRTUAL + j
            for v in range(ptr[g], ptr[g + 1]):
                expected |= {(virtual, v), (v, virtual)}
    assert pairs == expected
    assert np.array_equal(graph.node_graph.numpy()[n : n + VIRTUAL * (ptr.size - 1)],
                          np.repeat(np.arange(ptr.size - 1), VIRTUAL))


def test_virtual_nodes_have_no_features_labels_or_spectrum():
    data = graph_set()
    graph = build(anchors=None, substructure_tokens=None)
    n = data.num_nodes
    assert graph.x[n:].eq(0).all() and not graph.eigen_mask[n:].any()
    assert graph.y.shape[0] == data.graph_ptr.numel() - 1  # graph targets: one per graph, none for added nodes
