"""The estimate stage: interaction graph -> per-layer attention scores of the best validation epoch."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from sgt_core.metrics import evaluate, metric_name
from sgt_core.models import AttentionScoreEstimator
from sgt_core.preprocess.interaction_graph import EDGE_TYPES, INTERACTION_GRAPH_FILE, NODE_KINDS, InteractionGraph
from sgt_core.schedules import cosine_with_warmup, temperature
from sgt_core.seeding import seed_everything

log = logging.getLogger(__name__)

SCORES_FILE = "attention_scores.pt"
ESTIMATOR_FILE = "estimator.pt"
HISTORY_FILE = "history.json"


def run_estimate(cfg: dict, inputs: dict[str, Path], out_dir: Path) -> dict[str, float]:
    """Trains the estimator on CPU and saves the best epoch's scores ([L, E] float32) and weights."""
    options = cfg["estimator"]
    seed_everything(cfg["seed"])
    graph = InteractionGraph.load(inputs["preprocess"] / INTERACTION_GRAPH_FILE)
    metric = metric_name(graph.num_classes)
    model = AttentionScoreEstimator(
        in_features=graph.x.shape[1],
        num_classes=graph.num_classes,
        width=options["width"],
        num_layers=options["num_layers"],
        num_edge_types=len(EDGE_TYPES),
        num_node_kinds=len(NODE_KINDS),
        layer_norm=options["layer_norm"],
        logit_clip=options["logit_clip"],
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=options["lr"], weight_decay=options["weight_decay"])
    scheduler = cosine_with_warmup(optimizer, options["warmup_epochs"], options["epochs"])

    best = {"epoch": -1, "val": float("-inf")}
    history, started = [], time.perf_counter()
    for epoch in range(options["epochs"]):
        tau = temperature(epoch, **options["temperature"])
        model.train()
        logits, layer_scores = model(graph.x, graph.node_kind, graph.edge_index, graph.edge_type, tau)
        loss = F.cross_entropy(logits[graph.train_mask], graph.y[graph.train_mask])
        # The estimator has no dropout and layer norm has no train/eval difference, so this forward pass
        # already is the evaluation of the current weights: no second pass is needed to score the epoch.
        val = evaluate(logits[graph.val_mask], graph.y[graph.val_mask], graph.num_classes)
        if val > best["val"]:
            best = {
                "epoch": epoch,
                "val": val,
                "test": evaluate(logits[graph.test_mask], graph.y[graph.test_mask], graph.num_classes),
                "scores": torch.stack([s.detach() for s in layer_scores]).float(),  # [L, E]
                "state": {k: v.detach().clone() for k, v in model.state_dict().items()},
            }
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        scheduler.step()
        history.append({"epoch": epoch, "loss": loss.item(), f"val_{metric}": val, "temperature": tau})
        if epoch % 10 == 0 or epoch == options["epochs"] - 1:
            log.info("estimate epoch %d/%d loss %.4f val_%s %.4f tau %.3f",
                     epoch + 1, options["epochs"], loss.item(), metric, val, tau)

    torch.save(best["scores"], out_dir / SCORES_FILE)
    torch.save({"state_dict": best["state"], "config": options, "epoch": best["epoch"]}, out_dir / ESTIMATOR_FILE)
    (out_dir / HISTORY_FILE).write_text(json.dumps(history))
    return {
        "best_epoch": best["epoch"],
        f"val_{metric}": best["val"],
        f"test_{metric}": best["test"],
        "seconds": time.perf_counter() - started,
    }
