"""LocalMessagePassing: the GraphGPS local branch (GCN, GraphSAGE or GATv2) over a layer's kept graph edges."""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch_geometric.nn import GATv2Conv, GCNConv, SAGEConv
from torch_geometric.utils import scatter

from sgt_core.layers import FullLayer, SampledLayer

LOCAL_KINDS: tuple[str, ...] = ("none", "gcn", "sage", "gatv2")
SAGE_AGGREGATIONS: tuple[str, ...] = ("mean", "sum")


class LocalMessagePassing(nn.Module):
    r"""A message-passing layer over the input graph's own edges among those a layer keeps (GraphGPS's MPNN).

    The parameters are PyG's layers (`GCNConv`, `SAGEConv`, `GATv2Conv`) and so is the math; what differs
    is where the edges come from. A layer's pattern holds every kind of interaction edge (expander,
    virtual, anchor, ...); the branch uses only the `graph` ones: in a `SampledLayer` the slots of that
    type (so the fixed-degree layout and Algorithm 2's batches are unchanged), in a `FullLayer` all of
    the graph's edges. It runs as a bipartite layer from the layer's input rows (K) to its queries (Q):
    no [K, D] output for the K - Q rows nobody reads.

    When sampling keeps only s_i of node i's n_i graph neighbours, sums are rescaled by n_i / s_i: n_i
    times the mean of the kept ones, which estimates the full-graph sum without bias whenever the kept ones
    are a uniform choice among the neighbours and s_i > 0 (with s_i = 0 the branch adds nothing but the
    node's own term); means and GATv2's softmax need no correction. With every neighbour kept the branch
    equals the PyG layer on the graph:

    - gcn: :math:`\sum_{j \in N(i) \cup \{i\}} \frac{1}{\sqrt{\hat d_i \hat d_j}} W x_j + b`, with
      :math:`\hat d = n + 1` from the real graph degrees n (`GCNConv` with self-loops): the sampled sum
      needs every source's degree, which only the whole graph knows.
    - sage: :math:`W_1 x_i + W_2\, \mathrm{agg}_{j \in N(i)} x_j`, agg `mean` or `sum` (`SAGEConv`); a sum
      counts neighbours, which a mean and attention's softmax cannot.
    - gatv2: `GATv2Conv` with `heads` heads concatenated, over N(i) and i itself.

    Args:
        kind: gcn, sage or gatv2.
        hidden: feature width D (in and out).
        heads: GATv2's heads (D must divide by them).
        aggregation: sage's aggregation, mean or sum.
        graph_edge_type: the edge type code of the input graph's own edges.

    Shapes:
        h [K, D] layer input, query_h [Q, D] its query rows, graph_degree [K] real graph in-degree of each
        input row -> [Q, D].
    """

    def __init__(self, kind: str, hidden: int, heads: int, aggregation: str = "mean",
                 graph_edge_type: int = 0) -> None:
        super().__init__()
        if kind not in LOCAL_KINDS[1:]:
            raise ValueError(f"local branch kind must be one of {', '.join(LOCAL_KINDS[1:])}, got {kind!r}")
        if aggregation not in SAGE_AGGREGATIONS:
            raise ValueError(f"aggregation must be one of {', '.join(SAGE_AGGREGATIONS)}, got {aggregation!r}")
        self.kind, self.aggregation, self.graph_edge_type = kind, aggregation, graph_edge_type
        if kind == "gcn":
            self.conv: nn.Module = GCNConv(hidden, hidden)
        elif kind == "sage":
            self.conv = SAGEConv(hidden, hidden, aggr=aggregation)
        else:
            if hidden % heads:
                raise ValueError(f"hidden width {hidden} is not divisible by {heads} heads")
            # Self-loops are added here (`_with_self_edges`): in a bipartite layer PyG would join input row q
            # to query q, which is another node.
            self.conv = GATv2Conv(hidden, hidden // heads, heads=heads, add_self_loops=False)

    def reset_parameters(self) -> None:
        self.conv.reset_parameters()

    def forward(self, h: Tensor, query_h: Tensor, layer: SampledLayer | FullLayer, graph_degree: Tensor) -> Tensor:
        source, target, kept = self.graph_edges(layer, query_h.shape[0])  # [E'], [E'], [Q]
        query_rows = torch.arange(h.shape[0], device=h.device) if isinstance(layer, FullLayer) else layer.queries
        real = graph_degree.index_select(0, query_rows).to(h.dtype)  # [Q] n_i
        if self.kind == "gatv2":
            source, target = _with_self_edges(source, target, query_rows)
            return self.conv((h, query_h), torch.stack([source, target]))  # sizes from the pair: [K] -> [Q]
        # n_i / s_i: the sampled sum's correction (1 where every neighbour is kept)
        correction = real / kept.clamp_min(1).to(h.dtype)  # [Q]
        if self.kind == "gcn":
            degree_root = (graph_degree.to(h.dtype) + 1).rsqrt()  # [K] 1 / sqrt(d_j)
            query_root = (real + 1).rsqrt()  # [Q] 1 / sqrt(d_i)
            weight = correction[target] * query_root[target] * degree_root[source]  # [E']
            projected = self.conv.lin(h)  # [K, D]
            neighbours = scatter(projected[source] * weight.unsqueeze(1), target, dim=0,
                                 dim_size=query_h.shape[0], reduce="sum")  # [Q, D]
            own = projected.index_select(0, query_rows) * query_root.square().unsqueeze(1)  # [Q, D] self-loop
            return neighbours + own + self.conv.bias
        if self.aggregation == "mean":
            aggregated = scatter(h[source], target, dim=0, dim_size=query_h.shape[0], reduce="mean")  # [Q, D]
        else:
            aggregated = scatter(h[source], target, dim=0, dim_size=query_h.shape[0],
                                 reduce="sum") * correction.unsqueeze(1)  # [Q, D]
        return self.conv.lin_l(aggregated) + self.conv.lin_r(query_h)

    def graph_edges(self, layer: SampledLayer | FullLayer, num_queries: int) -> tuple[Tensor, Tensor, Tensor]:
        """The kept graph edges as (source input row [E'], target query [E']) and each query's count [Q]."""
        if isinstance(layer, FullLayer):
            is_graph = layer.edge_type == self.graph_edge_type  # [E]
            source, target = layer.edge_index[0][is_graph], layer.edge_index[1][is_graph]
        else:
            is_graph = layer.neighbour_mask & (layer.neighbour_type == self.graph_edge_type)  # [Q, deg]
            target, slot = is_graph.nonzero(as_tuple=True)  # row-major: sorted by target
            source = layer.neighbours[target, slot]
        kept = torch.bincount(target, minlength=num_queries)  # [Q]
        return source, target, kept

    def extra_repr(self) -> str:
        return f"kind={self.kind}" + (f", aggregation={self.aggregation}" if self.kind == "sage" else "")


def _with_self_edges(source: Tensor, target: Tensor, query_rows: Tensor) -> tuple[Tensor, Tensor]:
    """The edges plus query q's own input row -> q, for every query."""
    queries = torch.arange(query_rows.numel(), device=query_rows.device)
    return torch.cat([source, query_rows]), torch.cat([target, queries])
