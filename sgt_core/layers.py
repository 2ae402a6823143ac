"""One layer's attention pattern: the data contract between the neighbour samplers and the wide network.

`sgt_core.sampling` produces these (a `SampledLayer` per layer of a batch, or one `FullLayer` for the
whole graph) and `sgt_core.models.Spexphormer` consumes them; neither package imports the other.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = ["FullLayer", "PropagationRows", "SampledLayer"]


@dataclass(frozen=True)
class PropagationRows:
    """The appnp branch's K propagation steps as one weighted hop: each query's largest operator entries (PPRGo).

    Attributes:
        neighbours: int64 [Q, k] rows of the layer input whose z_0 reaches the query, by decreasing weight.
        weights: float32 [Q, k] their weights in the propagation operator (0 in padding slots).
    """

    neighbours: Tensor
    weights: Tensor

    def to(self, device) -> PropagationRows:
        return PropagationRows(self.neighbours.to(device), self.weights.to(device))


@dataclass(frozen=True)
class SampledLayer:
    """The attention pattern of one layer, in the local row numbering of that layer's input.

    Attributes:
        queries: int64 [Q] rows of the layer input whose representation this layer updates; the layer
            output has Q rows, in this order (and is the next layer's input).
        neighbours: int64 [Q, deg] rows of the layer input each query attends to.
        neighbour_type: int64 [Q, deg] edge type of each sampled edge.
        neighbour_mask: bool [Q, deg] False for padding slots.
        neighbour_spd: int64 [Q, deg] SPD bucket of each sampled edge (0: none), or None when the graph
            has no SPD encoding.
        propagation: the local branch's top-k propagation rows of the queries, or None without them.
        neighbour_attr: int64 [Q, deg] categorical feature code of each sampled edge (0: none), or None
            when the graph has no edge features.
        neighbour_features: float32 [Q, deg, Fe] continuous features of each sampled edge (zero on edges
            the input graph lacks; padding slots hold some edge's, which the mask ignores), or None when the
            graph has none.
    """

    queries: Tensor
    neighbours: Tensor
    neighbour_type: Tensor
    neighbour_mask: Tensor
    neighbour_spd: Tensor | None = None
    propagation: PropagationRows | None = None
    neighbour_attr: Tensor | None = None
    neighbour_features: Tensor | None = None

    def queries_are_input_rows(self, num_rows: int) -> bool:
        """Whether query q is input row q for each of the layer's `num_rows` input rows (a full-graph layer)."""
        return self.queries.numel() == num_rows and torch.equal(
            self.queries, torch.arange(num_rows, device=self.queries.device))

    def to(self, device) -> SampledLayer:
        spd = self.neighbour_spd.to(device) if self.neighbour_spd is not None else None
        attr = self.neighbour_attr.to(device) if self.neighbour_attr is not None else None
        features = self.neighbour_features.to(device) if self.neighbour_features is not None else None
        propagation = self.propagation.to(device) if self.propagation is not None else None
        tensors = (self.queries, self.neighbours, self.neighbour_type, self.neighbour_mask)
        return SampledLayer(*(t.to(device) for t in tensors), neighbour_spd=spd, propagation=propagation,
                            neighbour_attr=attr, neighbour_features=features)


@dataclass(frozen=True)
class FullLayer:
    """The whole interaction graph as one layer's pattern (the Exphormer-style baseline, no sampling).

    Attributes:
        edge_index: int64 [2, E] (src, dst) sorted by dst.
        edge_type: int64 [E].
        in_degree: int64 [N] incoming edges per node.
        edge_spd: int64 [E] SPD bucket of each edge, or None.
        propagation: the local branch's top-k propagation rows of every node, or None without them.
        edge_attr: int64 [E] categorical feature code of each edge (0: none), or None.
        edge_features: float32 [E, Fe] continuous features of each edge (zero on added edges), or None.
    """

    edge_index: Tensor
    edge_type: Tensor
    in_degree: Tensor
    edge_spd: Tensor | None = None
    propagation: PropagationRows | None = None
    edge_attr: Tensor | None = None
    edge_features: Tensor | None = None
