"""Degree histograms: neighbourhood sizes per edge type and what sampling leaves each node per layer."""

from __future__ import annotations

import torch

from sgt_core.preprocess.degrees import degree_histogram, in_degree_histograms
from sgt_core.preprocess.interaction_graph import EDGE_TYPES
from sgt_core.sampling import LayerSampler
from sgt_core.sampling.degrees import sampled_degree_histograms


def test_degree_histogram_counts_distinct_degrees():
    assert degree_histogram(torch.tensor([3, 0, 3, 1_000_000, 3])) == {
        "degree": [0, 3, 1_000_000], "nodes": [1, 3, 1]
    }


def test_in_degree_histograms_per_edge_type():
    graph, expander = EDGE_TYPES.index("graph"), EDGE_TYPES.index("expander")
    # node 0 gets 3 graph edges, node 1 gets 1 graph and 2 expander edges, node 2 gets none
    edge_index = torch.tensor([[1, 2, 3, 0, 2, 3], [0, 0, 0, 1, 1, 1]])
    edge_type = torch.tensor([graph, graph, graph, graph, expander, expander])
    histograms = in_degree_histograms(edge_index, edge_type, num_nodes=4)
    assert histograms == {
        "all": {"degree": [0, 3], "nodes": [2, 2]},
        "graph": {"degree": [0, 1, 3], "nodes": [2, 1, 1]},
        "expander": {"degree": [0, 2], "nodes": [3, 1]},
    }


def test_sampled_degrees_are_the_unmasked_slots():
    # in-degrees 1, 5, 3, 0: with degree 3 a node keeps min(in-degree, 3) real neighbours, the rest masked
    counts = torch.tensor([1, 5, 3, 0])
    ptr = torch.cat([torch.zeros(1, dtype=torch.long), counts.cumsum(0)])
    num_edges = int(counts.sum())
    edge_index = torch.stack([torch.zeros(num_edges, dtype=torch.long), torch.repeat_interleave(counts)])
    scores = torch.rand(2, num_edges)
    scores[1, :2] = 0.0  # zero-weight candidates are still drawn before a slot is masked
    edge_type = torch.zeros(num_edges, dtype=torch.long)

    def histograms(method: str) -> dict:
        sampler = LayerSampler(edge_index, edge_type, ptr, scores, [3, 1], method, torch.Generator())
        return sampled_degree_histograms(sampler, seed=0)

    expected = {"layer_0": {"degree": [0, 1, 3], "nodes": [1, 1, 2]}, "layer_1": {"degree": [0, 1], "nodes": [1, 3]}}
    assert histograms("reservoir") == expected
    assert histograms("uniform") == expected
    full = {"degree": [0, 1, 3, 5], "nodes": [1, 1, 1, 1]}
    assert histograms("full") == {"layer_0": full, "layer_1": full}
