"""The export stage: best-epoch attention scores -> one Parquet file per layer."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import torch

from sgt_core.artifacts import read_upstream
from sgt_core.config.export import ExportConfig
from sgt_core.errors import SGTError
from sgt_core.estimate.outputs import SCORES_FILE
from sgt_core.export.outputs import SCORES_DIR
from sgt_core.export.scores import write_attention_scores
from sgt_core.export.summary import summarise_scores
from sgt_core.preprocess.interaction_graph import EDGE_TYPES, InteractionGraph
from sgt_core.preprocess.outputs import INTERACTION_GRAPH_FILE

# Scores of each destination must sum to 1; float32 softmax sums drift by far less than this.
NORMALISATION_TOLERANCE = 1e-4


def run_export(cfg: dict, inputs: dict[str, Path], out_dir: Path) -> dict[str, float]:
    """Writes the scores to Parquet and checks, through DuckDB, that each destination's scores sum to 1."""
    # Edges as stored (int32, int8): the writer widens one row group at a time.
    graph = read_upstream(inputs["preprocess"], "preprocess", INTERACTION_GRAPH_FILE,
                          lambda path: InteractionGraph.load(path, compact=True))
    layer_scores = read_upstream(inputs["estimate"], "estimate", SCORES_FILE,  # [L, E]
                                 lambda path: torch.load(path, weights_only=True))
    scores_dir = out_dir / SCORES_DIR
    export = ExportConfig.from_dict(cfg["export"])
    write_attention_scores(layer_scores, graph.edge_index, graph.edge_type, EDGE_TYPES, scores_dir,
                           max_candidates_per_node=export.max_candidates_per_node, ptr=graph.ptr,
                           node_graph=graph.node_graph if graph.num_graphs > 1 else None)
    summary = summarise_scores(scores_dir)
    worst = max(row[4] for row in summary["per_layer"])
    if worst > NORMALISATION_TOLERANCE:
        raise SGTError(f"{scores_dir}: scores of some destination sum to 1 +- {worst:.2e}, beyond {NORMALISATION_TOLERANCE}")
    rows = sum(pq.ParquetFile(path).metadata.num_rows for path in scores_dir.glob("layer_*.parquet"))
    metrics = {"rows": rows, "max_normalisation_error": float(worst)}
    for layer, _, entropy, _, _ in summary["per_layer"]:
        metrics[f"mean_entropy_layer_{layer}"] = float(entropy)
    for layer, edge_type, mass, _ in summary["mass"]:
        metrics[f"mass_{edge_type}_layer_{layer}"] = float(mass)
    return metrics
