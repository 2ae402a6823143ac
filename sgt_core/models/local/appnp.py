"""APPNPBranch: APPNP's propagation (Gasteiger et al., 2019) after a GCN linear map, over a layer's kept graph
edges or through its top-k propagation rows (PPRGo, Bojchevski et al., 2020)."""

from __future__ import annotations

import torch
from torch import Tensor

from sgt_core.layers import FullLayer, SampledLayer
from sgt_core.models.local.gcn import GCNBranch
from sgt_core.models.local.messages import gcn_weights, graph_edges, query_rows, sum_messages


class APPNPBranch(GCNBranch):
    r"""APPNP as the GraphGPS local branch: K steps of personalised-PageRank propagation of z_0 = W h.

    \[
    z_{k+1} = (1 - \alpha) \hat A z_k + \alpha z_0, \qquad h' = z_K + b
    \]

    with \(\hat A\) GCN's normalised adjacency with self-loops over the layer's kept graph edges
    (`GCNBranch`'s, with its n_i / s_i correction of sampled sums): PyG's `APPNP(K, alpha)` applied to
    `GCNConv`'s linear map, plus its bias; the parameters are `GCNConv`'s (`lin`, `bias`). Hops after the
    first need every input row as a query, so K > 1 runs in full-graph layers only (Algorithm 2's batches
    sample one hop per layer), unless `top_k` is set.

    With `top_k` k the K steps are one hop over the layer's `PropagationRows` (PPRGo): each query's k
    largest entries of the K-step operator over the whole graph (`sgt_core.sampling.propagation.appnp_top_k`),
    \(\sum_j P_{ij} W h_j + b\), the same in full-graph layers and in a batch's, whose inputs hold each
    query's k rows. With k at least every row's support it is the K steps over all the graph's edges exactly;
    sampling does not touch it. `steps` and `teleport` then describe the rows, which the train stage computes.

    Args:
        hidden: feature width D (in and out).
        steps: propagation steps K >= 1.
        teleport: teleport probability alpha in [0, 1) back to z_0 at each step.
        top_k: the width k of the layers' `PropagationRows` to propagate through (None: the K steps run over
            the layer's kept graph edges).
        graph_edge_type: the edge type code of the input graph's own edges.

    Shapes:
        h [K, D] layer input, query_h [Q, D] its query rows, graph_degree [K] real graph in-degree of each
        input row -> [Q, D]; with `top_k` the layer's `propagation` rows [Q, k].
    """

    def __init__(self, hidden: int, steps: int, teleport: float, top_k: int | None = None,
                 graph_edge_type: int = 0) -> None:
        if steps < 1 or not 0.0 <= teleport < 1.0:
            raise ValueError(f"need steps >= 1 and 0 <= teleport < 1, got steps={steps}, teleport={teleport}")
        if top_k is not None and top_k < 1:
            raise ValueError(f"top_k must be None or >= 1, got {top_k}")
        super().__init__(hidden, graph_edge_type)  # GCNConv's parameters, initialised as GCNConv's
        self.steps, self.teleport, self.top_k = steps, teleport, top_k

    def forward(self, h: Tensor, query_h: Tensor, layer: SampledLayer | FullLayer, graph_degree: Tensor) -> Tensor:
        if self.top_k is not None:
            return self._propagate_top_k(h, query_h.shape[0], layer)
        source, target, kept = graph_edges(layer, query_h.shape[0], self.graph_edge_type)  # [E'], [E'], [Q]
        rows = query_rows(h, layer)  # [Q]
        weight, query_root = gcn_weights(graph_degree, rows, source, target, kept, h.dtype)  # [E'], [Q]
        projected = self.lin(h)  # [K, D] z_0
        every_row = isinstance(layer, FullLayer) or layer.queries_are_input_rows(h.shape[0])
        if self.steps > 1 and not every_row:
            raise ValueError(f"the appnp branch's {self.steps} propagation steps need a full-graph layer (every "
                             "input row a query); Algorithm 2's batches give one hop per layer")
        # (1 - alpha) folded into the edge and self-loop weights, and no row selection where queries are
        # the input rows: index_add_ (a scatter) is most of the K steps' time on CPU, and the backward of
        # indexing or of a selection is one more; index_select's is about half of indexing's
        edge_weight = ((1 - self.teleport) * weight).unsqueeze(1)  # [E', 1]
        own_weight = ((1 - self.teleport) * query_root.square()).unsqueeze(1)  # [Q, 1]
        teleported = self.teleport * (projected if every_row else projected.index_select(0, rows))  # [Q, D]
        propagated = projected
        for _ in range(self.steps):  # z <- (1 - alpha) Â z + alpha z_0
            own = propagated if every_row else propagated.index_select(0, rows)  # [Q, D]
            propagated = sum_messages(propagated, source, target, edge_weight,
                                      torch.addcmul(teleported, own, own_weight))  # [Q, D]
        return propagated + self.bias

    def _propagate_top_k(self, h: Tensor, num_queries: int, layer: SampledLayer | FullLayer) -> Tensor:
        """The K steps as one hop over the layer's top-k rows: sum_j P_ij W h_j + b -> [Q, D]."""
        rows = layer.propagation
        if rows is None or rows.neighbours.shape != (num_queries, self.top_k):
            found = None if rows is None else tuple(rows.neighbours.shape)
            raise ValueError(f"the appnp branch's top-{self.top_k} propagation needs the layer's propagation rows "
                             f"[{num_queries}, {self.top_k}] (LayerSampler's `propagation`), found {found}")
        projected = self.lin(h)  # [K, D] z_0
        target = torch.arange(num_queries, device=h.device).repeat_interleave(self.top_k)  # [Q * k]
        weight = rows.weights.reshape(-1, 1).to(h.dtype)  # [Q * k, 1]
        return sum_messages(projected, rows.neighbours.reshape(-1), target, weight,
                            projected.new_zeros((num_queries, projected.shape[1]))) + self.bias

    def extra_repr(self) -> str:
        return f"steps={self.steps}, teleport={self.teleport}" + (f", top_k={self.top_k}" if self.top_k else "")
