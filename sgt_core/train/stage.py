"""The train stage: interaction graph + exported scores -> trained wide network and its test metric."""

from __future__ import annotations

import json
import logging
import os
import time
from functools import partial
from pathlib import Path

import torch
import torch.distributed as dist

from sgt_core.artifacts import read_upstream
from sgt_core.config.train import TrainConfig
from sgt_core.errors import ConfigError
from sgt_core.export.outputs import SCORES_DIR
from sgt_core.export.scores import read_attention_scores
from sgt_core.metrics import UNDEFINED
from sgt_core.numerics import check_loss
from sgt_core.optim import CosineWithWarmup
from sgt_core.preprocess.interaction_graph import InteractionGraph
from sgt_core.preprocess.outputs import INTERACTION_GRAPH_FILE
from sgt_core.progress import Progress
from sgt_core.sampling.degrees import sampled_degree_histograms
from sgt_core.sampling.reach import warn_if_batches_reach_the_graph
from sgt_core.seeding import seed_everything
from sgt_core.tasks import BestEpoch
from sgt_core.train.device import resolve_device
from sgt_core.train.distributed import Ranks, launch, world_size
from sgt_core.train.evaluation_listeners import notify
from sgt_core.train.graph_set_training import GraphSetTraining
from sgt_core.train.outputs import HISTORY_FILE, MODEL_FILE, SAMPLED_DEGREES_FILE
from sgt_core.train.propagation_rows import ensure_propagation_rows, propagation_rows
from sgt_core.train.training import WideNetworkTraining

log = logging.getLogger(__name__)


def run_train(cfg: dict, inputs: dict[str, Path], out_dir: Path) -> dict[str, float | str]:
    """Trains the wide network, re-sampling each layer's neighbours every epoch, and keeps the best epoch.

    With `train.distributed` on more than one process, torchrun trains it (sgt_core/train/distributed.py):
    its rank 0 writes the same files and reports the same metrics.
    """
    if world_size(cfg["train"]) > 1:
        ensure_propagation_rows(cfg, inputs["preprocess"])  # here, once: the ranks then read them from the store
        return launch(run_rank, cfg, inputs, out_dir)
    device, graph, layer_scores = _start(cfg, inputs)
    log.info("training the wide network on %s", device)
    return _fit(cfg, graph, layer_scores, device, out_dir)


def run_rank(cfg: dict, inputs: dict[str, Path], out_dir: Path) -> dict[str, float | str]:
    """One rank of a distributed run, under torchrun: joins the process group and trains its share."""
    device, graph, layer_scores = _start(cfg, inputs, local_rank=int(os.environ.get("LOCAL_RANK", "0")))
    ranks = Ranks.join(cfg, device)
    try:
        log.info("training the wide network on %d processes (%s backend), rank 0 on %s", ranks.world,
                 dist.get_backend(), device)
        metrics = _fit(cfg, graph, layer_scores, device, out_dir, ranks)
        ranks.finish()
        return metrics
    finally:
        ranks.leave()


def _start(cfg: dict, inputs: dict[str, Path],
           local_rank: int | None = None) -> tuple[torch.device, InteractionGraph, torch.Tensor]:
    """What the stage and every rank do first: seed, choose the device, read the inputs (`_read_inputs`).

    Every rank seeds alike, so all build the same initial network. CUDA means one GPU, named with its
    index (cuda:0, as the metrics report it): with `local_rank` (a rank of a distributed run) that rank's,
    else the current one.
    """
    seed_everything(cfg["seed"])
    device = resolve_device(TrainConfig.from_dict(cfg["train"]).device)
    if device.type == "cuda":
        device = torch.device("cuda", torch.cuda.current_device() if local_rank is None else local_rank)
        torch.cuda.set_device(device)
    graph, layer_scores = _read_inputs(cfg, inputs)
    return device, graph, layer_scores


def _read_inputs(cfg: dict, inputs: dict[str, Path]) -> tuple[InteractionGraph, torch.Tensor]:
    """The interaction graph (edges as stored, int32 and int8) and the scores [L, E], checked against the model."""
    graph = read_upstream(inputs["preprocess"], "preprocess", INTERACTION_GRAPH_FILE,
                          lambda path: InteractionGraph.load(path, compact=True))
    layer_scores = read_upstream(inputs["export"], "export", SCORES_DIR,  # [L, E]
                                 lambda path: read_attention_scores(path, graph.edge_index, graph.ptr))
    num_layers = cfg["model"]["num_layers"]
    if layer_scores.shape[0] != num_layers:
        raise ConfigError(f"the scores have {layer_scores.shape[0]} layers but model.num_layers is {num_layers}")
    return graph, layer_scores


