"""Spexphormer: the wide network, trained on per-layer sparse graphs sampled from the estimator's scores."""

from __future__ import annotations

from torch import Tensor, nn

from sgt_core.layers import FullLayer, SampledLayer
from sgt_core.models.deep_norm import DeepNorm
from sgt_core.models.dropout import Dropout
from sgt_core.models.feed_forward import FeedForward
from sgt_core.models.local import local_branch
from sgt_core.models.node_encoder import NodeEncoder, NodeExtras
from sgt_core.models.readout import GraphReadout, GraphRows, prediction_head
from sgt_core.models.sampled_attention import SampledAttention


class SpexphormerLayer(nn.Module):
    """Sampled attention, optionally a local message-passing branch, and (by default) a feed-forward block.

    Each branch has its own dropout, residual and normalisation. With `local` the layer is GraphGPS's
    (Rampasek et al., 2022; Exphormer's best configurations): h = Norm(x + Attn(x)) + Norm(x + MPNN(x)),
    then Norm(h + FFN(h)); with `feed_forward=False` the layer ends at h. Spexphormer (section 3) drops the
    MPNN for scalability; here it runs over the graph edges the layer keeps, so it costs O(kept edges)
    like the attention.

    The residuals are normalised by batch norm (Spexphormer D.1), or with `deepnorm` by DeepNorm
    (DeepNet, Wang et al., 2022, as used by DeepGraph): x <- LN(alpha * x + G(x)), alpha = (2L)^(1/4),
    with the value, output and feed-forward weights initialised smaller (beta = (8L)^(-1/4)) so that deep
    stacks train stably.
    """

    def __init__(self, attention: SampledAttention, dropout: float, deepnorm: bool = False,
                 num_layers: int = 1, local: nn.Module | None = None,
                 feed_forward: bool = True) -> None:
        super().__init__()
        hidden = attention.hidden
        self.attention = attention
        self.local = local
        self.feed_forward = FeedForward(hidden, dropout) if feed_forward else None
        self.dropout = Dropout(dropout)
        self.local_dropout = Dropout(dropout) if local is not None else None
        norm = (lambda: DeepNorm(hidden, num_layers)) if deepnorm else (lambda: nn.BatchNorm1d(hidden))
        # Batch norm rather than layer norm in the final network (Spexphormer D.1).
        self.norm_attention: nn.Module = norm()
        self.norm_local: nn.Module | None = norm() if local is not None else None
        self.norm_feed_forward: nn.Module | None = norm() if feed_forward else None
        self.deepnorm = deepnorm
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.attention.reset_parameters()
        for module in (*(self.feed_forward or ()), self.norm_attention, self.norm_feed_forward, self.local,
                       self.norm_local):
            if hasattr(module, "reset_parameters"):
                module.reset_parameters()
        if self.deepnorm:
            # DeepNet's init: queries and keys Xavier with gain 1, the rest of the residual branch gain beta.
            for linear in (self.attention.query, self.attention.key):
                nn.init.xavier_normal_(linear.weight)
                nn.init.zeros_(linear.bias)
            attention = self.attention
            feed_forward = () if self.feed_forward is None else (self.feed_forward[0], self.feed_forward[3])
            for linear in (attention.value, attention.out, *feed_forward):
                self.norm_attention.init_sublayer_(linear)

    def forward(self, h: Tensor, layer: SampledLayer | FullLayer, graph_degree: Tensor | None = None) -> Tensor:
        """h [K, D] the layer's input rows, graph_degree [K] their real graph in-degrees (the local
        branch's) -> [Q, D]."""
        if isinstance(layer, FullLayer):
            query_h = h  # [N, D]
            attended = self.attention.forward_full(h, layer.edge_index, layer.edge_type, layer.in_degree,
                                                   layer.edge_spd, layer.edge_attr, layer.edge_features)
        else:
            # every input row, in order (full-graph layers): no [N, D] copy for autograd to keep
            query_h = h if layer.queries_are_input_rows(h.shape[0]) else h[layer.queries]  # [Q, D]
            attended = self.attention(query_h, h, layer.neighbours, layer.neighbour_type, layer.neighbour_mask,
                                      layer.neighbour_spd, layer.neighbour_attr, layer.neighbour_features)
        out = self._normed(self.norm_attention, query_h, self.dropout(attended))  # [Q, D]
        if self.local is not None:
            if graph_degree is None:
                raise ValueError("the local branch needs each input row's graph degree (graph_degree is None)")
            local = self.local(h, query_h, layer, graph_degree)  # [Q, D]
            out = out + self._normed(self.norm_local, query_h, self.local_dropout(local))  # [Q, D]
        if self.feed_forward is None:
            return out
        return self._normed(self.norm_feed_forward, out, self.dropout(self.feed_forward(out)))  # [Q, D]

    def _normed(self, norm: nn.Module, residual: Tensor, update: Tensor) -> Tensor:
        """norm(residual + update); DeepNorm scales the residual itself."""
        return norm(residual, update) if self.deepnorm else norm(residual + update)


