"""Vectorised reservoir sampling of a fixed number of neighbours per node from attention scores."""

from __future__ import annotations

import torch
from torch import Tensor

from sgt_core.models.spexphormer import SampledLayer

SAMPLERS = ("reservoir", "uniform", "topk")


def sample_neighbours(
    ptr: Tensor,
    scores: Tensor,
    degree: int,
    *,
    nodes: Tensor | None = None,
    method: str = "reservoir",
    generator: torch.Generator | None = None,
) -> tuple[Tensor, Tensor]:
    r"""Draws `degree` incoming edges per node without replacement, all nodes at once.

    Reservoir sampling (Efraimidis & Spirakis 2006; Spexphormer Algorithm 1): with u ~ U(0, 1) per
    candidate edge, the `degree` edges with the largest keys log(u) / a are a weighted sample without
    replacement with weights a. Instead of one top-k per node, one global sort orders every candidate by
    (node, key descending); an edge's rank inside its node's segment then says whether it is kept.
    That is two O(M log M) sorts for M candidates, no padding to the largest neighbourhood, no Python
    loop over nodes, and it runs unchanged on CUDA.

    Nodes with fewer candidates than `degree` keep all of them and the remaining slots are masked
    (rather than filled by drawing with replacement, as the paper's reference code does): masking keeps
    the attention over a small neighbourhood exact instead of double-counting repeated neighbours.

    Args:
        ptr: int64 [N+1] CSR pointer over destination nodes; node i's candidates are edges ptr[i]:ptr[i+1].
        scores: float [E] sampling weight of each edge (the estimator's attention scores).
        degree: neighbours to draw per node.
        nodes: int64 [Q] nodes to sample for (default: all N).
        method: "reservoir" (weighted by scores), "uniform" (ignores them) or "topk" (the `degree`
            highest-scored edges, the paper's "max" ablation; ties broken at random).
        generator: torch random generator on the scores' device.

    Returns:
        edges: int64 [Q, degree] sampled edge ids (-1 in masked slots).
        mask: bool [Q, degree] True where a slot holds an edge.
    """
    if method not in SAMPLERS:
        raise ValueError(f"unknown sampler {method!r}; expected one of {SAMPLERS}")
    device = scores.device
    if nodes is None:
        nodes = torch.arange(ptr.numel() - 1, device=device)
    starts = ptr[nodes]  # [Q]
    counts = ptr[nodes + 1] - starts  # [Q]
    num_queries, num_candidates = nodes.numel(), int(counts.sum())
    segment_offsets = counts.cumsum(0) - counts  # [Q] first candidate position of each query
    segment = torch.repeat_interleave(torch.arange(num_queries, device=device), counts)  # [M]
    position = torch.arange(num_candidates, device=device) - segment_offsets[segment]  # [M] rank in segment
    candidate_edges = starts[segment] + position  # [M] edge ids

    uniform = torch.rand(num_candidates, device=device, generator=generator).clamp_min_(1e-12)  # [M]
    if method == "reservoir":
        keys = uniform.log() / scores[candidate_edges]  # [M]; a zero score gives -inf, drawn last
    elif method == "uniform":
        keys = uniform
    else:  # topk: order by score; the random permutation below breaks ties
        keys = scores[candidate_edges].clone()
        shuffle = torch.randperm(num_candidates, device=device, generator=generator)
        keys, candidate_edges, segment = keys[shuffle], candidate_edges[shuffle], segment[shuffle]

    by_key = torch.argsort(keys, descending=True, stable=True)  # [M]
    by_segment = torch.argsort(segment[by_key], stable=True)  # [M] stable keeps key order within a node
    order = by_key[by_segment]  # [M] grouped by query, keys descending
    rank = torch.arange(num_candidates, device=device) - segment_offsets[segment[order]]  # [M]
    keep = rank < degree

    edges = torch.full((num_queries, degree), -1, dtype=torch.long, device=device)  # [Q, degree]
    edges[segment[order][keep], rank[keep]] = candidate_edges[order][keep]
    return edges, edges >= 0


def sample_full_graph_layers(
    edge_index: Tensor,
    edge_type: Tensor,
    ptr: Tensor,
    layer_scores: Tensor,
    degrees: list[int],
    *,
    method: str = "reservoir",
    generator: torch.Generator | None = None,
) -> list[SampledLayer]:
    """Samples every layer's graph for all nodes at once (full-graph training and inference).

    Args:
        edge_index: int64 [2, E] (src, dst) sorted by dst.
        edge_type: int64 [E].
        ptr: int64 [N+1] CSR pointer over dst.
        layer_scores: float [L, E] attention scores of each layer.
        degrees: deg_l per layer.
    """
    num_nodes = ptr.numel() - 1
    all_nodes = torch.arange(num_nodes, device=edge_index.device)
    layers = []
    for scores, degree in zip(layer_scores, degrees):
        edges, mask = sample_neighbours(ptr, scores, degree, method=method, generator=generator)
        safe_edges = edges.clamp_min(0)  # [N, deg] masked slots point at edge 0, ignored through the mask
        layers.append(
            SampledLayer(
                queries=all_nodes,
                neighbours=edge_index[0][safe_edges],  # [N, deg]
                neighbour_type=edge_type[safe_edges],  # [N, deg]
                neighbour_mask=mask,
            )
        )
    return layers
