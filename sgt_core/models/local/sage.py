"""SAGEBranch: GraphSAGE (Hamilton et al., 2017) over a layer's kept graph edges."""

from __future__ import annotations

from torch import Tensor, nn

from sgt_core.layers import FullLayer, SampledLayer
from sgt_core.models.local.messages import graph_edges, query_rows, sum_messages

SAGE_AGGREGATIONS: tuple[str, ...] = ("mean", "sum")


class SAGEBranch(nn.Module):
    r"""PyG's `SAGEConv` as the GraphGPS local branch, over the input graph's own edges a layer keeps.

    \[
    h'_i = W_1 h_i + W_2\, \mathrm{agg}_{j \in N(i)} h_j
    \]

    agg `mean` or `sum`; a sum counts neighbours, which a mean and attention's softmax cannot. When
    sampling keeps s_i of node i's n_i graph neighbours, the sum is rescaled by n_i / s_i (n_i times the
    mean of the kept ones, unbiased for the full sum given s_i > 0); the mean needs no correction. With
    every neighbour kept it is `SAGEConv(aggr=...)` on the graph, whose state dict (`lin_l`, `lin_r`)
    loads into it and back. Edges and layout as in `GCNBranch`.

    Args:
        hidden: feature width D (in and out).
        aggregation: mean or sum.
        graph_edge_type: the edge type code of the input graph's own edges.

    Shapes:
        h [K, D] layer input, query_h [Q, D] its query rows, graph_degree [K] real graph in-degree of each
        input row -> [Q, D].
    """

    def __init__(self, hidden: int, aggregation: str = "mean", graph_edge_type: int = 0) -> None:
        super().__init__()
        if aggregation not in SAGE_AGGREGATIONS:
            raise ValueError(f"aggregation must be one of {', '.join(SAGE_AGGREGATIONS)}, got {aggregation!r}")
        self.aggregation, self.graph_edge_type = aggregation, graph_edge_type
        self.lin_l = nn.Linear(hidden, hidden)  # the neighbours'
        self.lin_r = nn.Linear(hidden, hidden, bias=False)  # the node's own
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """PyG's initialisation: nn.Linear's."""
        self.lin_l.reset_parameters()
        self.lin_r.reset_parameters()

    def forward(self, h: Tensor, query_h: Tensor, layer: SampledLayer | FullLayer, graph_degree: Tensor) -> Tensor:
        source, target, kept = graph_edges(layer, query_h.shape[0], self.graph_edge_type)  # [E'], [E'], [Q]
        summed = sum_messages(h, source, target, None, h.new_zeros(query_h.shape))  # [Q, D]
        if self.aggregation == "mean":  # over the kept neighbours (0 where there are none, as in PyG)
            scale = 1 / kept.clamp_min(1).to(h.dtype)  # [Q]
        else:  # n_i / s_i: n_i times that mean
            real = graph_degree.index_select(0, query_rows(h, layer)).to(h.dtype)  # [Q] n_i
            scale = real / kept.clamp_min(1).to(h.dtype)  # [Q]
        return self.lin_l(summed * scale.unsqueeze(1)) + self.lin_r(query_h)

    def extra_repr(self) -> str:
        return f"aggregation={self.aggregation}"
