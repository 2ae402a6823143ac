"""The appnp branch: APPNP's propagation after GCN's linear map equals PyG's `APPNP` on `GCNConv`'s W x, over
the kept graph edges or through PPRGo's top-k rows, in full-graph layers and in Algorithm 2's batches."""

from __future__ import annotations

import pytest
import torch
from torch_geometric.nn import APPNP, GCNConv

from sgt_core.config.preprocess import ExpanderConfig
from sgt_core.models import NodeExtras, Spexphormer
from sgt_core.models.local import APPNPBranch
from sgt_core.preprocess.builder import build_interaction_graph
from sgt_core.preprocess.interaction_graph import EDGE_TYPES, NODE_KINDS
from tests.models.local.graphs import GRAPH, HEADS, HIDDEN, keep_everything, random_graph, top_k_rows


def test_appnp_equals_pyg_appnp_after_the_gcn_linear_map(interaction_graph):
    """K steps with teleport alpha over the kept graph edges: PyG's APPNP on GCNConv's W x, plus its bias."""
    graph = interaction_graph
    torch.manual_seed(0)
    branch = APPNPBranch(HIDDEN, steps=6, teleport=0.15, graph_edge_type=GRAPH)
    torch.nn.init.normal_(branch.bias)  # glorot's zero bias would hide where it is added
    degree = NodeExtras.from_graph(graph, NODE_KINDS.index("substructure"), GRAPH).graph_degree
    h = torch.randn(graph.num_nodes, HIDDEN)
    graph_edges = graph.edge_index[:, graph.edge_type == GRAPH]
    expected = APPNP(K=6, alpha=0.15)(branch.lin(h), graph_edges) + branch.bias  # [N, D]
    one_hop = GCNConv(HIDDEN, HIDDEN)
    one_hop.load_state_dict(branch.state_dict())  # GCNConv's parameters
    assert not torch.allclose(one_hop(h, graph_edges), expected, atol=1e-2)  # the steps change the output
    sampler = keep_everything(graph)
    (dense,) = sampler.full()
    assert torch.allclose(branch(h, h, dense, degree), expected, atol=1e-5)
    sampler.method = "full"
    (full,) = sampler.full()
    assert torch.allclose(branch(h, h, full, degree), expected, atol=1e-5)


def test_appnp_steps_refuse_a_batch_and_bad_settings(interaction_graph):
    graph = interaction_graph
    branch = APPNPBranch(HIDDEN, steps=3, teleport=0.1, graph_edge_type=GRAPH)
    degree = NodeExtras.from_graph(graph, NODE_KINDS.index("substructure"), GRAPH).graph_degree
    h = torch.randn(graph.num_nodes, HIDDEN)
    input_nodes, (layer,) = keep_everything(graph).batch(torch.tensor([0, 5, 17]))
    with pytest.raises(ValueError, match="need a full-graph layer"):
        branch(h[input_nodes], h[input_nodes][layer.queries], layer, degree[input_nodes])
    for steps, teleport in [(0, 0.1), (3, 1.0)]:
        with pytest.raises(ValueError, match="need steps >= 1 and 0 <= teleport < 1"):
            APPNPBranch(HIDDEN, steps, teleport)
    with pytest.raises(ValueError, match="top_k must be None or >= 1"):
        APPNPBranch(HIDDEN, 3, 0.1, top_k=0)


