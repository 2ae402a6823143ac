"""Virtual nodes (Exphormer's global attention): each graph's own, joined both ways to its own real nodes."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from sgt_core.preprocess.components.base import ComponentOutput, GraphView


class VirtualNodes:
    """`count` virtual nodes per graph, each joined both ways to every real node of its graph and no other.

    Graph g's virtual nodes are H's nodes num_real + g * count + j, j < count (on one graph: num_real + j, as
    before datasets of many graphs). One virtual node per dataset would join every graph to every other.
    """

    name = "virtual_nodes"

    def __init__(self, count: int) -> None:
        self.count = count

    def __call__(self, graph: GraphView, earlier: Mapping[str, ComponentOutput]) -> ComponentOutput:
        real = np.arange(graph.num_real)
        # [n, count] the virtual nodes of each real node's graph
        virtual = graph.num_real + graph.node_graph[:, None] * self.count + np.arange(self.count)
        own = np.repeat(real, self.count)  # [n * count] aligned with virtual.ravel()
        return ComponentOutput(blocks=[
            graph.block(virtual.ravel(), own, "virtual"),  # virtual -> real (dst real)
            graph.block(own, virtual.ravel(), "virtual"),  # real -> virtual (dst virtual)
        ])
