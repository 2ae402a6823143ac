"""Spexphormer: the wide network, trained on per-layer sparse graphs sampled from the estimator's scores."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from sgt_core.layers import FullLayer, SampledLayer
from sgt_core.models.deep_norm import DeepNorm
from sgt_core.models.dropout import Dropout
from sgt_core.models.feed_forward import FeedForward
from sgt_core.models.node_encoder import NodeEncoder, NodeExtras
from sgt_core.models.sampled_attention import SampledAttention


class SpexphormerLayer(nn.Module):
    """Sampled attention and a feed-forward block, each with dropout and a residual.

    The residuals are normalised by batch norm (Spexphormer D.1), or with `deepnorm` by DeepNorm
    (DeepNet, Wang et al., 2022, as used by DeepGraph): x <- LN(alpha * x + G(x)), alpha = (2L)^(1/4),
    with the value, output and feed-forward weights initialised smaller (beta = (8L)^(-1/4)) so that deep
    stacks train stably.
    """

    def __init__(self, attention: SampledAttention, dropout: float, deepnorm: bool = False,
                 num_layers: int = 1) -> None:
        super().__init__()
        hidden = attention.hidden
        self.attention = attention
        self.feed_forward = FeedForward(hidden, dropout)
        self.dropout = Dropout(dropout)
        if deepnorm:
            self.norm_attention: nn.Module = DeepNorm(hidden, num_layers)
            self.norm_feed_forward: nn.Module = DeepNorm(hidden, num_layers)
        else:
            # Batch norm rather than layer norm in the final network (Spexphormer D.1).
            self.norm_attention = nn.BatchNorm1d(hidden)
            self.norm_feed_forward = nn.BatchNorm1d(hidden)
        self.deepnorm = deepnorm
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.attention.reset_parameters()
        for module in (*self.feed_forward, self.norm_attention, self.norm_feed_forward):
            if hasattr(module, "reset_parameters"):
                module.reset_parameters()
        if self.deepnorm:
            # DeepNet's init: queries and keys Xavier with gain 1, the rest of the residual branch gain beta.
            for linear in (self.attention.query, self.attention.key):
                nn.init.xavier_normal_(linear.weight)
                nn.init.zeros_(linear.bias)
            attention = self.attention
            for linear in (attention.value, attention.out, self.feed_forward[0], self.feed_forward[3]):
                self.norm_attention.init_sublayer_(linear)

    def forward(self, h: Tensor, layer: SampledLayer | FullLayer) -> Tensor:
        if isinstance(layer, FullLayer):
            query_h = h  # [N, D]
            attended = self.attention.forward_full(h, layer.edge_index, layer.edge_type, layer.in_degree,
                                                   layer.edge_spd)
        else:
            # every input row, in order (full-graph layers): no [N, D] copy for autograd to keep
            every_row = layer.queries.numel() == h.shape[0] and torch.equal(
                layer.queries, torch.arange(h.shape[0], device=h.device))
            query_h = h if every_row else h[layer.queries]  # [Q, D]
            attended = self.attention(
                query_h, h, layer.neighbours, layer.neighbour_type, layer.neighbour_mask, layer.neighbour_spd
            )
        if self.deepnorm:
            h = self.norm_attention(query_h, self.dropout(attended))  # [Q, D]
            return self.norm_feed_forward(h, self.dropout(self.feed_forward(h)))  # [Q, D]
        h = self.norm_attention(query_h + self.dropout(attended))  # [Q, D]
        return self.norm_feed_forward(h + self.dropout(self.feed_forward(h)))  # [Q, D]


class Spexphormer(nn.Module):
    """The wide network (Spexphormer section 4): several heads, fixed degree per layer, batch norm.

    Args:
        num_classes: output classes.
        hidden: hidden width D.
        num_layers: attention layers L (as many as the estimator).
        heads: attention heads.
        num_edge_types: edge types of the interaction graph.
        dropout: dropout probability.
        deepnorm: DeepNorm residuals (DeepGraph) instead of batch norm, for deep stacks.
        num_spd_buckets: SPD buckets of anchor/k-hop edges (0: no SPD terms), see `SampledAttention`.
        encoder: the input layer's arguments but its width, as in `AttentionScoreEstimator`.

    Shapes:
        x [N0, F], node_kind [N0] and extras for the first layer's input rows; `layers` maps them down to
        the last layer's queries -> logits [Q_L, C].
    """

    def __init__(self, num_classes: int, hidden: int, num_layers: int, heads: int, num_edge_types: int,
                 dropout: float = 0.0, deepnorm: bool = False, num_spd_buckets: int = 0, **encoder: int) -> None:
        super().__init__()
        self.encoder = NodeEncoder(hidden=hidden, **encoder)
        self.layers = nn.ModuleList(
            SpexphormerLayer(SampledAttention(hidden, heads, num_edge_types, num_spd_buckets), dropout, deepnorm,
                             num_layers)
            for _ in range(num_layers)
        )
        self.head = nn.Linear(hidden, num_classes)

    def forward(
        self,
        x: Tensor,
        node_kind: Tensor,
        layers: list[SampledLayer | FullLayer],
        extras: NodeExtras | None = None,
    ) -> Tensor:
        if len(layers) != len(self.layers):
            raise ValueError(f"expected {len(self.layers)} sampled layers, got {len(layers)}")
        h = self.encoder(x, node_kind, extras)  # [N0, D]
        for block, layer in zip(self.layers, layers):
            h = block(h, layer)  # [Q_l, D]
        return self.head(h)  # [Q_L, C]
