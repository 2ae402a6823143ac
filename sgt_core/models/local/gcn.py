"""GCNBranch: one GCN hop (Kipf & Welling, 2017) over a layer's kept graph edges."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from sgt_core.layers import FullLayer, SampledLayer
from sgt_core.models.local.messages import gcn_weights, graph_edges, query_rows, sum_messages


class GCNBranch(nn.Module):
    r"""PyG's `GCNConv` as the GraphGPS local branch, over the input graph's own edges a layer keeps.

    \[
    h'_i = \sum_{j \in N(i) \cup \{i\}} \frac{1}{\sqrt{\hat d_i \hat d_j}} W h_j + b
    \]

    with \(\hat d = n + 1\) from the real graph degrees n (`GCNConv` with self-loops): the sampled sum
    needs every source's degree, which only the whole graph knows. When sampling keeps s_i of node i's
    n_i graph neighbours the neighbour sum is rescaled by n_i / s_i, an unbiased estimate of the full sum
    whenever the kept ones are a uniform choice and s_i > 0 (with s_i = 0 the branch adds nothing but the
    node's own term). With every neighbour kept it is `GCNConv` on the graph, whose state dict (`lin`,
    `bias`) loads into it and back; tests/models/local/test_branches.py checks it.

    The edges: a layer's pattern holds every kind of interaction edge (expander, virtual, anchor, ...);
    the branch uses only the `graph` ones (`graph_edges`): in a `SampledLayer` the slots of that type (the
    fixed-degree layout and Algorithm 2's batches are unchanged), in a `FullLayer` all of the graph's
    edges. It runs as a bipartite layer from the layer's input rows (K) to its queries (Q): no [K, D]
    output for the K - Q rows nobody reads. Written in plain torch rather than calling PyG: importing
    torch_geometric imports torch._dynamo in every train stage process, and the sum
    needs per-target weights that the layer cannot take.

    Args:
        hidden: feature width D (in and out).
        graph_edge_type: the edge type code of the input graph's own edges.

    Shapes:
        h [K, D] layer input, query_h [Q, D] its query rows, graph_degree [K] real graph in-degree of each
        input row -> [Q, D].
    """

    def __init__(self, hidden: int, graph_edge_type: int = 0) -> None:
        super().__init__()
        self.graph_edge_type = graph_edge_type
        self.lin = nn.Linear(hidden, hidden, bias=False)
        self.bias = nn.Parameter(torch.empty(hidden))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """PyG's initialisation: the weight glorot, the bias zero."""
        nn.init.xavier_uniform_(self.lin.weight)
        nn.init.zeros_(self.bias)

    def forward(self, h: Tensor, query_h: Tensor, layer: SampledLayer | FullLayer, graph_degree: Tensor) -> Tensor:
        source, target, kept = graph_edges(layer, query_h.shape[0], self.graph_edge_type)  # [E'], [E'], [Q]
        rows = query_rows(h, layer)  # [Q]
        weight, query_root = gcn_weights(graph_degree, rows, source, target, kept, h.dtype)  # [E'], [Q]
        projected = self.lin(h)  # [K, D] W h
        neighbours = sum_messages(projected, source, target, weight.unsqueeze(1),
                                  projected.new_zeros(query_h.shape))  # [Q, D]
        own = projected.index_select(0, rows) * query_root.square().unsqueeze(1)  # [Q, D] self-loop
        return neighbours + own + self.bias
