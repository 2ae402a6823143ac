"""SampledAttention: multi-head attention over a fixed number of sampled neighbours, as dense tensors."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

# Masked slots get a large finite logit rather than -inf, so a row with no valid neighbour yields
# zeros (after the mask multiply) instead of NaN.
_MASKED_LOGIT = -1e9


class SampledAttention(nn.Module):
    r"""Fixed-degree attention of the wide Spexphormer network (section 4, "Fixed Node Degree Layers").

    Every query node i has exactly `deg` sampled neighbours, so keys and values are gathered into dense
    [Q, deg, heads, head_dim] tensors and attention is batched matrix work instead of a scatter. For a
    sampled edge j -> i of type t, per head h:

    .. math::
        a^h_{ij} = \mathrm{softmax}_{j}\Big(\tfrac{(E^h_t \odot K^h_j)\cdot Q^h_i}{\sqrt{d_h}} + B^h_t\Big),
        \qquad \mathrm{out}_i = W_O\,\big\Vert_h \sum_j a^h_{ij} V^h_j

    No V normalisation here (that is only for the estimator). Padded slots (nodes with fewer candidates
    than `deg`) are masked out of the softmax.

    Args:
        hidden: feature width D.
        heads: attention heads H (D must divide by H).
        num_edge_types: number of edge types t.

    Shapes:
        query_x [Q, D], key_x [K, D], neighbours [Q, deg] (rows of key_x), neighbour_type [Q, deg],
        neighbour_mask [Q, deg] bool -> [Q, D].
    """

    def __init__(self, hidden: int, heads: int, num_edge_types: int) -> None:
        super().__init__()
        if hidden % heads:
            raise ValueError(f"hidden width {hidden} is not divisible by {heads} heads")
        self.hidden, self.heads, self.head_dim = hidden, heads, hidden // heads
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        self.edge_scale = nn.Embedding(num_edge_types, hidden)  # E_t, all heads side by side
        self.edge_bias = nn.Embedding(num_edge_types, heads)  # B_t, one per head
        self.out = nn.Linear(hidden, hidden)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for linear in (self.query, self.key, self.value, self.out):
            linear.reset_parameters()
        nn.init.ones_(self.edge_scale.weight)
        nn.init.zeros_(self.edge_bias.weight)

    def forward(
        self,
        query_x: Tensor,
        key_x: Tensor,
        neighbours: Tensor,
        neighbour_type: Tensor,
        neighbour_mask: Tensor,
    ) -> Tensor:
        num_queries, degree = neighbours.shape
        heads, head_dim = self.heads, self.head_dim
        query = self.query(query_x).view(num_queries, heads, head_dim)  # [Q, H, dh]
        # Project once per key node, then gather: cheaper than projecting Q * deg gathered rows; one
        # index_select for keys and values together (its backward is far cheaper than x[idx]'s).
        key_value = torch.cat([self.key(key_x), self.value(key_x)], dim=1)  # [K, 2D]
        key, value = key_value.index_select(0, neighbours.flatten()).split(self.hidden, dim=1)  # [Q*deg, D] x2
        # Edge-type terms through a one-hot matmul instead of an embedding lookup: a dense backward
        # rather than an embedding backward that sorts all Q * deg type indices every step.
        own_type = F.one_hot(neighbour_type.flatten(), self.edge_bias.num_embeddings).to(key.dtype)  # [Q*deg, T]
        key = (key * (own_type @ self.edge_scale.weight)).view(num_queries, degree, heads, head_dim)  # [Q, deg, H, dh]
        value = value.view(num_queries, degree, heads, head_dim)  # [Q, deg, H, dh]
        logits = torch.einsum("qhd,qkhd->qkh", query, key) / math.sqrt(head_dim)  # [Q, deg, H]
        logits = logits + (own_type @ self.edge_bias.weight).view(num_queries, degree, heads)  # [Q, deg, H]
        mask = neighbour_mask.unsqueeze(-1)  # [Q, deg, 1]
        attention = torch.softmax(logits.masked_fill(~mask, _MASKED_LOGIT), dim=1) * mask  # [Q, deg, H]
        out = torch.einsum("qkh,qkhd->qhd", attention, value).reshape(num_queries, self.hidden)  # [Q, D]
        return self.out(out)

    def forward_full(self, x: Tensor, edge_index: Tensor, edge_type: Tensor, in_degree: Tensor) -> Tensor:
        """The same attention over every interaction-graph edge: the Exphormer-style baseline (no sampling).

        Sparse, with segment reductions over the destination-sorted edges instead of dense slots.

        Shapes:
            x [N, D], edge_index [2, E] (src, dst) sorted by dst, edge_type [E], in_degree [N] -> [N, D].
        """
        src, dst = edge_index
        num_edges, heads, head_dim = src.numel(), self.heads, self.head_dim
        query = self.query(x).index_select(0, dst).view(num_edges, heads, head_dim)  # [E, H, dh]
        key_value = torch.cat([self.key(x), self.value(x)], dim=1)  # [N, 2D]
        key, value = key_value.index_select(0, src).split(self.hidden, dim=1)  # [E, D] x2
        own_type = F.one_hot(edge_type, self.edge_bias.num_embeddings).to(key.dtype)  # [E, T]
        key = (key * (own_type @ self.edge_scale.weight)).view(num_edges, heads, head_dim)  # [E, H, dh]
        logits = (query * key).sum(-1) / math.sqrt(head_dim) + own_type @ self.edge_bias.weight  # [E, H]
        # per-destination max for a stable softmax; a constant per segment, so no gradient through it
        largest = torch.segment_reduce(logits.detach(), "max", lengths=in_degree)  # [N, H]
        weights = (logits - largest.index_select(0, dst)).exp()  # [E, H]
        totals = torch.segment_reduce(weights, "sum", lengths=in_degree)  # [N, H]
        attention = weights / totals.index_select(0, dst)  # [E, H]
        messages = attention.unsqueeze(-1) * value.view(num_edges, heads, head_dim)  # [E, H, dh]
        out = torch.segment_reduce(messages, "sum", lengths=in_degree)  # [N, H, dh]
        return self.out(out.reshape(x.shape[0], self.hidden))
