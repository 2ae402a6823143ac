"""The train stage: interaction graph + exported scores -> trained wide network and its test metric."""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

from sgt_core.artifacts import read_upstream
from sgt_core.config.model import ModelConfig
from sgt_core.config.optimizer import AdamWConfig
from sgt_core.config.sampler import SamplerConfig
from sgt_core.config.train import TrainConfig
from sgt_core.errors import ConfigError
from sgt_core.export.outputs import SCORES_DIR
from sgt_core.export.scores import read_attention_scores
from sgt_core.layers import PropagationRows
from sgt_core.metrics import UNDEFINED, all_metrics, evaluate, metric_name, splits_without_metric
from sgt_core.models import NodeExtras, Spexphormer
from sgt_core.numerics import check_loss
from sgt_core.optim import AdamW, CosineWithWarmup
from sgt_core.preprocess.interaction_graph import GRAPH_EDGE_TYPE, NODE_KINDS, InteractionGraph
from sgt_core.preprocess.outputs import INTERACTION_GRAPH_FILE
from sgt_core.progress import Progress
from sgt_core.sampling import LayerSampler
from sgt_core.sampling.degrees import sampled_degree_histograms
from sgt_core.sampling.reach import warn_if_batches_reach_the_graph
from sgt_core.seeding import seed_everything
from sgt_core.train.device import resolve_device
from sgt_core.train.distributed import Ranks, launch, world_size
from sgt_core.train.evaluation_listeners import notify
from sgt_core.train.outputs import HISTORY_FILE, MODEL_FILE, SAMPLED_DEGREES_FILE
from sgt_core.train.propagation_rows import ensure_propagation_rows, propagation_rows

log = logging.getLogger(__name__)


def read_groups(cfg: dict) -> tuple[ModelConfig, SamplerConfig, AdamWConfig, TrainConfig]:
    """The groups the stage reads, typed: `model`, `sampler`, `optimizer` and `train`."""
    return (ModelConfig.from_dict(cfg["model"]), SamplerConfig.from_dict(cfg["sampler"]),
            AdamWConfig.from_dict(cfg["optimizer"]), TrainConfig.from_dict(cfg["train"]))


