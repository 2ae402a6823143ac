"""Neighbourhood sizes as small plain data: histograms of the interaction graph's in-degrees."""

from __future__ import annotations

import torch
from torch import Tensor

from sgt_core.preprocess.interaction_graph import EDGE_TYPES


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
    # bincount, not torch.unique: unique sorts a copy of every edge's type (GBs on large graphs)
    for type_id in torch.bincount(edge_type, minlength=len(EDGE_TYPES)).nonzero().flatten().tolist():
        in_degree = torch.bincount(dst[edge_type == type_id], minlength=num_nodes)
        histograms[EDGE_TYPES[type_id]] = degree_histogram(in_degree)
    return histograms