def test_top_k_propagation_with_whole_rows_equals_the_k_steps(interaction_graph):
    """k at least every row's support: one hop over the rows is APPNP's K steps over all the graph's edges,
    in full-graph layers (dense and sparse) and for a batch's queries; sampling does not change it."""
    graph = interaction_graph
    torch.manual_seed(0)
    steps_branch = APPNPBranch(HIDDEN, steps=6, teleport=0.15, graph_edge_type=GRAPH)
    torch.nn.init.normal_(steps_branch.bias)
    rows_branch = APPNPBranch(HIDDEN, steps=6, teleport=0.15, top_k=graph.num_nodes, graph_edge_type=GRAPH)
    rows_branch.load_state_dict(steps_branch.state_dict())
    degree = NodeExtras.from_graph(graph, NODE_KINDS.index("substructure"), GRAPH).graph_degree
    h = torch.randn(graph.num_nodes, HIDDEN)
    rows = top_k_rows(graph, 6, 0.15, graph.num_nodes)
    sampler = keep_everything(graph, method="full", propagation=rows)
    (full,) = sampler.full()
    expected = steps_branch(h, h, full, degree)  # [N, D]
    assert torch.allclose(rows_branch(h, h, full, degree), expected, atol=1e-5)
    sampler.method = "uniform"
    sampler.degrees = [2]  # most graph neighbours dropped: the rows do not depend on the draw
    (dense,) = sampler.full()
    assert torch.allclose(rows_branch(h, h, dense, degree), expected, atol=1e-5)
    targets = torch.tensor([0, 5, 17, 59, graph.num_nodes - 1])
    input_nodes, (layer,) = sampler.batch(targets)
    batched = rows_branch(h[input_nodes], h[input_nodes][layer.queries], layer, degree[input_nodes])
    assert torch.allclose(batched, expected[targets], atol=1e-5)


def test_top_k_propagation_refuses_a_layer_without_its_rows(interaction_graph):
    graph = interaction_graph
    branch = APPNPBranch(HIDDEN, steps=3, teleport=0.1, top_k=4, graph_edge_type=GRAPH)
    degree = NodeExtras.from_graph(graph, NODE_KINDS.index("substructure"), GRAPH).graph_degree
    h = torch.randn(graph.num_nodes, HIDDEN)
    for rows, found in [(None, "found None"), (top_k_rows(graph, 3, 0.1, 6), r"found \(\d+, 6\)")]:
        (layer,) = keep_everything(graph, propagation=rows).full()
        with pytest.raises(ValueError, match=rf"top-4 propagation needs the layer's propagation rows .*{found}"):
            branch(h, h, layer, degree)


@pytest.mark.parametrize("mode", ["train", "eval"])
def test_batched_forward_equals_full_graph_with_top_k_rows(mode):
    """With the rows cut to k = 3 (not P), Algorithm 2's batches, whose inputs add each query's rows, give
    the full-graph forward exactly: the K steps train in batches."""
    graph = build_interaction_graph(random_graph(40, 80, seed=2), self_loops=True, virtual_nodes=1, seed=0,
                                    expander=ExpanderConfig(degree=4, ramanujan_slack=1.0, max_tries=50))
    torch.manual_seed(0)
    rows = top_k_rows(graph, 10, 0.1, 3)
    assert (rows.weights[:graph.num_real_nodes] > 0).all()  # every real node's three slots are in use
    sampler = keep_everything(graph, num_layers=3, propagation=rows)
    model = Spexphormer(in_features=graph.x.shape[1], num_outputs=2, hidden=HIDDEN, num_layers=3, heads=HEADS,
                        num_edge_types=len(EDGE_TYPES), num_node_kinds=len(NODE_KINDS), dropout=0.0, local="appnp",
                        local_steps=10, local_teleport=0.1, local_top_k=3, graph_edge_type=GRAPH)
    extras = NodeExtras.from_graph(graph, NODE_KINDS.index("substructure"), GRAPH)
    model.train()
    for _ in range(3):
        model(graph.x, graph.node_kind, sampler.full(), extras)
    model.train(mode == "train")
    with torch.no_grad():
        full = model(graph.x, graph.node_kind, sampler.full(), extras)
        for targets in [torch.arange(graph.num_nodes), *(torch.tensor([node]) for node in [0, 13, 39, 40])]:
            if mode == "train" and targets.numel() == 1:
                continue  # batch norm in training mode needs more than one row
            input_nodes, layers = sampler.batch(targets)
            batched = model(graph.x[input_nodes], graph.node_kind[input_nodes], layers, extras.select(input_nodes))
            assert torch.allclose(batched, full[targets], atol=1e-5, rtol=1e-5)
    # one sampled neighbour per layer: a batch's inputs still hold every node of its targets' rows
    sampler.method, sampler.degrees = "uniform", [1, 1, 1]
    targets = torch.tensor([3, 21])
    input_nodes, layers = sampler.batch(targets)
    assert torch.isin(rows.neighbours[targets], input_nodes).all()
    assert torch.equal(input_nodes[layers[0].propagation.neighbours], rows.neighbours[input_nodes[layers[0].queries]])
