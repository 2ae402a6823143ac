"""The fused edge attention (the operator, and its torch implementation) equals plain autograd forward and
backward, and passes gradcheck."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from sgt_core.models import fused_edge_attention as fused_module
from sgt_core.models.fused_edge_attention import destination_chunks, fused_edge_attention


def graph(num_nodes=7, seed=0):
    generator = torch.Generator().manual_seed(seed)
    src = torch.randint(0, num_nodes, (30,), generator=generator)
    dst = torch.randint(0, num_nodes, (30,), generator=generator)
    loops = torch.arange(num_nodes)  # every node has an incoming edge
    src, dst = torch.cat([src, loops]), torch.cat([dst, loops])
    order = torch.argsort(dst * num_nodes + src)
    edge_index = torch.stack([src[order], dst[order]])
    code = torch.randint(0, 3, (edge_index.shape[1],), generator=generator)
    return edge_index, code, torch.bincount(edge_index[1], minlength=num_nodes)


def reference(query, key, value, edge_scale, edge_bias, edge_index, code, in_degree, temperature, clip):
    src, dst = edge_index
    raw = (query[dst] * key[src] * edge_scale[code]).sum(-1) / math.sqrt(query.shape[1]) + edge_bias[code]
    logits = (raw / temperature).clamp(-clip, clip)
    scores = torch.zeros_like(logits)
    for node in range(query.shape[0]):  # the textbook per-node softmax
        incoming = dst == node
        scores = scores + torch.where(incoming, torch.softmax(logits.masked_fill(~incoming, -1e30), 0), 0.0)
    out = torch.zeros_like(value).index_add(0, dst, scores[:, None] * value[src])
    return out, scores


def inputs(dtype=torch.float64, spread=1.0):
    torch.manual_seed(0)
    edge_index, code, in_degree = graph()
    tensors = [torch.randn(7, 4, dtype=dtype) * spread for _ in range(3)]
    tensors += [torch.randn(3, 4, dtype=dtype), torch.randn(3, dtype=dtype)]
    return [t.requires_grad_() for t in tensors], edge_index, code, in_degree


def torch_implementation(tensors, edge_index, code, in_degree, temperature, clip, weights, scores_weight):
    """Output, scores and gradients through the operator's torch implementation (its CUDA path)."""
    query, key, value, scale, bias = (t.detach() for t in tensors)
    ptr = torch.cat([torch.zeros(1, dtype=torch.long), in_degree.cumsum(0)])
    graph = fused_module.compact_edges(edge_index, code, ptr, scale.shape[0]).tensors()
    key_value = torch.cat([key, value], dim=1)
    out, scores, inside = fused_module._edge_attention_torch(query, key_value, scale, bias, *graph, temperature, clip)
    grad_query, grad_key_value, grad_scale, grad_bias = fused_module._edge_attention_backward_torch(
        weights, torch.full_like(scores, scores_weight), query, key_value, scale, scores, inside, *graph, temperature)
    return out, scores, [grad_query, *grad_key_value.split(key.shape[1], dim=1), grad_scale, grad_bias]


# the operator (compiled on the CPU); its torch implementation in one chunk, several, one per node (big nodes)
@pytest.mark.parametrize("implementation, chunk_edges", [("operator", None), ("torch", None), ("torch", 5),
                                                         ("torch", 1)])
def test_matches_autograd_forward_and_backward(implementation, chunk_edges, monkeypatch):
    monkeypatch.setattr(fused_module, "CHUNK_EDGES", chunk_edges or fused_module.CHUNK_EDGES)
    for temperature, spread in [(1.0, 1.0), (0.1, 3.0)]:  # the second case clips many logits
        tensors, edge_index, code, in_degree = inputs(spread=spread)
        ref_out, ref_scores = reference(*tensors, edge_index, code, in_degree, temperature, 8.0)
        weights = torch.randn_like(ref_out)
        ref_grads = torch.autograd.grad((ref_out * weights).sum() + ref_scores.sum() * 0.3, tensors)
        if implementation == "operator":
            out, scores = fused_edge_attention(*tensors, edge_index, code, in_degree, temperature, 8.0)
            grads = torch.autograd.grad((out * weights).sum() + scores.sum() * 0.3, tensors)
        else:
            out, scores, grads = torch_implementation(tensors, edge_index, code, in_degree, temperature, 8.0, weights,
                                                      0.3)
        assert torch.allclose(out, ref_out) and torch.allclose(scores, ref_scores)
        for grad, ref_grad in zip(grads, ref_grads, strict=True):
            assert torch.allclose(grad, ref_grad, atol=1e-10)


def test_destination_chunks_cover_every_edge_on_node_boundaries():
    in_degree = torch.tensor([3, 0, 1, 7, 2, 0, 0, 4])
    ptr = [0, *torch.cumsum(in_degree, 0).tolist()]
    for chunk_edges in (1, 3, 4, 100):
        chunks = destination_chunks(in_degree, chunk_edges)
        assert chunks[0][:3:2] == (0, 0) and chunks[-1][1] == 8 and chunks[-1][3] == ptr[-1]
        for (_, end_node, _, end), (next_node, _, next_edge, _) in itertools.pairwise(chunks):
            assert end_node == next_node and end == next_edge  # contiguous
        for first_node, end_node, first, end in chunks:
            assert (ptr[first_node], ptr[end_node]) == (first, end)  # whole nodes only
            assert end - first <= chunk_edges + int(in_degree.max())  # a big node may overshoot once


def test_gradcheck():
    tensors, edge_index, code, in_degree = inputs()
    assert torch.autograd.gradcheck(
        lambda *t: fused_edge_attention(*t, edge_index, code, in_degree, 0.7, 8.0), tensors
    )


def test_memory_efficient_estimator_attention_matches_the_plain_one():
    from sgt_core.models import EstimatorAttention

    torch.manual_seed(1)
    edge_index, code, _in_degree = graph()
    edge_type, edge_spd = code, torch.randint(0, 4, code.shape)
    plain = EstimatorAttention(width=4, num_edge_types=3, num_spd_buckets=4)
    with torch.no_grad():
        for parameter in (plain.edge_scale.weight, plain.edge_bias.weight, plain.spd_scale, plain.spd_bias):
            parameter.normal_()
    fused = EstimatorAttention(width=4, num_edge_types=3, num_spd_buckets=4, memory_efficient=True)
    fused.load_state_dict(plain.state_dict())
    x = torch.randn(7, 4)
    out, scores = plain(x, edge_index, edge_type, 0.5, edge_spd)
    fused_out, fused_scores = fused(x, edge_index, edge_type, 0.5, edge_spd)
    assert torch.allclose(out, fused_out, atol=1e-5) and torch.allclose(scores, fused_scores, atol=1e-6)
    out.square().sum().backward()
    fused_out.square().sum().backward()
    for (name, a), b in zip(plain.named_parameters(), fused.parameters()):
        assert torch.allclose(a.grad, b.grad, atol=1e-4), name


def test_chunks_on_cuda_are_sized_by_bytes_and_on_the_cpu_by_count():
    cpu, cuda = torch.device("cpu"), torch.device("cuda")  # a device name only: no GPU needed
    assert fused_module.chunk_items(1 << 16, 64, cpu) == 1 << 16
    assert fused_module.chunk_items(1 << 16, 64, cuda) == fused_module.CUDA_CHUNK_BYTES // 64  # one launch per 4M
    assert fused_module.chunk_items(1 << 16, 1 << 30, cuda) == 1 << 16  # never fewer items than the CPU's
