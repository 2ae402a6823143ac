"""fused_slot_attention: multi-head attention over fixed sampled slots as the `sgt::slot_attention` operator."""

from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F
from torch import Tensor

from sgt_core.kernels import operators
from sgt_core.kernels.library import loaded
from sgt_core.models.fused_edge_attention import chunk_items

# Query slots (queries x degree) per chunk: every [slots, D] intermediate lives for one chunk only
# (1 MB at D = 32), so the transient memory does not grow with the graph or the degree. Small chunks
# also keep glibc's heap from growing: the Minesweeper preset's train stage peaked lower at 2^13 slots
# than at 2^16 and was no slower (benchmarks/results/2026-11-27-moved-figures.md). On CUDA chunks are
# sized by bytes instead (`chunk_items`).
CHUNK_SLOTS = 1 << 13

# Masked slots get a large finite logit rather than -inf, so a row with no valid neighbour yields
# zeros (after the mask multiply) instead of NaN.
MASKED_LOGIT = -1e9


def _query_chunks(num_queries: int, degree: int, key_value: Tensor) -> list[tuple[int, int]]:
    slots = chunk_items(CHUNK_SLOTS, key_value.element_size() * key_value.shape[1], key_value.device)
    rows = max(1, slots // max(degree, 1))
    return [(start, min(start + rows, num_queries)) for start in range(0, num_queries, rows)]


def _slot_terms(edge_scale, edge_bias, code_c, features_c, num_codes):
    """A chunk's per-slot E rows [s, D] and B rows [s, H] (B None: E only): its code rows, plus with features
    f [s, F] the tables' F feature rows combined by f (Spexphormer's W_E f, W_B f)."""
    scale = edge_scale.index_select(0, code_c)  # [s, D]
    bias = None if edge_bias is None else edge_bias.index_select(0, code_c)  # [s, H]
    if features_c is not None:
        scale = scale + features_c @ edge_scale[num_codes:]  # [s, F] @ [F, D]
        bias = None if bias is None else bias + features_c @ edge_bias[num_codes:]  # [s, H]
    return scale, bias


def _chunk_features(features, start, end):
    """Rows start:end of the slots' features [Q, deg, F] as [slots, F], or None."""
    return None if features is None else features[start:end].reshape(-1, features.shape[-1])


def _slot_attention_torch(query, key_value, edge_scale, edge_bias, neighbours, code, mask, heads, features=None):
    """`sgt::slot_attention` in torch, a chunk of query rows at a time: the CUDA path, and the CPU's
    without the compiled kernels. Returns the output and the attention weights [Q, deg, H]. With `features`
    [Q, deg, F] the tables end with F feature rows (`fused_slot_attention`).

    Autograd over these ops would keep the gathered keys and values, the edge-scaled keys and einsum's
    permuted copies for the backward pass: ~100 bytes per slot and head dimension, the bulk of the wide
    network's training memory. The operator's backward pass gathers again from the node-level tensors,
    so between the passes only the attention weights (a few bytes per slot) are kept.
    """
    num_queries, degree = neighbours.shape
    hidden = query.shape[1]
    head_dim = hidden // heads
    out = query.new_empty(num_queries, hidden)
    attention = query.new_empty(num_queries, degree, heads)
    num_codes = edge_scale.shape[0] - (0 if features is None else features.shape[-1])
    for start, end in _query_chunks(num_queries, degree, key_value):
        rows = end - start
        key, value = key_value.index_select(0, neighbours[start:end].flatten()).split(hidden, dim=1)
        code_c = code[start:end].flatten()
        scale, bias = _slot_terms(edge_scale, edge_bias, code_c, _chunk_features(features, start, end), num_codes)
        scaled_key = key * scale  # [r*deg, D]
        logits = (query[start:end].unsqueeze(1) * scaled_key.view(rows, degree, hidden))  # [r, deg, D]
        logits = logits.view(rows, degree, heads, head_dim).sum(-1) / math.sqrt(head_dim)  # [r, deg, H]
        logits = logits + bias.view(rows, degree, heads)
        keep = mask[start:end].unsqueeze(-1)  # [r, deg, 1]
        weights = torch.softmax(logits.masked_fill_(~keep, MASKED_LOGIT), dim=1) * keep  # [r, deg, H]
        attention[start:end] = weights
        messages = weights.unsqueeze(-1) * value.view(rows, degree, heads, head_dim)  # [r, deg, H, dh]
        out[start:end] = messages.sum(1).view(rows, hidden)
    return out, attention


def _slot_attention_backward_torch(grad_out, query, key_value, edge_scale, neighbours, code, attention, heads,
                                   features=None):
    """`sgt::slot_attention_backward` in torch, chunk by chunk: gradients of query, key_value, E and B (their
    code rows, then with `features` their feature rows: f_j times the code rows' terms)."""
    num_queries, degree = neighbours.shape
    hidden = query.shape[1]
    num_codes = edge_scale.shape[0] - (0 if features is None else features.shape[-1])
    head_dim = hidden // heads
    grad_query = torch.empty_like(query)
    grad_key_value = torch.zeros_like(key_value)
    grad_scale = torch.zeros_like(edge_scale)
    grad_bias = edge_scale.new_zeros(edge_scale.shape[0], heads)
    for start, end in _query_chunks(num_queries, degree, key_value):
        rows, slots = end - start, (end - start) * degree
        flat = neighbours[start:end].flatten()
        key, value = key_value.index_select(0, flat).split(hidden, dim=1)  # [r*deg, D] x2
        code_c = code[start:end].flatten()
        features_c = _chunk_features(features, start, end)  # [r*deg, F] or None
        scale, _ = _slot_terms(edge_scale, None, code_c, features_c, num_codes)  # [r*deg, D]
        weights = attention[start:end]  # [r, deg, H]
        grad_heads = grad_out[start:end].view(rows, 1, heads, head_dim)
        # through the messages: d out / d weight and d out / d value
        grad_weights = (grad_heads * value.view(rows, degree, heads, head_dim)).sum(-1)  # [r, deg, H]
        grad_value = (weights.unsqueeze(-1) * grad_heads).view(slots, hidden)  # [r*deg, D]
        # softmax backward over each row's slots (masked slots have weight 0, so they get 0)
        grad_logits = weights * (grad_weights - (weights * grad_weights).sum(1, keepdim=True))  # [r, deg, H]
        own_code = F.one_hot(code_c, num_codes).to(query.dtype)  # [r*deg, C]: C is tiny
        grad_bias[:num_codes] += own_code.t() @ grad_logits.view(slots, heads)
        if features_c is not None:
            grad_bias[num_codes:] += features_c.t() @ grad_logits.view(slots, heads)  # [F, H]
        grad_dot = (grad_logits / math.sqrt(head_dim)).unsqueeze(-1)  # [r, deg, H, 1]
        query_rows = query[start:end].view(rows, 1, heads, head_dim)
        grad_scaled_key = (grad_dot * query_rows).view(slots, hidden)  # [r*deg, D]
        scaled_key = (key * scale).view(rows, degree, heads, head_dim)
        grad_query[start:end] = (grad_dot * scaled_key).sum(1).view(rows, hidden)
        grad_terms = grad_scaled_key * key  # [r*deg, D] the gradient of each slot's E row
        grad_scale[:num_codes] += own_code.t() @ grad_terms
        if features_c is not None:
            grad_scale[num_codes:] += features_c.t() @ grad_terms  # [F, D]
        grad_key_value.index_add_(0, flat, torch.cat([grad_scaled_key * scale, grad_value], dim=1))
    return grad_query, grad_key_value, grad_scale, grad_bias


def _projected_slot_attention(query_x, key_x, query_weight, query_bias, kv_weight, kv_bias, edge_scale, edge_bias,
                              neighbours, code, mask, heads, features=None):
    """`sgt::projected_slot_attention` on every device: the two projections, then `sgt::slot_attention`."""
    query = F.linear(query_x, query_weight, query_bias)  # [Q, D]
    key_value = F.linear(key_x, kv_weight, kv_bias)  # [K, 2D]
    return operators().slot_attention(query, key_value, edge_scale, edge_bias, neighbours, code, mask, heads,
                                      features)


def _setup_slots(ctx, inputs, output):
    query, key_value, edge_scale, _edge_bias, neighbours, code, _mask, heads, features = inputs
    _out, attention = output
    ctx.mark_non_differentiable(attention)  # kept for the backward pass; no gradient flows through it
    ctx.save_for_backward(query, key_value, edge_scale, neighbours, code, attention, features)
    ctx.heads = heads


def _backward_slots(ctx, grad_out, _grad_attention):
    query, key_value, edge_scale, neighbours, code, attention, features = ctx.saved_tensors
    grads = operators().slot_attention_backward(grad_out.contiguous(), query, key_value, edge_scale, neighbours,
                                                code, attention, ctx.heads, features)
    return *grads, None, None, None, None, None  # the slots, heads and features take none


def _setup_projected(ctx, inputs, output):
    """Keeps the layer's inputs (which the caller keeps anyway) instead of the projected queries, keys and
    values (3 x 4 bytes per row and hidden unit, 15 MB of the Minesweeper preset's saved activations): the
    backward pass recomputes the two projections, two small matmuls."""
    (query_x, key_x, query_weight, query_bias, kv_weight, kv_bias, edge_scale, _bias, neighbours, code, _mask, heads,
     features) = inputs
    _out, attention = output
    ctx.mark_non_differentiable(attention)
    ctx.save_for_backward(query_x, key_x, query_weight, query_bias, kv_weight, kv_bias, edge_scale, neighbours,
                          code, attention, features)
    ctx.heads = heads


def _backward_projected(ctx, grad_out, _grad_attention):
    query_x, key_x, query_weight, query_bias, kv_weight, kv_bias, edge_scale, neighbours, code, attention, features = (
        ctx.saved_tensors)
    query = F.linear(query_x, query_weight, query_bias)  # recomputed
    key_value = F.linear(key_x, kv_weight, kv_bias)
    grad_query, grad_key_value, grad_scale, grad_bias = operators().slot_attention_backward(
        grad_out.contiguous(), query, key_value, edge_scale, neighbours, code, attention, ctx.heads, features)
    return (grad_query @ query_weight, grad_key_value @ kv_weight, grad_query.t() @ query_x, grad_query.sum(0),
            grad_key_value.t() @ key_x, grad_key_value.sum(0), grad_scale, grad_bias, None, None, None, None, None)


@functools.cache
def _operators():
    """`torch.ops.sgt` with the slot operators' torch implementations (every device but the compiled CPU
    one) registered, and their autograd where the C++ library (which has its own) is not loaded."""
    ops = operators()
    torch.library.register_kernel("sgt::slot_attention", None, _slot_attention_torch)
    torch.library.register_kernel("sgt::slot_attention_backward", None, _slot_attention_backward_torch)
    if not loaded():  # the C++ library registers these itself (sgt_core/kernels/autograd.cpp, "Autograd")
        torch.library.register_kernel("sgt::projected_slot_attention", None, _projected_slot_attention)
        torch.library.register_autograd("sgt::slot_attention", _backward_slots, setup_context=_setup_slots)
        torch.library.register_autograd("sgt::projected_slot_attention", _backward_projected,
                                        setup_context=_setup_projected)
    return ops


def fused_slot_attention(
    query: Tensor,
    key_value: Tensor,
    edge_scale: Tensor,
    edge_bias: Tensor,
    neighbours: Tensor,
    code: Tensor,
    mask: Tensor,
    heads: int,
    projections: tuple[Tensor, Tensor, Tensor, Tensor] | None = None,
    features: Tensor | None = None,
) -> Tensor:
    r"""Multi-head attention of each query row over its `deg` sampled slots: for slot j of code c and,
    optionally, continuous features f (F of them), head h,

    \[
    E_{ij} = E_c + \sum_k f_k E_{C+k}, \qquad B_{ij} = B_c + \sum_k f_k B_{C+k},
    \]

    \[
    a^h_{ij} = \mathrm{softmax}_{j:\,\mathrm{mask}_{ij}}\Big(\tfrac{(E^h_{ij} \odot K^h_j)\cdot Q^h_i}{\sqrt{d_h}}
    + B^h_{ij}\Big), \qquad \mathrm{out}_i = \big\Vert_h \sum_j a^h_{ij} V^h_j
    \]

    The tables' last F rows are the columns of Spexphormer's W_E [D, F] and W_B [H, F] (E = W_E f, B = W_B f),
    formed per slot in the kernels (no [Q, deg, D] tensor of per-slot terms).

    Args:
        query: float [Q, D] projected queries.
        key_value: float [K, 2D] projected keys then values.
        edge_scale: float [C + F, D] E per slot code, then per feature.
        edge_bias: float [C + F, H] B per slot code, then per feature.
        neighbours: int64 [Q, deg] rows of key_value.
        code: int64 [Q, deg] each slot's code, in [0, C).
        mask: bool [Q, deg] real (True) or padding (False) slots; a row without any gives zeros.
        heads: H (D divisible by H).
        projections: (query_weight [D, D], query_bias [D], kv_weight [2D, D], kv_bias [2D]), the keys'
            rows of kv_weight and kv_bias first. With them, `query` and `key_value` are the rows before
            projection, float [Q, D] and [K, D] (may be the same tensor), which the operator projects as
            query W_Q^T + b_Q and key_value W_KV^T + b_KV (`sgt::projected_slot_attention`): its backward
            pass recomputes the projections instead of keeping them.
        features: float [Q, deg, F] each slot's continuous features, the query's dtype (None: F = 0); they take
            no gradient.

    Returns:
        float [Q, D], the heads side by side (before the output projection).
    """
    # what both operators take after the rows (and the projections)
    operands = (edge_scale.contiguous(), edge_bias.contiguous(), neighbours.contiguous(), code.contiguous(),
                mask.contiguous(), heads, None if features is None else features.contiguous())
    if projections is None:
        out, _attention = _operators().slot_attention(query.contiguous(), key_value.contiguous(), *operands)
    else:
        out, _attention = _operators().projected_slot_attention(query.contiguous(), key_value.contiguous(),
                                                                *projections, *operands)
    return out
