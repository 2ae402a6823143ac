"""SampledAttention: multi-head attention over a fixed number of sampled neighbours, as dense tensors."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from sgt_core.models.edge_codes import combined_code, one_hot_codes
from sgt_core.models.estimator_attention import EdgeTypedAttention, with_feature_columns
from sgt_core.models.fused_slot_attention import fused_slot_attention


class SampledAttention(EdgeTypedAttention):
    r"""Fixed-degree attention of the wide Spexphormer network (section 4, "Fixed Node Degree Layers").

    Every query node i has exactly `deg` sampled neighbours, so keys and values are gathered into dense
    [Q, deg, heads, head_dim] slots and attention is batched dense work instead of a scatter
    (`fused_slot_attention`, which keeps only the attention weights for the backward pass). For a
    sampled edge j -> i of type t, per head h:

    \[
    a^h_{ij} = \mathrm{softmax}_{j}\Big(\tfrac{(E^h_t \odot K^h_j)\cdot Q^h_i}{\sqrt{d_h}} + B^h_t\Big),
    \qquad \mathrm{out}_i = W_O\,\big\Vert_h \sum_j a^h_{ij} V^h_j
    \]

    No V normalisation here (that is only for the estimator). Padded slots (nodes with fewer candidates
    than `deg`) are masked out of the softmax.

    With `num_spd_buckets` > 0, a slot whose edge has shortest-path-distance bucket b > 0 (AnchorGT's
    encoding on anchor and k-hop edges) uses E_t + E^spd_b and B_t + B^spd_b; bucket 0 adds nothing, and
    E^spd, B^spd start at zero. Categorical edge features (bond types) add E^attr_a and B^attr_a the same
    way (`sgt_core.models.edge_codes`). Continuous edge features f [Fe] (zero on every edge but the input
    graph's own) add W_E f [D] (heads side by side) and W_B f [H] (Spexphormer section 3), both starting at
    zero; the fused operator forms them per slot from the sampled slots' features [Q, deg, Fe].

    Args:
        hidden: feature width D.
        heads: attention heads H (D must divide by H).
        num_edge_types: number of edge types t.
        num_spd_buckets: SPD buckets b = 0..num_spd_buckets-1 (0 or 1: no SPD terms).
        num_edge_attr_codes: edge-feature codes a = 0..num_edge_attr_codes-1 (0 or 1: none).
        edge_feature_dim: Fe, continuous edge-feature columns (0: none).

    Shapes:
        query_x [Q, D], key_x [K, D], neighbours [Q, deg] (rows of key_x), neighbour_type [Q, deg],
        neighbour_mask [Q, deg] bool, neighbour_spd [Q, deg] or None, neighbour_attr [Q, deg] or None,
        neighbour_features float [Q, deg, Fe] or None -> [Q, D].
    """

    def __init__(self, hidden: int, heads: int, num_edge_types: int, num_spd_buckets: int = 0,
                 num_edge_attr_codes: int = 0, edge_feature_dim: int = 0) -> None:
        if hidden % heads:
            raise ValueError(f"hidden width {hidden} is not divisible by {heads} heads")
        # E's heads side by side, B per head
        super().__init__(hidden, heads, num_edge_types, num_spd_buckets, num_edge_attr_codes=num_edge_attr_codes,
                         edge_feature_dim=edge_feature_dim)
        self.hidden, self.heads, self.head_dim = hidden, heads, hidden // heads
        self.reset_parameters()

    def forward(
        self,
        query_x: Tensor,
        key_x: Tensor,
        neighbours: Tensor,
        neighbour_type: Tensor,
        neighbour_mask: Tensor,
        neighbour_spd: Tensor | None = None,
        neighbour_attr: Tensor | None = None,
        neighbour_features: Tensor | None = None,
    ) -> Tensor:
        # Project once per key node, then gather inside the kernel: cheaper than projecting Q * deg rows.
        kv_weight = torch.cat([self.key.weight, self.value.weight])  # [2D, D]: keys, then values
        kv_bias = torch.cat([self.key.bias, self.value.bias])  # [2D]
        with_spd = neighbour_spd is not None and self.spd_scale is not None
        with_attr = neighbour_attr is not None and self.attr_scale is not None
        code = combined_code(neighbour_type, neighbour_spd if with_spd else None,
                             neighbour_attr if with_attr else None, self.num_spd if with_spd else 1,
                             self.num_attr if with_attr else 1).long()  # [Q, deg]
        scale, bias = self.tables(with_spd, with_attr)  # [C, D], [C, H]
        features = None
        if self.reads_features(neighbour_features):  # W_E^T and W_B^T after the code rows, weighed per slot
            features = neighbour_features.to(query_x.dtype)  # [Q, deg, Fe]
            scale, bias = self.with_feature_rows(scale, bias)  # [C + Fe, D], [C + Fe, H]
        out = fused_slot_attention(query_x, key_x, scale, bias, neighbours, code, neighbour_mask, self.heads,
                                   projections=(self.query.weight, self.query.bias, kv_weight, kv_bias),
                                   features=features)  # [Q, D]
        return self.out(out)

    def forward_full(
        self,
        x: Tensor,
        edge_index: Tensor,
        edge_type: Tensor,
        in_degree: Tensor,
        edge_spd: Tensor | None = None,
        edge_attr: Tensor | None = None,
        edge_features: Tensor | None = None,
    ) -> Tensor:
        """The same attention over every interaction-graph edge: the Exphormer-style baseline (no sampling).

        Sparse, with segment reductions over the destination-sorted edges instead of dense slots.

        Shapes:
            x [N, D], edge_index [2, E] (src, dst) sorted by dst, edge_type [E], in_degree [N],
            edge_spd [E] or None, edge_attr [E] or None, edge_features float [E, Fe] or None -> [N, D].
        """
        src, dst = edge_index
        num_edges, heads, head_dim = src.numel(), self.heads, self.head_dim
        query = self.query(x).index_select(0, dst).view(num_edges, heads, head_dim)  # [E, H, dh]
        key_value = torch.cat([self.key(x), self.value(x)], dim=1)  # [N, 2D]
        key, value = key_value.index_select(0, src).split(self.hidden, dim=1)  # [E, D] x2
        features = edge_features.to(x.dtype) if self.reads_features(edge_features) else None  # [E, Fe]
        scale, bias = self.one_hot_tables(features is not None)  # [C (+ Fe), D], [C (+ Fe), H]
        codes = one_hot_codes(edge_type, edge_spd, edge_attr, self.edge_bias.num_embeddings, self.num_spd,
                              self.num_attr)
        codes = with_feature_columns(codes, features).to(key.dtype)  # [E, C (+ Fe)]: E_c + W_E f, B_c + W_B f
        key = (key * (codes @ scale)).view(num_edges, heads, head_dim)  # [E, H, dh]
        logits = (query * key).sum(-1) / math.sqrt(head_dim) + codes @ bias  # [E, H]
        # per-destination max for a stable softmax; a constant per segment, so no gradient through it
        largest = torch.segment_reduce(logits.detach(), "max", lengths=in_degree)  # [N, H]
        weights = (logits - largest.index_select(0, dst)).exp()  # [E, H]
        totals = torch.segment_reduce(weights, "sum", lengths=in_degree)  # [N, H]
        attention = weights / totals.index_select(0, dst)  # [E, H]
        messages = attention.unsqueeze(-1) * value.view(num_edges, heads, head_dim)  # [E, H, dh]
        out = torch.segment_reduce(messages, "sum", lengths=in_degree)  # [N, H, dh]
        return self.out(out.reshape(x.shape[0], self.hidden))
