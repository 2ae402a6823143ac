"""The preprocess stage: dataset config -> interaction_graph.pt."""

from __future__ import annotations

from pathlib import Path

from sgt_core.data import load_dataset
from sgt_core.preprocess.builder import build_interaction_graph
from sgt_core.preprocess.interaction_graph import INTERACTION_GRAPH_FILE


def run_preprocess(cfg: dict, inputs: dict[str, Path], out_dir: Path) -> dict[str, float]:
    """Loads and validates the dataset, builds its interaction graph and saves it under `out_dir`."""
    graph = load_dataset(cfg["dataset"], seed=cfg["seed"])
    options = cfg["preprocess"]
    expander = options["expander"]
    interaction_graph = build_interaction_graph(
        graph,
        self_loops=options["self_loops"],
        expander_degree=expander["degree"] if expander["enabled"] else None,
        ramanujan_slack=expander["ramanujan_slack"],
        expander_max_tries=expander["max_tries"],
        virtual_nodes=options["virtual_nodes"],
        seed=cfg["seed"],
        per_component=expander["per_component"],
    )
    interaction_graph.save(out_dir / INTERACTION_GRAPH_FILE)
    return {
        **interaction_graph.stats,
        "num_features": graph.num_features,
        "num_classes": graph.num_classes,
        "num_input_edges": graph.num_edges,
    }
