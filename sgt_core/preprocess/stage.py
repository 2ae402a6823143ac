"""The preprocess stage: dataset config -> interaction_graph.pt (and substructures.npz with tokens)."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from sgt_core.data import load_dataset
from sgt_core.preprocess.builder import SUBSTRUCTURE_STREAM, AnchorOptions, build_interaction_graph
from sgt_core.preprocess.interaction_graph import INTERACTION_GRAPH_FILE
from sgt_core.preprocess.substructure_tokens import (
    SUBSTRUCTURES_FILE,
    SubstructureOptions,
    sample_substructure_tokens,
)


def _options(group: dict) -> dict:
    """A component's config group without its `enabled` switch: its options' constructor arguments."""
    return {key: value for key, value in group.items() if key != "enabled"}


def run_preprocess(cfg: dict, inputs: dict[str, Path], out_dir: Path) -> dict[str, float]:
    """Loads and validates the dataset, builds its interaction graph and saves it under `out_dir`.

    With substructure tokens on, the sampled substructures and their encodings are saved too
    (`substructures.npz`), so they are computed once per preprocess cache key.
    """
    graph = load_dataset(cfg["dataset"], seed=cfg["seed"])
    options = cfg["preprocess"]
    expander = options["expander"]
    metrics: dict[str, float] = {}

    tokens = None
    if options["substructures"]["enabled"]:
        started = time.perf_counter()
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
    return {
        **interaction_graph.stats,
        **metrics,
        "num_features": graph.num_features,
        "num_classes": graph.num_classes,
        "num_input_edges": graph.num_edges,
    }
