"""The preprocess stage: dataset config -> interaction_graph.pt (and substructures.npz with tokens)."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import numpy as np
import torch
from scipy.sparse.csgraph import connected_components

from sgt_core.config.preprocess import PreprocessConfig
from sgt_core.data import load_dataset
from sgt_core.errors import ConfigError
from sgt_core.preprocess.adjacency import sorted_csr
from sgt_core.preprocess.builder import SUBSTRUCTURE_STREAM, build_interaction_graph
from sgt_core.preprocess.degrees import in_degree_histograms
from sgt_core.preprocess.interaction_graph import NODE_KINDS, InteractionGraph
from sgt_core.preprocess.outputs import IN_DEGREES_FILE, INTERACTION_GRAPH_FILE
from sgt_core.preprocess.substructure_tokens import SUBSTRUCTURES_FILE, sample_substructure_tokens

log = logging.getLogger(__name__)


# The switchable components whose cost grows faster than the graph, with what makes it grow; each group's
# `max_nodes` refuses larger graphs (checked by `check_size_limits` before any long work).
SIZE_LIMITED = {
    "anchors": "one BFS per anchor, and the anchors grow with the graph",
    "substructures": "coverage sampling costs O(tokens * nodes) on one graph",
    "lpe": "ARPACK's Laplacian eigenpairs cost more than linear time",
}


def limited_size(graph) -> tuple[int, str]:
    """The size `max_nodes` limits, and what it is: the largest graph's nodes on a dataset of many graphs (the
    costly components are built graph by graph, so their cost follows the largest graph), else the graph's."""
    ptr = getattr(graph, "graph_ptr", None)
    if ptr is not None and ptr.numel() > 2:
        return int(ptr.diff().max()), "the largest graph of this dataset"
    return int(graph.num_nodes), "this graph"


def check_size_limits(preprocess: PreprocessConfig, num_nodes: int, what: str = "this graph") -> None:
    """Refuses a graph too large for a switched-on component (its `max_nodes`; None: no limit).

    On a dataset of many graphs `num_nodes` is the largest graph's (`limited_size`).

    Raises:
        ConfigError: one line naming the component, its limit and why it has one.
    """
    for name, reason in SIZE_LIMITED.items():
        group = getattr(preprocess, name)
        limit = group.max_nodes
        if not group.enabled or limit is None:
            continue
        if num_nodes > limit:
            raise ConfigError(
                f"preprocess.{name}.enabled: refused on {what} of {num_nodes} nodes, above "
                f"preprocess.{name}.max_nodes={limit} ({reason}); switch it off or raise the limit"
            )


def _graph_statistics(edge_index: torch.Tensor, num_nodes: int, interaction_graph: InteractionGraph) -> dict:
    """Node counts per kind, input and interaction-graph degrees, connected components of the input graph.

    `edge_index` is the loaded graph's, which holds both directions of every edge (`load_dataset`), so its
    strongly connected components are its connected components: found without building the transpose,
    from a CSR matrix that the loaders' sorted edge list gives in linear time.
    """
    kinds = torch.bincount(interaction_graph.node_kind, minlength=len(NODE_KINDS)).tolist()
    input_degree = torch.bincount(edge_index[1], minlength=num_nodes)  # [n]
    in_degree = interaction_graph.ptr.diff()  # [N]
    src, dst = edge_index.numpy()
    adjacency = sorted_csr(src, dst, np.ones(src.size), num_nodes)  # float64: what csgraph works in
    num_components = connected_components(adjacency, directed=True, connection="strong")[0]
    return {
        **{f"num_{kind}_nodes": count for kind, count in zip(NODE_KINDS, kinds)},
        "input_mean_degree": input_degree.double().mean().item() if num_nodes else 0.0,
        "input_max_degree": int(input_degree.max().item()) if num_nodes else 0,
        "max_in_degree": int(in_degree.max().item()) if in_degree.numel() else 0,
        "num_components": int(num_components),
    }


