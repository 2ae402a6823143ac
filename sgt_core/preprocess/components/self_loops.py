"""Self-loops: one `self` edge on every node of H, added nodes included."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from sgt_core.preprocess.components.base import ComponentOutput, GraphView


class SelfLoops:
    """One `self` edge per node (real, virtual and token alike)."""

    name = "self_loops"

    def __call__(self, graph: GraphView, earlier: Mapping[str, ComponentOutput]) -> ComponentOutput:
        loop = np.arange(graph.num_total)
        return ComponentOutput(blocks=[graph.block(loop, loop, "self")])
