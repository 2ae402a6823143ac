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
