"""Per-layer neighbour sampling from attention scores (Spexphormer Algorithm 1)."""

from sgt_core.sampling.reservoir import SAMPLERS, sample_full_graph_layers, sample_neighbours

__all__ = ["SAMPLERS", "sample_full_graph_layers", "sample_neighbours"]
