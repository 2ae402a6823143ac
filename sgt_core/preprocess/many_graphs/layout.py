"""`GraphSet`: the graphs of a disjoint union as preprocessing sees them: node ranges, edges and size groups."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import torch

from sgt_core.errors import DatasetError
from sgt_core.preprocess.adjacency import segment_positions

__all__ = ["BLOCK_ENTRIES", "DENSE_MAX_NODES", "GraphSet", "one_lapack_thread", "solve_in_threads"]

# Graphs up to this many nodes are handled as stacked dense [B, n, n] blocks (distances, eigendecompositions,
# expander draws); larger ones, rare in datasets of many graphs, go through the one-graph (sparse) code.
DENSE_MAX_NODES = 256
# A dense chunk holds at most this many entries B * n * n (32 MB as float64), whatever the graph size.
BLOCK_ENTRIES = 1 << 22


@dataclass(frozen=True, eq=False)
class GraphSet:
    """G graphs as contiguous node ranges of one union, with the union's edges grouped by graph.

    Attributes:
        ptr: int64 [G+1]: graph g holds nodes ptr[g]:ptr[g+1] (every graph non-empty).
        edge_index: int64 [2, E] the union's edges, each undirected edge both ways, no self-loops or repeats,
            grouped by graph (graph g's edges are edge_index[:, edge_ptr[g]:edge_ptr[g+1]]).
        edge_ptr: int64 [G+1] graph boundaries in `edge_index`.
    """

    ptr: np.ndarray
    edge_index: np.ndarray
    edge_ptr: np.ndarray

    @classmethod
    def from_union(cls, graph_ptr: np.ndarray, edge_index: np.ndarray) -> GraphSet:
        """The graph set of a union whose edges never join two graphs (`build_graph_set` checks it).

        The loaders sort edges by (src, dst), which already groups them by graph; other orders are grouped
        by a stable sort.
        """
        ptr = np.asarray(graph_ptr, dtype=np.int64)
        edges = np.asarray(edge_index)
        edge_graph = np.searchsorted(ptr, edges[0], side="right") - 1  # [E]
        if edges.shape[1] and bool(np.any(edge_graph != np.searchsorted(ptr, edges[1], side="right") - 1)):
            raise DatasetError("graph_ptr: an edge joins two graphs; every edge must stay inside its graph")
        if edge_graph.size > 1 and bool(np.any(edge_graph[1:] < edge_graph[:-1])):
            order = np.argsort(edge_graph, kind="stable")
            edges, edge_graph = edges[:, order], edge_graph[order]
        counts = np.bincount(edge_graph, minlength=ptr.size - 1)
        edge_ptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        return cls(ptr=ptr, edge_index=edges, edge_ptr=edge_ptr)

    @property
    def num_graphs(self) -> int:
        return int(self.ptr.size - 1)

    @property
    def num_nodes(self) -> int:
        return int(self.ptr[-1])

    @cached_property
    def sizes(self) -> np.ndarray:
        """int64 [G] nodes per graph."""
        return np.diff(self.ptr)

    @cached_property
    def node_graph(self) -> np.ndarray:
        """int64 [N] the graph of every node."""
        return np.repeat(np.arange(self.num_graphs, dtype=np.int64), self.sizes)

    @cached_property
    def degree(self) -> np.ndarray:
        """int64 [N] neighbours per node."""
        return np.bincount(self.edge_index[1], minlength=self.num_nodes)

    def size_groups(self, max_nodes: int | None = None) -> Iterator[tuple[int, np.ndarray]]:
        """(n, graph ids [B]) for the graphs of n <= max_nodes (default DENSE_MAX_NODES) nodes, by size, in
        chunks of B * n * n <= BLOCK_ENTRIES; ids ascend inside a chunk."""
        sizes = self.sizes
        small = np.flatnonzero(sizes <= (DENSE_MAX_NODES if max_nodes is None else max_nodes))
        order = small[np.argsort(sizes[small], kind="stable")]  # by size, ids ascending within a size
        bounds = np.flatnonzero(np.diff(sizes[order])) + 1
        for graphs in np.split(order, bounds):
            if graphs.size == 0:
                continue
            n = int(sizes[graphs[0]])
            step = max(1, BLOCK_ENTRIES // (n * n))  # read at call time, so tests can shrink it
            for start in range(0, graphs.size, step):
                yield n, graphs[start : start + step]

    def large_graphs(self, max_nodes: int | None = None) -> np.ndarray:
        """int64 ids of the graphs above max_nodes (default DENSE_MAX_NODES) nodes: the one-graph code
        handles them one by one."""
        return np.flatnonzero(self.sizes > (DENSE_MAX_NODES if max_nodes is None else max_nodes))

    def edges_of(self, graphs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The edges of the given graphs in local ids: (row [e] in 0..B-1, src [e], dst [e])."""
        counts = self.edge_ptr[graphs + 1] - self.edge_ptr[graphs]  # [B]
        positions = segment_positions(self.edge_ptr[graphs], counts)  # [e]
        row = np.repeat(np.arange(graphs.size), counts)  # [e]
        offset = self.ptr[graphs][row]  # [e] first node of each edge's graph
        src, dst = self.edge_index[:, positions]
        return row, src - offset, dst - offset

    def dense_adjacency(self, graphs: np.ndarray, n: int) -> np.ndarray:
        """bool [B, n, n] adjacency of B graphs of n nodes each (symmetric, zero diagonal)."""
        adjacency = np.zeros((graphs.size, n, n), dtype=bool)
        row, src, dst = self.edges_of(graphs)
        adjacency[row, src, dst] = True
        return adjacency

    def graph_edges(self, graph: int) -> np.ndarray:
        """int64 [2, e] one graph's edges in its local ids."""
        lo, hi = self.edge_ptr[graph], self.edge_ptr[graph + 1]
        return self.edge_index[:, lo:hi] - self.ptr[graph]

    def node_ids(self, graphs: np.ndarray, n: int) -> np.ndarray:
        """int64 [B, n] the global ids of B graphs of n nodes each."""
        return self.ptr[graphs][:, None] + np.arange(n)


@contextmanager
def one_lapack_thread() -> Iterator[None]:
    """Runs batched dense eigensolvers on one thread, restoring torch's thread count after.

    torch solves a batch matrix by matrix, each through MKL's threaded LAPACK; at n <= DENSE_MAX_NODES the
    threads cost more than they give (measured on two shared cores: `eigh` on [400, 119, 119] took 1.5 ms of
    CPU per matrix on one thread, 3.3-3.9 ms on two).
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def solve_in_threads(function: Callable, items: Iterable) -> list:
    """`function` over `items` (dense batches to eigendecompose) on as many Python threads as torch has, each
    LAPACK call on one thread (`one_lapack_thread`): LAPACK releases the GIL, so the batches run side by side
    on the cores instead of each being split across them. Results in the items' order."""
    items = list(items)
    workers = min(torch.get_num_threads(), len(items))
    with one_lapack_thread():
        if workers <= 1:
            return [function(item) for item in items]
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="sgt-lapack") as pool:
            return list(pool.map(function, items))
