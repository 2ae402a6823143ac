"""DeepGraph's substructure tokens: each sampled substructure a token node joined both ways to its members."""

from __future__ import annotations

from collections.abc import Mapping

from sgt_core.preprocess.components.base import ComponentOutput, GraphView
from sgt_core.preprocess.substructure_tokens import SubstructureTokens


class SubstructureTokenEdges:
    """`substructure` edges between each token and its members (tokens sampled beforehand, inside each graph on
    many graphs: `substructure_tokens.sample_substructure_tokens`); token t is H's node num_real + num_virtual + t.
    """

    name = "substructures"

    def __init__(self, tokens: SubstructureTokens) -> None:
        self.tokens = tokens

    def __call__(self, graph: GraphView, earlier: Mapping[str, ComponentOutput]) -> ComponentOutput:
        selection = self.tokens.selection
        members = selection.members  # [M] input-graph nodes
        tokens = graph.num_real + graph.num_virtual + selection.instance_of_member  # [M]
        return ComponentOutput(
            blocks=[graph.block(members, tokens, "substructure"), graph.block(tokens, members, "substructure")],
            stats=self.tokens.stats(),
        )
