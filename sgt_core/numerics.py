"""Guards for a training loop: stop at the first non-finite loss with an error a user can act on."""

from __future__ import annotations

import math

import torch

from sgt_core.errors import SGTError


class NonFiniteLossError(SGTError):
    """The training loss became NaN or infinite: continuing would only train and cache garbage."""


def check_loss(loss: float, stage: str, epoch: int, features: torch.Tensor, lr_key: str) -> None:
    """Raises NonFiniteLossError naming the stage, the epoch and the likeliest cause when `loss` is not finite."""
    if math.isfinite(loss):
        return
    largest = float(features.abs().max()) if features.numel() else 0.0
    if not math.isfinite(largest) or largest >= 1e6:  # the threshold of the loaders' feature-scale warning
        hint = (f"the node features reach {largest:.3g} in magnitude, which overflows float32 arithmetic: "
                "standardise them with dataset.standardize=true")
    else:
        hint = f"lower {lr_key} or check the node features' scale (dataset.standardize=true)"
    raise NonFiniteLossError(f"{stage}: the training loss is {loss} at epoch {epoch}; {hint}. Nothing was written")
