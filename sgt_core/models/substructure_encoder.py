"""SubstructureEncoder: substructure tokens' input features (DeepGraph)."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["SubstructureEncoder"]


class SubstructureEncoder(nn.Module):
    r"""Initial feature of each substructure token from its DFS-ordered adjacency and its type.

    DeepGraph (Zhao et al., "Are More Layers Beneficial to Graph Transformers?", ICLR 2023, section 5.2
    and Appendix E) encodes a substructure token by its induced adjacency matrix written in a
    degree-ordered DFS order, ``a_t = vec(pi(A_t^S))`` (see
    `sgt_core.preprocess.substructures.dfs_encoding.dfs_adjacency_encodings`; the paper pools over DFS orders, here
    one deterministic order is used). This module is the encoder ``g_s``, a 2-layer MLP, with a learned
    embedding ``E`` of the substructure type added to the first layer:

    \[
    h_t = W_2\,\mathrm{GELU}\big(W_1 a_t + b_1 + E_{\tau_t}\big) + b_2
    \]

    Args:
        max_size: side K of the padded adjacency matrix (the input has K * K columns).
        num_types: number of substructure types (``len(SUBSTRUCTURE_TYPES)``).
        hidden: output width D.

    Shapes:
        adjacency float [T, K * K], type_id int64 [T] -> [T, D].
    """

    def __init__(self, max_size: int, num_types: int, hidden: int) -> None:
        super().__init__()
        self.max_size, self.num_types, self.hidden = max_size, num_types, hidden
        self.adjacency = nn.Linear(max_size * max_size, hidden)  # W_1, b_1
        self.type_embedding = nn.Embedding(num_types, hidden)  # E
        self.out = nn.Linear(hidden, hidden)  # W_2, b_2
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.adjacency.reset_parameters()
        self.out.reset_parameters()
        nn.init.normal_(self.type_embedding.weight, std=0.02)

    def forward(self, adjacency: Tensor, type_id: Tensor) -> Tensor:
        expected = self.max_size * self.max_size
        if adjacency.dim() != 2 or adjacency.shape[1] != expected:
            raise ValueError(
                f"SubstructureEncoder expects adjacency of shape [T, {expected}] (max_size={self.max_size}); "
                f"got {tuple(adjacency.shape)}"
            )
        if type_id.shape != adjacency.shape[:1]:
            raise ValueError(
                f"SubstructureEncoder expects type_id of shape [{adjacency.shape[0]}]; "
                f"got {tuple(type_id.shape)}"
            )
        h = self.adjacency(adjacency.float()) + self.type_embedding(type_id)  # [T, D]
        return self.out(F.gelu(h))  # [T, D]
