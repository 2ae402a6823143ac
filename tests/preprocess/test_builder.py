"""The interaction graph of a dataset of many graphs: no edge of any type joins two graphs, node order and
node graphs, seeded, compact, and one graph unchanged by the graph index."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sgt_core.preprocess.interaction_graph import EDGE_TYPES, NODE_KINDS
from tests.preprocess.components.built import VIRTUAL, M, build, built, graph_set
from tests.preprocess.many_graphs.graph_sets import random_graph_set


@pytest.mark.parametrize("name", EDGE_TYPES)
def test_no_edge_joins_two_graphs(name):
    graph = built()
    src, dst = graph.edge_index[:, graph.edge_type == EDGE_TYPES.index(name)]
    assert src.numel() > 0, f"no {name} edges to check"
    assert torch.equal(graph.node_graph[src], graph.node_graph[dst])


def test_node_order_and_node_graphs():
    data, graph = graph_set(), built()
    n, count = data.num_nodes, data.graph_ptr.numel() - 1
    assert graph.num_graphs == count and graph.node_graph.shape == (graph.num_nodes,)
    kinds = graph.node_kind.tolist()
    tokens = graph.num_tokens
    assert kinds == ([NODE_KINDS.index("real")] * n + [NODE_KINDS.index("virtual")] * VIRTUAL * count
                     + [NODE_KINDS.index("substructure")] * tokens)
    real_graph = torch.repeat_interleave(torch.arange(count), data.graph_ptr.diff())
    assert torch.equal(graph.node_graph[:n], real_graph)
    assert torch.equal(graph.node_graph[n : n + VIRTUAL * count], torch.arange(count).repeat_interleave(VIRTUAL))
    assert torch.all(graph.node_graph[n + VIRTUAL * count :].diff() >= 0)  # tokens graph by graph
    # sorted by (dst, src), no pair twice
    src, dst = graph.edge_index
    key = dst * graph.num_nodes + src
    assert torch.all(key[1:] > key[:-1])
    assert graph.stats["num_nodes"] == graph.num_nodes and graph.eigenvalues.shape == (graph.num_nodes, M)


def test_seeded():
    first, again, other = build(seed=3), build(seed=3), build(seed=4)
    for name in ("edge_index", "edge_type", "edge_spd", "token_adjacency", "eigenvectors", "node_graph"):
        assert torch.equal(getattr(first, name), getattr(again, name)), name
    assert first.num_edges != other.num_edges or not torch.equal(first.edge_index, other.edge_index)


def test_compact_build_holds_the_same_values():
    wide, compact = build(), build(compact=True)
    assert compact.edge_index.dtype == torch.int32 and compact.edge_type.dtype == torch.int8
    for name in ("edge_index", "edge_type", "edge_spd", "node_kind", "token_type", "node_graph"):
        assert torch.equal(getattr(wide, name), getattr(compact, name).long()), name


def test_components_off_add_nothing_across_graphs():
    graph = build(expander=None, virtual_nodes=0, anchors=None, substructure_tokens=None, lpe=None)
    assert graph.edge_type_counts()["graph"] == graph_set().edge_index.shape[1]
    assert graph.num_nodes == graph_set().num_nodes
    src, dst = graph.edge_index
    assert torch.equal(graph.node_graph[src], graph.node_graph[dst])


def test_a_set_of_one_graph_is_built_as_one_graph():
    one = random_graph_set(sizes=[30], task="node_classification", seed=2)
    with_ptr = build(one, virtual_nodes=1)
    del one.graph_ptr
    without = build(one, virtual_nodes=1)
    assert with_ptr.num_graphs == 1 and with_ptr.node_graph.numel() == 0
    for name in ("edge_index", "edge_type", "edge_spd", "token_adjacency", "eigenvectors"):
        assert torch.equal(getattr(with_ptr, name), getattr(without, name)), name
    assert np.isclose(with_ptr.stats["expander_bound"], without.stats["expander_bound"])
