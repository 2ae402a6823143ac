"""DeepNorm: the post-LN residual with an up-weighted skip that keeps deep stacks stable (DeepNet)."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["DeepNorm", "deepnorm_constants", "deepnorm_residual"]


def deepnorm_constants(num_layers: int) -> tuple[float, float]:
    r"""DeepNorm's residual scale alpha and init scale beta for an encoder-only stack of N layers.

    DeepNet (Wang et al., 2022, "DeepNet: Scaling Transformers to 1,000 Layers"), used by DeepGraph
    (section 3.2): \(\alpha = (2N)^{1/4}\), \(\beta = (8N)^{-1/4}\), where N counts layers of one
    attention + one feed-forward sublayer each.
    """
    if num_layers < 1:
        raise ValueError(f"DeepNorm needs num_layers >= 1; got {num_layers}")
    return (2.0 * num_layers) ** 0.25, (8.0 * num_layers) ** -0.25


def deepnorm_residual(x: Tensor, sublayer_out: Tensor, alpha: float, norm: nn.Module | None = None) -> Tensor:
    r"""Post-LN residual with an up-weighted skip: \(x_{l+1} = \mathrm{LN}(\alpha x_l + G(x_l))\).

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

    \[
    x_{l+1} = \mathrm{LN}\big(\alpha\,x_l + G(x_l)\big), \qquad \alpha = (2N)^{1/4}
    \]

    and, at initialisation, the feed-forward weights and the attention value / output projections are
    Xavier-normal scaled by \(\beta = (8N)^{-1/4}\) (queries and keys keep gain 1); use
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
