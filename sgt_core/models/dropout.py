"""Dropout whose CPU mask comes from `sgt::dropout_mask`'s counter-based generator, not torch's serial one."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from sgt_core.kernels import cpu_kernels, draw_seed, usable


class _MaskedScale(torch.autograd.Function):
    """x * keep / (1 - p), keeping only the boolean mask (1 byte per element) for the backward pass.

    The dropped elements are zeroed with masked_fill: multiplying by a bool mask would first convert it to
    a float copy, an extra pass writing 4 bytes per element.
    """

    @staticmethod
    def forward(ctx, x, keep, scale):
        dropped = ~keep
        ctx.save_for_backward(dropped)
        ctx.scale = scale
        return x.masked_fill(dropped, 0.0).mul_(scale)

    @staticmethod
    def backward(ctx, grad):
        (dropped,) = ctx.saved_tensors
        return grad.masked_fill(dropped, 0.0).mul_(ctx.scale), None, None


class Dropout(nn.Module):
    """nn.Dropout with the same semantics; on the CPU (float32) its mask is drawn by the compiled kernel.

    torch's CPU bernoulli_ runs one Mersenne Twister serially: on the wide network's [N, D] activations it
    was ~18% of a Minesweeper epoch on 2 cores. The kernel draws the mask in parallel, seeded per call
    from torch's default generator, so `seed_everything` still makes runs reproducible.
    """

    def __init__(self, p: float = 0.5) -> None:
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise ValueError(f"dropout probability must be in [0, 1), got {p}")
        self.p = p

    @property
    def scale(self) -> float:
        return 1.0 / (1.0 - self.p)

    def keep_mask(self, shape: tuple[int, ...], device: torch.device) -> Tensor:
        """A boolean mask of `shape`, each element True (kept) with probability 1 - p."""
        if device.type != "cpu" or cpu_kernels() is None:
            return torch.rand(shape, device=device) >= self.p
        return cpu_kernels().dropout_mask(list(shape), self.p, draw_seed(None))

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0.0:
            return x
        if not usable(x):
            return F.dropout(x, self.p, training=True)
        return _MaskedScale.apply(x, self.keep_mask(x.shape, x.device), self.scale)

    def extra_repr(self) -> str:
        return f"p={self.p}"
