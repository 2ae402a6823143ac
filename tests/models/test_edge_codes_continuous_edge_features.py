"""Continuous edge features in both attentions (Spexphormer's E = W_E f, B = W_B f): the fused operators and
their torch implementations equal plain autograd, pass gradcheck, start as models without features, and a
feature moves its own edge's logit only."""

from __future__ import annotations

import math

import pytest
import torch

from sgt_core.models import EstimatorAttention, SampledAttention
from sgt_core.models import fused_edge_attention as edge_module
from sgt_core.models import fused_slot_attention as slot_module
from sgt_core.models.fused_edge_attention import fused_edge_attention
from sgt_core.models.fused_slot_attention import fused_slot_attention

NUM_FEATURES = 3


def edge_graph(num_nodes=7, num_edges=30, num_codes=3, seed=0):
    """Destination-sorted edges with codes, every node with a self edge, and features zero on a third of them."""
    generator = torch.Generator().manual_seed(seed)
    src = torch.cat([torch.randint(0, num_nodes, (num_edges,), generator=generator), torch.arange(num_nodes)])
    dst = torch.cat([torch.randint(0, num_nodes, (num_edges,), generator=generator), torch.arange(num_nodes)])
    order = torch.argsort(dst * num_nodes + src)
    edge_index = torch.stack([src[order], dst[order]])
    code = torch.randint(0, num_codes, (edge_index.shape[1],), generator=generator)
    features = torch.rand(edge_index.shape[1], NUM_FEATURES, generator=generator, dtype=torch.float64)
    features[torch.rand(edge_index.shape[1], generator=generator) < 0.3] = 0  # edges the input graph lacks
    return edge_index, code, torch.bincount(edge_index[1], minlength=num_nodes), features


def edge_reference(query, key, value, edge_scale, edge_bias, edge_index, code, features, temperature, clip):
    """The textbook formula: E_ij = E_c + sum_k f_k E_{C+k}, B_ij alike, a per-node softmax."""
    src, dst = edge_index
    num_codes = edge_scale.shape[0] - features.shape[1]
    scale = edge_scale[code] + features @ edge_scale[num_codes:]  # [E, d]
    bias = edge_bias[code] + features @ edge_bias[num_codes:]  # [E]
    raw = (query[dst] * key[src] * scale).sum(-1) / math.sqrt(query.shape[1]) + bias
    logits = (raw / temperature).clamp(-clip, clip)
    scores = torch.zeros_like(logits)
    for node in range(query.shape[0]):
        incoming = dst == node
        scores = scores + torch.where(incoming, torch.softmax(logits.masked_fill(~incoming, -1e30), 0), 0.0)
    return torch.zeros_like(value).index_add(0, dst, scores[:, None] * value[src]), scores


def edge_inputs(num_codes=3, spread=1.0):
    generator = torch.Generator().manual_seed(1)
    tensors = [torch.randn(7, 4, generator=generator, dtype=torch.float64) * spread for _ in range(3)]
    tensors += [torch.randn(num_codes + NUM_FEATURES, 4, generator=generator, dtype=torch.float64),
                torch.randn(num_codes + NUM_FEATURES, generator=generator, dtype=torch.float64)]
    return [t.requires_grad_() for t in tensors]


