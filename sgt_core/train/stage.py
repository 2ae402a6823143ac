"""The train stage: interaction graph + exported scores -> trained wide network and its test metric."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from sgt_core.errors import ConfigError
from sgt_core.export.scores import SCORES_DIR, read_attention_scores
from sgt_core.metrics import evaluate, metric_name
from sgt_core.models import Spexphormer
from sgt_core.preprocess.interaction_graph import EDGE_TYPES, NODE_KINDS, InteractionGraph
from sgt_core.preprocess.stage import INTERACTION_GRAPH_FILE
from sgt_core.sampling import sample_full_graph_layers
from sgt_core.schedules import cosine_with_warmup
from sgt_core.seeding import seed_everything

log = logging.getLogger(__name__)

MODEL_FILE = "model.pt"
HISTORY_FILE = "history.json"


def resolve_device(requested: str) -> torch.device:
    """`auto` -> CUDA when available, else CPU; `cuda` fails clearly when there is none."""
    if requested == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if requested == "cuda" and not torch.cuda.is_available():
        raise ConfigError("train.device=cuda but torch.cuda.is_available() is False on this machine")
    return torch.device(requested)


def run_train(cfg: dict, inputs: dict[str, Path], out_dir: Path) -> dict[str, float | str]:
    """Trains the wide network, re-sampling each layer's neighbours every epoch, and keeps the best epoch."""
    model_cfg, options = cfg["model"], cfg["train"]
    seed_everything(cfg["seed"])
    device = resolve_device(options["device"])
    graph = InteractionGraph.load(inputs["preprocess"] / INTERACTION_GRAPH_FILE)
    layer_scores = read_attention_scores(inputs["export"] / SCORES_DIR, graph.edge_index)  # [L, E]
    if layer_scores.shape[0] != model_cfg["num_layers"]:
        raise ConfigError(f"the scores have {layer_scores.shape[0]} layers but model.num_layers is {model_cfg['num_layers']}")
    log.info("training the wide network on %s", device)

    x, node_kind, y = graph.x.to(device), graph.node_kind.to(device), graph.y.to(device)
    edge_index, edge_type, ptr = graph.edge_index.to(device), graph.edge_type.to(device), graph.ptr.to(device)
    layer_scores = layer_scores.to(device)
    generator = torch.Generator(device=device).manual_seed(cfg["seed"])
    metric = metric_name(graph.num_classes)

    def sample_layers():
        return sample_full_graph_layers(
            edge_index, edge_type, ptr, layer_scores, model_cfg["degrees"], method=options["sampler"], generator=generator
        )

    model = Spexphormer(
        in_features=graph.x.shape[1],
        num_classes=graph.num_classes,
        hidden=model_cfg["hidden"],
        num_layers=model_cfg["num_layers"],
        heads=model_cfg["heads"],
        num_edge_types=len(EDGE_TYPES),
        num_node_kinds=len(NODE_KINDS),
        dropout=model_cfg["dropout"],
    ).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=options["lr"], weight_decay=options["weight_decay"])
    scheduler = cosine_with_warmup(optimizer, options["warmup_epochs"], options["epochs"])
    train_mask, val_mask, test_mask = (m.to(device) for m in (graph.train_mask, graph.val_mask, graph.test_mask))

    best = {"epoch": -1, "val": float("-inf"), "test": float("nan"), "state": None}
    history, started = [], time.perf_counter()
    for epoch in range(options["epochs"]):
        model.train()
        logits = model(x, node_kind, sample_layers())  # [N, C]
        loss = F.cross_entropy(logits[train_mask], y[train_mask])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        scheduler.step()

        model.eval()
        with torch.no_grad():
            logits = model(x, node_kind, sample_layers())  # evaluation samples afresh
        val = evaluate(logits, y, val_mask, graph.num_classes)
        if val > best["val"]:
            best = {
                "epoch": epoch,
                "val": val,
                "test": evaluate(logits, y, test_mask, graph.num_classes),
                "state": {k: v.detach().cpu().clone() for k, v in model.state_dict().items()},
            }
        history.append({
            "epoch": epoch,
            "loss": loss.item(),
            f"train_{metric}": evaluate(logits, y, train_mask, graph.num_classes),
            f"val_{metric}": val,
        })
        if epoch % 10 == 0 or epoch == options["epochs"] - 1:
            log.info("train epoch %d/%d loss %.4f val_%s %.4f", epoch + 1, options["epochs"], loss.item(), metric, val)

    seconds = time.perf_counter() - started
    checkpoint = {"state_dict": best["state"], "config": {"model": model_cfg, "train": options}, "epoch": best["epoch"]}
    torch.save(checkpoint, out_dir / MODEL_FILE)
    (out_dir / HISTORY_FILE).write_text(json.dumps(history))
    return {
        "best_epoch": best["epoch"],
        f"val_{metric}": best["val"],
        f"test_{metric}": best["test"],
        "seconds": seconds,
        "seconds_per_epoch": seconds / max(1, options["epochs"]),
        "device": str(device),
    }
