"""NodeEncoder: the input layer both networks share: features (+ SAN's LPE), node kinds, token encodings."""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch
from torch import Tensor, nn

from sgt_core.models.lpe import LearnedPositionalEncoding
from sgt_core.models.substructure_encoder import SubstructureEncoder


@dataclass(frozen=True)
class NodeExtras:
    """Per-node inputs beyond features and node kinds, for the rows a forward pass computes.

    Attributes:
        eigenvalues: float32 [N, m] Laplacian eigenvalues per row (the LPE's input).
        eigenvectors: float32 [N, m] each row's entries of those eigenvectors (the LPE's input).
        eigen_mask: bool [N, m] False on padding and on added nodes.
        token_rows: int64 [T] the rows that are substructure tokens.
        token_adjacency: float32 [T, s*s] those tokens' DFS-ordered adjacency, in `token_rows` order.
        token_type: int64 [T] their substructure types.
        graph_degree: int64 [N] each row's real neighbour count: its incoming edges of the input graph
            (the wide network's local branch and degree signal).
        categorical: int64 [N, C] each row's categorical features (atom types), -1 on added nodes.

    Each group is None when its component is off.
    """

    eigenvalues: Tensor | None = None
    eigenvectors: Tensor | None = None
    eigen_mask: Tensor | None = None
    token_rows: Tensor | None = None
    token_adjacency: Tensor | None = None
    token_type: Tensor | None = None
    graph_degree: Tensor | None = None
    categorical: Tensor | None = None

    @classmethod
    def from_graph(cls, graph, token_kind: int, graph_edge_type: int | None = None) -> NodeExtras:
        """Every node of an `InteractionGraph`; `token_kind` is the node kind of substructure tokens, and
        `graph_edge_type` (None: no `graph_degree`) the edge type of the input graph's own edges."""
        lpe = graph.eigenvalues.shape[1] > 0
        tokens = graph.token_type.numel() > 0
        if graph_edge_type is not None:
            targets = graph.edge_index[1][graph.edge_type == graph_edge_type].long()  # [E_graph]
            graph_degree = torch.bincount(targets, minlength=graph.num_nodes)  # [N]
        else:
            graph_degree = None
        return cls(
            graph_degree=graph_degree,
            categorical=graph.x_cat if graph.x_cat.shape[1] else None,
            eigenvalues=graph.eigenvalues if lpe else None,
            eigenvectors=graph.eigenvectors if lpe else None,
            eigen_mask=graph.eigen_mask if lpe else None,
            token_rows=(graph.node_kind == token_kind).nonzero().flatten() if tokens else None,
            token_adjacency=graph.token_adjacency if tokens else None,
            token_type=graph.token_type if tokens else None,
        )

    def select(self, rows: Tensor) -> NodeExtras:
        """The extras of `rows` (int64 [R] row ids, e.g. a batch's input nodes), renumbered 0..R-1."""
        per_row = {}  # the extras with one row per node, selected alike
        if self.eigenvalues is not None:
            per_row = {"eigenvalues": self.eigenvalues[rows], "eigenvectors": self.eigenvectors[rows],
                       "eigen_mask": self.eigen_mask[rows]}  # [R, m] each
        if self.graph_degree is not None:
            per_row["graph_degree"] = self.graph_degree[rows]  # [R]
        if self.categorical is not None:
            per_row["categorical"] = self.categorical[rows]  # [R, C]
        if self.token_rows is None:
            return NodeExtras(**per_row)
        # token_rows is sorted (tokens are found in row order), so searchsorted finds each row's token.
        position = torch.searchsorted(self.token_rows, rows).clamp_max(self.token_rows.numel() - 1)  # [R]
        is_token = self.token_rows[position] == rows  # [R]
        which = position[is_token]  # [T'] token index of each selected token row
        return NodeExtras(**per_row, token_rows=is_token.nonzero().flatten(),
                          token_adjacency=self.token_adjacency[which], token_type=self.token_type[which])

    def to(self, device) -> NodeExtras:
        return NodeExtras(**{f.name: None if (t := getattr(self, f.name)) is None else t.to(device)
                             for f in fields(self)})