def _fit(cfg: dict, graph: InteractionGraph, layer_scores: torch.Tensor, device: torch.device, out_dir: Path,
         ranks: Ranks | None = None) -> dict[str, float | str]:
    """The epochs, the best epoch's choice and the stage's files; with `ranks`, this rank's part of them."""
    train = TrainConfig.from_dict(cfg["train"])
    task = graph.task_spec(train.regression_loss, train.classification_loss)
    undefined = task.splits_without_metric({"val": graph.y[graph.val_mask], "test": graph.y[graph.test_mask]},
                                           "train")
    if device.type == "cuda":  # the stage's own high-water mark of GPU memory, reported beside the time
        torch.cuda.reset_peak_memory_stats(device)
    if graph.num_graphs > 1:
        training = GraphSetTraining.build(cfg, graph, layer_scores, device)
    else:
        training = WideNetworkTraining.build(cfg, graph, layer_scores, device, propagation_rows(cfg, graph))
    scheduler = CosineWithWarmup(training.optimizer, warmup_epochs=train.warmup_epochs, epochs=train.epochs)
    masks = {split: getattr(graph, f"{split}_mask").to(device) for split in ("train", "val", "test")}
    train_units, val_units, test_units = (training.units(masks[split]) for split in ("train", "val", "test"))
    evaluation = {"val": (val_units, masks["val"]), "test": (test_units, masks["test"])}
    val_targets, test_targets = training.targets(val_units, masks["val"]), training.targets(test_units, masks["test"])
    if graph.num_graphs == 1 and (ranks is None or ranks.rank == 0):
        # once: a batch setting that makes an epoch cost many full-graph ones (batches of whole graphs
        # read only their own graphs, so this is one large graph's question)
        warn_if_batches_reach_the_graph(graph.num_nodes, graph.edge_index.shape[1], train_units.numel(),
                                        train.batch_size, cfg["model"]["degrees"], cfg["model"]["local_top_k"] or 0)
    if ranks is not None:
        ranks.check_split("training", train_units, 2)
        ranks.check_split("evaluation", torch.cat([val_units, test_units]), 1)
        ranks.attach(training)  # synchronised batch norm, DDP
    if train.ema_decay is not None:
        training.average_weights(train.ema_decay)
    evaluated, sampler = training.evaluated, training.sampler

    best, best_scores, best_state = BestEpoch(task, "val" in undefined), {}, None

    def validation_improves(epoch: int, row: dict, val_outputs: torch.Tensor) -> bool:
        """Fills `row`'s validation columns from `val_outputs`; whether `epoch` is the best so far."""
        row["val_loss"] = task.loss(val_outputs, val_targets).item()
        if "val" not in undefined:
            row[f"val_{task.metric}"] = task.value(task.metric, val_outputs, val_targets)
        return best.improves(epoch, row)

    history, started = [], time.perf_counter()
    epochs = Progress(range(train.epochs), "train epoch", log)
    for epoch in epochs:
        loss = training.train_epoch(train_units) if ranks is None else ranks.train_epoch(training, train_units, epoch)
        check_loss(loss, "train", epoch, graph.x, "optimizer.lr")
        scheduler.step()
        row = {"epoch": epoch, "loss": loss}
        if epoch % train.eval_every == 0 or epoch == train.epochs - 1:
            if train.precise_bn_batches is not None:  # refused with ranks: each would average its own
                training.recalibrate_batch_norm(evaluated, train_units, train.precise_bn_batches)
            evaluated.eval()
            improves = partial(validation_improves, epoch, row)
            # Evaluation samples afresh; with ranks, each its slice, then gathered. The test split's outputs
            # count only at the best epoch, so a training that predicts it apart does so only when it improves.
            with torch.no_grad():
                val_outputs, test_outputs = (training.evaluate(evaluation, evaluated, improves) if ranks is None
                                             else ranks.evaluate(training, evaluation, evaluated, improves))
            if ranks is None or ranks.rank == 0:  # e.g. `sgt tune`, which may stop a hopeless trial here
                notify(epoch, row)
            if best.epoch == epoch:
                best_scores = {
                    **{f"val_{k}": v for k, v in task.metrics(val_outputs, val_targets).items()},
                    **{f"test_{k}": v for k, v in task.metrics(test_outputs, test_targets).items()},
                }
                for split in undefined:
                    best_scores[f"{split}_{task.metric}"] = UNDEFINED
                best_state = {k: v.detach().cpu().clone() for k, v in evaluated.state_dict().items()}
        history.append(row)
        epochs.set_metrics(**{k: v for k, v in row.items() if k != "epoch"})

    seconds = time.perf_counter() - started
    if ranks is None or ranks.rank == 0:  # with ranks, every rank holds the same weights and metrics
        groups = ("model", "sampler", "optimizer", "train")
        checkpoint = {"state_dict": best_state, "config": {group: cfg[group] for group in groups},
                      "epoch": best.epoch}
        torch.save(checkpoint, out_dir / MODEL_FILE)
        (out_dir / HISTORY_FILE).write_text(json.dumps(history))
        # What one epoch's sampling gives each node per layer, as a histogram for the tracking layer.
        (out_dir / SAMPLED_DEGREES_FILE).write_text(json.dumps(sampled_degree_histograms(sampler, cfg["seed"])))
    return {
        "best_epoch": best.epoch,
        **best_scores,
        "selected_by": best.selected_by,
        "seconds": seconds,
        "seconds_per_epoch": seconds / max(1, train.epochs),
        "device": str(device),
        **({"peak_cuda_mb": torch.cuda.max_memory_allocated(device) / 2**20} if device.type == "cuda" else {}),
    }