class Spexphormer(nn.Module):
    """The wide network (Spexphormer section 4): several heads, fixed degree per layer, batch norm.

    Args:
        num_outputs: output columns: classes, or tasks (multi-label, regression).
        hidden: hidden width D.
        num_layers: attention layers L (as many as the estimator).
        heads: attention heads.
        num_edge_types: edge types of the interaction graph.
        dropout: dropout probability.
        input_dropout: dropout on the raw node features before the input layer, as GCN and GAT do on
            sparse bag-of-words features (Cora, CiteSeer); 0 leaves them whole.
        deepnorm: DeepNorm residuals (DeepGraph) instead of batch norm, for deep stacks.
        num_spd_buckets: SPD buckets of anchor/k-hop edges (0: no SPD terms), see `SampledAttention`.
        local: the local branch of every layer, `none` or a class of `sgt_core.models.local`: `gcn`
            (`GCNBranch`), `sage` (`SAGEBranch`), `gatv2` (`GATv2Branch`), `appnp` (`APPNPBranch`) or `gine`
            (`GINEBranch`, reading the edges' feature codes and continuous features); gatv2 reads the
            continuous features too.
        local_aggregation: the sage branch's aggregation, mean or sum.
        local_steps: the appnp branch's K steps (`APPNPBranch`'s `steps`); None for the other branches.
        local_teleport: the appnp branch's teleport alpha (`APPNPBranch`'s `teleport`); None for the other
            branches.
        local_top_k: the appnp branch's propagation through the layers' top-k rows of that width
            (`APPNPBranch`'s `top_k`; the layers must carry them); None: over the kept graph edges.
        degree_signal: adds W log(1 + n_v) to every node's input encoding, n_v its real graph degree: a
            softmax average over neighbours cannot tell how many there are, this can.
        graph_edge_type: the edge type code of the input graph's own edges (the local branch's).
        feed_forward: each layer's feed-forward block; False ends every layer at its branches' sum.
        num_edge_attr_codes: categorical edge-feature codes (0: none), read by the attention and by gine.
        edge_feature_dim: Fe, continuous edge-feature columns (0: none), read by the attention (W_E f, W_B f,
            see `SampledAttention`) and by gine (a linear map added to the code embedding).
        readout: None for node tasks (a linear head per node), else how each graph's rows are pooled
            (`GraphReadout`: mean, sum, virtual, attention) before GraphGPS's MLP head.
        **encoder (Any): the input layer's arguments but its width, as in `AttentionScoreEstimator`.

    Shapes:
        x [N0, F], node_kind [N0] and extras for the first layer's input rows; `layers` maps them down to
        the last layer's queries -> outputs [Q_L, C], or with a readout and `rows` [B, C] per graph. The
        local branch and the degree signal read `extras.graph_degree`.
    """

    def __init__(self, num_outputs: int, hidden: int, num_layers: int, heads: int, num_edge_types: int,
                 dropout: float = 0.0, deepnorm: bool = False, num_spd_buckets: int = 0, local: str = "none",
                 local_aggregation: str = "mean", local_steps: int | None = None,
                 local_teleport: float | None = None, local_top_k: int | None = None, degree_signal: bool = False,
                 graph_edge_type: int = 0,
                 input_dropout: float = 0.0, feed_forward: bool = True, num_edge_attr_codes: int = 0,
                 edge_feature_dim: int = 0, readout: str | None = None, **encoder) -> None:
        super().__init__()
        self.input_dropout = Dropout(input_dropout)
        self.encoder = NodeEncoder(hidden=hidden, **encoder)
        self.degree_encoder = nn.Linear(1, hidden) if degree_signal else None
        self.layers = nn.ModuleList(
            SpexphormerLayer(
                SampledAttention(hidden, heads, num_edge_types, num_spd_buckets, num_edge_attr_codes,
                                 edge_feature_dim), dropout,
                deepnorm, num_layers,
                local_branch(local, hidden, heads, graph_edge_type, local_aggregation, local_steps, local_teleport,
                             local_top_k, num_edge_attr_codes, edge_feature_dim),
                feed_forward,
            )
            for _ in range(num_layers)
        )
        self.readout = GraphReadout(readout, hidden) if readout is not None else None
        self.head = prediction_head(hidden, num_outputs, readout is not None)

    @property
    def needs_graph_degree(self) -> bool:
        return self.degree_encoder is not None or self.layers[0].local is not None

    def forward(
        self,
        x: Tensor,
        node_kind: Tensor,
        layers: list[SampledLayer | FullLayer],
        extras: NodeExtras | None = None,
        rows: GraphRows | None = None,
    ) -> Tensor:
        """-> [Q_L, C] per output row, or [B, C] per graph of `rows` with a readout."""
        if len(layers) != len(self.layers):
            raise ValueError(f"expected {len(self.layers)} sampled layers, got {len(layers)}")
        graph_degree = None  # [N0], carried down the layers only when something reads it
        if self.needs_graph_degree:
            graph_degree = extras.graph_degree if extras is not None else None
            if graph_degree is None:
                raise ValueError("the local branch and the degree signal need extras.graph_degree, which is None")
        h = self.encoder(self.input_dropout(x), node_kind, extras)  # [N0, D]
        if self.degree_encoder is not None:
            h = h + self.degree_encoder(graph_degree.to(h.dtype).log1p().unsqueeze(1))  # [N0, D]
        for block, layer in zip(self.layers, layers):
            h = block(h, layer, graph_degree)  # [Q_l, D]
            if graph_degree is not None and isinstance(layer, SampledLayer):
                graph_degree = graph_degree.index_select(0, layer.queries)  # [Q_l]: the next layer's input rows
        if self.readout is not None:
            if rows is None:
                raise ValueError("a graph-level network needs each output row's graph (rows is None)")
            h = self.readout(h, rows)  # [B, D]
        return self.head(h)  # [Q_L, C] or [B, C]
