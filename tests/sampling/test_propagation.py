"""PPRGo's top-k rows of APPNP's operator: exact when nothing is cut, the largest entries when cut, deterministic."""

from __future__ import annotations

import pytest
import torch
from torch_geometric.nn import APPNP

from sgt_core.sampling import propagation
from sgt_core.sampling.propagation import appnp_top_k
from tests.models.local.graphs import random_graph
from tests.threads import torch_threads


def exact_operator(edge_index: torch.Tensor, num_nodes: int, steps: int, teleport: float) -> torch.Tensor:
    """P [N, N] by PyG's APPNP applied to the identity: its output row i is sum_j P_ij e_j."""
    return APPNP(K=steps, alpha=teleport)(torch.eye(num_nodes, dtype=torch.float64), edge_index)


def dense(rows, num_nodes: int) -> torch.Tensor:
    return torch.zeros(num_nodes, num_nodes, dtype=torch.float64).scatter_add_(
        1, rows.neighbours, rows.weights.double())


@pytest.mark.parametrize(("steps", "teleport"), [(1, 0.0), (2, 0.0), (6, 0.15), (10, 0.1)])
def test_rows_are_the_exact_operator_when_nothing_is_cut(steps, teleport):
    graph = random_graph(40, 90, seed=4)
    rows = appnp_top_k(graph.edge_index[0], graph.edge_index[1], 40, steps, teleport, top_k=40)
    assert rows.neighbours.shape == rows.weights.shape == (40, 40)
    assert torch.allclose(dense(rows, 40), exact_operator(graph.edge_index, 40, steps, teleport), atol=1e-7)


def test_rows_hold_each_nodes_largest_entries_by_decreasing_weight(monkeypatch):
    graph = random_graph(60, 150, seed=5)
    exact = exact_operator(graph.edge_index, 60, 10, 0.1)
    best = exact.topk(5, dim=1).values  # [N, 5]
    rows = appnp_top_k(graph.edge_index[0], graph.edge_index[1], 60, 10, 0.1, top_k=5)
    assert rows.neighbours.shape == (60, 5)
    assert (rows.weights[:, :-1] >= rows.weights[:, 1:]).all()  # by decreasing weight
    # Intermediate steps are cut to 4k entries, each dropping mass that would have reached later steps: a
    # kept weight is a lower bound of P's entry. The kept sets are still P's largest but for near ties.
    kept_exact = exact.gather(1, rows.neighbours)
    assert (rows.weights.double() <= kept_exact + 1e-7).all()
    assert (kept_exact.sum(1) / best.sum(1)).min() > 0.95
    monkeypatch.setattr(propagation, "WORKING_WIDTH", 12)  # 60 entries: no intermediate row is cut
    uncut = appnp_top_k(graph.edge_index[0], graph.edge_index[1], 60, 10, 0.1, top_k=5)
    assert torch.allclose(uncut.weights.double(), best, atol=1e-7)
    assert torch.allclose(exact.gather(1, uncut.neighbours), best, atol=1e-7)  # the same sets, up to ties


def test_rows_of_nodes_without_edges_are_the_node_itself():
    graph = random_graph(20, 30, seed=6)
    rows = appnp_top_k(graph.edge_index[0], graph.edge_index[1], 23, 5, 0.1, top_k=4)  # nodes 20-22: no edges
    assert (rows.neighbours[20:, 0] == torch.arange(20, 23)).all()
    assert torch.allclose(rows.weights[20:, 0], torch.ones(3))
    assert (rows.weights[20:, 1:] == 0).all() and (rows.neighbours[20:, 1:] == torch.arange(20, 23)[:, None]).all()
    empty = appnp_top_k(torch.empty(0, dtype=torch.long), torch.empty(0, dtype=torch.long), 0, 3, 0.1, top_k=2)
    assert empty.neighbours.shape == (0, 2)


def test_rows_repeat_exactly_whatever_the_chunking_and_the_kernels(monkeypatch):
    """SciPy's products in chunks of any size, and the compiled kernel on two threads, give the same rows bit
    for bit: the same float32 sums in the same order, ties cut alike. The graph has many exact ties (a star's
    leaves), so a cut that broke them differently would show."""
    graph = random_graph(300, 900, seed=7)
    leaves = torch.stack([torch.zeros(40, dtype=torch.long), torch.arange(300, 340)])
    edge_index = torch.cat([graph.edge_index, leaves, leaves.flip(0)], dim=1)
    args = (edge_index[0], edge_index[1], 340, 8, 0.1)
    compiled = propagation.cpu_kernels() is not None
    with torch_threads(2):
        kernel_rows = appnp_top_k(*args, top_k=6)
    monkeypatch.setattr(propagation, "cpu_kernels", lambda: None)
    whole = appnp_top_k(*args, top_k=6)
    monkeypatch.setattr(propagation, "CHUNK_ENTRIES", 64)  # a few rows per product
    chunked = appnp_top_k(*args, top_k=6)
    assert torch.equal(whole.neighbours, chunked.neighbours) and torch.equal(whole.weights, chunked.weights)
    assert (whole.weights[300:340, 1:] == whole.weights[300:340, 1:2]).any()  # leaves tie with each other
    if not compiled:
        pytest.skip("the compiled kernels are not built here: SciPy's path checked alone")
    assert torch.equal(kernel_rows.neighbours, whole.neighbours) and torch.equal(kernel_rows.weights, whole.weights)


def test_bad_arguments_are_refused():
    graph = random_graph(10, 10)
    for steps, teleport, top_k in [(0, 0.1, 4), (3, 1.0, 4), (3, 0.1, 0)]:
        with pytest.raises(ValueError, match="need steps >= 1"):
            appnp_top_k(graph.edge_index[0], graph.edge_index[1], 10, steps, teleport, top_k)
