"""Algorithm 2 batching with every component on: SPD buckets, LPE and token rows follow the batch."""

from __future__ import annotations

import pytest
import torch

from sgt_core.config.preprocess import ExpanderConfig
from sgt_core.models import NodeExtras, Spexphormer
from sgt_core.preprocess.interaction_graph import NODE_KINDS
from sgt_core.sampling import LayerSampler
from tests.preprocess.test_builder_components import build_all
from tests.preprocess.test_interaction_graph import path_graph


@pytest.fixture(scope="module", params=[(False, True), (True, True), (False, False)],
                ids=["batchnorm", "deepnorm", "no-feed-forward"])
def setting(request):
    deepnorm, feed_forward = request.param
    torch.manual_seed(0)
    graph = build_all(path_graph(30), expander=ExpanderConfig(degree=4, ramanujan_slack=1.0, max_tries=50))
    largest = int(graph.ptr.diff().max())  # keep every neighbour: sampling is then exact
    sampler = LayerSampler(graph.edge_index, graph.edge_type, graph.ptr, torch.rand(2, graph.num_edges),
                           [largest] * 2, "reservoir", torch.Generator().manual_seed(0), graph.edge_spd)
    model = Spexphormer(**graph.model_input_sizes(), hidden=8, num_layers=2, heads=2, dropout=0.0,
                        deepnorm=deepnorm, feed_forward=feed_forward, lpe_dim=4, lpe_layers=1, lpe_heads=2)
    # without the block a layer holds no feed-forward weights and no norm for them
    assert all((layer.feed_forward is None) is (not feed_forward) for layer in model.layers)
    assert all((layer.norm_feed_forward is None) is (not feed_forward) for layer in model.layers)
    with torch.no_grad():  # non-zero SPD terms, so a wrong bucket would show
        for layer in model.layers:
            layer.attention.spd_scale.normal_()
            layer.attention.spd_bias.normal_()
    extras = NodeExtras.from_graph(graph, NODE_KINDS.index("substructure"))
    model.train()  # batch-norm running statistics that are not the identity
    for _ in range(3):
        model(graph.x, graph.node_kind, sampler.full(), extras)
    return graph, sampler, model.eval(), extras


def test_batch_of_one_equals_full_graph_inference(setting):
    graph, sampler, model, extras = setting
    with torch.no_grad():
        full = model(graph.x, graph.node_kind, sampler.full(), extras)
        first_token = int((graph.node_kind == NODE_KINDS.index("substructure")).nonzero()[0])
        for node in [0, 13, 30, first_token, graph.num_nodes - 1]:  # real, virtual and token nodes
            input_nodes, layers = sampler.batch(torch.tensor([node]))
            assert layers[0].neighbour_spd is not None
            single = model(graph.x[input_nodes], graph.node_kind[input_nodes], layers, extras.select(input_nodes))
            assert torch.allclose(single[0], full[node], atol=1e-5, rtol=1e-5), node


def test_sampled_layers_carry_each_slots_spd(setting):
    graph, sampler, _, _ = setting
    (layer, _) = sampler.full()
    src, dst = graph.edge_index
    spd_of = {(int(d), int(s)): int(b) for s, d, b in zip(src, dst, graph.edge_spd)}
    for node in range(graph.num_nodes):
        for slot in layer.neighbour_mask[node].nonzero().flatten().tolist():
            assert layer.neighbour_spd[node, slot] == spd_of[(node, int(layer.neighbours[node, slot]))]


def test_select_picks_token_rows_and_spectra():
    graph = build_all(path_graph(20))
    extras = NodeExtras.from_graph(graph, NODE_KINDS.index("substructure"))
    first_token = 22
    rows = torch.tensor([3, first_token + 1, 21, first_token + 4])
    picked = extras.select(rows)
    assert picked.token_rows.tolist() == [1, 3]
    assert torch.equal(picked.token_adjacency, graph.token_adjacency[[1, 4]])
    assert torch.equal(picked.eigenvalues, graph.eigenvalues[rows])
    assert picked.eigen_mask[0].all() and not picked.eigen_mask[1:].any()
