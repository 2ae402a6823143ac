"""fused_slot_attention: multi-head attention over fixed sampled slots, chunked, with a memory-lean backward."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from sgt_core.kernels import address, checked, cpu_kernels, group_by, usable

# Query slots (queries x degree) per chunk: every [slots, D] intermediate lives for one chunk only
# (1 MB at D = 32), so the transient memory does not grow with the graph or the degree. Small chunks
# also keep glibc's heap from growing: at 2^16 slots (8 MB intermediates) the Minesweeper preset's
# train stage peaked at 636 MB, at 2^13 at 521 MB, and was no slower (benchmarks, 2 cores).
CHUNK_SLOTS = 1 << 13

# Masked slots get a large finite logit rather than -inf, so a row with no valid neighbour yields
# zeros (after the mask multiply) instead of NaN.
MASKED_LOGIT = -1e9


def _query_chunks(num_queries: int, degree: int) -> list[tuple[int, int]]:
    rows = max(1, CHUNK_SLOTS // max(degree, 1))
    return [(start, min(start + rows, num_queries)) for start in range(0, num_queries, rows)]


class _FusedSlotAttention(torch.autograd.Function):
    """Forward and backward of `fused_slot_attention`, a chunk of query rows at a time.

    Autograd keeps the gathered keys and values, the edge-scaled keys and einsum's permuted copies for the
    backward pass: ~100 bytes per slot and head dimension, the bulk of the wide network's training memory.
    Here the backward pass gathers again from the node-level tensors, so between the passes only the
    attention weights ([Q, deg, H], a few bytes per slot) are kept.
    """

    @staticmethod
    def forward(ctx, query, key_value, edge_scale, edge_bias, neighbours, code, mask, heads):
        num_queries, degree = neighbours.shape
        hidden = query.shape[1]
        head_dim = hidden // heads
        out = query.new_empty(num_queries, hidden)
        attention = query.new_empty(num_queries, degree, heads)
        for start, end in _query_chunks(num_queries, degree):
            rows = end - start
            key, value = key_value.index_select(0, neighbours[start:end].flatten()).split(hidden, dim=1)
            code_c = code[start:end].flatten()
            scaled_key = key * edge_scale.index_select(0, code_c)  # [r*deg, D]
            logits = (query[start:end].unsqueeze(1) * scaled_key.view(rows, degree, hidden))  # [r, deg, D]
            logits = logits.view(rows, degree, heads, head_dim).sum(-1) / math.sqrt(head_dim)  # [r, deg, H]
            logits = logits + edge_bias.index_select(0, code_c).view(rows, degree, heads)
            keep = mask[start:end].unsqueeze(-1)  # [r, deg, 1]
            weights = torch.softmax(logits.masked_fill_(~keep, MASKED_LOGIT), dim=1) * keep  # [r, deg, H]
            attention[start:end] = weights
            messages = weights.unsqueeze(-1) * value.view(rows, degree, heads, head_dim)  # [r, deg, H, dh]
            out[start:end] = messages.sum(1).view(rows, hidden)
        ctx.save_for_backward(query, key_value, edge_scale, neighbours, code, attention)
        ctx.heads = heads
        return out

    @staticmethod
    def backward(ctx, grad_out):
        query, key_value, edge_scale, neighbours, code, attention = ctx.saved_tensors
        num_queries, degree = neighbours.shape
        hidden, heads, num_codes = query.shape[1], ctx.heads, edge_scale.shape[0]
        head_dim = hidden // heads
        grad_query = torch.empty_like(query)
        grad_key_value = torch.zeros_like(key_value)
        grad_scale = torch.zeros_like(edge_scale)
        grad_bias = edge_scale.new_zeros(num_codes, heads)
        for start, end in _query_chunks(num_queries, degree):
            rows, slots = end - start, (end - start) * degree
            flat = neighbours[start:end].flatten()
            key, value = key_value.index_select(0, flat).split(hidden, dim=1)  # [r*deg, D] x2
            code_c = code[start:end].flatten()
            scale = edge_scale.index_select(0, code_c)  # [r*deg, D]
            weights = attention[start:end]  # [r, deg, H]
            grad_heads = grad_out[start:end].view(rows, 1, heads, head_dim)
            # through the messages: d out / d weight and d out / d value
            grad_weights = (grad_heads * value.view(rows, degree, heads, head_dim)).sum(-1)  # [r, deg, H]
            grad_value = (weights.unsqueeze(-1) * grad_heads).view(slots, hidden)  # [r*deg, D]
            # softmax backward over each row's slots (masked slots have weight 0, so they get 0)
            grad_logits = weights * (grad_weights - (weights * grad_weights).sum(1, keepdim=True))  # [r, deg, H]
            own_code = F.one_hot(code_c, num_codes).to(query.dtype)  # [r*deg, C]: C is tiny
            grad_bias += own_code.t() @ grad_logits.view(slots, heads)
            grad_dot = (grad_logits / math.sqrt(head_dim)).unsqueeze(-1)  # [r, deg, H, 1]
            query_rows = query[start:end].view(rows, 1, heads, head_dim)
            grad_scaled_key = (grad_dot * query_rows).view(slots, hidden)  # [r*deg, D]
            scaled_key = (key * scale).view(rows, degree, heads, head_dim)
            grad_query[start:end] = (grad_dot * scaled_key).sum(1).view(rows, hidden)
            grad_scale += own_code.t() @ (grad_scaled_key * key)
            grad_key_value.index_add_(0, flat, torch.cat([grad_scaled_key * scale, grad_value], dim=1))
        return grad_query, grad_key_value, grad_scale, grad_bias, None, None, None, None


class _CompiledSlotAttention(torch.autograd.Function):
    """The same attention through the C kernels (sgt_core/kernels/attention.c), float32 on the CPU.

    One sweep over the query rows forward; backward, one over the query rows and one over the key rows,
    whose slots are grouped afresh per call (the sample changes every epoch; a counting sort, O(slots)).
    Like the torch version it keeps only the attention weights between the passes.
    """

    @staticmethod
    def forward(ctx, query, key_value, edge_scale, edge_bias, neighbours, code, mask, heads):
        out, kept = _slot_attention_forward(query, key_value, edge_scale, edge_bias, neighbours, code, mask, heads)
        ctx.save_for_backward(query, key_value, *kept)
        ctx.heads = heads
        return out

    @staticmethod
    def backward(ctx, grad_out):
        query, key_value, edge_scale, neighbours, code, attention = ctx.saved_tensors
        return (*_slot_attention_backward(query, key_value, edge_scale, neighbours, code, attention, grad_out,
                                          ctx.heads), None, None, None, None)


def _slot_attention_forward(query, key_value, edge_scale, edge_bias, neighbours, code, mask, heads):
    """The compiled forward pass: the output, and (edge_scale, neighbours, code, attention) for backward."""
    query, key_value, edge_scale, edge_bias = (t.contiguous() for t in (query, key_value, edge_scale, edge_bias))
    neighbours, code, mask = neighbours.contiguous(), code.contiguous(), mask.contiguous()
    num_queries, degree = neighbours.shape
    hidden = query.shape[1]
    out = query.new_empty(num_queries, hidden)
    attention = query.new_empty(num_queries, degree, heads)
    cpu_kernels().sgt_slot_attention_forward(
        num_queries, degree, hidden, heads, address(query), address(key_value), address(edge_scale),
        address(edge_bias), address(neighbours), address(code), address(mask), address(out), address(attention),
    )
    return out, (edge_scale, neighbours, code, attention)


def _slot_attention_backward(query, key_value, edge_scale, neighbours, code, attention, grad_out, heads):
    """The compiled backward pass: gradients of query, key_value, edge_scale and edge_bias."""
    num_queries, degree = neighbours.shape
    num_keys, hidden, num_codes = key_value.shape[0], query.shape[1], edge_scale.shape[0]
    by_key_ptr, by_key_order = group_by(neighbours.flatten(), num_keys)
    grad_out = grad_out.contiguous()
    grad_query = torch.empty_like(query)
    grad_key_value = torch.empty_like(key_value)
    grad_scale = torch.empty_like(edge_scale)
    grad_bias = edge_scale.new_empty(num_codes, heads)
    slot_grad = torch.empty_like(attention)  # scratch: d loss / d logit per slot and head
    checked(cpu_kernels().sgt_slot_attention_backward(
        num_queries, num_keys, degree, hidden, heads, num_codes, address(query), address(key_value),
        address(edge_scale), address(neighbours), address(code), address(by_key_ptr), address(by_key_order),
        address(attention), address(grad_out), address(grad_query), address(grad_key_value),
        address(grad_scale), address(grad_bias), address(slot_grad),
    ), "sgt_slot_attention_backward")
    return grad_query, grad_key_value, grad_scale, grad_bias


class _CompiledProjectedSlotAttention(torch.autograd.Function):
    """Query/key/value projections and the compiled slot attention as one function.

    Keeps the layer's inputs (which the caller keeps anyway) instead of the projected queries, keys and
    values (3 x 4 bytes per row and hidden unit, 15 MB of the Minesweeper preset's saved activations),
    and recomputes the two projections in the backward pass: two small matmuls.
    """

    @staticmethod
    def forward(ctx, query_x, key_x, query_weight, query_bias, kv_weight, kv_bias, edge_scale, edge_bias,
                neighbours, code, mask, heads):
        query = F.linear(query_x, query_weight, query_bias)
        key_value = F.linear(key_x, kv_weight, kv_bias)
        out, kept = _slot_attention_forward(query, key_value, edge_scale, edge_bias, neighbours, code, mask, heads)
        ctx.save_for_backward(query_x, key_x, query_weight, query_bias, kv_weight, kv_bias, *kept)
        ctx.heads = heads
        return out

    @staticmethod
    def backward(ctx, grad_out):
        query_x, key_x, query_weight, query_bias, kv_weight, kv_bias, edge_scale, neighbours, code, attention = (
            ctx.saved_tensors)
        query = F.linear(query_x, query_weight, query_bias)  # recomputed
        key_value = F.linear(key_x, kv_weight, kv_bias)
        grad_query, grad_key_value, grad_scale, grad_bias = _slot_attention_backward(
            query, key_value, edge_scale, neighbours, code, attention, grad_out, ctx.heads)
        return (grad_query @ query_weight, grad_key_value @ kv_weight, grad_query.t() @ query_x, grad_query.sum(0),
                grad_key_value.t() @ key_x, grad_key_value.sum(0), grad_scale, grad_bias, None, None, None, None)


def projected_slot_attention(
    query_x: Tensor,
    key_x: Tensor,
    query_weight: Tensor,
    query_bias: Tensor,
    kv_weight: Tensor,
    kv_bias: Tensor,
    edge_scale: Tensor,
    edge_bias: Tensor,
    neighbours: Tensor,
    code: Tensor,
    mask: Tensor,
    heads: int,
) -> Tensor:
    """`fused_slot_attention` of the projections query_x W_Q^T + b_Q and key_x W_KV^T + b_KV.

    Args:
        query_x: float [Q, D] query rows; key_x: float [K, D] key rows (may be the same tensor).
        query_weight [D, D], query_bias [D]; kv_weight [2D, D], kv_bias [2D]: keys then values.
        The rest as in `fused_slot_attention`.

    Returns:
        float [Q, D], the heads side by side (before the output projection).
    """
    if usable(query_x, key_x, query_weight, kv_weight, edge_scale, edge_bias, neighbours):
        return _CompiledProjectedSlotAttention.apply(query_x, key_x, query_weight, query_bias, kv_weight, kv_bias,
                                                     edge_scale, edge_bias, neighbours, code, mask, heads)
    return fused_slot_attention(F.linear(query_x, query_weight, query_bias), F.linear(key_x, kv_weight, kv_bias),
                                edge_scale, edge_bias, neighbours, code, mask, heads)


def fused_slot_attention(
    query: Tensor,
    key_value: Tensor,
    edge_scale: Tensor,
    edge_bias: Tensor,
    neighbours: Tensor,
    code: Tensor,
    mask: Tensor,
    heads: int,
) -> Tensor:
    r"""Multi-head attention of each query row over its `deg` sampled slots: for slot j of code c, head h,

    .. math::
        a^h_{ij} = \mathrm{softmax}_{j:\,\mathrm{mask}_{ij}}\Big(\tfrac{(E^h_c \odot K^h_j)\cdot Q^h_i}{\sqrt{d_h}} + B^h_c\Big),
        \qquad \mathrm{out}_i = \big\Vert_h \sum_j a^h_{ij} V^h_j

    Args:
        query: float [Q, D] projected queries; key_value: float [K, 2D] projected keys then values.
        edge_scale: float [C, D] E per slot code; edge_bias: float [C, H] B per slot code.
        neighbours: int64 [Q, deg] rows of key_value; code: int64 [Q, deg] in [0, C).
        mask: bool [Q, deg] real (True) or padding (False) slots; a row without any gives zeros.
        heads: H (D divisible by H).

    Returns:
        float [Q, D], the heads side by side (before the output projection).
    """
    if usable(query, key_value, edge_scale, edge_bias, neighbours):
        return _CompiledSlotAttention.apply(query, key_value, edge_scale, edge_bias, neighbours, code, mask, heads)
    return _FusedSlotAttention.apply(query, key_value, edge_scale, edge_bias, neighbours, code, mask, heads)
