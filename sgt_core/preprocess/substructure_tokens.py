"""Substructure tokens for the interaction graph: matched, coverage-sampled and encoded (DeepGraph).

DeepGraph (Zhao et al., "Are More Layers Beneficial to Graph Transformers?", ICLR 2023) adds one token
node per sampled substructure; `sgt_core.preprocess.builder` joins each token both ways to its member
nodes (edge type `substructure`). This module runs the data side once per graph, from the steps in
`sgt_core/preprocess/substructures/`:

    match_substructures -> coverage_balanced_sample -> dfs_adjacency_encodings

and keeps the result as a preprocessing artifact (`SUBSTRUCTURES_FILE`), so it is computed once per
preprocess cache key and can be inspected without re-running the matcher.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sgt_core.config.preprocess import SubstructuresConfig
from sgt_core.preprocess.interaction_graph import SUBSTRUCTURE_TYPES
from sgt_core.preprocess.many_graphs.layout import GraphSet
from sgt_core.preprocess.many_graphs.substructure_coverage import coverage_balanced_sample_per_graph
from sgt_core.preprocess.many_graphs.substructure_matching import PairLookup, match_substructures_per_graph
from sgt_core.preprocess.substructures.coverage import coverage_balanced_sample
from sgt_core.preprocess.substructures.dfs_encoding import dfs_adjacency_encodings
from sgt_core.preprocess.substructures.instances import Substructures
from sgt_core.preprocess.substructures.matching import match_substructures

__all__ = ["SUBSTRUCTURES_FILE", "SubstructureTokens", "sample_substructure_tokens"]

SUBSTRUCTURES_FILE = "substructures.npz"


@dataclass(frozen=True, eq=False)
class SubstructureTokens:
    """The sampled substructures of one graph, ready to become token nodes.

    Attributes:
        selection: the sampled instances, token t = instance t (members are input-graph node ids).
        adjacency: float32 [T, s*s] DFS-ordered induced adjacency of each instance, flattened.
        candidate_counts: matched instances per type, before sampling.
    """

    selection: Substructures
    adjacency: np.ndarray
    candidate_counts: dict[str, int]

    @property
    def num_tokens(self) -> int:
        return len(self.selection)

    def stats(self) -> dict[str, int]:
        """Token count, and candidates and tokens per type (types with candidates only)."""
        stats = {"num_tokens": self.num_tokens}
        picked = self.selection.type_counts()
        for name in SUBSTRUCTURE_TYPES:
            if self.candidate_counts.get(name, 0):
                stats[f"candidates_{name}"] = self.candidate_counts[name]
                stats[f"tokens_{name}"] = picked[name]
        return stats

    def save(self, path: Path) -> None:
        np.savez_compressed(
            path,
            members=self.selection.members,
            ptr=self.selection.ptr,
            type_id=self.selection.type_id,
            adjacency=self.adjacency.astype(np.uint8),  # 0/1: a quarter of float32's bytes to compress
            candidate_counts=np.array([self.candidate_counts.get(n, 0) for n in SUBSTRUCTURE_TYPES]),
            type_names=np.array(SUBSTRUCTURE_TYPES),
        )

    @classmethod
    def load(cls, path: Path) -> SubstructureTokens:
        with np.load(path) as data:
            selection = Substructures(members=data["members"], ptr=data["ptr"], type_id=data["type_id"])
            counts = dict(zip(data["type_names"].tolist(), data["candidate_counts"].tolist()))
            return cls(selection=selection, adjacency=data["adjacency"].astype(np.float32), candidate_counts=counts)


def sample_substructure_tokens(
    edge_index: np.ndarray,
    num_nodes: int,
    options: SubstructuresConfig,
    generator: np.random.Generator,
    graph_ptr: np.ndarray | None = None,
) -> SubstructureTokens:
    """Matches the vocabulary, samples with coverage balancing, and encodes each sampled instance.

    On a dataset of many graphs (`graph_ptr` with G > 1) all three steps run inside every graph, vectorised
    across graphs (`many_graphs.substructure_matching`, `many_graphs.substructure_coverage`): the caps of
    `options.types` apply per graph, every token's members lie in one graph, and the tokens come graph by
    graph. Otherwise (one graph) the one-graph steps run as they always did.

    Args:
        edge_index: int [2, E] input-graph edges (symmetrised, loops ignored).
        num_nodes: input-graph nodes n.
        options: `preprocess.substructures`: the caps (`types`), coverage `threshold` and encoding `max_size`.
        generator: the only source of randomness (matching order, walks, sampling ties).
        graph_ptr: int [G+1] the graphs' node ranges of a dataset of many graphs; None for one graph.
    """
    if graph_ptr is not None and len(graph_ptr) > 2:
        graphs = GraphSet.from_union(np.asarray(graph_ptr), edge_index)
        candidates, instance_graph = match_substructures_per_graph(
            graphs, types=dict(options.types), generator=generator, hop2_max_size=options.max_size)
        picks = coverage_balanced_sample_per_graph(candidates, instance_graph, graphs.node_graph, options.threshold,
                                                   generator)
        selection = candidates.select(picks)
        adjacency = dfs_adjacency_encodings(selection, edge_index, num_nodes, options.max_size,
                                            adjacent=PairLookup(graphs))  # [T, s*s]
        return SubstructureTokens(selection, adjacency, candidates.type_counts())
    # A hop2 instance holds at most max_size nodes, so its encoding is never truncated.
    candidates = match_substructures(
        edge_index, num_nodes, types=dict(options.types), generator=generator, hop2_max_size=options.max_size
    )
    picks = coverage_balanced_sample(candidates, num_nodes, options.threshold, generator)
    selection = candidates.select(picks)
    adjacency = dfs_adjacency_encodings(selection, edge_index, num_nodes, options.max_size)  # [T, s*s]
    return SubstructureTokens(selection, adjacency, candidates.type_counts())
