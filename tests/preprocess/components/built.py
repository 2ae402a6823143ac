"""A dataset of many small graphs built with every component on, shared by the component tests."""

from __future__ import annotations

from functools import cache

import numpy as np

from sgt_core.config.preprocess import AnchorsConfig, ExpanderConfig, LpeConfig, SubstructuresConfig
from sgt_core.preprocess.builder import SUBSTRUCTURE_STREAM, build_interaction_graph
from sgt_core.preprocess.interaction_graph import EDGE_TYPES, InteractionGraph
from sgt_core.preprocess.substructure_tokens import SubstructureTokens, sample_substructure_tokens
from tests.preprocess.many_graphs.graph_sets import random_graph_set

SEED = 5
VIRTUAL = 2
M = 6
ANCHORS = AnchorsConfig(k=2, max_khop_per_node=6, max_anchors_per_node=3, max_spd=6)
CAPS = {"cycle_5": 20, "cycle_6": 20, "star_3": 20, "path_4": 20, "path_6": 20, "hop2": None, "random_walk": 3}


@cache
def graph_set():
    return random_graph_set(70, seed=11)


def tokens(data, seed: int = SEED) -> SubstructureTokens:
    options = SubstructuresConfig(threshold=2, max_size=8, types=CAPS)
    return sample_substructure_tokens(data.edge_index.numpy(), data.num_nodes, options,
                                      np.random.default_rng([seed, SUBSTRUCTURE_STREAM]),
                                      graph_ptr=data.graph_ptr.numpy() if "graph_ptr" in data else None)


def build(data=None, seed: int = SEED, compact: bool = False, **overrides) -> InteractionGraph:
    data = graph_set() if data is None else data
    options = {"self_loops": True, "expander": ExpanderConfig(degree=6), "virtual_nodes": VIRTUAL, "seed": seed,
               "anchors": ANCHORS, "substructure_tokens": tokens(data, seed), "lpe": LpeConfig(m=M)}
    options.update(overrides)
    return build_interaction_graph(data, compact=compact, **options)


@cache
def built() -> InteractionGraph:
    return build()


def edges_of(graph: InteractionGraph, name: str) -> tuple[np.ndarray, np.ndarray]:
    """(src, dst) of one edge type."""
    src, dst = graph.edge_index[:, graph.edge_type == EDGE_TYPES.index(name)].numpy()
    return src, dst
