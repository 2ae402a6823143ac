"""Categorical edge features (bond types) in both attentions: E_t + E^spd_s + E^attr_a per edge, code 0 inert."""

from __future__ import annotations

import pytest
import torch

from sgt_core.models import EstimatorAttention, SampledAttention
from sgt_core.models.edge_codes import code_tables, combined_code, used_codes
from tests.models.test_estimator_attention import small_graph

NUM_TYPES, NUM_BUCKETS, NUM_CODES = 3, 4, 5


def randomise(attention) -> None:
    with torch.no_grad():
        for table in (attention.edge_scale.weight, attention.edge_bias.weight, attention.spd_scale,
                      attention.spd_bias, attention.attr_scale, attention.attr_bias):
            if table is not None:
                table.normal_()


def test_code_tables_hold_each_combination_at_its_code():
    scale, bias = torch.randn(3, 2), torch.randn(3, 1)
    spd_scale, spd_bias, attr_scale, attr_bias = torch.randn(3, 2), torch.randn(3, 1), torch.randn(4, 2), torch.randn(4, 1)
    table, _ = code_tables(scale, bias, spd_scale, spd_bias, attr_scale, attr_bias)
    code = combined_code(torch.tensor([2]), torch.tensor([3]), torch.tensor([1]), NUM_BUCKETS, NUM_CODES)
    assert torch.allclose(table[code[0]], scale[2] + spd_scale[2] + attr_scale[0])
    code = combined_code(torch.tensor([1]), torch.tensor([0]), torch.tensor([0]), NUM_BUCKETS, NUM_CODES)
    assert torch.allclose(table[code[0]], scale[1])


@pytest.mark.parametrize("memory_efficient", [True, False])
def test_estimator_feature_codes_match_the_formula(memory_efficient):
    torch.manual_seed(0)
    edge_index, edge_type = small_graph()
    attention = EstimatorAttention(width=4, num_edge_types=NUM_TYPES, logit_clip=30.0, num_spd_buckets=NUM_BUCKETS,
                                   memory_efficient=memory_efficient, num_edge_attr_codes=NUM_CODES)
    randomise(attention)
    x = torch.randn(5, 4)
    spd = torch.tensor([0, 3, 0, 0, 2, 0, 0, 0, 0, 0])
    attr = torch.tensor([2, 0, 4, 1, 0, 3, 0, 0, 0, 1])
    _, scores = attention(x, edge_index, edge_type, edge_spd=spd, edge_attr=attr)
    q = attention.query(x[0])
    logits = []
    for j, e in [(1, 0), (2, 1), (3, 2)]:  # node 0's in-edges
        t, b, a = edge_type[e], spd[e], attr[e]
        scale = (attention.edge_scale.weight[t] + (attention.spd_scale[b - 1] if b else 0)
                 + (attention.attr_scale[a - 1] if a else 0))
        bias = (attention.edge_bias.weight[t, 0] + (attention.spd_bias[b - 1, 0] if b else 0)
                + (attention.attr_bias[a - 1, 0] if a else 0))
        logits.append((scale * attention.key(x[j])) @ q / 2 + bias)
    assert torch.allclose(scores[:3], torch.softmax(torch.stack(logits), dim=0), atol=1e-5)


def test_fresh_feature_tables_and_code_zero_change_nothing():
    torch.manual_seed(1)
    edge_index, edge_type = small_graph()
    with_codes = EstimatorAttention(width=4, num_edge_types=NUM_TYPES, num_edge_attr_codes=NUM_CODES,
                                    memory_efficient=True)
    without = EstimatorAttention(width=4, num_edge_types=NUM_TYPES, memory_efficient=True)
    without.load_state_dict({k: v for k, v in with_codes.state_dict().items() if not k.startswith("attr_")})
    x = torch.randn(5, 4)
    attr = torch.randint(0, NUM_CODES, edge_type.shape)
    assert torch.allclose(with_codes(x, edge_index, edge_type, edge_attr=attr)[1], without(x, edge_index, edge_type)[1])
    randomise(with_codes)
    without.load_state_dict({k: v for k, v in with_codes.state_dict().items() if not k.startswith("attr_")})
    zeros = torch.zeros_like(edge_type)
    assert torch.allclose(with_codes(x, edge_index, edge_type, edge_attr=zeros)[1], without(x, edge_index, edge_type)[1])


