"""GINEBranch equals PyG's GINEConv (with GraphGPS's bond embedding) whenever every neighbour is kept."""

from __future__ import annotations

import torch
from torch_geometric.nn import GINEConv

from sgt_core.layers import FullLayer, SampledLayer
from sgt_core.models.local import GINEBranch

GRAPH, OTHER = 0, 2


def test_matches_pyg_gineconv_on_full_and_sampled_layers():
    torch.manual_seed(0)
    branch = GINEBranch(hidden=6, num_edge_attr_codes=4)
    reference = GINEConv(branch.mlp)  # the same MLP; edge features given already embedded
    # a triangle 0-1-2 plus a pendant 3, both directions, and one non-graph edge into node 0
    src = torch.tensor([1, 2, 0, 2, 0, 1, 3, 2, 3])
    dst = torch.tensor([0, 0, 1, 1, 2, 2, 2, 3, 0])
    types = torch.tensor([GRAPH] * 8 + [OTHER])
    codes = torch.tensor([1, 2, 1, 3, 2, 3, 1, 1, 0])
    h = torch.randn(4, 6)
    degree = torch.bincount(dst[types == GRAPH], minlength=4)
    expected = reference(h, torch.stack([src[:8], dst[:8]]), branch.edge_embedding(codes[:8]))
    order = torch.argsort(dst, stable=True)
    full = FullLayer(torch.stack([src, dst])[:, order], types[order], torch.bincount(dst), None, None, codes[order])
    assert torch.allclose(branch(h, h, full, degree), expected, atol=1e-6)
    # the same edges as slots of a fixed-degree layer (padding and the non-graph slot are skipped)
    neighbours = torch.tensor([[1, 2, 3], [0, 2, 0], [0, 1, 3], [2, 0, 0]])
    slot_types = torch.tensor([[GRAPH, GRAPH, OTHER], [GRAPH, GRAPH, GRAPH], [GRAPH, GRAPH, GRAPH], [GRAPH, 0, 0]])
    slot_codes = torch.tensor([[1, 2, 0], [1, 3, 0], [2, 3, 1], [1, 0, 0]])
    mask = torch.tensor([[True, True, True], [True, True, False], [True, True, True], [True, False, False]])
    sampled = SampledLayer(torch.arange(4), neighbours, slot_types, mask, neighbour_attr=slot_codes)
    assert torch.allclose(branch(h, h, sampled, degree), expected, atol=1e-6)


def test_a_sampled_sum_is_rescaled_to_the_full_neighbourhood():
    torch.manual_seed(1)
    branch = GINEBranch(hidden=4, num_edge_attr_codes=1)
    h = torch.randn(3, 4)
    # node 0 has 2 graph neighbours, of which the layer kept one: its message counts twice
    sampled = SampledLayer(torch.tensor([0]), torch.tensor([[1]]), torch.tensor([[GRAPH]]), torch.tensor([[True]]))
    out = branch(h, h[:1], sampled, torch.tensor([2, 1, 1]))
    message = torch.relu(h[1] + branch.edge_embedding.weight[0])
    assert torch.allclose(out[0], branch.mlp(h[0] + 2 * message), atol=1e-6)


def test_continuous_features_match_pyg_gineconv_with_edge_dim():
    """With only continuous features (code 0 everywhere, its row zero) the branch is GINEConv(edge_dim=Fe)."""
    torch.manual_seed(2)
    branch = GINEBranch(hidden=6, num_edge_attr_codes=1, edge_feature_dim=3)
    with torch.no_grad():
        branch.edge_embedding.weight.zero_()
    reference = GINEConv(branch.mlp, edge_dim=3)
    reference.lin.load_state_dict(branch.edge_linear.state_dict())
    src = torch.tensor([1, 2, 0, 2, 0, 1, 3, 2, 3])
    dst = torch.tensor([0, 0, 1, 1, 2, 2, 2, 3, 0])
    types = torch.tensor([GRAPH] * 8 + [OTHER])
    features = torch.rand(9, 3)
    h = torch.randn(4, 6)
    degree = torch.bincount(dst[types == GRAPH], minlength=4)
    expected = reference(h, torch.stack([src[:8], dst[:8]]), features[:8])
    order = torch.argsort(dst, stable=True)
    full = FullLayer(torch.stack([src, dst])[:, order], types[order], torch.bincount(dst), edge_features=features[order])
    assert torch.allclose(branch(h, h, full, degree), expected, atol=1e-6)


def test_codes_and_continuous_features_match_gineconv_on_their_concatenation():
    """Code embedding plus W f + b is GINEConv's map of [one-hot code | f], on full and on sampled layers."""
    torch.manual_seed(3)
    branch = GINEBranch(hidden=6, num_edge_attr_codes=4, edge_feature_dim=2)
    reference = GINEConv(branch.mlp, edge_dim=4 + 2)
    with torch.no_grad():
        reference.lin.weight.copy_(torch.cat([branch.edge_embedding.weight.t(), branch.edge_linear.weight], dim=1))
        reference.lin.bias.copy_(branch.edge_linear.bias)
    src = torch.tensor([1, 2, 0, 2, 0, 1, 3, 2, 3])
    dst = torch.tensor([0, 0, 1, 1, 2, 2, 2, 3, 0])
    types = torch.tensor([GRAPH] * 8 + [OTHER])
    codes = torch.tensor([1, 2, 1, 3, 2, 3, 1, 1, 0])
    features = torch.rand(9, 2)
    h = torch.randn(4, 6)
    degree = torch.bincount(dst[types == GRAPH], minlength=4)
    concatenated = torch.cat([torch.nn.functional.one_hot(codes, 4).float(), features], dim=1)
    expected = reference(h, torch.stack([src[:8], dst[:8]]), concatenated[:8])
    order = torch.argsort(dst, stable=True)
    full = FullLayer(torch.stack([src, dst])[:, order], types[order], torch.bincount(dst), None, None, codes[order],
                     features[order])
    assert torch.allclose(branch(h, h, full, degree), expected, atol=1e-6)
    # the same edges as slots: each slot's own edge's code and features, padding skipped
    slot_edges = torch.tensor([[0, 1, 8], [2, 3, 0], [4, 5, 6], [7, 0, 0]])
    mask = torch.tensor([[True, True, True], [True, True, False], [True, True, True], [True, False, False]])
    sampled = SampledLayer(torch.arange(4), src[slot_edges], types[slot_edges], mask, neighbour_attr=codes[slot_edges],
                           neighbour_features=features[slot_edges])
    assert torch.allclose(branch(h, h, sampled, degree), expected, atol=1e-6)
    without = SampledLayer(torch.arange(4), src[slot_edges], types[slot_edges], mask, neighbour_attr=codes[slot_edges])
    assert not torch.allclose(branch(h, h, without, degree), expected, atol=1e-3)
