"""Algorithm 2 batching: with every neighbour kept, batched forward passes equal the full-graph one."""

from __future__ import annotations

import pytest
import torch

from sgt_core.config.preprocess import ExpanderConfig
from sgt_core.models import Spexphormer
from sgt_core.preprocess.builder import build_interaction_graph
from sgt_core.preprocess.interaction_graph import EDGE_TYPES, NODE_KINDS
from sgt_core.sampling import LayerSampler
from tests.preprocess.test_interaction_graph import path_graph


@pytest.fixture(scope="module")
def setting():
    torch.manual_seed(0)
    graph = build_interaction_graph(path_graph(40), self_loops=True, virtual_nodes=1, seed=0,
                                    expander=ExpanderConfig(degree=4, ramanujan_slack=1.0, max_tries=50))
    largest = int(graph.ptr.diff().max())  # the virtual node sees all 40 real nodes and itself
    scores = torch.rand(3, graph.num_edges)
    sampler = LayerSampler(graph.edge_index, graph.edge_type, graph.ptr, scores, [largest] * 3, "reservoir",
                           torch.Generator().manual_seed(0))
    model = Spexphormer(in_features=graph.x.shape[1], num_outputs=2, hidden=8, num_layers=3, heads=2,
                        num_edge_types=len(EDGE_TYPES), num_node_kinds=len(NODE_KINDS), dropout=0.0)
    # non-trivial batch-norm running statistics, so eval mode is not the identity
    model.train()
    for _ in range(3):
        model(graph.x, graph.node_kind, sampler.full())
    return graph, sampler, model


@pytest.mark.parametrize("mode", ["train", "eval"])
def test_one_batch_of_all_nodes_equals_full_graph(setting, mode):
    graph, sampler, model = setting
    model.train(mode == "train")
    with torch.no_grad():
        full = model(graph.x, graph.node_kind, sampler.full())
        everyone = torch.arange(graph.num_nodes)
        input_nodes, layers = sampler.batch(everyone)
        batched = model(graph.x[input_nodes], graph.node_kind[input_nodes], layers)
    assert torch.equal(input_nodes, everyone)
    assert torch.allclose(batched, full, atol=1e-5, rtol=1e-5)


def test_batch_of_one_equals_full_graph_inference(setting):
    graph, sampler, model = setting
    model.eval()
    with torch.no_grad():
        full = model(graph.x, graph.node_kind, sampler.full())
        for node in [0, 7, 39, 40]:  # 40 is the virtual node
            input_nodes, layers = sampler.batch(torch.tensor([node]))
            single = model(graph.x[input_nodes], graph.node_kind[input_nodes], layers)
            assert torch.allclose(single[0], full[node], atol=1e-5, rtol=1e-5), node


def test_batch_layers_follow_algorithm_2():
    graph = build_interaction_graph(path_graph(60), self_loops=True, virtual_nodes=0, seed=1,
                                    expander=ExpanderConfig(degree=4, ramanujan_slack=1.0, max_tries=50))
    sampler = LayerSampler(graph.edge_index, graph.edge_type, graph.ptr, torch.rand(2, graph.num_edges), [3, 2],
                           "reservoir", torch.Generator().manual_seed(3))
    targets = torch.tensor([5, 17, 42])
    input_nodes, (first, last) = sampler.batch(targets)
    # last layer: queries are the targets; its input set V^(2) = targets ∪ their sampled neighbours
    assert last.neighbours.shape == (3, 2)
    assert first.queries.numel() <= 3 * (2 + 1)
    # the first layer outputs exactly the rows the last layer reads, and reads only input_nodes
    assert first.neighbours.max() < input_nodes.numel()
    assert last.queries.numel() == 3 and last.neighbours.max() < first.queries.numel()
    # every sampled neighbour is a real in-neighbour in the interaction graph
    src, dst = graph.edge_index
    pairs = set(zip(dst.tolist(), src.tolist()))
    rows_of_first_output = input_nodes[first.queries]  # global ids of V^(2)
    for q, target in enumerate(targets.tolist()):
        for slot in range(2):
            assert (target, int(rows_of_first_output[last.neighbours[q, slot]])) in pairs
