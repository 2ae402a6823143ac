"""The sampled layers' degrees as small plain data (the interaction graph's own: sgt_core/preprocess/degrees.py)."""

from __future__ import annotations

import torch

from sgt_core.preprocess.degrees import degree_histogram
from sgt_core.sampling.reservoir import LayerSampler, sample_neighbours


def sampled_degree_histograms(sampler: LayerSampler, seed: int) -> dict[str, dict]:
    """Per layer, how many real (unmasked) neighbours each node gets in one full-graph sampling.

    One layer at a time, keeping only the [N, deg_l] mask, so it costs far less than `sampler.full()`.
    A generator of its own leaves the training's random stream untouched.
    """
    generator = torch.Generator(device=sampler.ptr.device).manual_seed(seed)
    in_degree = sampler.ptr.diff()  # [N]
    histograms = {}
    for layer, (scores, degree) in enumerate(zip(sampler.layer_scores, sampler.degrees)):
        if sampler.method == "full":  # every layer attends over the whole neighbourhood
            sampled = in_degree
        else:
            _, mask = sample_neighbours(sampler.ptr, scores, degree, method=sampler.method, generator=generator)
            sampled = mask.sum(dim=1)  # [N]
        histograms[f"layer_{layer}"] = degree_histogram(sampled)
    return histograms