def build_preprocessed(preprocess: PreprocessConfig, graph, seed: int) -> tuple[InteractionGraph, object, dict]:
    """The stage's building from a loaded graph: substructure tokens (when on), then the interaction graph.

    Returns:
        (the interaction graph in the stored dtypes, the `SubstructureTokens` or None, {"seconds_substructures"}
        when tokens were sampled); what `run_preprocess` saves, and what benchmarks/preprocess_graphs.py times.
    """
    metrics: dict[str, float] = {}
    tokens = None
    if preprocess.substructures.enabled:
        started = time.perf_counter()
        log.info("preprocess: sampling substructure tokens")
        generator = np.random.default_rng([seed, SUBSTRUCTURE_STREAM])
        ptr = getattr(graph, "graph_ptr", None)
        tokens = sample_substructure_tokens(
            graph.edge_index.numpy(), graph.num_nodes, preprocess.substructures, generator,
            graph_ptr=None if ptr is None else ptr.numpy(),  # many graphs: tokens inside each graph
        )
        metrics["seconds_substructures"] = time.perf_counter() - started
    interaction_graph = build_interaction_graph(
        graph,
        self_loops=preprocess.self_loops,
        expander=preprocess.expander,  # each component's group, read by the builder only when enabled
        virtual_nodes=preprocess.virtual_nodes,
        anchors=preprocess.anchors,
        substructure_tokens=tokens,
        lpe=preprocess.lpe,
        seed=seed,
        compact=True,  # the stored dtypes: a large graph is never held in int64 here
    )
    return interaction_graph, tokens, metrics


def run_preprocess(cfg: dict, inputs: dict[str, Path], out_dir: Path) -> dict[str, float]:
    """Loads and validates the dataset, builds its interaction graph and saves it under `out_dir`.

    With substructure tokens on, the sampled substructures and their encodings are saved too
    (`substructures.npz`), so they are computed once per preprocess cache key.
    """
    preprocess = PreprocessConfig.from_dict(cfg["preprocess"])
    log.info("preprocess: loading dataset %s", cfg["dataset"]["name"])
    graph = load_dataset(cfg["dataset"], seed=cfg["seed"])
    log.info("preprocess: %d nodes, %d edges", graph.num_nodes, graph.num_edges)
    check_size_limits(preprocess, *limited_size(graph))  # before the minutes the expander and tokens may take
    interaction_graph, tokens, metrics = build_preprocessed(preprocess, graph, cfg["seed"])
    if tokens is not None:
        tokens.save(out_dir / SUBSTRUCTURES_FILE)
    interaction_graph.save(out_dir / INTERACTION_GRAPH_FILE)
    # Neighbourhood sizes for the tracking layer's histograms: a few numbers, whatever the graph's size.
    in_degrees = in_degree_histograms(interaction_graph.edge_index, interaction_graph.edge_type,
                                      interaction_graph.num_nodes)
    (out_dir / IN_DEGREES_FILE).write_text(json.dumps(in_degrees))
    log.info("preprocess: interaction graph with %d nodes, %d edges",
             interaction_graph.stats["num_nodes"], interaction_graph.stats["num_edges"])
    return {
        "num_anchors": 0,  # overwritten by the stats when anchors are on
        **interaction_graph.stats,
        **_graph_statistics(graph.edge_index, graph.num_nodes, interaction_graph),
        **metrics,
        "num_features": graph.num_features,
        "num_outputs": interaction_graph.num_outputs,
        "num_input_edges": graph.num_edges,
        "num_graphs": interaction_graph.num_graphs,
        "task": interaction_graph.task,
        "metric": interaction_graph.metric,
        # what every report of a run on this data says (e.g. that ZINC's training set is a stand-in)
        **{f"note_{name}": text for name, text in interaction_graph.notes.items()},
    }
