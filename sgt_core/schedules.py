"""The estimator's attention-temperature schedule (the learning-rate schedule is in sgt_core.optim)."""

from __future__ import annotations


def temperature(epoch: int, *, anneal: bool, initial_epochs: int, gamma: float, minimum: float) -> float:
    """Spexphormer's attention temperature at `epoch` (0-based).

    tau = 1 for the first `initial_epochs` epochs, then max(gamma^(t - initial_epochs), minimum), so the
    estimator first learns which neighbours matter at normal sharpness, then sharpens (section 4).
    """
    if not anneal or epoch < initial_epochs:
        return 1.0
    return max(gamma ** (epoch - initial_epochs), minimum)
