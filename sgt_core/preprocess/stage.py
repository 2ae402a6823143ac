"""The preprocess stage: dataset config -> interaction_graph.pt (and substructures.npz with tokens)."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import numpy as np
import torch
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from sgt_core.data import load_dataset
from sgt_core.preprocess.builder import SUBSTRUCTURE_STREAM, AnchorOptions, build_interaction_graph
from sgt_core.preprocess.interaction_graph import INTERACTION_GRAPH_FILE, NODE_KINDS, InteractionGraph
from sgt_core.preprocess.substructure_tokens import (
    SUBSTRUCTURES_FILE,
    SubstructureOptions,
    sample_substructure_tokens,
)
from sgt_core.preprocess.degrees import IN_DEGREES_FILE, in_degree_histograms

log = logging.getLogger(__name__)


def _options(group: dict) -> dict:
    """A component's config group without its `enabled` switch: its options' constructor arguments."""
    return {key: value for key, value in group.items() if key != "enabled"}


def _graph_statistics(edge_index: torch.Tensor, num_nodes: int, interaction_graph: InteractionGraph) -> dict:
    """Node counts per kind, input and interaction-graph degrees, connected components of the input graph."""
    kinds = torch.bincount(interaction_graph.node_kind, minlength=len(NODE_KINDS)).tolist()
    input_degree = torch.bincount(edge_index[1], minlength=num_nodes).double()  # [n]
    in_degree = interaction_graph.ptr.diff()  # [N]
    src, dst = edge_index.numpy()
    adjacency = coo_matrix((np.ones(src.size, dtype=np.int8), (src, dst)), shape=(num_nodes, num_nodes))
    return {
        **{f"num_{kind}_nodes": count for kind, count in zip(NODE_KINDS, kinds)},
        "input_mean_degree": input_degree.mean().item() if num_nodes else 0.0,
        "input_max_degree": int(input_degree.max().item()) if num_nodes else 0,
        "max_in_degree": int(in_degree.max().item()) if in_degree.numel() else 0,
        "num_components": int(connected_components(adjacency, directed=False)[0]),
    }


def run_preprocess(cfg: dict, inputs: dict[str, Path], out_dir: Path) -> dict[str, float]:
    """Loads and validates the dataset, builds its interaction graph and saves it under `out_dir`.

    With substructure tokens on, the sampled substructures and their encodings are saved too
    (`substructures.npz`), so they are computed once per preprocess cache key.
    """
    log.info("preprocess: loading dataset %s", cfg["dataset"]["name"])
    graph = load_dataset(cfg["dataset"], seed=cfg["seed"])
    log.info("preprocess: %d nodes, %d edges", graph.num_nodes, graph.num_edges)
    options = cfg["preprocess"]
    expander = options["expander"]
    metrics: dict[str, float] = {}

    tokens = None
    if options["substructures"]["enabled"]:
        started = time.perf_counter()
        log.info("preprocess: sampling substructure tokens")
        generator = np.random.default_rng([cfg["seed"], SUBSTRUCTURE_STREAM])
        substructure_options = SubstructureOptions(**_options(options["substructures"]))
        tokens = sample_substructure_tokens(
            graph.edge_index.numpy(), graph.num_nodes, substructure_options, generator
        )
        tokens.save(out_dir / SUBSTRUCTURES_FILE)
        metrics["seconds_substructures"] = time.perf_counter() - started

    interaction_graph = build_interaction_graph(
        graph,
        self_loops=options["self_loops"],
        expander_degree=expander["degree"] if expander["enabled"] else None,
        ramanujan_slack=expander["ramanujan_slack"],
        expander_max_tries=expander["max_tries"],
        virtual_nodes=options["virtual_nodes"],
        seed=cfg["seed"],
        per_component=expander["per_component"],
        anchors=AnchorOptions(**_options(options["anchors"])) if options["anchors"]["enabled"] else None,
        substructure_tokens=tokens,
        lpe_eigenpairs=options["lpe"]["m"] if options["lpe"]["enabled"] else None,
    )
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
        "num_classes": graph.num_classes,
        "num_input_edges": graph.num_edges,
    }
