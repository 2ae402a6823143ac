"""GINEBranch: GINE (Hu et al., 2020) over a layer's kept graph edges, reading the bond types and continuous
edge features."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from sgt_core.layers import FullLayer, SampledLayer


class GINEBranch(nn.Module):
    r"""The local branch GraphGPS and Exphormer pair with attention on molecules: PyG's `GINEConv`

    \[
    h'_i = \mathrm{MLP}\Big((1 + \epsilon)\, h_i + \frac{n_i}{s_i}\sum_{j \in N_s(i)} \mathrm{ReLU}(h_j + e_{ji})\Big)
    \]

    over the input graph's own edges among those the layer keeps (`graph_edges`' rule: the slots of the
    `graph` type in a `SampledLayer`, every graph edge in a `FullLayer`). e_ji is the learned
    embedding of the edge's categorical feature code (its bond type; code 0, an edge without features,
    has its own row), as GraphGPS embeds bond types before GINE, plus with continuous features f_ji [Fe]
    the linear map W f_ji + b that PyG's `GINEConv(edge_dim=Fe)` applies to its edge features (a code is
    a one-hot feature, so both together are `GINEConv`'s map of [one-hot code | f]). When sampling keeps
    s_i of node i's n_i graph neighbours the sum is rescaled by n_i / s_i, an unbiased estimate of the full
    sum (with every neighbour kept, as on molecules whose degrees are below the sampled degree, it is GINE
    exactly).
    MLP: Linear, ReLU, Linear, as GraphGPS builds it; eps = 0, fixed (PyG's default).

    Args:
        hidden: feature width D (in and out).
        num_edge_attr_codes: rows of the edge-feature embedding (at least 1: code 0 when there are none).
        graph_edge_type: the edge type code of the input graph's own edges.
        edge_feature_dim: Fe, continuous edge-feature columns (0: none), read through `edge_linear`.

    Shapes:
        h [K, D] layer input, query_h [Q, D] its query rows, graph_degree [K] real graph in-degree of each
        input row -> [Q, D]; the layer's continuous features (`neighbour_features` [Q, deg, Fe] or
        `edge_features` [E, Fe]) where it has them.
    """

    def __init__(self, hidden: int, num_edge_attr_codes: int, graph_edge_type: int = 0,
                 edge_feature_dim: int = 0) -> None:
        super().__init__()
        self.graph_edge_type = graph_edge_type
        self.edge_embedding = nn.Embedding(max(1, num_edge_attr_codes), hidden)
        # GINEConv's `lin` (edge_dim -> in_channels), with nn.Linear's initialisation as there
        self.edge_linear = nn.Linear(edge_feature_dim, hidden) if edge_feature_dim > 0 else None
        self.mlp = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, hidden))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.xavier_uniform_(self.edge_embedding.weight)  # OGB's BondEncoder
        if self.edge_linear is not None:
            self.edge_linear.reset_parameters()
        for module in self.mlp:
            if isinstance(module, nn.Linear):
                module.reset_parameters()

    def forward(self, h: Tensor, query_h: Tensor, layer: SampledLayer | FullLayer, graph_degree: Tensor) -> Tensor:
        num_queries = query_h.shape[0]
        if isinstance(layer, FullLayer):
            is_graph = layer.edge_type == self.graph_edge_type  # [E]
            source, target = layer.edge_index[0][is_graph], layer.edge_index[1][is_graph]
            code = layer.edge_attr[is_graph] if layer.edge_attr is not None else None
            features = layer.edge_features[is_graph] if layer.edge_features is not None else None  # [E', Fe]
            query_rows = torch.arange(h.shape[0], device=h.device)
        else:
            is_graph = layer.neighbour_mask & (layer.neighbour_type == self.graph_edge_type)  # [Q, deg]
            target, slot = is_graph.nonzero(as_tuple=True)
            source = layer.neighbours[target, slot]
            code = layer.neighbour_attr[target, slot] if layer.neighbour_attr is not None else None
            features = layer.neighbour_features[target, slot] if layer.neighbour_features is not None else None
            query_rows = layer.queries
        if code is None:  # every edge has code 0: its row, broadcast (no [E', D] gather, and a sum for its gradient)
            edge = self.edge_embedding.weight[0]  # [D]
        else:
            edge = self.edge_embedding(code.long())  # [E', D]
        if self.edge_linear is not None and features is not None:
            edge = edge + self.edge_linear(features.to(h.dtype))  # [E', D]
        # in place on the gathered rows: autograd needs neither the sum's inputs nor the gather's output, and
        # ReLU keeps its own output; two fewer [E', D] tensors written per layer
        messages = h.index_select(0, source).add_(edge).relu_()  # [E', D]
        kept = torch.bincount(target, minlength=num_queries)  # [Q]
        real = graph_degree.index_select(0, query_rows).to(h.dtype)  # [Q]
        correction = (real / kept.clamp_min(1).to(h.dtype)).unsqueeze(1)  # [Q, 1] n_i / s_i
        summed = h.new_zeros(num_queries, h.shape[1]).index_add_(0, target, messages)  # [Q, D]
        return self.mlp(query_h + summed * correction)