class NodeEncoder(nn.Module):
    r"""Initial node representations of the interaction graph, shared by the estimator and the wide network.

    \[
    h_v = \begin{cases}
        W\,[x_v \,\Vert\, \mathrm{LPE}(\lambda, \phi_v)] + b + \sum_c A^c_{x^c_v} + K_{\kappa_v} & \text{real, virtual} \\
        \mathrm{SubstructureEncoder}(a_v, \tau_v) + K_{\kappa_v} & \text{substructure tokens}
    \end{cases}
    \]

    K is a learned node-kind embedding (kind κ: real, virtual, substructure); A^c embeds the code of
    categorical column c (atom types, OGB's AtomEncoder: one table per column, summed), zero on added
    nodes (code -1). Without continuous features (F = 0) and LPE there is no W. The LPE (SAN, Kreuzer et al.,
    2021) is concatenated to the features before the linear encoder when `lpe_eigenpairs` and `lpe_dim`
    are both positive; added nodes have a fully masked spectrum, so their LPE is zero. Tokens (DeepGraph,
    Zhao et al., 2023) take the encoding of their substructure instead of the feature encoder.

    Args:
        in_features: node feature width F.
        hidden: output width D.
        num_node_kinds: node kinds (rows of K).
        lpe_eigenpairs: eigenpairs m per node in the input (0: no LPE).
        lpe_dim: LPE width k (0: no LPE).
        lpe_layers: layers of the LPE's Transformer encoder.
        lpe_heads: attention heads of the LPE's Transformer encoder.
        token_size: side s of the tokens' padded adjacency (0: no tokens).
        num_token_types: substructure types (rows of the token type embedding).
        categorical_sizes: the vocabulary of each categorical feature column (empty: none).

    Shapes:
        x [N, F], node_kind [N], extras with [N, m] spectra, [N, C] codes and T token rows -> [N, D].
    """

    def __init__(
        self,
        in_features: int,
        hidden: int,
        num_node_kinds: int,
        lpe_eigenpairs: int = 0,
        lpe_dim: int = 0,
        lpe_layers: int = 1,
        lpe_heads: int = 1,
        token_size: int = 0,
        num_token_types: int = 0,
        categorical_sizes: list[int] | tuple[int, ...] = (),
    ) -> None:
        super().__init__()
        use_lpe = lpe_eigenpairs > 0 and lpe_dim > 0
        width = in_features + (lpe_dim if use_lpe else 0)
        self.features = nn.Linear(width, hidden) if width else None
        # One table for all columns: column c's code k is row 1 + offset_c + k; row 0 (code -1) stays zero.
        sizes = torch.tensor([int(size) for size in categorical_sizes], dtype=torch.int64)
        self.register_buffer("categorical_offsets", torch.cat([sizes.new_zeros(1), sizes.cumsum(0)[:-1]]) + 1
                             if sizes.numel() else sizes, persistent=False)
        self.categorical = (nn.Embedding(int(sizes.sum()) + 1, hidden, padding_idx=0) if sizes.numel() else None)
        self.node_kind_embedding = nn.Embedding(num_node_kinds, hidden)
        self.lpe = (
            LearnedPositionalEncoding(lpe_eigenpairs, lpe_dim, lpe_layers, lpe_heads) if use_lpe else None
        )
        self.substructure = SubstructureEncoder(token_size, num_token_types, hidden) if token_size else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for module in (self.features, self.lpe, self.substructure):
            if module is not None:
                module.reset_parameters()
        if self.categorical is not None:  # OGB's AtomEncoder initialises its tables so
            nn.init.xavier_uniform_(self.categorical.weight)
            with torch.no_grad():
                self.categorical.weight[0].zero_()
        # Zero, not nn.Embedding's N(0, 1): a unit-normal vector shared by every real node swamps the
        # features' ~0.3-sized encoding, the layer norms then see nearly identical inputs everywhere, and
        # on Minesweeper the width-8 estimator of some seeds never left the loss plateau (val ROC-AUC
        # 0.61 for seed 0, against 0.88 with this init).
        nn.init.zeros_(self.node_kind_embedding.weight)

    def forward(self, x: Tensor, node_kind: Tensor, extras: NodeExtras | None = None) -> Tensor:
        extras = extras or NodeExtras()
        if self.lpe is not None:
            if extras.eigenvalues is None:
                raise ValueError("NodeEncoder has an LPE but got no eigenpairs (extras.eigenvalues is None)")
            positional = self.lpe(extras.eigenvalues, extras.eigenvectors, extras.eigen_mask)  # [N, k]
            x = torch.cat([x, positional], dim=1)  # [N, F + k]
        if self.features is not None:
            h = self.features(x)  # [N, D]
        else:
            h = x.new_zeros(x.shape[0], self.node_kind_embedding.embedding_dim)  # [N, D]
        if self.categorical is not None:
            if extras.categorical is None:
                raise ValueError("NodeEncoder has categorical embeddings but extras.categorical is None")
            codes = extras.categorical.long()  # [N, C]
            rows = torch.where(codes >= 0, codes + self.categorical_offsets, 0)  # [N, C]; -1 -> the zero row
            h = h + self.categorical(rows).sum(1)  # [N, D]
        if self.substructure is not None:
            if extras.token_rows is None:
                raise ValueError("NodeEncoder has a substructure encoder but extras.token_rows is None")
            tokens = self.substructure(extras.token_adjacency, extras.token_type)  # [T, D]
            h = h.index_copy(0, extras.token_rows, tokens)  # [N, D] token rows replaced
        return h + self.node_kind_embedding(node_kind)  # [N, D]