def test_more_than_256_codes_are_renumbered_over_those_in_use():
    torch.manual_seed(2)
    edge_index, edge_type = small_graph()
    many = 61  # OGB's bond features: 1 + 5 * 6 * 2 codes; with 9 SPD buckets, 7 * 9 * 61 > 256 table rows
    fused = EstimatorAttention(width=4, num_edge_types=7, num_spd_buckets=9, memory_efficient=True,
                               num_edge_attr_codes=many)
    plain = EstimatorAttention(width=4, num_edge_types=7, num_spd_buckets=9, num_edge_attr_codes=many)
    randomise(fused)
    plain.load_state_dict(fused.state_dict())
    x = torch.randn(5, 4)
    spd, attr = torch.randint(0, 9, edge_type.shape), torch.randint(0, many, edge_type.shape)
    edges = fused.prepare(edge_index, edge_type, spd, 5, attr)
    assert edges.rows is not None and edges.rows.numel() <= edge_type.numel()
    out, scores = fused(x, edge_index, edge_type, edge_spd=spd, edges=edges)
    reference_out, reference_scores = plain(x, edge_index, edge_type, edge_spd=spd, edge_attr=attr)
    assert torch.allclose(scores, reference_scores, atol=1e-6) and torch.allclose(out, reference_out, atol=1e-5)
    code, rows = used_codes(torch.tensor([5, 900, 5]), 1000, 256)
    assert rows.tolist() == [5, 900] and code.tolist() == [0, 1, 0]


def test_sampled_attention_feature_codes_match_the_full_graph_path():
    torch.manual_seed(3)
    attention = SampledAttention(hidden=8, heads=2, num_edge_types=NUM_TYPES, num_spd_buckets=NUM_BUCKETS,
                                 num_edge_attr_codes=NUM_CODES)
    randomise(attention)
    edge_index = torch.tensor([[1, 2, 3, 0, 3, 0, 1, 2], [0, 0, 0, 1, 1, 2, 3, 3]])
    edge_type = torch.tensor([0, 1, 2, 1, 0, 2, 1, 0])
    edge_spd = torch.tensor([0, 2, 3, 0, 0, 0, 2, 0])
    edge_attr = torch.tensor([3, 0, 0, 0, 1, 0, 0, 4])
    x = torch.randn(4, 8)
    full = attention.forward_full(x, edge_index, edge_type, torch.bincount(edge_index[1], minlength=4), edge_spd,
                                  edge_attr)
    neighbours = torch.tensor([[1, 2, 3], [0, 3, 0], [0, 0, 0], [1, 2, 0]])
    types = torch.tensor([[0, 1, 2], [1, 0, 0], [2, 0, 0], [1, 0, 0]])
    spd = torch.tensor([[0, 2, 3], [0, 0, 0], [0, 0, 0], [2, 0, 0]])
    attr = torch.tensor([[3, 0, 0], [0, 1, 0], [0, 0, 0], [0, 4, 0]])
    mask = torch.tensor([[True, True, True], [True, True, False], [True, False, False], [True, True, False]])
    dense = attention(x, x, neighbours, types, mask, spd, attr)
    assert torch.allclose(full, dense, atol=1e-5)
    moved = attr.clone()
    moved[0, 0] = 2
    changed = attention(x, x, neighbours, types, mask, spd, moved)
    assert not torch.allclose(changed[0], dense[0]) and torch.allclose(changed[1:], dense[1:])
