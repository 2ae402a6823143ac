"""FeedForward: the wide network's Linear -> ReLU -> Dropout -> Linear block, with a memory-lean backward."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from sgt_core.models.dropout import Dropout, as_bytes


class _FeedForward(torch.autograd.Function):
    """Forward as usual; backward recomputes the hidden activations from the block's input.

    Autograd would keep the [N, 2D] pre-activation, the ReLU output and the dropout output, 3 x 8 bytes
    per node and hidden unit (20 MB of the Minesweeper preset's 82 MB of saved activations). Here only
    the input (which the layer keeps anyway) and the 1-byte dropout mask are kept, and the backward pass
    pays one extra [N, D] x [D, 2D] matmul.
    """

    @staticmethod
    def forward(ctx, x, inner_weight, inner_bias, outer_weight, outer_bias, keep, scale):
        hidden = F.linear(x, inner_weight, inner_bias).relu_()
        if keep is not None:
            hidden = hidden.mul_(as_bytes(keep)).mul_(scale)
        ctx.save_for_backward(x, inner_weight, inner_bias, outer_weight, keep)
        ctx.scale = scale
        return F.linear(hidden, outer_weight, outer_bias)

    @staticmethod
    def backward(ctx, grad):
        x, inner_weight, inner_bias, outer_weight, keep = ctx.saved_tensors
        pre_activation = F.linear(x, inner_weight, inner_bias)  # [N, 2D], recomputed
        active = pre_activation > 0
        hidden = pre_activation.relu_()
        if keep is not None:
            hidden = hidden.mul_(as_bytes(keep)).mul_(ctx.scale)
        grad_outer_weight, grad_outer_bias = grad.t() @ hidden, grad.sum(0)
        grad_hidden = grad @ outer_weight  # [N, 2D]
        if keep is not None:
            grad_hidden = grad_hidden.mul_(as_bytes(keep)).mul_(ctx.scale)
        grad_pre = grad_hidden.mul_(as_bytes(active))
        grad_inner_weight, grad_inner_bias = grad_pre.t() @ x, grad_pre.sum(0)
        return grad_pre @ inner_weight, grad_inner_weight, grad_inner_bias, grad_outer_weight, grad_outer_bias, None, None


class FeedForward(nn.Sequential):
    """Linear(D, 2D) -> ReLU -> Dropout -> Linear(2D, D), indexed and saved like the nn.Sequential it is.

    With gradients on, it runs as one autograd function that keeps only its input and the dropout mask.
    """

    def __init__(self, hidden: int, dropout: float) -> None:
        super().__init__(nn.Linear(hidden, 2 * hidden), nn.ReLU(), Dropout(dropout), nn.Linear(2 * hidden, hidden))

    def forward(self, x: Tensor) -> Tensor:
        if not torch.is_grad_enabled():
            return super().forward(x)
        inner, _relu, dropout, outer = self
        keep = dropout.keep_mask((x.shape[0], inner.out_features), x.device) if dropout.training and dropout.p else None
        return _FeedForward.apply(x, inner.weight, inner.bias, outer.weight, outer.bias, keep, dropout.scale)