@pytest.mark.parametrize("implementation, chunk_edges", [("operator", None), ("torch", None), ("torch", 5)])
def test_edge_attention_with_features_matches_autograd(implementation, chunk_edges, monkeypatch):
    if chunk_edges:
        monkeypatch.setattr(edge_module, "CHUNK_EDGES", chunk_edges)
    edge_index, code, in_degree, features = edge_graph()
    for temperature, spread in [(1.0, 1.0), (0.1, 3.0)]:  # the second clips many logits
        tensors = edge_inputs(spread=spread)
        ref_out, ref_scores = edge_reference(*tensors, edge_index, code, features, temperature, 8.0)
        weights = torch.randn_like(ref_out)
        ref_grads = torch.autograd.grad((ref_out * weights).sum() + ref_scores.sum() * 0.3, tensors)
        if implementation == "operator":
            out, scores = fused_edge_attention(*tensors, edge_index, code, in_degree, temperature, 8.0,
                                               features=features)
            grads = torch.autograd.grad((out * weights).sum() + scores.sum() * 0.3, tensors)
        else:
            query, key, value, scale, bias = (t.detach() for t in tensors)
            ptr = torch.cat([torch.zeros(1, dtype=torch.long), in_degree.cumsum(0)])
            graph = edge_module.compact_edges(edge_index, code, ptr, 3).tensors()
            key_value = torch.cat([key, value], dim=1)
            out, scores, inside = edge_module._edge_attention_torch(query, key_value, scale, bias, *graph,
                                                                    temperature, 8.0, features)
            grad_query, grad_key_value, grad_scale, grad_bias = edge_module._edge_attention_backward_torch(
                weights, torch.full_like(scores, 0.3), query, key_value, scale, scores, inside, *graph,
                temperature, features)
            grads = [grad_query, *grad_key_value.split(4, dim=1), grad_scale, grad_bias]
        assert torch.allclose(out, ref_out) and torch.allclose(scores, ref_scores)
        for grad, ref_grad in zip(grads, ref_grads, strict=True):
            assert torch.allclose(grad, ref_grad, atol=1e-10)
        assert ref_grads[3][3:].abs().sum() > 0 and ref_grads[4][3:].abs().sum() > 0  # W_E, W_B learn


def test_edge_attention_with_features_gradcheck():
    edge_index, code, in_degree, features = edge_graph()
    assert torch.autograd.gradcheck(
        lambda *t: fused_edge_attention(*t, edge_index, code, in_degree, 0.7, 8.0, features=features),
        edge_inputs())


def slot_inputs(num_codes=3, seed=0):
    generator = torch.Generator().manual_seed(seed)
    num_queries, num_keys, degree, hidden, heads = 9, 11, 4, 6, 2

    def randn(*shape):
        return torch.randn(*shape, generator=generator, dtype=torch.float64).requires_grad_()

    tensors = [randn(num_queries, hidden), randn(num_keys, 2 * hidden), randn(num_codes + NUM_FEATURES, hidden),
               randn(num_codes + NUM_FEATURES, heads)]
    neighbours = torch.randint(0, num_keys, (num_queries, degree), generator=generator)
    code = torch.randint(0, num_codes, (num_queries, degree), generator=generator)
    mask = torch.rand(num_queries, degree, generator=generator) < 0.7
    mask[0], mask[1] = False, True  # a row without any real neighbour, and a full one
    features = torch.rand(num_queries, degree, NUM_FEATURES, generator=generator, dtype=torch.float64)
    features[torch.rand(num_queries, degree, generator=generator) < 0.3] = 0
    return tensors, neighbours, code, mask, heads, features


def slot_reference(query, key_value, edge_scale, edge_bias, neighbours, code, mask, heads, features):
    """Dense [Q, deg, H, dh] autograd with the per-slot terms E_c + f W_E^T, B_c + f W_B^T."""
    num_queries, degree = neighbours.shape
    hidden = query.shape[1]
    head_dim, num_codes = hidden // heads, edge_scale.shape[0] - features.shape[-1]
    key, value = key_value[neighbours].split(hidden, dim=-1)  # [Q, deg, D] x2
    scale = edge_scale[code] + features @ edge_scale[num_codes:]  # [Q, deg, D]
    bias = edge_bias[code] + features @ edge_bias[num_codes:]  # [Q, deg, H]
    key = (key * scale).view(num_queries, degree, heads, head_dim)
    logits = torch.einsum("qhd,qkhd->qkh", query.view(num_queries, heads, head_dim), key) / math.sqrt(head_dim)
    weights = torch.softmax((logits + bias).masked_fill(~mask[..., None], -1e9), dim=1) * mask[..., None]
    out = torch.einsum("qkh,qkhd->qhd", weights, value.view(num_queries, degree, heads, head_dim))
    return out.reshape(num_queries, hidden)


