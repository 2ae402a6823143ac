"""`train.device` resolved to a torch device."""

from __future__ import annotations

import torch

from sgt_core.errors import ConfigError


def resolve_device(device: str) -> torch.device:
    """`train.device`: `auto` -> CUDA when available, else CPU; `cuda` fails clearly when there is none."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("train.device=cuda but torch.cuda.is_available() is False on this machine")
    return torch.device(device)
