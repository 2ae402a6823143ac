"""Batches of whole graphs: their nodes, edges and readout rows against a direct selection from the union."""

from __future__ import annotations

import torch

from sgt_core.graph_batches import GraphBatches, induced_edges, ranges
from sgt_core.preprocess.builder import build_interaction_graph
from tests.graph_sets import toy_graph_set


def union():
    return build_interaction_graph(toy_graph_set(num_graphs=40), self_loops=True, expander=None, virtual_nodes=0,
                                   seed=0)


def test_ranges():
    assert ranges(torch.tensor([5, 0, 9]), torch.tensor([2, 0, 3])).tolist() == [5, 6, 9, 10, 11]


def test_nodes_edges_and_rows_of_a_batch_are_the_induced_subgraph():
    graph = union()
    batches = GraphBatches.of(graph.node_graph, graph.node_kind, graph.num_graphs)
    chosen = torch.tensor([7, 2, 31])
    nodes = batches.nodes(chosen)
    expected = torch.isin(graph.node_graph, chosen).nonzero().flatten()
    assert torch.equal(nodes, expected)
    ordered = batches.in_graph_order(chosen)
    counts = torch.bincount(graph.node_graph)[chosen]
    assert torch.equal(graph.node_graph[ordered], torch.repeat_interleave(chosen, counts))
    assert torch.equal(torch.sort(ordered).values, nodes)
    edges, local = induced_edges(graph.ptr, graph.edge_index, nodes)
    inside = torch.isin(graph.edge_index[1], nodes)
    assert torch.equal(edges, inside.nonzero().flatten())
    assert torch.equal(nodes[local], graph.edge_index[:, edges])  # local ids map back to the union's edges
    assert bool((local[1].diff() >= 0).all())  # still sorted by destination
    rows = batches.rows(chosen, nodes)
    assert rows.num_graphs == 3 and torch.equal(chosen[rows.graph], graph.node_graph[nodes])


def test_shuffled_batches_cover_every_graph_once():
    graphs = torch.arange(11)
    batches = GraphBatches.of(torch.arange(11), torch.zeros(11, dtype=torch.long), 11)
    cut = batches.shuffled(graphs, 5, torch.Generator().manual_seed(0))
    assert [b.numel() for b in cut] == [5, 6]  # a last batch of one joins the one before
    assert torch.equal(torch.sort(torch.cat(cut)).values, graphs)
