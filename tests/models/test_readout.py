"""The readouts against a loop over graphs, and the graph-level heads' shapes."""

from __future__ import annotations

import pytest
import torch

from sgt_core.models.readout import GraphReadout, GraphRows, prediction_head

REAL, VIRTUAL, TOKEN = 0, 1, 2


def rows_of_three_graphs() -> GraphRows:
    # graph 0: nodes 0-2 and a virtual node; graph 1: nodes 3-4, a token and a virtual node; graph 2: node 5
    graph = torch.tensor([0, 0, 0, 1, 1, 2, 1, 0, 1])
    kind = torch.tensor([REAL, REAL, REAL, REAL, REAL, REAL, TOKEN, VIRTUAL, VIRTUAL])
    return GraphRows(graph, 3, kind)


@pytest.mark.parametrize("kind", ["mean", "sum", "attention"])
def test_pooling_over_real_nodes_matches_a_loop_over_graphs(kind):
    torch.manual_seed(0)
    rows, h = rows_of_three_graphs(), torch.randn(9, 4)
    readout = GraphReadout(kind, 4)
    pooled = readout(h, rows)
    for g in range(3):
        members = h[(rows.graph == g) & (rows.node_kind == REAL)]
        if kind == "mean":
            expected = members.mean(0)
        elif kind == "sum":
            expected = members.sum(0)
        else:
            weights = torch.softmax(readout.gate(members).squeeze(1), dim=0)
            expected = (weights.unsqueeze(1) * members).sum(0)
        assert torch.allclose(pooled[g], expected, atol=1e-6)


def test_virtual_readout_reads_the_graphs_virtual_nodes():
    rows, h = rows_of_three_graphs(), torch.randn(9, 4)
    pooled = GraphReadout("virtual", 4)(h, rows)
    assert torch.equal(pooled[0], h[7]) and torch.equal(pooled[1], h[8])
    assert torch.equal(pooled[2], torch.zeros(4))  # graph 2 has none


def test_virtual_readout_without_virtual_nodes_is_refused():
    rows = GraphRows(torch.tensor([0, 1]), 2, torch.tensor([REAL, REAL]))
    with pytest.raises(ValueError, match="virtual nodes"):
        GraphReadout("virtual", 4)(torch.randn(2, 4), rows)


def test_heads():
    assert prediction_head(8, 3, graph_level=False)(torch.randn(5, 8)).shape == (5, 3)
    head = prediction_head(8, 1, graph_level=True)
    assert head(torch.randn(2, 8)).shape == (2, 1) and len(head) == 5
