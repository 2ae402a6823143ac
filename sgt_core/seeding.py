"""One place that seeds every random number generator a stage uses."""

from __future__ import annotations

import random

import numpy as np
import torch


def seed_everything(seed: int) -> torch.Generator:
    """Seeds Python, NumPy and torch; returns a CPU generator for explicit sampling calls."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)