@pytest.mark.parametrize("implementation, chunk_slots", [("operator", None), ("torch", None), ("torch", 8)])
def test_slot_attention_with_features_matches_autograd(implementation, chunk_slots, monkeypatch):
    if chunk_slots:
        monkeypatch.setattr(slot_module, "CHUNK_SLOTS", chunk_slots)
    tensors, neighbours, code, mask, heads, features = slot_inputs()
    reference = slot_reference(*tensors, neighbours, code, mask, heads, features)
    weights = torch.randn_like(reference)
    reference_grads = torch.autograd.grad((reference * weights).sum(), tensors)
    if implementation == "operator":
        out = fused_slot_attention(*tensors, neighbours, code, mask, heads, features=features)
        grads = torch.autograd.grad((out * weights).sum(), tensors)
    else:
        detached = [t.detach() for t in tensors]
        out, attention = slot_module._slot_attention_torch(*detached, neighbours, code, mask, heads, features)
        query, key_value, scale, _bias = detached
        grads = slot_module._slot_attention_backward_torch(weights, query, key_value, scale, neighbours, code,
                                                           attention, heads, features)
    assert torch.allclose(out, reference)
    assert torch.equal(out[0], torch.zeros_like(out[0]))
    for grad, reference_grad in zip(grads, reference_grads, strict=True):
        assert torch.allclose(grad, reference_grad, atol=1e-10)
    assert reference_grads[2][3:].abs().sum() > 0 and reference_grads[3][3:].abs().sum() > 0


def test_slot_attention_with_features_gradcheck():
    tensors, neighbours, code, mask, heads, features = slot_inputs()
    assert torch.autograd.gradcheck(
        lambda *t: fused_slot_attention(*t, neighbours, code, mask, heads, features=features), tensors)


def test_projected_slot_attention_with_features_gradcheck():
    """The wide network's path: the projections inside the operator, recomputed in its backward pass."""
    tensors, neighbours, code, mask, heads, features = slot_inputs()
    _query, _key_value, scale, bias = tensors
    generator = torch.Generator().manual_seed(5)
    leaves = [torch.randn(*shape, generator=generator, dtype=torch.float64).requires_grad_()
              for shape in ((9, 6), (11, 6), (6, 6), (6,), (12, 6), (12,))]
    assert torch.autograd.gradcheck(
        lambda qx, kx, qw, qb, kvw, kvb, es, eb: fused_slot_attention(
            qx, kx, es, eb, neighbours, code, mask, heads, projections=(qw, qb, kvw, kvb), features=features),
        [*leaves, scale, bias])


def random_tables(attention):
    with torch.no_grad():
        for parameter in attention.parameters():
            if parameter.dim() == 2 and parameter is not attention.query.weight:
                parameter.normal_()


def test_memory_efficient_estimator_attention_with_features_matches_the_plain_one():
    torch.manual_seed(1)
    edge_index, edge_type, _in_degree, features = edge_graph()
    features = features.float()
    edge_spd = torch.randint(0, 4, edge_type.shape)
    plain = EstimatorAttention(width=4, num_edge_types=3, num_spd_buckets=4, edge_feature_dim=NUM_FEATURES)
    random_tables(plain)
    fused = EstimatorAttention(width=4, num_edge_types=3, num_spd_buckets=4, memory_efficient=True,
                               edge_feature_dim=NUM_FEATURES)
    fused.load_state_dict(plain.state_dict())
    x = torch.randn(7, 4)
    out, scores = plain(x, edge_index, edge_type, 0.5, edge_spd, edge_features=features)
    fused_out, fused_scores = fused(x, edge_index, edge_type, 0.5, edge_spd, edge_features=features)
    assert torch.allclose(out, fused_out, atol=1e-5) and torch.allclose(scores, fused_scores, atol=1e-6)
    without, _ = plain(x, edge_index, edge_type, 0.5, edge_spd)
    assert not torch.allclose(out, without, atol=1e-3)  # the features are read
    out.square().sum().backward()
    fused_out.square().sum().backward()
    for (name, a), b in zip(plain.named_parameters(), fused.parameters()):
        assert torch.allclose(a.grad, b.grad, atol=1e-4), name
    assert plain.feature_scale.grad.abs().sum() > 0 and plain.feature_bias.grad.abs().sum() > 0


