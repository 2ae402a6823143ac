"""Learning-rate and temperature schedules shared by the estimator and the wide network."""

from __future__ import annotations

import math

import torch


def cosine_with_warmup(
    optimizer: torch.optim.Optimizer, warmup_epochs: int, total_epochs: int
) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warm-up over `warmup_epochs`, then cosine decay to zero at `total_epochs` (stepped per epoch)."""

    def factor(epoch: int) -> float:
        if epoch < warmup_epochs:
            return (epoch + 1) / (warmup_epochs + 1)
        progress = (epoch - warmup_epochs) / max(1, total_epochs - warmup_epochs)
        return 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0)))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def temperature(epoch: int, *, anneal: bool, initial_epochs: int, gamma: float, minimum: float) -> float:
    """Spexphormer's attention temperature at `epoch` (0-based).

    tau = 1 for the first `initial_epochs` epochs, then max(gamma^(t - initial_epochs), minimum), so the
    estimator first learns which neighbours matter at normal sharpness, then sharpens (section 4).
    """
    if not anneal or epoch < initial_epochs:
        return 1.0
    return max(gamma ** (epoch - initial_epochs), minimum)
