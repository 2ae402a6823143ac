"""Degree histograms as small plain data: the interaction graph's in-degrees and the sampled layers' degrees."""

from __future__ import annotations

import torch
from torch import Tensor

from sgt_core.preprocess.interaction_graph import EDGE_TYPES
from sgt_core.sampling.reservoir import LayerSampler, sample_neighbours

IN_DEGREES_FILE = "in_degrees.json"
SAMPLED_DEGREES_FILE = "sampled_degrees.json"


def degree_histogram(degrees: Tensor) -> dict[str, list[int]]:
    """{"degree": the distinct degrees, "nodes": how many nodes have each}.

    Distinct values rather than one bin per integer, so a hub of a million neighbours adds one pair, not a
    million zeros, and the file stays a few kilobytes for any graph.
    """
    values, counts = torch.unique(degrees, return_counts=True)
    return {"degree": values.tolist(), "nodes": counts.tolist()}


def in_degree_histograms(edge_index: Tensor, edge_type: Tensor, num_nodes: int) -> dict[str, dict]:
    """Neighbourhood sizes (incoming edges per node) over all edges ("all"), then per edge type present.

    Per type, every node counts, so nodes without an edge of that type show up as degree 0.
    """
    dst = edge_index[1]
    histograms = {"all": degree_histogram(torch.bincount(dst, minlength=num_nodes))}
    for type_id in torch.unique(edge_type).tolist():
        in_degree = torch.bincount(dst[edge_type == type_id], minlength=num_nodes)
        histograms[EDGE_TYPES[type_id]] = degree_histogram(in_degree)
    return histograms


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