@pytest.mark.parametrize("memory_efficient", [False, True])
def test_a_fresh_estimator_attention_with_features_equals_one_without(memory_efficient):
    torch.manual_seed(2)
    edge_index, edge_type, _in_degree, features = edge_graph()
    without = EstimatorAttention(width=8, num_edge_types=3, memory_efficient=memory_efficient)
    with_features = EstimatorAttention(width=8, num_edge_types=3, memory_efficient=memory_efficient,
                                       edge_feature_dim=NUM_FEATURES)
    assert set(with_features.state_dict()) - set(without.state_dict()) == {"feature_scale", "feature_bias"}
    with_features.load_state_dict(without.state_dict(), strict=False)
    x = torch.randn(7, 8)
    out, scores = without(x, edge_index, edge_type, 0.7)
    featured_out, featured_scores = with_features(x, edge_index, edge_type, 0.7, edge_features=features.float())
    assert torch.allclose(out, featured_out, atol=1e-6) and torch.allclose(scores, featured_scores, atol=1e-7)


@pytest.mark.parametrize("memory_efficient", [False, True])
def test_a_feature_moves_its_own_edges_logit_only(memory_efficient):
    """Changing edge e's features changes e's logit alone: other destinations' scores stay, and e's own
    destination's other scores keep their ratios (the softmax renormalises them by one common factor)."""
    torch.manual_seed(3)
    edge_index, edge_type, _in_degree, features = edge_graph()
    attention = EstimatorAttention(width=4, num_edge_types=3, memory_efficient=memory_efficient,
                                   edge_feature_dim=NUM_FEATURES)
    random_tables(attention)
    x = torch.randn(7, 4)
    attention.requires_grad_(False)
    _, scores = attention(x, edge_index, edge_type, 1.0, edge_features=features.float())
    edge = int((edge_index[1] == 2).nonzero()[1])
    changed = features.float().clone()
    changed[edge] += torch.tensor([0.5, -0.3, 0.2])
    _, changed_scores = attention(x, edge_index, edge_type, 1.0, edge_features=changed)
    same_node = edge_index[1] == 2
    assert torch.allclose(scores[~same_node], changed_scores[~same_node])
    ratio = changed_scores / scores  # [E]
    others = same_node.clone()
    others[edge] = False
    assert torch.allclose(ratio[others], ratio[others][0].expand(int(others.sum())), atol=1e-5)
    assert abs(float(ratio[edge] - ratio[others][0])) > 1e-3


def test_sampled_attention_with_features_equals_full_graph_attention():
    """The wide network's sampled slots (fused operator) and its full-graph path (plain autograd) agree when
    the slots hold every neighbour, and a slot's features move its own logit only."""
    torch.manual_seed(4)
    attention = SampledAttention(hidden=8, heads=2, num_edge_types=3, edge_feature_dim=NUM_FEATURES)
    random_tables(attention)
    edge_index = torch.tensor([[1, 2, 3, 0, 3, 0, 1, 2], [0, 0, 0, 1, 1, 2, 3, 3]])
    edge_type = torch.tensor([0, 1, 2, 1, 0, 2, 1, 0])
    features = torch.rand(8, NUM_FEATURES)
    features[edge_type != 0] = 0
    x = torch.randn(4, 8)
    full = attention.forward_full(x, edge_index, edge_type, torch.bincount(edge_index[1]), edge_features=features)
    neighbours = torch.tensor([[1, 2, 3], [0, 3, 0], [0, 0, 0], [1, 2, 0]])
    types = torch.tensor([[0, 1, 2], [1, 0, 0], [2, 0, 0], [1, 0, 0]])
    mask = torch.tensor([[True, True, True], [True, True, False], [True, False, False], [True, True, False]])
    slot_edges = torch.tensor([[0, 1, 2], [3, 4, 0], [5, 0, 0], [6, 7, 0]])  # each slot's edge id
    dense = attention(x, x, neighbours, types, mask, neighbour_features=features[slot_edges])
    assert torch.allclose(full, dense, atol=1e-5)
    without = attention(x, x, neighbours, types, mask)
    changed = (attention(x, x, neighbours, types, mask, neighbour_features=features[slot_edges] * 2) - dense).abs()
    assert not torch.allclose(dense, without, atol=1e-3)
    # node 2's one edge has no features (an added edge): its row does not move, though a padding slot of
    # row 1 points at a featured edge
    assert changed[[0, 1, 3]].amax(1).min() > 1e-3 and changed[2].amax() == 0


