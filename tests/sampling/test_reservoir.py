"""Reservoir sampling: the right probabilities, no repeated neighbour, masking of small neighbourhoods."""

from __future__ import annotations

import pytest
import torch
from scipy.stats import chisquare

from sgt_core.kernels import cpu_kernels
from sgt_core.sampling import LayerSampler, reservoir, sample_neighbours


@pytest.fixture(autouse=True, params=["compiled", "torch"])
def implementation(request, monkeypatch):
    """Every test runs on both samplers: the compiled CPU kernel and the torch one (CUDA's, and the fallback)."""
    if request.param == "torch":
        monkeypatch.setattr(reservoir, "usable", lambda *tensors: False)
    elif cpu_kernels() is None:
        pytest.skip("no C compiler here: only the torch sampler runs")
    return request.param


def csr(counts: list[int], device: torch.device | str = "cpu") -> torch.Tensor:
    return torch.cat([torch.zeros(1, dtype=torch.long), torch.tensor(counts).cumsum(0)]).to(device)


def test_single_draw_frequencies_match_scores():
    # one node repeated many times is the same as many independent draws for one node
    weights = torch.tensor([0.5, 0.25, 0.15, 0.07, 0.03])
    repeats = 40_000
    ptr = csr([5] * repeats)
    scores = weights.repeat(repeats)
    generator = torch.Generator().manual_seed(0)
    edges, mask = sample_neighbours(ptr, scores, 1, generator=generator)
    assert mask.all()
    picked = edges[:, 0] - ptr[:-1]  # position inside each node's neighbourhood
    observed = torch.bincount(picked, minlength=5).numpy()
    expected = (weights.double() / weights.double().sum() * observed.sum()).numpy()
    assert chisquare(observed, expected).pvalue > 1e-3


def test_without_replacement_and_within_neighbourhood():
    generator = torch.Generator().manual_seed(1)
    counts = torch.randint(6, 30, (500,))
    ptr = csr(counts.tolist())
    scores = torch.rand(int(counts.sum())) ** 4  # skewed, as trained scores are
    edges, mask = sample_neighbours(ptr, scores, 5, generator=generator)
    assert mask.all()
    assert torch.all((edges >= ptr[:-1, None]) & (edges < ptr[1:, None]))
    sorted_edges = edges.sort(dim=1).values
    assert torch.all(sorted_edges[:, 1:] != sorted_edges[:, :-1])


def test_small_neighbourhoods_take_all_and_mask_the_rest():
    ptr = csr([2, 5, 1])
    edges, mask = sample_neighbours(ptr, torch.rand(8), 4, generator=torch.Generator().manual_seed(0))
    assert mask.sum(dim=1).tolist() == [2, 4, 1]
    assert sorted(edges[0][mask[0]].tolist()) == [0, 1]
    assert edges[2][mask[2]].tolist() == [7]
    assert (edges[~mask] == -1).all()


def test_subset_of_nodes():
    ptr = csr([3, 3, 3])
    edges, _mask = sample_neighbours(ptr, torch.ones(9), 3, nodes=torch.tensor([2, 0]))
    assert sorted(edges[0].tolist()) == [6, 7, 8] and sorted(edges[1].tolist()) == [0, 1, 2]


def test_topk_takes_highest_and_uniform_ignores_scores():
    ptr = csr([4] * 3000)
    scores = torch.tensor([0.7, 0.2, 0.06, 0.04]).repeat(3000)
    top, _ = sample_neighbours(ptr, scores, 2, method="topk")
    assert torch.equal((top - ptr[:-1, None]).sort(dim=1).values, torch.tensor([[0, 1]]).expand(3000, 2))
    uniform, _ = sample_neighbours(ptr, scores, 1, method="uniform", generator=torch.Generator().manual_seed(0))
    counts = torch.bincount(uniform[:, 0] - ptr[:-1], minlength=4).numpy()
    assert chisquare(counts).pvalue > 1e-3


def test_full_graph_layers_use_each_layers_scores():
    edge_index = torch.tensor([[0, 1, 2, 0, 1, 2], [0, 0, 0, 1, 1, 1]])
    edge_type = torch.tensor([1, 0, 2, 0, 1, 2])
    ptr = csr([3, 3])
    # layer 0 puts all mass on src 2, layer 1 on src 0
    layer_scores = torch.tensor([[0, 0, 1, 0, 0, 1], [1, 0, 0, 1, 0, 0]], dtype=torch.float)
    layers = LayerSampler(edge_index, edge_type, ptr, layer_scores, [1, 1], "reservoir",
                          torch.Generator().manual_seed(0)).full()
    assert layers[0].neighbours[:, 0].tolist() == [2, 2] and layers[0].neighbour_type[:, 0].tolist() == [2, 2]
    assert layers[1].neighbours[:, 0].tolist() == [0, 0]
