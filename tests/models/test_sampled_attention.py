"""The wide network's dense attention over sampled neighbours equals a plain per-node computation."""

from __future__ import annotations

import math

import torch

from sgt_core.layers import SampledLayer
from sgt_core.models import SampledAttention, Spexphormer


def reference_attention(attention: SampledAttention, query_x, key_x, neighbours, types, mask):
    """Node by node, head by head, only the unmasked neighbours: the textbook formula."""
    heads, head_dim = attention.heads, attention.head_dim
    outputs = []
    for i in range(query_x.shape[0]):
        q = attention.query(query_x[i]).view(heads, head_dim)
        keep = mask[i].nonzero().flatten()
        per_head = []
        for h in range(heads):
            part = slice(h * head_dim, (h + 1) * head_dim)
            logits, values = [], []
            for slot in keep:
                j, t = neighbours[i, slot], types[i, slot]
                k = (attention.edge_scale.weight[t] * attention.key(key_x[j]))[part]
                logits.append(k @ q[h] / math.sqrt(head_dim) + attention.edge_bias.weight[t, h])
                values.append(attention.value(key_x[j])[part])
            weights = torch.softmax(torch.stack(logits), dim=0)
            per_head.append(weights @ torch.stack(values))
        outputs.append(attention.out(torch.cat(per_head)))
    return torch.stack(outputs)


def test_dense_attention_equals_reference():
    torch.manual_seed(0)
    attention = SampledAttention(hidden=8, heads=2, num_edge_types=3)
    with torch.no_grad():
        attention.edge_scale.weight.normal_()
        attention.edge_bias.weight.normal_()
    key_x, query_x = torch.randn(7, 8), torch.randn(4, 8)
    neighbours = torch.tensor([[0, 1, 2], [3, 4, 0], [5, 6, 6], [1, 0, 0]])
    types = torch.randint(0, 3, (4, 3))
    mask = torch.tensor([[True, True, True], [True, True, False], [True, True, True], [True, False, False]])
    dense = attention(query_x, key_x, neighbours, types, mask)
    reference = reference_attention(attention, query_x, key_x, neighbours, types, mask)
    assert torch.allclose(dense, reference, atol=1e-5)


def test_fully_masked_row_gives_no_nan():
    attention = SampledAttention(hidden=4, heads=1, num_edge_types=1)
    out = attention(torch.randn(2, 4), torch.randn(3, 4), torch.zeros(2, 2, dtype=torch.long),
                    torch.zeros(2, 2, dtype=torch.long), torch.tensor([[False, False], [True, False]]))
    assert torch.isfinite(out).all()


def test_spexphormer_maps_layers_down_to_queries():
    torch.manual_seed(0)
    model = Spexphormer(in_features=3, num_outputs=4, hidden=8, num_layers=2, heads=2, num_edge_types=2,
                        num_node_kinds=1).eval()
    x, kind = torch.randn(6, 3), torch.zeros(6, dtype=torch.long)
    full = torch.arange(6)
    neighbours = torch.randint(0, 6, (6, 3))
    layers = [
        SampledLayer(full, neighbours, torch.zeros(6, 3, dtype=torch.long), torch.ones(6, 3, dtype=torch.bool)),
        SampledLayer(torch.tensor([1, 4]), torch.tensor([[0, 1], [2, 5]]), torch.zeros(2, 2, dtype=torch.long),
                     torch.ones(2, 2, dtype=torch.bool)),
    ]
    assert model(x, kind, layers).shape == (2, 4)


def test_input_dropout_drops_raw_features_in_training_only():
    torch.manual_seed(0)
    model = Spexphormer(in_features=50, num_outputs=2, hidden=8, num_layers=1, heads=2, num_edge_types=1,
                        num_node_kinds=1, input_dropout=0.6)
    seen = []
    model.encoder.register_forward_pre_hook(lambda module, args: seen.append(args[0]))
    x, kind = torch.rand(400, 50) + 0.5, torch.zeros(400, dtype=torch.long)
    layer = SampledLayer(torch.arange(400), torch.arange(400).unsqueeze(1), torch.zeros(400, 1, dtype=torch.long),
                         torch.ones(400, 1, dtype=torch.bool))
    model.train()(x, kind, [layer])
    dropped = seen[-1] == 0
    assert abs(dropped.float().mean().item() - 0.6) < 0.01
    assert torch.allclose(seen[-1][~dropped], x[~dropped] / 0.4)  # kept features rescaled by 1 / (1 - p)
    model.eval()(x, kind, [layer])
    assert torch.equal(seen[-1], x)


def test_full_graph_attention_equals_dense_attention_over_every_neighbour():
    torch.manual_seed(3)
    attention = SampledAttention(hidden=8, heads=2, num_edge_types=3)
    with torch.no_grad():
        attention.edge_scale.weight.normal_()
        attention.edge_bias.weight.normal_()
    # destination-sorted edges; node 2 has one in-edge, node 0 three
    edge_index = torch.tensor([[1, 2, 3, 0, 3, 0, 1, 2], [0, 0, 0, 1, 1, 2, 3, 3]])
    edge_type = torch.tensor([0, 1, 2, 1, 0, 2, 1, 0])
    x = torch.randn(4, 8) * 3
    in_degree = torch.bincount(edge_index[1], minlength=4)
    full = attention.forward_full(x, edge_index, edge_type, in_degree)
    # the same neighbourhoods as dense padded slots
    neighbours = torch.tensor([[1, 2, 3], [0, 3, 0], [0, 0, 0], [1, 2, 0]])
    types = torch.tensor([[0, 1, 2], [1, 0, 0], [2, 0, 0], [1, 0, 0]])
    mask = torch.tensor([[True, True, True], [True, True, False], [True, False, False], [True, True, False]])
    dense = attention(x, x, neighbours, types, mask)
    assert torch.allclose(full, dense, atol=1e-5)
