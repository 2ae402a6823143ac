"""Batch norm whose training statistics cover every rank's rows, on any device and process group."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import Tensor, nn


class _GlobalBatchNorm(torch.autograd.Function):
    """y = (x - mean) / sqrt(var + eps) * weight + bias with mean and var over the rows of every rank.

    Forward all-reduces each channel's sum, sum of squares and the row count (one [2C + 1] float64
    tensor); backward all-reduces the two sums the input gradient needs, sum(dx̂) and sum(dx̂ · x̂), as
    torch.nn.SyncBatchNorm does. The weight and bias gradients stay per rank: DDP averages them with
    the others. Every rank must call it the same number of times, in the same order (one collective each).
    """

    @staticmethod
    def forward(ctx, x, weight, bias, eps, group):
        channels = x.shape[1]
        wide = x.double()  # [n, C]: float64 sums, so that E[x²] - E[x]² loses nothing that matters
        stats = torch.cat([wide.sum(0), (wide * wide).sum(0), wide.new_full((1,), x.shape[0])])  # [2C + 1]
        dist.all_reduce(stats, group=group)
        count = stats[-1]
        mean = stats[:channels] / count  # [C]
        var = (stats[channels:-1] / count - mean * mean).clamp_min(0)  # [C] biased, as batch norm normalises
        invstd = (var + eps).rsqrt().to(x.dtype)  # [C]
        x_hat = (x - mean.to(x.dtype)) * invstd  # [n, C]
        ctx.save_for_backward(x_hat, invstd, weight)
        ctx.count, ctx.group = count, group
        ctx.mark_non_differentiable(mean, var)
        return x_hat * weight + bias, mean, var * count / (count - 1).clamp_min(1)  # unbiased var for running stats

    @staticmethod
    def backward(ctx, grad, _grad_mean, _grad_var):
        x_hat, invstd, weight = ctx.saved_tensors
        grad_x_hat = grad * weight  # [n, C]
        sums = torch.cat([grad_x_hat.double().sum(0), (grad_x_hat * x_hat).double().sum(0)])  # [2C]
        dist.all_reduce(sums, group=ctx.group)
        channels = x_hat.shape[1]
        mean_grad, mean_grad_x_hat = (sums[:channels] / ctx.count).to(grad.dtype), (sums[channels:] / ctx.count).to(grad.dtype)
        grad_x = (grad_x_hat - mean_grad - x_hat * mean_grad_x_hat) * invstd  # [n, C]
        return grad_x, (grad * x_hat).sum(0), grad.sum(0), None, None


class SyncBatchNorm1d(nn.BatchNorm1d):
    """nn.BatchNorm1d that, in training under torch.distributed, normalises with every rank's rows.

    torch.nn.SyncBatchNorm does this on CUDA but refuses CPU tensors (its statistics kernels are CUDA
    only); this one runs on gloo too, through plain `all_reduce`s of the process group, so that ranks
    splitting a batch B into W shares of B/W rows normalise exactly as one process with all B rows
    would. In evaluation, or with one process, it is nn.BatchNorm1d. Running statistics are updated from
    the global mean and unbiased variance, the same on every rank.

    Args:
        num_features: channels C of the [N, C] input.
        eps: as nn.BatchNorm1d.
        momentum: as nn.BatchNorm1d (None: cumulative average).
        group (torch.distributed.ProcessGroup | None): the process group to normalise over (None: the
            default group).
    """

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1, group=None) -> None:
        super().__init__(num_features, eps, momentum)
        self.group = group

    def forward(self, x: Tensor) -> Tensor:
        if not (self.training and dist.is_available() and dist.is_initialized()
                and dist.get_world_size(self.group) > 1):
            return super().forward(x)
        y, mean, unbiased_var = _GlobalBatchNorm.apply(x, self.weight, self.bias, self.eps, self.group)
        with torch.no_grad():
            self.num_batches_tracked.add_(1)
            factor = 1.0 / float(self.num_batches_tracked) if self.momentum is None else self.momentum
            self.running_mean.lerp_(mean.to(self.running_mean.dtype), factor)
            self.running_var.lerp_(unbiased_var.to(self.running_var.dtype), factor)
        return y

    @classmethod
    def convert(cls, module: nn.Module, group=None) -> nn.Module:
        """`module` with every nn.BatchNorm1d replaced by one of these, sharing its parameters and buffers.

        The parameters stay the same objects, so an optimizer built over the module keeps working.
        """
        if isinstance(module, nn.BatchNorm1d) and not isinstance(module, cls):
            if not (module.affine and module.track_running_stats):
                raise ValueError("SyncBatchNorm1d.convert expects affine batch norm with running statistics")
            converted = cls(module.num_features, module.eps, module.momentum, group)
            converted.weight, converted.bias = module.weight, module.bias
            converted.running_mean, converted.running_var = module.running_mean, module.running_var
            converted.num_batches_tracked = module.num_batches_tracked
            converted.train(module.training)
            return converted
        for name, child in module.named_children():
            module.add_module(name, cls.convert(child, group))
        return module
