"""Per-layer neighbour sampling from attention scores (Spexphormer Algorithms 1 and 2)."""

from sgt_core.sampling.reservoir import SAMPLERS, TRAIN_SAMPLERS, LayerSampler, sample_neighbours

__all__ = ["SAMPLERS", "TRAIN_SAMPLERS", "LayerSampler", "sample_neighbours"]
