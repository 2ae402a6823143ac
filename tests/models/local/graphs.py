"""Small graphs and samplers for the local branches' tests (tests/models/local/)."""

from __future__ import annotations

import torch

from sgt_core.layers import PropagationRows
from sgt_core.preprocess.interaction_graph import EDGE_TYPES
from sgt_core.sampling import LayerSampler
from sgt_core.sampling.propagation import appnp_top_k
from tests.preprocess.test_interaction_graph import path_graph

GRAPH = EDGE_TYPES.index("graph")
HIDDEN, HEADS = 8, 2
# (model.local, model.local_aggregation) of the one-hop branches
BRANCHES = [("gcn", "mean"), ("sage", "mean"), ("sage", "sum"), ("gatv2", "mean")]


def random_graph(num_nodes: int = 60, num_edges: int = 150, seed: int = 0):
    """An undirected graph with uneven degrees (a path plus random chords), so that normalisations matter."""
    graph = path_graph(num_nodes)
    generator = torch.Generator().manual_seed(seed)
    chords = torch.randint(0, num_nodes, (2, num_edges), generator=generator)
    chords = chords[:, chords[0] != chords[1]]
    edges = torch.cat([graph.edge_index, chords, chords.flip(0)], dim=1)
    graph.edge_index = torch.unique(edges, dim=1)
    return graph


def keep_everything(graph, num_layers: int = 1, device: torch.device | str = "cpu",
                    method: str = "reservoir", propagation: PropagationRows | None = None) -> LayerSampler:
    """Every neighbour in every layer, so the layout is the same whatever the (device's) random draws."""
    largest = int(graph.ptr.diff().max())
    scores = torch.rand(num_layers, graph.num_edges, generator=torch.Generator().manual_seed(1))
    return LayerSampler(graph.edge_index.to(device), graph.edge_type.to(device), graph.ptr.to(device),
                        scores.to(device), [largest] * num_layers, method, torch.Generator(device).manual_seed(0),
                        propagation=None if propagation is None else propagation.to(device))


def top_k_rows(graph, steps: int, teleport: float, top_k: int) -> PropagationRows:
    """The graph edges' top-k APPNP rows, as the train stage computes them."""
    graph_edges = graph.edge_index[:, graph.edge_type == GRAPH]
    return appnp_top_k(graph_edges[0], graph_edges[1], graph.num_nodes, steps, teleport, top_k)
