"""GATv2Branch: GATv2 attention (Brody et al., 2022) over a layer's kept graph edges."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from sgt_core.layers import FullLayer, SampledLayer
from sgt_core.models.local.messages import graph_edges, query_rows, sum_by_target, with_self_edges


class GATv2Branch(nn.Module):
    r"""PyG's `GATv2Conv` (heads concatenated) as the GraphGPS local branch, over N(i) and i itself among the
    input graph's own edges a layer keeps.

    \[
    h'_i = \big\Vert_{k=1}^{H} \sum_{j \in N(i) \cup \{i\}} \alpha^k_{ij} W^k_l h_j + b, \quad
    \alpha^k_{ij} = \mathrm{softmax}_j\big(a^{k\top} \mathrm{LeakyReLU}_{0.2}(W^k_l h_j + W^k_r h_i
    + W^k_e f_{ji})\big)
    \]

    With `edge_feature_dim` Fe > 0 it is `GATv2Conv(edge_dim=Fe)`: W_e f_ji joins the scores inside the
    LeakyReLU, and i's own edge takes the mean of its kept graph edges' features (PyG's self-loops,
    fill_value="mean"; with every neighbour kept it is PyG's). The softmax needs no sampling correction.
    With every neighbour kept it is `GATv2Conv` on the graph, whose state dict (`lin_l`, `lin_r`, `att`,
    `bias`, `lin_edge`) loads into it and back. Edges and layout as in `GCNBranch`.

    Args:
        hidden: feature width D (in and out).
        heads: attention heads H (D must divide by them); each has width C = D / H.
        graph_edge_type: the edge type code of the input graph's own edges.
        edge_feature_dim: Fe, continuous edge-feature columns (0: none).

    Shapes:
        h [K, D] layer input, query_h [Q, D] its query rows, graph_degree [K] (unread) -> [Q, D]; the layer's
        continuous features (`neighbour_features` [Q, deg, Fe] or `edge_features` [E, Fe]) where it has them.
    """

    def __init__(self, hidden: int, heads: int, graph_edge_type: int = 0, edge_feature_dim: int = 0) -> None:
        super().__init__()
        if hidden % heads:
            raise ValueError(f"hidden width {hidden} is not divisible by {heads} heads")
        self.heads, self.graph_edge_type = heads, graph_edge_type
        self.lin_l = nn.Linear(hidden, hidden)
        self.lin_r = nn.Linear(hidden, hidden)
        self.att = nn.Parameter(torch.empty(1, heads, hidden // heads))
        self.bias = nn.Parameter(torch.empty(hidden))
        self.lin_edge = nn.Linear(edge_feature_dim, hidden, bias=False) if edge_feature_dim > 0 else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """PyG's initialisation: weights and `att` glorot, biases zero."""
        for linear in (self.lin_l, self.lin_r):
            nn.init.xavier_uniform_(linear.weight)
            nn.init.zeros_(linear.bias)
        nn.init.xavier_uniform_(self.att)
        if self.lin_edge is not None:  # last: the other weights draw as they do without edge features
            nn.init.xavier_uniform_(self.lin_edge.weight)
        nn.init.zeros_(self.bias)

    def forward(self, h: Tensor, query_h: Tensor, layer: SampledLayer | FullLayer, graph_degree: Tensor) -> Tensor:
        num_queries = query_h.shape[0]
        source, target, kept = graph_edges(layer, num_queries, self.graph_edge_type)  # [E'], [E'], [Q]
        features = self._self_edge_features(layer, target, kept)  # [E' + Q, Fe] or None
        source, target = with_self_edges(source, target, query_rows(h, layer))  # [E' + Q] each
        heads = self.heads
        source_h = self.lin_l(h).view(h.shape[0], heads, -1)  # [K, H, C]
        query_proj = self.lin_r(query_h).view(num_queries, heads, -1)  # [Q, H, C]
        messages = source_h.index_select(0, source)  # [E' + Q, H, C]
        pre = messages + query_proj.index_select(0, target)  # [E' + Q, H, C]
        if features is not None:
            pre = pre + self.lin_edge(features).view(pre.shape)
        scores = (F.leaky_relu(pre, 0.2) * self.att).sum(-1)  # [E' + Q, H]
        # softmax over each query's edges; the per-query max is a constant there, so no gradient through it
        largest = torch.full((num_queries, heads), float("-inf"), dtype=scores.dtype, device=scores.device)
        largest = largest.scatter_reduce(0, target.unsqueeze(1).expand(-1, heads), scores.detach(), "amax")
        weights = (scores - largest.index_select(0, target)).exp()  # [E' + Q, H]
        totals = sum_by_target(weights, target, num_queries)  # [Q, H]; every query has its self edge
        attention = weights / totals.index_select(0, target)  # [E' + Q, H]
        out = sum_by_target(messages * attention.unsqueeze(-1), target, num_queries)  # [Q, H, C]
        return out.reshape(num_queries, -1) + self.bias  # [Q, D]

    def _self_edge_features(self, layer: SampledLayer | FullLayer, target: Tensor, kept: Tensor) -> Tensor | None:
        """The kept graph edges' continuous features, then each query's own edge's, the mean of its kept
        edges' (0 without any): [E' + Q, Fe], in `with_self_edges`' order; None where the branch reads none."""
        if self.lin_edge is None:
            return None
        if isinstance(layer, FullLayer):
            features = layer.edge_features
            features = None if features is None else features[layer.edge_type == self.graph_edge_type]
        else:
            features = layer.neighbour_features
            if features is not None:  # the same row-major order as `graph_edges`
                features = features[layer.neighbour_mask & (layer.neighbour_type == self.graph_edge_type)]
        if features is None:
            return None
        dtype = self.lin_edge.weight.dtype
        sums = features.new_zeros((kept.numel(), features.shape[1]), dtype=dtype).index_add_(0, target,
                                                                                                features.to(dtype))
        return torch.cat([features.to(dtype), sums / kept.clamp_min(1).unsqueeze(1).to(dtype)])

    def extra_repr(self) -> str:
        return f"heads={self.heads}"
