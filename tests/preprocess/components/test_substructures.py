"""Substructure tokens on many graphs: every token's members in one graph, its node graph that graph, its edges
to exactly its members, caps per graph."""

from __future__ import annotations

import numpy as np

from tests.preprocess.components.built import built, edges_of, graph_set, tokens


def test_tokens_lie_inside_one_graph_and_join_exactly_their_members():
    data, graph = graph_set(), built()
    sampled = tokens(data)
    first_token = graph.num_nodes - graph.num_tokens
    node_graph = graph.node_graph.numpy()
    selection = sampled.selection
    member_graph = node_graph[selection.members]
    token_graph = node_graph[first_token + selection.instance_of_member]
    assert np.array_equal(member_graph, token_graph)
    src, dst = edges_of(graph, "substructure")
    pairs = set(zip(src.tolist(), dst.tolist()))
    expected = set()
    for t in range(selection.type_id.size):
        for member in selection.instance(t).tolist():
            expected |= {(member, first_token + t), (first_token + t, member)}
    assert pairs == expected
    assert graph.token_adjacency.shape == (graph.num_tokens, 64)


def test_every_graph_with_edges_gets_tokens():
    data = graph_set()
    sampled = tokens(data)
    token_graph = np.searchsorted(data.graph_ptr.numpy(), sampled.selection.members[sampled.selection.ptr[:-1]],
                                  side="right") - 1
    served = np.bincount(token_graph, minlength=data.graph_ptr.numel() - 1) > 0
    assert served.all()  # hop2 instances exist for every node, so every graph, late ones too, is covered
