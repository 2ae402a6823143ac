"""The wide Spexphormer network on a four-node graph: shapes layer by layer, and one attention row by hand.

The graph is the path 0 - 1 - 2 - 3 with self-loops and one expander edge 3 -> 0. Edge types: 0 graph edge,
1 expander edge, 2 self-loop. With one-hot node features, identity encoder, value, output and head maps,
one head of width 4 and batch norm in eval mode (running mean 0, variance 1), the attended vector of node
i is its attention row itself, a_i = sum_j a_ij e_j, and the network's output row i is
(e_i + a_i) / sqrt(1 + eps). The logits are SampledAttention's formula (Spexphormer section 3, with the
softmax of section 4's fixed-degree layers): z_ij = (E_t * K_j) . Q_i / sqrt(d_h) + B_t.
"""

from __future__ import annotations

import math

import torch

from sgt_core.layers import FullLayer, SampledLayer
from sgt_core.models import Spexphormer

GRAPH, EXPANDER, SELF = 0, 1, 2
# The sampled neighbours of each node (deg 3) and their edge types; node 3's third slot is padding that
# points at node 0, which the mask must keep out of the softmax.
NEIGHBOURS = torch.tensor([[0, 1, 3], [1, 0, 2], [2, 1, 3], [3, 2, 0]])
TYPES = torch.tensor([[SELF, GRAPH, EXPANDER], [SELF, GRAPH, GRAPH], [SELF, GRAPH, GRAPH], [SELF, GRAPH, GRAPH]])
MASK = torch.tensor([[True, True, True], [True, True, True], [True, True, True], [True, True, False]])


def one_hot_network() -> Spexphormer:
    """One layer, one head of width 4, no feed-forward block, every map the identity but the query and key.

    Q_i = 2 e_i (so that 2 / sqrt(4) = 1) and K_j = (j, 0, 0, 0): node 0's logit for neighbour j is
    E_t[0] * j + B_t. E_expander = 1/2 and B = (0, 1, -1) for (graph, expander, self-loop).
    """
    model = Spexphormer(in_features=4, num_outputs=4, hidden=4, num_layers=1, heads=1, num_edge_types=3,
                        num_node_kinds=1, feed_forward=False).eval()
    eye = torch.eye(4)
    attention = model.layers[0].attention
    with torch.no_grad():
        for linear in (model.encoder.features, attention.value, attention.out, model.head):
            linear.weight.copy_(eye)
            linear.bias.zero_()
        attention.query.weight.copy_(2 * eye)
        attention.query.bias.zero_()
        attention.key.weight.zero_()
        attention.key.weight[0] = torch.tensor([0.0, 1.0, 2.0, 3.0])
        attention.key.bias.zero_()
        attention.edge_scale.weight.fill_(1.0)
        attention.edge_scale.weight[EXPANDER] = 0.5
        attention.edge_bias.weight.copy_(torch.tensor([[0.0], [1.0], [-1.0]]))
    return model


def all_nodes_layer() -> SampledLayer:
    return SampledLayer(torch.arange(4), NEIGHBOURS, TYPES, MASK)


def run(model: Spexphormer, layers) -> tuple[torch.Tensor, torch.Tensor]:
    """The network's output and the first layer's attention output (before its residual and norm)."""
    seen = []
    hook = model.layers[0].attention.register_forward_hook(lambda module, args, out: seen.append(out))
    try:
        with torch.no_grad():
            out = model(torch.eye(4), torch.zeros(4, dtype=torch.long), layers)
    finally:
        hook.remove()
    return out, seen[0]


def test_node_zero_attention_row_by_hand():
    model = one_hot_network()
    out, attended = run(model, [all_nodes_layer()])
    # Node 0 attends to itself (self-loop: 1 * 0 - 1), node 1 (graph edge: 1 * 1 + 0) and node 3
    # (expander edge: 0.5 * 3 + 1); node 2 is not its neighbour.
    logits = [-1.0, 1.0, 2.5]
    total = sum(math.exp(z) for z in logits)
    row = torch.tensor([math.exp(-1.0) / total, math.exp(1.0) / total, 0.0, math.exp(2.5) / total])
    assert torch.allclose(attended[0], row, atol=1e-6), (attended[0], row)
    # The residual and batch norm in eval mode (mean 0, variance 1, weight 1, bias 0), then the identity head.
    eps = model.layers[0].norm_attention.eps
    assert torch.allclose(out[0], (torch.eye(4)[0] + row) / math.sqrt(1 + eps), atol=1e-6)


def test_padding_slot_and_non_neighbours_get_no_weight():
    _, attended = run(one_hot_network(), [all_nodes_layer()])
    assert torch.allclose(attended.sum(1), torch.ones(4), atol=1e-6)  # each row a distribution
    # Node 3: K_j . Q_3 = 0 for every j (Q_3 = 2 e_3, K_j = (j, 0, 0, 0)), so its logits are the biases:
    # self-loop -1, graph edge to node 2 0; its padded slot points at node 0, which must get nothing.
    total = math.exp(-1.0) + math.exp(0.0)
    assert torch.allclose(attended[3], torch.tensor([0.0, 0.0, 1.0 / total, math.exp(-1.0) / total]), atol=1e-6)
    assert attended[0, 2] == 0 and attended[1, 3] == 0


def test_shapes_follow_the_queries_down_the_layers():
    """Two layers, two heads: [4, F] inputs -> [4, D] after the first layer -> [2, C] for its two queries."""
    torch.manual_seed(0)
    model = Spexphormer(in_features=3, num_outputs=5, hidden=8, num_layers=2, heads=2, num_edge_types=3,
                        num_node_kinds=1).eval()
    shapes = []
    hooks = [block.register_forward_hook(lambda module, args, out: shapes.append(tuple(out.shape)))
             for block in model.layers]
    second = SampledLayer(torch.tensor([0, 2]), torch.tensor([[0, 1], [2, 3]]), torch.tensor([[SELF, GRAPH]] * 2),
                          torch.ones(2, 2, dtype=torch.bool))
    with torch.no_grad():
        out = model(torch.randn(4, 3), torch.zeros(4, dtype=torch.long), [all_nodes_layer(), second])
    for hook in hooks:
        hook.remove()
    assert shapes == [(4, 8), (2, 8)]
    assert out.shape == (2, 5)


def test_full_layer_over_the_same_edges_agrees_with_the_sampled_layer():
    """The Exphormer-style full layer over the kept edges computes what the dense sampled slots do."""
    torch.manual_seed(0)
    model = Spexphormer(in_features=3, num_outputs=2, hidden=8, num_layers=1, heads=2, num_edge_types=3,
                        num_node_kinds=1).eval()
    with torch.no_grad():  # edge-type terms away from their neutral start, so that they matter
        model.layers[0].attention.edge_scale.weight.normal_()
        model.layers[0].attention.edge_bias.weight.normal_()
    keep = MASK.flatten()
    src = NEIGHBOURS.flatten()[keep]  # [E]
    dst = torch.arange(4).repeat_interleave(3)[keep]  # [E], sorted: slots are listed node by node
    full = FullLayer(torch.stack([src, dst]), TYPES.flatten()[keep], torch.bincount(dst, minlength=4))
    x, kind = torch.randn(4, 3), torch.zeros(4, dtype=torch.long)
    with torch.no_grad():
        sampled_out = model(x, kind, [all_nodes_layer()])
        full_out = model(x, kind, [full])
    assert torch.allclose(sampled_out, full_out, atol=1e-5)
