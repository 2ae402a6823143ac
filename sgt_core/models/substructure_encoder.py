"""SubstructureEncoder: substructure tokens' input features, plus the DeepNorm residual (DeepGraph)."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["DeepNorm", "SubstructureEncoder", "deepnorm_constants", "deepnorm_residual"]


class SubstructureEncoder(nn.Module):
    r"""Initial feature of each substructure token from its DFS-ordered adjacency and its type.

    DeepGraph (Zhao et al., "Are More Layers Beneficial to Graph Transformers?", ICLR 2023, section 5.2
    and Appendix E) encodes a substructure token by its induced adjacency matrix written in a
    degree-ordered DFS order, ``a_t = vec(pi(A_t^S))`` (see
    `sgt_core.preprocess.substructures.dfs_adjacency_encodings`; the paper pools over DFS orders, here
    one deterministic order is used). This module is the encoder ``g_s``, a 2-layer MLP, with a learned
    embedding ``E`` of the substructure type added to the first layer:

    .. math::
        h_t = W_2\,\mathrm{GELU}\big(W_1 a_t + b_1 + E_{\tau_t}\big) + b_2

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


def deepnorm_constants(num_layers: int) -> tuple[float, float]:
    r"""DeepNorm's residual scale alpha and init scale beta for an encoder-only stack of N layers.

    DeepNet (Wang et al., 2022, "DeepNet: Scaling Transformers to 1,000 Layers"), used by DeepGraph
    (section 3.2): :math:`\alpha = (2N)^{1/4}`, :math:`\beta = (8N)^{-1/4}`, where N counts layers of one
    attention + one feed-forward sublayer each.
    """
    if num_layers < 1:
        raise ValueError(f"DeepNorm needs num_layers >= 1; got {num_layers}")
    return (2.0 * num_layers) ** 0.25, (8.0 * num_layers) ** -0.25


def deepnorm_residual(x: Tensor, sublayer_out: Tensor, alpha: float, norm: nn.Module | None = None) -> Tensor:
    r"""Post-LN residual with an up-weighted skip: :math:`x_{l+1} = \mathrm{LN}(\alpha x_l + G(x_l))`.

    Args:
        x: sublayer input x_l [..., D].
        sublayer_out: G(x_l) [..., D].
        alpha: residual scale (1 gives the ordinary Post-LN residual).
        norm: the LayerNorm to apply; None uses a parameter-free layer norm over the last dimension.
    """
    h = alpha * x + sublayer_out
    return norm(h) if norm is not None else F.layer_norm(h, h.shape[-1:])


class DeepNorm(nn.Module):
    r"""DeepNorm residual block wrapper (DeepNet; DeepGraph section 3.2), off unless a model opts in.

    .. math::
        x_{l+1} = \mathrm{LN}\big(\alpha\,x_l + G(x_l)\big), \qquad \alpha = (2N)^{1/4}

    and, at initialisation, the feed-forward weights and the attention value / output projections are
    Xavier-normal scaled by :math:`\beta = (8N)^{-1/4}` (queries and keys keep gain 1); use
    `init_sublayer_` on those linears.

    Args:
        hidden: width D.
        num_layers: number of transformer layers N.

    Shapes:
        x [..., D], sublayer_out [..., D] -> [..., D].
    """

    def __init__(self, hidden: int, num_layers: int) -> None:
        super().__init__()
        self.alpha, self.beta = deepnorm_constants(num_layers)
        self.norm = nn.LayerNorm(hidden)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.norm.reset_parameters()

    def forward(self, x: Tensor, sublayer_out: Tensor) -> Tensor:
        return deepnorm_residual(x, sublayer_out, self.alpha, self.norm)

    def init_sublayer_(self, linear: nn.Linear) -> None:
        """Xavier-normal init with gain beta, zero bias (for FFN, value and output projections)."""
        nn.init.xavier_normal_(linear.weight, gain=self.beta)
        if linear.bias is not None:
            nn.init.zeros_(linear.bias)
