"""AnchorGT's SPD encoding in both networks' attention: E_t + E^spd_b and B_t + B^spd_b, bucket 0 inert."""

from __future__ import annotations

import math

import torch

from sgt_core.models import EstimatorAttention, SampledAttention
from tests.models.test_estimator_attention import small_graph

NUM_TYPES, NUM_BUCKETS = 3, 5


def randomise(attention) -> None:
    with torch.no_grad():
        for table in (attention.edge_scale.weight, attention.edge_bias.weight, attention.spd_scale, attention.spd_bias):
            table.normal_()


def test_estimator_spd_bucket_changes_the_score_of_its_edge():
    torch.manual_seed(0)
    edge_index, edge_type = small_graph()
    attention = EstimatorAttention(width=4, num_edge_types=NUM_TYPES, num_spd_buckets=NUM_BUCKETS)
    randomise(attention)
    x = torch.randn(5, 4)
    spd = torch.zeros_like(edge_type)
    spd[1] = 2  # node 0's second in-edge, say an anchor at distance 2
    _, near = attention(x, edge_index, edge_type, edge_spd=spd)
    spd[1] = 4
    _, far = attention(x, edge_index, edge_type, edge_spd=spd)
    assert not torch.isclose(near[1], far[1])
    assert torch.allclose(near[3:], far[3:])  # other destinations do not see it


def test_estimator_spd_terms_match_the_formula():
    torch.manual_seed(1)
    edge_index, edge_type = small_graph()
    attention = EstimatorAttention(width=4, num_edge_types=NUM_TYPES, logit_clip=30.0, num_spd_buckets=NUM_BUCKETS)
    randomise(attention)
    x = torch.randn(5, 4)
    spd = torch.tensor([0, 3, 4, 0, 2, 0, 0, 0, 0, 0])
    _, scores = attention(x, edge_index, edge_type, edge_spd=spd)
    q = attention.query(x[0])
    logits = []
    for j, e in [(1, 0), (2, 1), (3, 2)]:  # node 0's in-edges
        t, b = edge_type[e], spd[e]
        scale = attention.edge_scale.weight[t] + (attention.spd_scale[b - 1] if b else 0)
        bias = attention.edge_bias.weight[t, 0] + (attention.spd_bias[b - 1, 0] if b else 0)
        logits.append((scale * attention.key(x[j])) @ q / math.sqrt(4) + bias)
    assert torch.allclose(scores[:3], torch.softmax(torch.stack(logits), dim=0), atol=1e-6)


def test_bucket_zero_and_fresh_tables_change_nothing():
    torch.manual_seed(2)
    edge_index, edge_type = small_graph()
    with_spd = EstimatorAttention(width=4, num_edge_types=NUM_TYPES, num_spd_buckets=NUM_BUCKETS)
    without = EstimatorAttention(width=4, num_edge_types=NUM_TYPES)
    without.load_state_dict({k: v for k, v in with_spd.state_dict().items() if not k.startswith("spd_")})
    x = torch.randn(5, 4)
    spd = torch.randint(0, NUM_BUCKETS, edge_type.shape)
    # SPD tables start at zero: a fresh model with buckets equals one without
    assert torch.allclose(with_spd(x, edge_index, edge_type, edge_spd=spd)[1], without(x, edge_index, edge_type)[1])
    randomise(with_spd)
    without.load_state_dict({k: v for k, v in with_spd.state_dict().items() if not k.startswith("spd_")})
    zeros = torch.zeros_like(edge_type)
    assert torch.allclose(with_spd(x, edge_index, edge_type, edge_spd=zeros)[1], without(x, edge_index, edge_type)[1])


def test_sampled_attention_spd_changes_the_output_and_full_matches_dense():
    torch.manual_seed(3)
    attention = SampledAttention(hidden=8, heads=2, num_edge_types=NUM_TYPES, num_spd_buckets=NUM_BUCKETS)
    randomise(attention)
    edge_index = torch.tensor([[1, 2, 3, 0, 3, 0, 1, 2], [0, 0, 0, 1, 1, 2, 3, 3]])
    edge_type = torch.tensor([0, 1, 2, 1, 0, 2, 1, 0])
    edge_spd = torch.tensor([0, 2, 4, 0, 3, 0, 2, 0])
    x = torch.randn(4, 8)
    in_degree = torch.bincount(edge_index[1], minlength=4)
    full = attention.forward_full(x, edge_index, edge_type, in_degree, edge_spd)
    neighbours = torch.tensor([[1, 2, 3], [0, 3, 0], [0, 0, 0], [1, 2, 0]])
    types = torch.tensor([[0, 1, 2], [1, 0, 0], [2, 0, 0], [1, 0, 0]])
    spd = torch.tensor([[0, 2, 4], [0, 3, 0], [0, 0, 0], [2, 0, 0]])
    mask = torch.tensor([[True, True, True], [True, True, False], [True, False, False], [True, True, False]])
    dense = attention(x, x, neighbours, types, mask, spd)
    assert torch.allclose(full, dense, atol=1e-5)
    moved = spd.clone()
    moved[0, 1] = 3
    changed = attention(x, x, neighbours, types, mask, moved)
    assert not torch.allclose(changed[0], dense[0]) and torch.allclose(changed[1:], dense[1:])
