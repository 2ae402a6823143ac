"""Continuous edge features in the wide network: every sampled slot carries its own edge's features, and with
every neighbour kept the network (attention and gine) gives the same outputs sampled, batched and full."""

from __future__ import annotations

import pytest
import torch

from sgt_core.config.preprocess import ExpanderConfig
from sgt_core.graph_batches import GraphBatches
from sgt_core.layers import FullLayer
from sgt_core.models import NodeExtras, Spexphormer
from sgt_core.preprocess.builder import build_interaction_graph
from sgt_core.preprocess.interaction_graph import EDGE_TYPES, GRAPH_EDGE_TYPE, NODE_KINDS
from sgt_core.sampling import LayerSampler
from tests.graph_sets import toy_graph_set
from tests.preprocess.test_interaction_graph import path_graph


@pytest.fixture(scope="module")
def graph():
    return build_interaction_graph(path_graph(40), self_loops=True, virtual_nodes=1, seed=0,
                                   expander=ExpanderConfig(degree=4, ramanujan_slack=1.0, max_tries=50))


def identifying_features(graph):
    """Each edge's (source, destination, type) as its features: a slot's features name the edge they came from."""
    src, dst = graph.edge_index
    return torch.stack([src, dst, graph.edge_type]).t().float()  # [E, 3]


def check_slots(layer, input_rows):
    """Every kept slot's features are its own edge's: from its neighbour, into its query, of its type."""
    keep = layer.neighbour_mask
    features = layer.neighbour_features  # [Q, deg, 3]
    assert features.shape == (*layer.neighbours.shape, 3)
    queries = input_rows[layer.queries].unsqueeze(1).expand_as(layer.neighbours)
    assert torch.equal(features[..., 0][keep], input_rows[layer.neighbours][keep].float())
    assert torch.equal(features[..., 1][keep], queries[keep].float())
    assert torch.equal(features[..., 2][keep], layer.neighbour_type[keep].float())


@pytest.mark.parametrize("method", ["reservoir", "uniform", "topk"])
def test_sampled_slots_carry_their_own_edges_features(graph, method):
    features = identifying_features(graph)
    sampler = LayerSampler(graph.edge_index, graph.edge_type, graph.ptr, torch.rand(2, graph.num_edges), [3, 2],
                           method, torch.Generator().manual_seed(0), edge_features=features)
    everyone = torch.arange(graph.num_nodes)
    for layer in sampler.full():
        check_slots(layer, everyone)
    input_nodes, layers = sampler.batch(torch.tensor([3, 17, 40]))  # 40: the virtual node
    rows = input_nodes  # each layer's input rows, as global ids
    for layer in layers:
        check_slots(layer, rows)
        rows = rows[layer.queries]


def test_closed_batches_of_whole_graphs_carry_their_own_edges_features():
    graph = build_interaction_graph(toy_graph_set("graph_regression", num_graphs=12), self_loops=True,
                                    expander=None, virtual_nodes=0, seed=0)
    sampler = LayerSampler(graph.edge_index, graph.edge_type, graph.ptr, torch.rand(2, graph.num_edges), [3, 2],
                           "reservoir", torch.Generator().manual_seed(0), edge_features=identifying_features(graph))
    nodes = GraphBatches.of(graph.node_graph, graph.node_kind, graph.num_graphs).nodes(torch.tensor([2, 5, 9]))
    for layer in sampler.closed_batch(nodes):
        check_slots(layer, nodes)


def test_a_full_graph_layer_carries_every_edges_features(graph):
    features = identifying_features(graph)
    sampler = LayerSampler(graph.edge_index, graph.edge_type, graph.ptr, torch.rand(1, graph.num_edges), [3],
                           "full", torch.Generator(), edge_features=features)
    (layer,) = sampler.full()
    assert isinstance(layer, FullLayer) and layer.edge_features is features


def featured(graph, seed=0):
    """Confidence-like features in [0, 1] on the input graph's own edges, zero on the edges it lacks."""
    features = torch.rand(graph.num_edges, 8, generator=torch.Generator().manual_seed(seed))
    return features * (graph.edge_type == GRAPH_EDGE_TYPE).unsqueeze(1)


@pytest.mark.parametrize("local", ["none", "gine"])
def test_sampled_batched_and_full_graph_networks_agree_with_features(graph, local):
    torch.manual_seed(1)
    features = featured(graph)
    largest = int(graph.ptr.diff().max())
    scores = torch.rand(2, graph.num_edges)
    sampled = LayerSampler(graph.edge_index, graph.edge_type, graph.ptr, scores, [largest] * 2, "reservoir",
                           torch.Generator().manual_seed(0), edge_features=features)
    full = LayerSampler(graph.edge_index, graph.edge_type, graph.ptr, scores, [largest] * 2, "full",
                        torch.Generator(), edge_features=features)
    model = Spexphormer(in_features=graph.x.shape[1], num_outputs=2, hidden=8, num_layers=2, heads=2,
                        num_edge_types=len(EDGE_TYPES), num_node_kinds=len(NODE_KINDS), local=local,
                        graph_edge_type=GRAPH_EDGE_TYPE, edge_feature_dim=8).eval()
    with torch.no_grad():
        for block in model.layers:  # features that matter: W_E and W_B start at zero
            block.attention.feature_scale.normal_()
            block.attention.feature_bias.normal_()
    degree = torch.bincount(graph.edge_index[1][graph.edge_type == GRAPH_EDGE_TYPE], minlength=graph.num_nodes)
    extras = NodeExtras(graph_degree=degree)
    with torch.no_grad():
        reference = model(graph.x, graph.node_kind, full.full(), extras)  # plain autograd over every edge
        fused = model(graph.x, graph.node_kind, sampled.full(), extras)  # the fused slot operator
        targets = torch.tensor([0, 7, 39, 40])
        input_nodes, layers = sampled.batch(targets)
        batched = model(graph.x[input_nodes], graph.node_kind[input_nodes], layers, extras.select(input_nodes))
        sampled.edge_features = full.edge_features = torch.zeros_like(features)
        full._full_layer = None  # built again, with the new features
        without = model(graph.x, graph.node_kind, full.full(), extras)
    assert torch.allclose(fused, reference, atol=1e-5) and torch.allclose(batched, reference[targets], atol=1e-5)
    assert not torch.allclose(without, reference, atol=1e-3)  # the network reads them
