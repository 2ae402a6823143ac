"""The estimate stage: interaction graph -> per-layer attention scores of the best validation epoch."""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from pathlib import Path

import torch

from sgt_core.artifacts import atomic_path, read_upstream
from sgt_core.config.estimator import EstimatorConfig
from sgt_core.errors import ConfigError
from sgt_core.estimate.outputs import ESTIMATOR_FILE, HISTORY_FILE, SCORES_FILE
from sgt_core.graph_batches import GraphBatches, induced_edges
from sgt_core.metrics import UNDEFINED
from sgt_core.models import AttentionScoreEstimator, NodeExtras
from sgt_core.numerics import check_loss
from sgt_core.optim import AdamW, CosineWithWarmup
from sgt_core.preprocess.interaction_graph import NODE_KINDS, InteractionGraph
from sgt_core.preprocess.outputs import INTERACTION_GRAPH_FILE
from sgt_core.progress import Progress
from sgt_core.schedules import temperature
from sgt_core.seeding import seed_everything
from sgt_core.tasks import BestEpoch

log = logging.getLogger(__name__)


def run_estimate(cfg: dict, inputs: dict[str, Path], out_dir: Path) -> dict[str, float]:
    """Trains the estimator on CPU and saves the best epoch's scores ([L, E] float32) and weights.

    On one graph every epoch is one full-graph step, whose forward pass also scores the epoch. On a
    dataset of many graphs an epoch is a pass over the training graphs in batches of
    `estimator.batch_size` graphs (None: all at once), then one evaluation pass over the whole union,
    which gives the validation metric and the scores of every edge.
    """
    seed_everything(cfg["seed"])
    # Edges as stored (int32 indices, int8 types): the stage's memory is per edge, and this is most of it.
    graph = read_upstream(inputs["preprocess"], "preprocess", INTERACTION_GRAPH_FILE,
                          lambda path: InteractionGraph.load(path, compact=True))
    estimator = EstimatorConfig.from_dict(cfg["estimator"])
    if estimator.batch_size is not None and graph.num_graphs == 1:
        raise ConfigError(f"estimator.batch_size: {estimator.batch_size} graphs per batch, but this dataset is one "
                          "graph, which the estimator trains on whole; set null")
    task = graph.task_spec(estimator.regression_loss, estimator.classification_loss)
    undefined = task.splits_without_metric({"val": graph.y[graph.val_mask], "test": graph.y[graph.test_mask]},
                                           "estimate")
    # The graph's sizes (features, classes, edge types, node kinds, SPD, LPE and tokens) and the group's.
    # A node task has no readout, whatever the group says.
    model = AttentionScoreEstimator(**graph.model_input_sizes(), **{
        **estimator.network_arguments(), "readout": estimator.readout if graph.graph_level else None})
    model.start_at_prior(task.prior(graph.y[graph.train_mask]))
    # The LPE, categorical and substructure-token inputs; None where the component is off.
    extras = NodeExtras.from_graph(graph, NODE_KINDS.index("substructure"))
    batches = GraphBatches.of(graph.node_graph, graph.node_kind, graph.num_graphs) if graph.num_graphs > 1 else None
    train_graphs = _graphs_with_targets(graph, batches, graph.train_mask) if batches is not None else None
    # Continuous edge features [E, Fe] only where the graph has them (Fe > 0): every layer reads this one tensor.
    edge_features = graph.edge_features if graph.edge_features.shape[1] else None
    # Kept for the batches' subgraphs (they are dropped below when one graph trains whole, as before)
    edge_tensors = (graph.ptr, graph.edge_index, graph.edge_type, graph.edge_spd, graph.edge_attr, edge_features)

    # Degrees, edge codes and the compiled kernels' grouping by source: once, not per layer and epoch.
    edges = model.prepare(graph.edge_index, graph.edge_type, graph.edge_spd if graph.num_spd_buckets else None,
                          graph.num_nodes, graph.edge_attr if graph.num_edge_attr_codes else None, edge_features)
    if edges.compact is not None and batches is None:
        # The compiled kernels read only `edges`' compact copy: the graph's destinations, types and SPD
        # buckets (7 bytes per edge, 1.4 GB at Amazon2M's size) are let go for the rest of the stage.
        graph = dataclasses.replace(graph, edge_index=graph.edge_index.new_empty(2, 0),
                                    edge_type=graph.edge_type.new_empty(0), edge_spd=graph.edge_spd.new_empty(0),
                                    edge_attr=graph.edge_attr.new_empty(0))
        edge_tensors = None
    rows = batches.all_rows() if batches is not None and graph.graph_level else None

    def forward(tau: float) -> tuple[torch.Tensor, list[torch.Tensor]]:
        return model(graph.x, graph.node_kind, edges, tau, extras, rows)

    optimizer = AdamW(model.parameters(), lr=estimator.lr, weight_decay=estimator.weight_decay)
    scheduler = CosineWithWarmup(optimizer, warmup_epochs=estimator.warmup_epochs, epochs=estimator.epochs)
    generator = torch.Generator().manual_seed(cfg["seed"])

    best, scores_at_best = BestEpoch(task, "val" in undefined), {}
    history, started = [], time.perf_counter()
    epochs = Progress(range(estimator.epochs), "estimate epoch", log)
    for epoch in epochs:
        tau = temperature(epoch, **estimator.temperature.as_dict())  # anneal, initial_epochs, gamma, minimum
        model.train()
        if batches is None:
            outputs, layer_scores = forward(tau)
            loss = task.loss(outputs[graph.train_mask], graph.y[graph.train_mask])
            loss_value = loss.item()
            check_loss(loss_value, "estimate", epoch, graph.x, "estimator.lr")
            # The estimator has no dropout and layer norm has no train/eval difference, so this forward
            # pass already is the evaluation of the current weights: no second pass is needed to score the
            # epoch. Only the LPE behaves differently in training (random eigenvector sign flips): with it,
            # the epoch is scored, and its scores kept, from an evaluation pass.
            if model.encoder.lpe is not None:
                model.eval()
                with torch.no_grad():
                    outputs, layer_scores = forward(tau)
        else:
            loss_value = _train_graph_batches(model, optimizer, task, graph, extras, batches, edge_tensors,
                                              train_graphs, estimator.batch_size, tau, generator)
            check_loss(loss_value, "estimate", epoch, graph.x, "estimator.lr")
            model.eval()
            with torch.no_grad():  # the evaluation pass over the whole union: every graph and edge scored
                outputs, layer_scores = forward(tau)
        val = (outputs[graph.val_mask].detach(), graph.y[graph.val_mask])
        row = {"epoch": epoch, "loss": loss_value, "val_loss": task.loss(*val).item()}
        if "val" not in undefined:
            row[f"val_{task.metric}"] = task.value(task.metric, *val)
        if best.improves(epoch, row):
            test = (outputs[graph.test_mask].detach(), graph.y[graph.test_mask])
            scores_at_best = {
                f"val_{task.metric}": row.get(f"val_{task.metric}", UNDEFINED),
                f"test_{task.metric}": UNDEFINED if "test" in undefined else task.value(task.metric, *test),
                "state": {k: v.detach().clone() for k, v in model.state_dict().items()},
            }
            # On disk at once rather than a second [L, E] copy in memory until the end: that copy would be
            # 4 bytes per edge and layer for the whole run, the file costs a write per better epoch. Through
            # a temporary file, so that the file always holds one whole tensor.
            with atomic_path(out_dir / SCORES_FILE) as partial:
                torch.save(torch.stack([s.detach().float() for s in layer_scores]), partial)
        if batches is None:
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            del loss
        scheduler.step()
        # Dropped now, not when the next forward pass returns: this epoch's scores would otherwise sit
        # beside the next epoch's, 4 bytes per edge and layer more at the peak.
        del outputs, layer_scores
        history.append({**row, "temperature": tau})
        epochs.set_metrics(**{k: v for k, v in history[-1].items() if k != "epoch"})

    checkpoint = {"state_dict": scores_at_best["state"], "config": cfg["estimator"], "epoch": best.epoch}
    torch.save(checkpoint, out_dir / ESTIMATOR_FILE)
    (out_dir / HISTORY_FILE).write_text(json.dumps(history))
    return {
        "best_epoch": best.epoch,
        f"val_{task.metric}": scores_at_best[f"val_{task.metric}"],
        f"test_{task.metric}": scores_at_best[f"test_{task.metric}"],
        "selected_by": best.selected_by,
        "seconds": time.perf_counter() - started,
    }


