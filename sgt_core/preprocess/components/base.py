"""What every interaction-graph component is given (`GraphView`) and returns (`ComponentOutput`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Protocol

import numpy as np
import scipy.sparse

from sgt_core.preprocess.blocks import edge_block
from sgt_core.preprocess.many_graphs.layout import GraphSet

__all__ = ["Component", "ComponentOutput", "GraphView"]


@dataclass(frozen=True, eq=False)
class GraphView:
    """The input graph as the components see it, and where the interaction graph's nodes lie.

    Node order of H: the input graph's `num_real` nodes (graph by graph), then `virtual_per_graph` virtual
    nodes per graph (graph by graph), then `num_tokens` substructure tokens (graph by graph on many graphs).

    Attributes:
        edges: int64 [2, E] the input graph's edges, each undirected edge both ways, no self-loops (a view).
        num_real: the input graph's nodes.
        virtual_per_graph: virtual nodes of each graph.
        num_tokens: substructure tokens.
        graphs: the graphs of a dataset of many (G > 1); None for one graph (every component then builds
            exactly what it built before datasets of many graphs existed).
        seed: the build's seed (each component draws from its own stream of it).
        code_dtype: the dtype of the blocks' values (`blocks.edge_block`).
    """

    edges: np.ndarray
    num_real: int
    virtual_per_graph: int
    num_tokens: int
    graphs: GraphSet | None
    seed: int
    code_dtype: type

    @property
    def num_graphs(self) -> int:
        return 1 if self.graphs is None else self.graphs.num_graphs

    @property
    def num_virtual(self) -> int:
        return self.virtual_per_graph * self.num_graphs

    @property
    def num_total(self) -> int:
        """N: every node of H."""
        return self.num_real + self.num_virtual + self.num_tokens

    @cached_property
    def node_graph(self) -> np.ndarray:
        """int64 [num_real] the graph of every real node (all 0 for one graph)."""
        if self.graphs is None:
            return np.zeros(self.num_real, dtype=np.int64)
        return self.graphs.node_graph

    def block(self, src: np.ndarray, dst: np.ndarray, type_name: str,
              spd: np.ndarray | None = None) -> scipy.sparse.csr_matrix:
        """One edge type's block over H's N nodes (`blocks.edge_block`)."""
        return edge_block(src, dst, type_name, self.num_total, self.code_dtype, spd)


@dataclass
class ComponentOutput:
    """A component's result.

    Attributes:
        blocks: its edge blocks (CSR [N, N], row dst, column src), disjoint from every other component's.
        stats: numbers the stage reports (`seconds_<component>` among them for the costly ones).
        fields: node fields for H (the LPE's arrays) or what later components read (the expander's pairs).
    """

    blocks: list[scipy.sparse.csr_matrix] = field(default_factory=list)
    stats: dict[str, float] = field(default_factory=dict)
    fields: dict[str, np.ndarray] = field(default_factory=dict)


class Component(Protocol):
    """A transform adding one kind of edge (or node field) to H; `name` keys its output for later ones."""

    name: str

    def __call__(self, graph: GraphView, earlier: Mapping[str, ComponentOutput]) -> ComponentOutput: ...
