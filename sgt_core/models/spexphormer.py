"""Spexphormer: the wide network, trained on per-layer sparse graphs sampled from the estimator's scores."""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor, nn

from sgt_core.models.sampled_attention import SampledAttention


@dataclass(frozen=True)
class SampledLayer:
    """The attention pattern of one layer, in the local row numbering of that layer's input.

    Attributes:
        queries: int64 [Q] rows of the layer input whose representation this layer updates; the layer
            output has Q rows, in this order (and is the next layer's input).
        neighbours: int64 [Q, deg] rows of the layer input each query attends to.
        neighbour_type: int64 [Q, deg] edge type of each sampled edge.
        neighbour_mask: bool [Q, deg] False for padding slots.
    """

    queries: Tensor
    neighbours: Tensor
    neighbour_type: Tensor
    neighbour_mask: Tensor

    def to(self, device) -> SampledLayer:
        return SampledLayer(*(t.to(device) for t in (self.queries, self.neighbours, self.neighbour_type, self.neighbour_mask)))


@dataclass(frozen=True)
class FullLayer:
    """The whole interaction graph as one layer's pattern (the Exphormer-style baseline, no sampling).

    Attributes:
        edge_index: int64 [2, E] (src, dst) sorted by dst.
        edge_type: int64 [E].
        in_degree: int64 [N] incoming edges per node.
    """

    edge_index: Tensor
    edge_type: Tensor
    in_degree: Tensor


class SpexphormerLayer(nn.Module):
    """Sampled attention and a feed-forward block, each with dropout, a residual and batch norm."""

    def __init__(self, hidden: int, heads: int, num_edge_types: int, dropout: float) -> None:
        super().__init__()
        self.attention = SampledAttention(hidden, heads, num_edge_types)
        self.feed_forward = nn.Sequential(
            nn.Linear(hidden, 2 * hidden), nn.ReLU(), nn.Dropout(dropout), nn.Linear(2 * hidden, hidden)
        )
        self.dropout = nn.Dropout(dropout)
        # Batch norm rather than layer norm in the final network (Spexphormer D.1).
        self.norm_attention = nn.BatchNorm1d(hidden)
        self.norm_feed_forward = nn.BatchNorm1d(hidden)

    def forward(self, h: Tensor, layer: SampledLayer | FullLayer) -> Tensor:
        if isinstance(layer, FullLayer):
            query_h = h  # [N, D]
            attended = self.attention.forward_full(h, layer.edge_index, layer.edge_type, layer.in_degree)
        else:
            query_h = h[layer.queries]  # [Q, D]
            attended = self.attention(query_h, h, layer.neighbours, layer.neighbour_type, layer.neighbour_mask)
        h = self.norm_attention(query_h + self.dropout(attended))  # [Q, D]
        return self.norm_feed_forward(h + self.dropout(self.feed_forward(h)))  # [Q, D]


class Spexphormer(nn.Module):
    """The wide network (Spexphormer section 4): several heads, fixed degree per layer, batch norm.

    Args:
        in_features: node feature width F.
        num_classes: output classes.
        hidden: hidden width D.
        num_layers: attention layers L (as many as the estimator).
        heads: attention heads.
        num_edge_types: edge types of the interaction graph.
        num_node_kinds: node kinds (real, virtual, ...); added nodes get a learned embedding.
        dropout: dropout probability.

    Shapes:
        x [N0, F] and node_kind [N0] for the first layer's input rows; `layers` maps them down to the
        last layer's queries -> logits [Q_L, C].
    """

    def __init__(
        self,
        in_features: int,
        num_classes: int,
        hidden: int,
        num_layers: int,
        heads: int,
        num_edge_types: int,
        num_node_kinds: int,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.encoder = nn.Linear(in_features, hidden)
        self.node_kind_embedding = nn.Embedding(num_node_kinds, hidden)
        self.layers = nn.ModuleList(
            SpexphormerLayer(hidden, heads, num_edge_types, dropout) for _ in range(num_layers)
        )
        self.head = nn.Linear(hidden, num_classes)

    def forward(self, x: Tensor, node_kind: Tensor, layers: list[SampledLayer | FullLayer]) -> Tensor:
        if len(layers) != len(self.layers):
            raise ValueError(f"expected {len(self.layers)} sampled layers, got {len(layers)}")
        h = self.encoder(x) + self.node_kind_embedding(node_kind)  # [N0, D]
        for block, layer in zip(self.layers, layers):
            h = block(h, layer)  # [Q_l, D]
        return self.head(h)  # [Q_L, C]