@dataclass
class WideNetworkTraining:
    """The wide network with its sampler and optimizer on one interaction graph: train an epoch, or predict."""

    x: torch.Tensor  # [N, F]
    node_kind: torch.Tensor  # [N]
    y: torch.Tensor  # [N]
    extras: NodeExtras  # the LPE and token inputs per node; None fields where the component is off
    sampler: LayerSampler
    model: Spexphormer
    optimizer: AdamW
    generator: torch.Generator  # the sampler's, which also shuffles the batches
    batch_size: int | None  # None: full graph; else Algorithm 2 batches of that many target nodes
    averaged: AveragedModel | None = None  # the weights' moving average (`average_weights`), else None

    @classmethod
    def build(cls, cfg: dict, graph: InteractionGraph, layer_scores: torch.Tensor, device: torch.device,
              propagation: PropagationRows | None = None) -> WideNetworkTraining:
        """`propagation`: the rows `model.local_top_k` needs (`propagation_rows`), None without it."""
        network, sampling, optimizer, train = read_groups(cfg)
        if (network.local_top_k is None) != (propagation is None):
            raise ValueError(f"model.local_top_k is {network.local_top_k} but propagation rows were "
                             f"{'not ' if propagation is None else ''}given")
        x, node_kind, y = graph.x.to(device), graph.node_kind.to(device), graph.y.to(device)
        # real graph degrees only for a network that reads them (local branch, degree signal)
        reads_degrees = network.local != "none" or network.degree_signal
        extras = NodeExtras.from_graph(graph, NODE_KINDS.index("substructure"),
                                       GRAPH_EDGE_TYPE if reads_degrees else None).to(device)
        edge_spd = graph.edge_spd.to(device) if graph.num_spd_buckets else None
        generator = torch.Generator(device=device).manual_seed(cfg["seed"])
        if propagation is not None:  # the gcn branch's K steps as top-k rows, for every layer
            propagation = propagation.to(device)
        sampler = LayerSampler(graph.edge_index.to(device), graph.edge_type.to(device), graph.ptr.to(device),
                               layer_scores.to(device), degrees=network.degrees, method=sampling.method,
                               generator=generator, edge_spd=edge_spd, propagation=propagation)
        # The graph's sizes (features, classes, edge types, node kinds, SPD, LPE and tokens) and the group's.
        model = Spexphormer(**graph.model_input_sizes(), graph_edge_type=GRAPH_EDGE_TYPE,
                            **network.network_arguments()).to(device)
        adamw = AdamW(model.parameter_groups(optimizer.input_weight_decay), lr=optimizer.lr,
                      weight_decay=optimizer.weight_decay,
                      betas=tuple(optimizer.betas), eps=optimizer.eps,
                      decoupled_weight_decay=optimizer.decoupled_weight_decay)
        return cls(x, node_kind, y, extras, sampler, model, adamw, generator, train.batch_size)

    def average_weights(self, decay: float) -> None:
        """From now on, keep an exponential moving average of the model's weights and buffers.

        After every optimiser step (`optimizer_step`): average <- decay * average + (1 - decay) * weights,
        the first step's weights taken as they are. Buffers are averaged too, so batch norm's running
        statistics match the averaged weights (timm's ModelEmaV2 does the same); its integer count of
        batches, which nothing reads while its momentum is set, is averaged and truncated along with them.
        Call it after the model takes its final form (synchronised batch norm under DDP), which the copy keeps.
        """
        self.averaged = AveragedModel(self.model, multi_avg_fn=get_ema_multi_avg_fn(decay), use_buffers=True)

    @property
    def evaluated(self) -> nn.Module:
        """The network that evaluation runs and the checkpoint keeps: the moving average, else the model."""
        return self.model if self.averaged is None else self.averaged.module

    def predict(self, nodes: torch.Tensor, network: nn.Module | None = None) -> torch.Tensor:
        """Logits [len(nodes), C] with freshly sampled layers: one full-graph pass or Algorithm 2 batches.

        `network` is the model unless given (evaluation passes `evaluated`).
        """
        network = self.model if network is None else network
        if self.batch_size is None:
            return network(self.x, self.node_kind, self.sampler.full(), self.extras)[nodes]
        outputs = []
        for chunk in nodes.split(self.batch_size):
            input_nodes, layers = self.sampler.batch(chunk)
            outputs.append(network(self.x[input_nodes], self.node_kind[input_nodes], layers,
                                   self.extras.select(input_nodes)))
        return torch.cat(outputs)

    def train_epoch(self, train_nodes: torch.Tensor) -> float:
        """One epoch over `train_nodes` (shuffled batches, or one full-graph step); returns the mean loss."""
        self.model.train()
        if self.batch_size is None:
            return self._step(train_nodes)
        order = torch.randperm(train_nodes.numel(), generator=self.generator, device=train_nodes.device)
        chunks = list(train_nodes[order].split(self.batch_size))
        if len(chunks) > 1 and chunks[-1].numel() < 2:  # batch norm needs two rows in training mode
            chunks[-2:] = [torch.cat(chunks[-2:])]
        losses = [self._step(chunk) for chunk in chunks]
        return sum(losses) / len(losses)

    def _step(self, nodes: torch.Tensor) -> float:
        loss = F.cross_entropy(self.predict(nodes), self.y[nodes])
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer_step()
        return loss.item()

    def optimizer_step(self) -> None:
        """The optimiser's step, then the moving average's, if any (also each DDP step, `Ranks.train_epoch`)."""
        self.optimizer.step()
        if self.averaged is not None:
            self.averaged.update_parameters(self.model)


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
    metric = metric_name(graph.num_classes)
    undefined = splits_without_metric(graph.y, {"val": graph.val_mask, "test": graph.test_mask},
                                      graph.num_classes, "train")
    if device.type == "cuda":  # the stage's own high-water mark of GPU memory, reported beside the time
        torch.cuda.reset_peak_memory_stats(device)
    training = WideNetworkTraining.build(cfg, graph, layer_scores, device, propagation_rows(cfg, graph))
    scheduler = CosineWithWarmup(training.optimizer, warmup_epochs=train.warmup_epochs, epochs=train.epochs)
    train_nodes, val_nodes, test_nodes = (m.nonzero().flatten().to(device)
                                          for m in (graph.train_mask, graph.val_mask, graph.test_mask))
    eval_nodes = torch.cat([val_nodes, test_nodes])
    if ranks is None or ranks.rank == 0:  # once: a batch setting that makes an epoch cost many full-graph ones
        warn_if_batches_reach_the_graph(graph.num_nodes, graph.edge_index.shape[1], train_nodes.numel(),
                                        train.batch_size, cfg["model"]["degrees"], cfg["model"]["local_top_k"] or 0)
    if ranks is not None:
        ranks.check_split("training", train_nodes, 2)
        ranks.check_split("evaluation", eval_nodes, 1)
        ranks.attach(training)  # synchronised batch norm, DDP
    if train.ema_decay is not None:
        training.average_weights(train.ema_decay)
    evaluated, sampler, y = training.evaluated, training.sampler, training.y

    best = {"epoch": -1, "selection": float("-inf"), "scores": {}, "state": None}
    history, started = [], time.perf_counter()
    epochs = Progress(range(train.epochs), "train epoch", log)
    for epoch in epochs:
        loss = training.train_epoch(train_nodes) if ranks is None else ranks.train_epoch(training, train_nodes, epoch)
        check_loss(loss, "train", epoch, graph.x, "optimizer.lr")
        scheduler.step()
        row = {"epoch": epoch, "loss": loss}
        if epoch % train.eval_every == 0 or epoch == train.epochs - 1:
            evaluated.eval()
            with torch.no_grad():  # evaluation samples afresh; with ranks, each its slice, then gathered
                logits = (training.predict(eval_nodes, evaluated) if ranks is None
                          else ranks.predict(training, eval_nodes, evaluated))
            val_logits, test_logits = logits[: val_nodes.numel()], logits[val_nodes.numel():]
            row["val_loss"] = F.cross_entropy(val_logits, y[val_nodes]).item()
            if "val" not in undefined:
                row[f"val_{metric}"] = evaluate(val_logits, y[val_nodes], graph.num_classes)
            if ranks is None or ranks.rank == 0:  # e.g. `sgt tune`, which may stop a hopeless trial here
                notify(epoch, row)
            selection = -row["val_loss"] if "val" in undefined else row[f"val_{metric}"]
            if selection > best["selection"]:
                scores = {
                    **{f"val_{k}": v for k, v in all_metrics(val_logits, y[val_nodes], graph.num_classes).items()},
                    **{f"test_{k}": v for k, v in all_metrics(test_logits, y[test_nodes], graph.num_classes).items()},
                }
                for split in undefined:
                    scores[f"{split}_{metric}"] = UNDEFINED
                best = {
                    "epoch": epoch,
                    "selection": selection,
                    "scores": scores,
                    "state": {k: v.detach().cpu().clone() for k, v in evaluated.state_dict().items()},
                }
        history.append(row)
        epochs.set_metrics(**{k: v for k, v in row.items() if k != "epoch"})

    seconds = time.perf_counter() - started
    if ranks is None or ranks.rank == 0:  # with ranks, every rank holds the same weights and metrics
        groups = ("model", "sampler", "optimizer", "train")
        checkpoint = {"state_dict": best["state"], "config": {group: cfg[group] for group in groups},
                      "epoch": best["epoch"]}
        torch.save(checkpoint, out_dir / MODEL_FILE)
        (out_dir / HISTORY_FILE).write_text(json.dumps(history))
        # What one epoch's sampling gives each node per layer, as a histogram for the tracking layer.
        (out_dir / SAMPLED_DEGREES_FILE).write_text(json.dumps(sampled_degree_histograms(sampler, cfg["seed"])))
    return {
        "best_epoch": best["epoch"],
        **best["scores"],
        "selected_by": "val_loss" if "val" in undefined else f"val_{metric}",
        "seconds": seconds,
        "seconds_per_epoch": seconds / max(1, train.epochs),
        "device": str(device),
        **({"peak_cuda_mb": torch.cuda.max_memory_allocated(device) / 2**20} if device.type == "cuda" else {}),
    }
