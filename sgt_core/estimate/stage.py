"""The estimate stage: interaction graph -> per-layer attention scores of the best validation epoch."""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from sgt_core.artifacts import atomic_path, read_upstream
from sgt_core.config.estimator import EstimatorConfig
from sgt_core.estimate.outputs import ESTIMATOR_FILE, HISTORY_FILE, SCORES_FILE
from sgt_core.metrics import UNDEFINED, evaluate, metric_name, splits_without_metric
from sgt_core.models import AttentionScoreEstimator, NodeExtras
from sgt_core.numerics import check_loss
from sgt_core.optim import AdamW, CosineWithWarmup
from sgt_core.preprocess.interaction_graph import NODE_KINDS, InteractionGraph
from sgt_core.preprocess.outputs import INTERACTION_GRAPH_FILE
from sgt_core.progress import Progress
from sgt_core.schedules import temperature
from sgt_core.seeding import seed_everything

log = logging.getLogger(__name__)


def run_estimate(cfg: dict, inputs: dict[str, Path], out_dir: Path) -> dict[str, float]:
    """Trains the estimator on CPU and saves the best epoch's scores ([L, E] float32) and weights."""
    seed_everything(cfg["seed"])
    # Edges as stored (int32 indices, int8 types): the stage's memory is per edge, and this is most of it.
    graph = read_upstream(inputs["preprocess"], "preprocess", INTERACTION_GRAPH_FILE,
                          lambda path: InteractionGraph.load(path, compact=True))
    estimator = EstimatorConfig.from_dict(cfg["estimator"])
    metric = metric_name(graph.num_classes)
    undefined = splits_without_metric(graph.y, {"val": graph.val_mask, "test": graph.test_mask},
                                      graph.num_classes, "estimate")
    # The graph's sizes (features, classes, edge types, node kinds, SPD, LPE and tokens) and the group's.
    model = AttentionScoreEstimator(**graph.model_input_sizes(), **estimator.network_arguments())
    model.start_at_prior(torch.bincount(graph.y[graph.train_mask], minlength=graph.num_classes))
    # The LPE and substructure-token inputs; None where the component is off.
    extras = NodeExtras.from_graph(graph, NODE_KINDS.index("substructure"))

    # Degrees, edge codes and the compiled kernels' grouping by source: once, not per layer and epoch.
    edges = model.prepare(graph.edge_index, graph.edge_type, graph.edge_spd if graph.num_spd_buckets else None,
                          graph.num_nodes)
    if edges.compact is not None:
        # The compiled kernels read only `edges`' compact copy: the graph's destinations, types and SPD
        # buckets (7 bytes per edge, 1.4 GB at Amazon2M's size) are let go for the rest of the stage.
        graph = dataclasses.replace(graph, edge_index=graph.edge_index.new_empty(2, 0),
                                    edge_type=graph.edge_type.new_empty(0), edge_spd=graph.edge_spd.new_empty(0))

    def forward(tau: float) -> tuple[torch.Tensor, list[torch.Tensor]]:
        return model(graph.x, graph.node_kind, edges, tau, extras)

    optimizer = AdamW(model.parameters(), lr=estimator.lr, weight_decay=estimator.weight_decay)
    scheduler = CosineWithWarmup(optimizer, warmup_epochs=estimator.warmup_epochs, epochs=estimator.epochs)

    best = {"epoch": -1, "selection": float("-inf")}
    history, started = [], time.perf_counter()
    epochs = Progress(range(estimator.epochs), "estimate epoch", log)
    for epoch in epochs:
        tau = temperature(epoch, **estimator.temperature.as_dict())  # anneal, initial_epochs, gamma, minimum
        model.train()
        logits, layer_scores = forward(tau)
        loss = F.cross_entropy(logits[graph.train_mask], graph.y[graph.train_mask])
        check_loss(loss.item(), "estimate", epoch, graph.x, "estimator.lr")
        # The estimator has no dropout and layer norm has no train/eval difference, so this forward pass
        # already is the evaluation of the current weights: no second pass is needed to score the epoch.
        # Only the LPE behaves differently in training (random eigenvector sign flips): with it, the
        # epoch is scored, and its scores kept, from an evaluation pass.
        if model.encoder.lpe is not None:
            model.eval()
            with torch.no_grad():
                logits, layer_scores = forward(tau)
        row = {"epoch": epoch, "loss": loss.item(),
               "val_loss": F.cross_entropy(logits[graph.val_mask].detach(), graph.y[graph.val_mask]).item()}
        if "val" not in undefined:
            row[f"val_{metric}"] = evaluate(logits[graph.val_mask], graph.y[graph.val_mask], graph.num_classes)
        selection = -row["val_loss"] if "val" in undefined else row[f"val_{metric}"]
        if selection > best["selection"]:
            best = {
                "epoch": epoch,
                "selection": selection,
                f"val_{metric}": row.get(f"val_{metric}", UNDEFINED),
                f"test_{metric}": UNDEFINED if "test" in undefined else evaluate(
                    logits[graph.test_mask], graph.y[graph.test_mask], graph.num_classes),
                "state": {k: v.detach().clone() for k, v in model.state_dict().items()},
            }
            # On disk at once rather than a second [L, E] copy in memory until the end: that copy would be
            # 4 bytes per edge and layer for the whole run, the file costs a write per better epoch. Through
            # a temporary file, so that the file always holds one whole tensor.
            with atomic_path(out_dir / SCORES_FILE) as partial:
                torch.save(torch.stack([s.detach().float() for s in layer_scores]), partial)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step()
        # Dropped now, not when the next forward pass returns: this epoch's scores would otherwise sit
        # beside the next epoch's, 4 bytes per edge and layer more at the peak.
        del logits, layer_scores, loss
        history.append({**row, "temperature": tau})
        epochs.set_metrics(**{k: v for k, v in history[-1].items() if k != "epoch"})

    checkpoint = {"state_dict": best["state"], "config": cfg["estimator"], "epoch": best["epoch"]}
    torch.save(checkpoint, out_dir / ESTIMATOR_FILE)
    (out_dir / HISTORY_FILE).write_text(json.dumps(history))
    return {
        "best_epoch": best["epoch"],
        f"val_{metric}": best[f"val_{metric}"],
        f"test_{metric}": best[f"test_{metric}"],
        "selected_by": "val_loss" if "val" in undefined else f"val_{metric}",
        "seconds": time.perf_counter() - started,
    }
