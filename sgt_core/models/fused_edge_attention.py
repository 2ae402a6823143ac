"""fused_edge_attention: the estimator's edge softmax attention with a hand-written, memory-lean backward."""

from __future__ import annotations

import math

import torch
from torch import Tensor


class _FusedEdgeAttention(torch.autograd.Function):
    """Forward and backward of the tempered, clipped edge softmax attention.

    Autograd would keep about a dozen [E, d]-sized intermediates per layer for the backward pass
    (gathered queries, keys, values, products, one-hots, ...), hundreds of bytes per edge: on Tolokers
    (1.4M attention edges) that is gigabytes. Here the backward pass recomputes the gathers from the
    node-level tensors, so the only per-edge state kept between the passes is the scores and a clip mask
    (5 bytes per edge). Node-level tensors are tiny at the estimator's width.
    """

    @staticmethod
    def forward(ctx, query, key, value, edge_scale, edge_bias, src, dst, code, in_degree, temperature, clip):
        scale = 1.0 / math.sqrt(query.shape[1])
        width = query.shape[1]
        key_e, value_e = torch.cat([key, value], dim=1).index_select(0, src).split(width, dim=1)  # [E, d] x2
        raw = (query.index_select(0, dst) * key_e * edge_scale.index_select(0, code)).sum(-1)  # [E]
        tempered = (raw * scale + edge_bias.index_select(0, code)) / temperature  # [E]
        inside = tempered.abs() < clip  # [E] where the clip lets gradient through
        # |logit| <= clip, so exp cannot overflow and no per-segment max is needed
        weights = tempered.clamp(-clip, clip).exp()  # [E]
        scores = weights / torch.segment_reduce(weights, "sum", lengths=in_degree).index_select(0, dst)  # [E]
        out = torch.segment_reduce(scores.unsqueeze(1) * value_e, "sum", lengths=in_degree)  # [N, d]
        ctx.save_for_backward(query, key, value, edge_scale, src, dst, code, in_degree, scores, inside)
        ctx.temperature, ctx.scale = temperature, scale
        return out, scores

    @staticmethod
    def backward(ctx, grad_out, grad_scores):
        query, key, value, edge_scale, src, dst, code, in_degree, scores, inside = ctx.saved_tensors
        num_nodes, width = query.shape
        # The per-edge gathers are the expensive part: each is taken once and shared.
        grad_out_e = grad_out.index_select(0, dst)  # [E, d]
        key_e, value_e = torch.cat([key, value], dim=1).index_select(0, src).split(width, dim=1)  # [E, d] x2
        # d loss / d score of each edge, through the messages and (if used) the scores output
        grad_score = (grad_out_e * value_e).sum(-1)  # [E]
        if grad_scores is not None:
            grad_score = grad_score + grad_scores
        # softmax backward within each destination's segment
        expected = torch.segment_reduce(scores * grad_score, "sum", lengths=in_degree)  # [N]
        grad_logit = scores * (grad_score - expected.index_select(0, dst))  # [E]
        grad_logit = grad_logit * inside / ctx.temperature  # [E] gradient of the bias term
        grad_raw = (grad_logit * ctx.scale).unsqueeze(1)  # [E, 1]
        query_e, scale_e = query.index_select(0, dst), edge_scale.index_select(0, code)  # [E, d] x2
        query_key_e = query_e * key_e  # [E, d]
        grad_query = torch.segment_reduce(grad_raw * key_e * scale_e, "sum", lengths=in_degree)  # [N, d]
        # keys and values are both gathered by src: one scatter for the two
        grad_key_value = torch.zeros(num_nodes, 2 * width, dtype=query.dtype, device=query.device)
        grad_key_value.index_add_(
            0, src, torch.cat([grad_raw * query_e * scale_e, scores.unsqueeze(1) * grad_out_e], dim=1)
        )
        grad_key, grad_value = grad_key_value.split(width, dim=1)
        # C is tiny, so a one-hot matmul beats index_add_'s serial scatter into a handful of rows
        own_code = torch.nn.functional.one_hot(code, edge_scale.shape[0]).to(query.dtype)  # [E, C]
        grad_edge_scale = own_code.t() @ (grad_raw * query_key_e)  # [C, d]
        grad_edge_bias = torch.bincount(code, weights=grad_logit, minlength=edge_scale.shape[0]).to(query.dtype)
        return grad_query, grad_key, grad_value, grad_edge_scale, grad_edge_bias, *([None] * 6)


def fused_edge_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    edge_scale: Tensor,
    edge_bias: Tensor,
    edge_index: Tensor,
    edge_code: Tensor,
    in_degree: Tensor,
    temperature: float,
    clip: float,
) -> tuple[Tensor, Tensor]:
    r"""Edge softmax attention: for an edge j -> i with code c (its edge type, or type and distance),

    .. math::
        a_{ij} = \mathrm{softmax}_j\Big(\mathrm{clip}\big(((E_c \odot K_j)\cdot Q_i / \sqrt{d} + B_c) / \tau, \pm\,clip\big)\Big),
        \qquad \mathrm{out}_i = \sum_j a_{ij} V_j

    Args:
        query, key, value: float [N, d] node projections (value already normalised and scaled).
        edge_scale: float [C, d] E per edge code; edge_bias: float [C] B per edge code.
        edge_index: int64 [2, E] (src, dst) sorted by dst; edge_code: int64 [E] in [0, C).
        in_degree: int64 [N] incoming edges per node (the CSR segment lengths).
        temperature: tau; clip: bound on the tempered logits (<= 30 so exp cannot overflow).

    Returns:
        out [N, d] and scores [E] (summing to 1 per destination).
    """
    return _FusedEdgeAttention.apply(
        query, key, value, edge_scale, edge_bias, edge_index[0], edge_index[1], edge_code, in_degree,
        float(temperature), float(clip),
    )