def test_a_fresh_sampled_attention_with_features_equals_one_without():
    torch.manual_seed(5)
    without = SampledAttention(hidden=8, heads=2, num_edge_types=3)
    with_features = SampledAttention(hidden=8, heads=2, num_edge_types=3, edge_feature_dim=NUM_FEATURES)
    with_features.load_state_dict(without.state_dict(), strict=False)
    x, neighbours = torch.randn(6, 8), torch.randint(0, 6, (6, 3))
    types, mask = torch.randint(0, 3, (6, 3)), torch.rand(6, 3) < 0.8
    features = torch.rand(6, 3, NUM_FEATURES)
    assert torch.equal(without(x, x, neighbours, types, mask),
                       with_features(x, x, neighbours, types, mask, neighbour_features=features))


def test_gatv2_branch_with_features_equals_pyg_gatv2conv_with_edge_dim():
    """Dense sampled slots, full layers and Algorithm 2's batches, every neighbour kept: GATv2Conv(edge_dim=Fe)
    with its self-loops' features the mean of each node's incoming ones."""
    from torch_geometric.nn import GATv2Conv

    from sgt_core.config.preprocess import ExpanderConfig
    from sgt_core.models import NodeExtras
    from sgt_core.models.local import GATv2Branch
    from sgt_core.preprocess.builder import build_interaction_graph
    from sgt_core.preprocess.interaction_graph import NODE_KINDS
    from tests.models.local.graphs import GRAPH, HEADS, HIDDEN, keep_everything, random_graph

    graph = build_interaction_graph(random_graph(), self_loops=True, virtual_nodes=1, seed=0,
                                    expander=ExpanderConfig(degree=4, ramanujan_slack=1.0, max_tries=50))
    torch.manual_seed(0)
    branch = GATv2Branch(HIDDEN, HEADS, graph_edge_type=GRAPH, edge_feature_dim=NUM_FEATURES)
    reference = GATv2Conv(HIDDEN, HIDDEN // HEADS, heads=HEADS, edge_dim=NUM_FEATURES)
    reference.load_state_dict(branch.state_dict())
    is_graph = graph.edge_type == GRAPH
    features = torch.rand(graph.num_edges, NUM_FEATURES) * is_graph.unsqueeze(1)
    degree = NodeExtras.from_graph(graph, NODE_KINDS.index("substructure"), GRAPH).graph_degree
    h = torch.randn(graph.num_nodes, HIDDEN)
    expected = reference(h, graph.edge_index[:, is_graph], features[is_graph])  # [N, D]
    sampler = keep_everything(graph)
    sampler.edge_features = features
    (dense,) = sampler.full()
    assert torch.allclose(branch(h, h, dense, degree), expected, atol=1e-5)
    targets = torch.tensor([0, 5, 17, 59, graph.num_nodes - 1])
    input_nodes, (layer,) = sampler.batch(targets)
    batched = branch(h[input_nodes], h[input_nodes][layer.queries], layer, degree[input_nodes])
    assert torch.allclose(batched, expected[targets], atol=1e-5)
    sampler.method = "full"
    (full,) = sampler.full()
    assert torch.allclose(branch(h, h, full, degree), expected, atol=1e-5)
    without = GATv2Conv(HIDDEN, HIDDEN // HEADS, heads=HEADS)
    without.load_state_dict({k: v for k, v in branch.state_dict().items() if k != "lin_edge.weight"})
    assert not torch.allclose(without(h, graph.edge_index[:, is_graph]), expected, atol=1e-3)
