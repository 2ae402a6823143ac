"""Batches of whole graphs from a dataset of many: their nodes, their edges and their readout rows.

A dataset of many graphs is one interaction graph, the disjoint union of every graph's own (no edge joins
two graphs), so a batch of graphs is the subgraph their nodes induce: taking every node of a graph takes
every edge into it. Both stages train on such batches (PyG's DataLoader over a dataset of graphs does the
same with a `batch` vector); nothing here loops over graphs in Python.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from sgt_core.models.readout import GraphRows


def ranges(starts: Tensor, lengths: Tensor) -> Tensor:
    """The integers starts[i] .. starts[i] + lengths[i] - 1 of every range, range after range. int64 [sum]."""
    total = int(lengths.sum())
    offsets = torch.repeat_interleave(starts - (lengths.cumsum(0) - lengths), lengths)  # [total]
    return offsets + torch.arange(total, device=starts.device)


@dataclass(frozen=True)
class GraphBatches:
    """Each graph's nodes in an interaction graph of many graphs, as batches draw them.

    Attributes:
        node_order: int64 [N] the nodes grouped by graph, ascending within each graph.
        node_ptr: int64 [G + 1] graph g's nodes are node_order[node_ptr[g]:node_ptr[g+1]].
        node_graph: int64 [N] each node's graph.
        node_kind: int64 [N] each node's kind (real, virtual, substructure).
    """

    node_order: Tensor
    node_ptr: Tensor
    node_graph: Tensor
    node_kind: Tensor

    @classmethod
    def of(cls, node_graph: Tensor, node_kind: Tensor, num_graphs: int) -> GraphBatches:
        node_graph = node_graph.long()
        order = torch.argsort(node_graph, stable=True)  # [N]
        counts = torch.bincount(node_graph, minlength=num_graphs)  # [G]
        ptr = torch.cat([counts.new_zeros(1), counts.cumsum(0)])
        return cls(order, ptr, node_graph, node_kind.long())

    @property
    def num_graphs(self) -> int:
        return int(self.node_ptr.numel() - 1)

    def in_graph_order(self, graphs: Tensor) -> Tensor:
        """Every node of `graphs` (int64 [B]), graph after graph in their order, ascending within each. [n_B]"""
        starts = self.node_ptr[graphs]
        return self.node_order[ranges(starts, self.node_ptr[graphs + 1] - starts)]

    def nodes(self, graphs: Tensor) -> Tensor:
        """Every node of `graphs` (int64 [B]), ascending. int64 [n_B]."""
        return torch.sort(self.in_graph_order(graphs)).values

    def rows(self, graphs: Tensor, nodes: Tensor) -> GraphRows:
        """The readout rows of `nodes` (the batch's output rows): each one's graph as its place in `graphs`."""
        position = torch.full((self.num_graphs,), -1, dtype=torch.int64, device=graphs.device)
        position[graphs] = torch.arange(graphs.numel(), device=graphs.device)
        return GraphRows(position[self.node_graph[nodes]], graphs.numel(), self.node_kind[nodes])

    def all_rows(self) -> GraphRows:
        """The readout rows of every node of the union, in node order."""
        return GraphRows(self.node_graph, self.num_graphs, self.node_kind)

    def shuffled(self, graphs: Tensor, batch_size: int | None, generator: torch.Generator | None) -> list[Tensor]:
        """`graphs` in a random order (the generator's), cut into batches of `batch_size` (None: one batch).

        A last batch of a single graph joins the one before: batch norm needs two rows in training.
        """
        order = torch.randperm(graphs.numel(), generator=generator, device=graphs.device)
        if batch_size is None:
            return [graphs[order]]
        batches = list(graphs[order].split(batch_size))
        if len(batches) > 1 and batches[-1].numel() < 2:
            batches[-2:] = [torch.cat(batches[-2:])]
        return batches


def induced_edges(ptr: Tensor, edge_index: Tensor, nodes: Tensor) -> tuple[Tensor, Tensor]:
    """The edges into `nodes` (ascending, closed under the graph's edges: whole graphs) in local numbering.

    Args:
        ptr: int64 [N + 1] CSR offsets of the destination-sorted edges.
        edge_index: [2, E] (src, dst) sorted by dst.
        nodes: int64 [n] ascending global node ids, every source of their edges among them.

    Returns:
        (edge ids int64 [e] in destination order, local edge_index int64 [2, e] sorted by destination).
    """
    starts = ptr[nodes]
    degree = ptr[nodes + 1] - starts  # [n]
    edges = ranges(starts, degree)  # [e]
    sources = torch.searchsorted(nodes, edge_index[0].index_select(0, edges).long())  # [e]
    destinations = torch.repeat_interleave(torch.arange(nodes.numel(), device=nodes.device), degree)  # [e]
    return edges, torch.stack([sources, destinations])
