"""Dropout whose CPU mask comes from `sgt::dropout_mask`'s counter-based generator, not torch's serial one."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from sgt_core.kernels import cpu_kernels, draw_seed, usable


def as_bytes(mask: Tensor) -> Tensor:
    """A bool mask as uint8 0/1, without a copy, for multiplying float tensors by: multiplying by the bool
    itself first converts it to a float copy, and masked_fill is slower still; on the CPU both take several
    times the product with this view. The products are the same numbers: x * 1 and x * 0."""
    return mask.view(torch.uint8)


class _MaskedScale(torch.autograd.Function):
    """x * keep / (1 - p), keeping only the boolean mask (1 byte per element) for the backward pass."""

    @staticmethod
    def forward(ctx, x, keep, scale):
        ctx.save_for_backward(keep)
        ctx.scale = scale
        return x.mul(as_bytes(keep)).mul_(scale)

    @staticmethod
    def backward(ctx, grad):
        (keep,) = ctx.saved_tensors
        return grad.mul(as_bytes(keep)).mul_(ctx.scale), None, None


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
