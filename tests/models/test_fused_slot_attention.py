"""The fused slot attention (the operator, and its torch implementation) equals plain autograd attention
forward and backward, and passes gradcheck."""

from __future__ import annotations

import math

import pytest
import torch

from sgt_core.models import SampledAttention
from sgt_core.models import fused_slot_attention as fused_module
from sgt_core.models.fused_slot_attention import fused_slot_attention


def autograd_attention(query, key_value, edge_scale, edge_bias, neighbours, code, mask, heads):
    """The same attention written with plain autograd over dense [Q, deg, H, dh] tensors."""
    num_queries, degree = neighbours.shape
    hidden = query.shape[1]
    head_dim = hidden // heads
    key, value = key_value[neighbours].split(hidden, dim=-1)  # [Q, deg, D] x2
    key = (key * edge_scale[code]).view(num_queries, degree, heads, head_dim)
    logits = torch.einsum("qhd,qkhd->qkh", query.view(num_queries, heads, head_dim), key) / math.sqrt(head_dim)
    logits = logits + edge_bias[code]
    weights = torch.softmax(logits.masked_fill(~mask[..., None], -1e9), dim=1) * mask[..., None]
    out = torch.einsum("qkh,qkhd->qhd", weights, value.view(num_queries, degree, heads, head_dim))
    return out.reshape(num_queries, hidden)


def inputs(dtype=torch.float64, seed=0):
    generator = torch.Generator().manual_seed(seed)
    num_queries, num_keys, degree, hidden, heads, codes = 9, 11, 4, 6, 2, 3

    def randn(*shape):
        return torch.randn(*shape, generator=generator, dtype=dtype).requires_grad_()

    tensors = [randn(num_queries, hidden), randn(num_keys, 2 * hidden), randn(codes, hidden), randn(codes, heads)]
    neighbours = torch.randint(0, num_keys, (num_queries, degree), generator=generator)
    code = torch.randint(0, codes, (num_queries, degree), generator=generator)
    mask = torch.rand(num_queries, degree, generator=generator) < 0.7
    mask[0] = False  # a row without any real neighbour
    mask[1] = True
    return tensors, neighbours, code, mask, heads


# the operator (compiled on the CPU); its torch implementation in one chunk, several, one row per chunk
@pytest.mark.parametrize("implementation, chunk_slots", [("operator", None), ("torch", None), ("torch", 8),
                                                         ("torch", 1)])
def test_matches_autograd_forward_and_backward(implementation, chunk_slots, monkeypatch):
    if chunk_slots:
        monkeypatch.setattr(fused_module, "CHUNK_SLOTS", chunk_slots)
    tensors, neighbours, code, mask, heads = inputs()
    reference = autograd_attention(*tensors, neighbours, code, mask, heads)
    weights = torch.randn_like(reference)
    reference_grads = torch.autograd.grad((reference * weights).sum(), tensors)
    if implementation == "operator":
        out = fused_slot_attention(*tensors, neighbours, code, mask, heads)
        grads = torch.autograd.grad((out * weights).sum(), tensors)
    else:
        detached = [t.detach() for t in tensors]
        out, attention = fused_module._slot_attention_torch(*detached, neighbours, code, mask, heads)
        query, key_value, scale, _bias = detached
        grads = fused_module._slot_attention_backward_torch(weights, query, key_value, scale, neighbours, code,
                                                            attention, heads)
    assert torch.allclose(out, reference)
    assert torch.equal(out[0], torch.zeros_like(out[0]))  # no neighbour: zeros, not NaN
    for grad, reference_grad in zip(grads, reference_grads, strict=True):
        assert torch.allclose(grad, reference_grad, atol=1e-10)


def test_gradcheck():
    tensors, neighbours, code, mask, heads = inputs()
    assert torch.autograd.gradcheck(lambda *t: fused_slot_attention(*t, neighbours, code, mask, heads), tensors)


def test_sampled_attention_with_spd_buckets_matches_one_hot_codes():
    """(type, bucket) codes over summed tables equal E_t + E^spd_b and B_t + B^spd_b per slot."""
    torch.manual_seed(2)
    attention = SampledAttention(hidden=8, heads=2, num_edge_types=3, num_spd_buckets=4)
    with torch.no_grad():
        for parameter in (attention.edge_scale.weight, attention.edge_bias.weight, attention.spd_scale,
                          attention.spd_bias):
            parameter.normal_()
    key_x, query_x = torch.randn(7, 8), torch.randn(5, 8)
    neighbours, types = torch.randint(0, 7, (5, 3)), torch.randint(0, 3, (5, 3))
    spd, mask = torch.randint(0, 4, (5, 3)), torch.ones(5, 3, dtype=torch.bool)
    out = attention(query_x, key_x, neighbours, types, mask, spd)
    scale = attention.edge_scale.weight[types] + torch.cat([torch.zeros(1, 8), attention.spd_scale])[spd]
    bias = attention.edge_bias.weight[types] + torch.cat([torch.zeros(1, 2), attention.spd_bias])[spd]
    # one code per slot: slot (q, j) indexes row q * 3 + j of the per-slot tables
    per_slot = torch.arange(15).view(5, 3)
    key_value = torch.cat([attention.key(key_x), attention.value(key_x)], dim=1)
    expected = attention.out(autograd_attention(attention.query(query_x), key_value, scale.view(15, 8),
                                                bias.view(15, 2), neighbours, per_slot, mask, 2))
    assert torch.allclose(out, expected, atol=1e-5)
