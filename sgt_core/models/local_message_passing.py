"""LocalMessagePassing: the GraphGPS local branch (GCN, GraphSAGE or GATv2) over a layer's kept graph edges."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from sgt_core.layers import FullLayer, SampledLayer

LOCAL_KINDS: tuple[str, ...] = ("none", "gcn", "sage", "gatv2")
SAGE_AGGREGATIONS: tuple[str, ...] = ("mean", "sum")


class LocalMessagePassing(nn.Module):
    r"""A message-passing layer over the input graph's own edges among those a layer keeps (GraphGPS's MPNN).

    The math and the parameters (names, shapes, glorot init) are those of PyG's `GCNConv`, `SAGEConv` and
    `GATv2Conv`, whose state dicts load into `self.conv` and back, and tests/models/test_local_message_passing.py
    checks the outputs against PyG's layers. They are written out in plain torch rather than called: importing
    torch_geometric imports torch._dynamo, ~1.3 s and ~160 MB in every train stage process, and GCN and sums
    need per-target weights (below) that the layers cannot take. What differs is where the edges come from. A layer's pattern holds every kind of interaction edge (expander,
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
      With `steps` K > 1 or a `teleport` alpha > 0 it is APPNP's propagation (Gasteiger et al., 2019) of
      z_0 = W x over the layer's kept graph edges: :math:`z_{k+1} = (1 - \alpha) \hat A z_k + \alpha z_0`,
      output :math:`z_K + b` (`APPNP(K, alpha)` after `GCNConv`'s linear map); K = 1 with alpha = 0 is
      the one GCN hop above. Hops after the first need every input row as a query, so K > 1 runs in
      full-graph layers only (Algorithm 2's batches sample one hop per layer), unless `top_k` is set.
      With `top_k` k the K steps are one hop over the layer's `PropagationRows` (PPRGo, Bojchevski et
      al., 2020): each query's k largest entries of the K-step operator over the whole graph
      (`sgt_core.sampling.propagation.appnp_top_k`), :math:`\sum_j P_{ij} W x_j + b`, the same in
      full-graph layers and in a batch's, whose inputs hold each query's k rows. With k at least every
      row's support it is the K steps over all the graph's edges exactly; sampling does not touch it.
    - sage: :math:`W_1 x_i + W_2\, \mathrm{agg}_{j \in N(i)} x_j`, agg `mean` or `sum` (`SAGEConv`); a sum
      counts neighbours, which a mean and attention's softmax cannot.
    - gatv2: `GATv2Conv` with `heads` heads concatenated, over N(i) and i itself; with `edge_feature_dim`
      Fe > 0, `GATv2Conv(edge_dim=Fe)`: W_e f_ji joins the scores inside the LeakyReLU, and i's own edge
      takes the mean of its kept graph edges' features (PyG's self-loops, fill_value="mean"; with every
      neighbour kept it is PyG's). gcn and sage have no use for edge features (GCNConv takes one scalar
      weight per edge, SAGEConv none) and ignore them.

    Args:
        kind: gcn, sage or gatv2.
        hidden: feature width D (in and out).
        heads: GATv2's heads (D must divide by them).
        aggregation: sage's aggregation, mean or sum.
        graph_edge_type: the edge type code of the input graph's own edges.
        steps: gcn's propagation steps K (1: one hop).
        teleport: gcn's teleport probability alpha back to z_0 at each step (0: none).
        top_k: gcn's propagation through the layer's top-k `PropagationRows` of that width (None: the steps
            run over the layer's kept graph edges).
        edge_feature_dim: Fe, continuous edge-feature columns, which gatv2 reads (0: none).

    Shapes:
        h [K, D] layer input, query_h [Q, D] its query rows, graph_degree [K] real graph in-degree of each
        input row -> [Q, D].
    """

    def __init__(self, kind: str, hidden: int, heads: int, aggregation: str = "mean",
                 graph_edge_type: int = 0, steps: int = 1, teleport: float = 0.0, top_k: int | None = None,
                 edge_feature_dim: int = 0) -> None:
        super().__init__()
        if kind not in LOCAL_KINDS[1:]:
            raise ValueError(f"local branch kind must be one of {', '.join(LOCAL_KINDS[1:])}, got {kind!r}")
        if aggregation not in SAGE_AGGREGATIONS:
            raise ValueError(f"aggregation must be one of {', '.join(SAGE_AGGREGATIONS)}, got {aggregation!r}")
        if kind == "gatv2" and hidden % heads:
            raise ValueError(f"hidden width {hidden} is not divisible by {heads} heads")
        if (steps, teleport) != (1, 0.0) and kind != "gcn":
            raise ValueError(f"propagation steps and teleport apply to the gcn branch only, not {kind!r}")
        if steps < 1 or not 0.0 <= teleport < 1.0:
            raise ValueError(f"need steps >= 1 and 0 <= teleport < 1, got steps={steps}, teleport={teleport}")
        if top_k is not None and (kind != "gcn" or top_k < 1):
            raise ValueError(f"top-k propagation rows are the gcn branch's, with top_k >= 1; got {kind!r}, {top_k}")
        self.steps, self.teleport, self.top_k = steps, teleport, top_k
        self.kind, self.aggregation, self.graph_edge_type = kind, aggregation, graph_edge_type
        self.heads = heads if kind == "gatv2" else 1
        self.conv = _ConvParameters(kind, hidden, self.heads, edge_feature_dim if kind == "gatv2" else 0)

    def reset_parameters(self) -> None:
        self.conv.reset_parameters()

    def forward(self, h: Tensor, query_h: Tensor, layer: SampledLayer | FullLayer, graph_degree: Tensor) -> Tensor:
        if self.top_k is not None:
            return self._propagate_top_k(h, query_h.shape[0], layer)
        source, target, kept = self.graph_edges(layer, query_h.shape[0])  # [E'], [E'], [Q]
        query_rows = torch.arange(h.shape[0], device=h.device) if isinstance(layer, FullLayer) else layer.queries
        real = graph_degree.index_select(0, query_rows).to(h.dtype)  # [Q] n_i
        if self.kind == "gatv2":  # over N(i) and i itself, as PyG's layer with its self-loops
            features = self._self_edge_features(layer, target, kept)  # [E' + Q, Fe] or None
            return self._gatv2(h, query_h, *_with_self_edges(source, target, query_rows), features)
        # n_i / s_i: the sampled sum's correction (1 where every neighbour is kept)
        correction = real / kept.clamp_min(1).to(h.dtype)  # [Q]
        if self.kind == "gcn":
            degree_root = (graph_degree.to(h.dtype) + 1).rsqrt()  # [K] 1 / sqrt(d_j)
            query_root = (real + 1).rsqrt()  # [Q] 1 / sqrt(d_i)
            weight = correction[target] * query_root[target] * degree_root[source]  # [E']
            projected = self.conv.lin(h)  # [K, D] z_0
            if self.steps == 1 and not self.teleport:  # one GCN hop
                neighbours = _sum_messages(projected, source, target, weight.unsqueeze(1),
                                           projected.new_zeros(query_h.shape))  # [Q, D]
                own = projected.index_select(0, query_rows) * query_root.square().unsqueeze(1)  # [Q, D] self-loop
                return neighbours + own + self.conv.bias
            every_row = isinstance(layer, FullLayer) or layer.queries_are_input_rows(h.shape[0])
            if self.steps > 1 and not every_row:
                raise ValueError(f"the gcn branch's {self.steps} propagation steps need a full-graph layer (every "
                                 "input row a query); Algorithm 2's batches give one hop per layer")
            # (1 - alpha) folded into the edge and self-loop weights, and no row selection where queries are
            # the input rows: index_add_ (a scatter) is most of the K steps' time on CPU, and the backward of
            # indexing or of a selection is one more; index_select's is about half of indexing's
            edge_weight = ((1 - self.teleport) * weight).unsqueeze(1)  # [E', 1]
            own_weight = ((1 - self.teleport) * query_root.square()).unsqueeze(1)  # [Q, 1]
            teleported = self.teleport * (projected if every_row else projected.index_select(0, query_rows))
            propagated = projected
            for _ in range(self.steps):  # z <- (1 - alpha) Â z + alpha z_0
                own = propagated if every_row else propagated.index_select(0, query_rows)  # [Q, D]
                propagated = _sum_messages(propagated, source, target, edge_weight,
                                           torch.addcmul(teleported, own, own_weight))  # [Q, D]
            return propagated + self.conv.bias
        summed = _sum_messages(h, source, target, None, h.new_zeros(query_h.shape))  # [Q, D]
        # mean: over the kept neighbours (0 where there are none, as in PyG); sum: n_i times that mean
        scale = 1 / kept.clamp_min(1).to(h.dtype) if self.aggregation == "mean" else correction  # [Q]
        return self.conv.lin_l(summed * scale.unsqueeze(1)) + self.conv.lin_r(query_h)

    def _propagate_top_k(self, h: Tensor, num_queries: int, layer: SampledLayer | FullLayer) -> Tensor:
        """The K steps as one hop over the layer's top-k rows: sum_j P_ij W h_j + b -> [Q, D]."""
        rows = layer.propagation
        if rows is None or rows.neighbours.shape != (num_queries, self.top_k):
            found = None if rows is None else tuple(rows.neighbours.shape)
            raise ValueError(f"the gcn branch's top-{self.top_k} propagation needs the layer's propagation rows "
                             f"[{num_queries}, {self.top_k}] (LayerSampler's `propagation`), found {found}")
        projected = self.conv.lin(h)  # [K, D] z_0
        target = torch.arange(num_queries, device=h.device).repeat_interleave(self.top_k)  # [Q * k]
        weight = rows.weights.reshape(-1, 1).to(h.dtype)  # [Q * k, 1]
        return _sum_messages(projected, rows.neighbours.reshape(-1), target, weight,
                             projected.new_zeros((num_queries, projected.shape[1]))) + self.conv.bias

    def _self_edge_features(self, layer: SampledLayer | FullLayer, target: Tensor, kept: Tensor) -> Tensor | None:
        """The kept graph edges' continuous features, then each query's own edge's, the mean of its kept
        edges' (0 without any): [E' + Q, Fe], in `_with_self_edges`' order; None where gatv2 reads none."""
        if self.conv.lin_edge is None:
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
        dtype = self.conv.lin_edge.weight.dtype
        sums = features.new_zeros((kept.numel(), features.shape[1]), dtype=dtype).index_add_(0, target,
                                                                                                features.to(dtype))
        return torch.cat([features.to(dtype), sums / kept.clamp_min(1).unsqueeze(1).to(dtype)])

    def _gatv2(self, h: Tensor, query_h: Tensor, source: Tensor, target: Tensor,
               edge_features: Tensor | None = None) -> Tensor:
        """GATv2Conv (concatenated heads, LeakyReLU slope 0.2) from input rows to queries; `edge_features`
        [E', Fe] join the scores through lin_edge as GATv2Conv(edge_dim) adds them."""
        heads, num_queries = self.heads, query_h.shape[0]
        source_h = self.conv.lin_l(h).view(h.shape[0], heads, -1)  # [K, H, C]
        query_proj = self.conv.lin_r(query_h).view(num_queries, heads, -1)  # [Q, H, C]
        messages = source_h.index_select(0, source)  # [E', H, C]
        pre = messages + query_proj.index_select(0, target)  # [E', H, C]
        if edge_features is not None:
            pre = pre + self.conv.lin_edge(edge_features).view(pre.shape)
        scores = (F.leaky_relu(pre, 0.2) * self.conv.att).sum(-1)  # [E', H]
        # softmax over each query's edges; the per-query max is a constant there, so no gradient through it
        largest = torch.full((num_queries, heads), float("-inf"), dtype=scores.dtype, device=scores.device)
        largest = largest.scatter_reduce(0, target.unsqueeze(1).expand(-1, heads), scores.detach(), "amax")
        weights = (scores - largest.index_select(0, target)).exp()  # [E', H]
        totals = _sum_by_target(weights, target, num_queries)  # [Q, H]; every query has its self edge
        attention = weights / totals.index_select(0, target)  # [E', H]
        out = _sum_by_target(messages * attention.unsqueeze(-1), target, num_queries)  # [Q, H, C]
        return out.reshape(num_queries, -1) + self.conv.bias

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
        propagation = f", steps={self.steps}, teleport={self.teleport}" if self.kind == "gcn" else ""
        propagation += f", top_k={self.top_k}" if self.top_k is not None else ""
        return f"kind={self.kind}" + (f", aggregation={self.aggregation}" if self.kind == "sage" else "") + propagation


class _ConvParameters(nn.Module):
    """The parameters of PyG's layer of `kind`, by its names and shapes, so that state dicts load both ways.

    gcn: `lin` (no bias) and `bias`; sage: `lin_l` (bias) on the neighbours, `lin_r` (no bias) on the node;
    gatv2: `lin_l`, `lin_r` (both with bias), `att` [1, H, C] and `bias`, and with edge features `lin_edge`
    (Fe -> D, no bias).
    """

    def __init__(self, kind: str, hidden: int, heads: int, edge_dim: int = 0) -> None:
        super().__init__()
        self.kind = kind
        if kind == "gcn":
            self.lin = nn.Linear(hidden, hidden, bias=False)
            self.bias = nn.Parameter(torch.empty(hidden))
        elif kind == "sage":
            self.lin_l = nn.Linear(hidden, hidden)
            self.lin_r = nn.Linear(hidden, hidden, bias=False)
        else:
            self.lin_l = nn.Linear(hidden, hidden)
            self.lin_r = nn.Linear(hidden, hidden)
            self.att = nn.Parameter(torch.empty(1, heads, hidden // heads))
            self.bias = nn.Parameter(torch.empty(hidden))
        self.lin_edge = nn.Linear(edge_dim, hidden, bias=False) if edge_dim > 0 else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """PyG's initialisation: sage's layers as nn.Linear's; gcn's and gatv2's weights glorot, biases zero."""
        if self.kind == "sage":
            self.lin_l.reset_parameters()
            self.lin_r.reset_parameters()
            return
        for linear in self.children():
            if linear is not self.lin_edge:
                nn.init.xavier_uniform_(linear.weight)
                if linear.bias is not None:
                    nn.init.zeros_(linear.bias)
        if self.kind == "gatv2":
            nn.init.xavier_uniform_(self.att)
        if self.lin_edge is not None:  # last: the other weights draw as they do without edge features
            nn.init.xavier_uniform_(self.lin_edge.weight)
        nn.init.zeros_(self.bias)


def _sum_messages(x: Tensor, source: Tensor, target: Tensor, weight: Tensor | None, into: Tensor) -> Tensor:
    """Adds the messages weight_e * x[source_e] into their targets' rows of `into` (in place) -> into [Q, D].

    The same sum as `_sum_by_target(x[source] * weight, ...)`, for edge weights that take no gradient (the
    graph's normalisation). Autograd's index_add_ keeps its whole [E', D] message tensor for the backward
    pass, one per layer and per propagation step (ten steps took the train stage at 10^6 nodes past
    20 GB); `_MessageSum` keeps only the indices and weights, which the gather and the product keep anyway.

    x's gradient is scattered with index_add_, which sums each row's terms in edge order on CPU at any
    thread count, so training is bit-reproducible there. Autograd's backward of indexing (`x[source]`,
    which the one-hop branches used before) is an accumulating index_put_: on one thread the very same
    sums, bit for bit, but on several its order changes from run to run (on two threads every repeat
    differed in the last bits, and `sgt run`'s default model ended a few 1e-6 apart), and it took 2.6x
    index_add_'s time.
    """
    return _MessageSum.apply(x, into, source, target, weight)


class _MessageSum(torch.autograd.Function):
    """`_sum_messages`: gradients for x and into only; saves source, target and weight, never the messages."""

    @staticmethod
    def forward(ctx, x: Tensor, into: Tensor, source: Tensor, target: Tensor, weight: Tensor | None) -> Tensor:
        if weight is not None and weight.requires_grad:
            raise ValueError("_sum_messages takes fixed edge weights; these require a gradient")
        messages = x.index_select(0, source)  # [E', D]
        if weight is not None:
            messages = messages * weight
        ctx.save_for_backward(source, target, weight)
        ctx.num_rows = x.shape[0]
        ctx.mark_dirty(into)  # summed in place, as before: no [Q, D] copy per layer and step
        return into.index_add_(0, target, messages)

    @staticmethod
    def backward(ctx, grad: Tensor):
        source, target, weight = ctx.saved_tensors
        grad_x = None
        if ctx.needs_input_grad[0]:
            grad_messages = grad.index_select(0, target)  # [E', D]
            if weight is not None:
                grad_messages = grad_messages * weight
            grad_x = grad.new_zeros((ctx.num_rows, *grad.shape[1:])).index_add_(0, source, grad_messages)  # [K, D]
        grad_into = grad if ctx.needs_input_grad[1] else None
        return grad_x, grad_into, None, None, None


def _sum_by_target(values: Tensor, target: Tensor, num_targets: int) -> Tensor:
    """values [E, ...] summed into their targets' rows -> [num_targets, ...]."""
    return values.new_zeros((num_targets, *values.shape[1:])).index_add_(0, target, values)


def _with_self_edges(source: Tensor, target: Tensor, query_rows: Tensor) -> tuple[Tensor, Tensor]:
    """The edges plus query q's own input row -> q, for every query."""
    queries = torch.arange(query_rows.numel(), device=query_rows.device)
    return torch.cat([source, query_rows]), torch.cat([target, queries])
