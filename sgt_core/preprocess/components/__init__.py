"""The interaction graph's components as small transforms (PyG's habit): each is built from its config, given
the input graph as `GraphView`, and returns its edge blocks, node fields and statistics (`ComponentOutput`);
`builder.build_interaction_graph` composes them. On a dataset of many graphs each builds inside every graph."""

from sgt_core.preprocess.components.anchors import AnchorEdges
from sgt_core.preprocess.components.base import Component, ComponentOutput, GraphView
from sgt_core.preprocess.components.expander import ExpanderEdges
from sgt_core.preprocess.components.lpe import LaplacianEigenpairs
from sgt_core.preprocess.components.self_loops import SelfLoops
from sgt_core.preprocess.components.substructures import SubstructureTokenEdges
from sgt_core.preprocess.components.virtual_nodes import VirtualNodes

__all__ = ["AnchorEdges", "Component", "ComponentOutput", "ExpanderEdges", "GraphView", "LaplacianEigenpairs",
           "SelfLoops", "SubstructureTokenEdges", "VirtualNodes"]