def _graphs_with_targets(graph: InteractionGraph, batches: GraphBatches, mask: torch.Tensor) -> torch.Tensor:
    """The graphs holding targets of a split: the split's graphs, or for node tasks the graphs of its nodes."""
    if graph.graph_level:
        return mask.nonzero().flatten()
    return torch.unique(batches.node_graph[mask.nonzero().flatten()])


def _train_graph_batches(model: AttentionScoreEstimator, optimizer: AdamW, task, graph: InteractionGraph,
                         extras: NodeExtras, batches: GraphBatches, edge_tensors: tuple, train_graphs: torch.Tensor,
                         batch_size: int | None, tau: float, generator: torch.Generator) -> float:
    """One epoch over the training graphs in shuffled batches of whole graphs; returns the mean batch loss."""
    ptr, edge_index, edge_type, edge_spd, edge_attr, edge_features = edge_tensors
    losses = []
    for batch in batches.shuffled(train_graphs, batch_size, generator):
        nodes = batches.nodes(batch)  # [n] ascending
        edge_ids, local_edges = induced_edges(ptr, edge_index, nodes)  # [e], [2, e]
        edges = model.prepare(local_edges, edge_type[edge_ids],
                              edge_spd[edge_ids] if graph.num_spd_buckets else None, nodes.numel(),
                              edge_attr[edge_ids] if graph.num_edge_attr_codes else None,
                              edge_features[edge_ids] if edge_features is not None else None)
        rows = batches.rows(batch, nodes) if graph.graph_level else None
        outputs, _ = model(graph.x[nodes], graph.node_kind[nodes], edges, tau, extras.select(nodes), rows)
        if graph.graph_level:
            loss = task.loss(outputs, graph.y[batch])
        else:
            targets = graph.train_mask[nodes]  # [n] the batch's training nodes
            loss = task.loss(outputs[targets], graph.y[nodes][targets])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return sum(losses) / len(losses)
