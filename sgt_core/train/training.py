"""The wide network's training on one interaction graph: its parts, one epoch, and predictions."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

from sgt_core.config.model import ModelConfig
from sgt_core.config.optimizer import OptimizerConfig
from sgt_core.config.sampler import FULL_ATTENTION_ON_ONE_GRAPH, SamplerConfig
from sgt_core.config.train import TrainConfig
from sgt_core.errors import ConfigError
from sgt_core.layers import PropagationRows
from sgt_core.models import NodeExtras, Spexphormer
from sgt_core.optim import OPTIMIZERS, AdamW
from sgt_core.preprocess.interaction_graph import GRAPH_EDGE_TYPE, NODE_KINDS, InteractionGraph
from sgt_core.sampling import LayerSampler
from sgt_core.tasks import Task


def read_groups(cfg: dict) -> tuple[ModelConfig, SamplerConfig, OptimizerConfig, TrainConfig]:
    """The groups the stage reads, typed: `model`, `sampler`, `optimizer` and `train`."""
    return (ModelConfig.from_dict(cfg["model"]), SamplerConfig.from_dict(cfg["sampler"]),
            OptimizerConfig.from_dict(cfg["optimizer"]), TrainConfig.from_dict(cfg["train"]))


@dataclass
class WideNetworkTraining:
    """The wide network with its sampler and optimizer on one interaction graph: train an epoch, or predict.

    What a step trains on are its units: the target nodes of one graph here; `GraphSetTraining`
    (sgt_core/train/graph_set_training.py) trains on whole graphs of a dataset of many. Both answer
    `units`, `num_targets`, `targets`, `predict`, `train_epoch` and `loss_sum` alike, which is all the
    epochs (`_fit`) and the ranks of a distributed run (`Ranks`) call.
    """

    x: torch.Tensor  # [N, F]
    node_kind: torch.Tensor  # [N]
    y: torch.Tensor  # [N] or [N, T]
    extras: NodeExtras  # the LPE and token inputs per node; None fields where the component is off
    sampler: LayerSampler
    model: Spexphormer
    optimizer: AdamW
    generator: torch.Generator  # the sampler's, which also shuffles the batches
    batch_size: int | None  # None: full graph; else Algorithm 2 batches of that many target nodes
    task: Task
    averaged: AveragedModel | None = None  # the weights' moving average (`average_weights`), else None

    @classmethod
    def build(cls, cfg: dict, graph: InteractionGraph, layer_scores: torch.Tensor, device: torch.device,
              propagation: PropagationRows | None = None) -> WideNetworkTraining:
        """`propagation`: the rows `model.local_top_k` needs (`propagation_rows`), None without it."""
        network, sampling, _optimizer, train = read_groups(cfg)
        if sampling.method == "full" and train.batch_size is not None:  # a dataset the config could not tell
            raise ConfigError(f"train.batch_size: {FULL_ATTENTION_ON_ONE_GRAPH} (found {train.batch_size})")
        if (network.local_top_k is None) != (propagation is None):
            raise ValueError(f"model.local_top_k is {network.local_top_k} but propagation rows were "
                             f"{'not ' if propagation is None else ''}given")
        x, node_kind, y = graph.x.to(device), graph.node_kind.to(device), graph.y.to(device)
        extras, sampler, generator, model, adam = network_parts(cfg, graph, layer_scores, device, propagation)
        return cls(x, node_kind, y, extras, sampler, model, adam, generator, train.batch_size,
                   graph.task_spec(train.regression_loss, train.classification_loss))

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

    def units(self, mask: torch.Tensor) -> torch.Tensor:
        """The units holding a split's targets: its nodes."""
        return mask.nonzero().flatten().to(self.x.device)

    def num_targets(self, units: torch.Tensor, mask: torch.Tensor | None = None) -> int:
        """How many target rows `predict(units)` gives: one per node."""
        return units.numel()

    def targets(self, units: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """The targets of `predict(units)`'s rows."""
        return self.y[units]

    def predict(self, nodes: torch.Tensor, network: nn.Module | None = None,
                mask: torch.Tensor | None = None) -> torch.Tensor:
        """Outputs [len(nodes), C] with freshly sampled layers: one full-graph pass or Algorithm 2 batches.

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

    def evaluate(self, splits: dict[str, tuple[torch.Tensor, torch.Tensor]], network: nn.Module,
                 wants_test: Callable[[torch.Tensor], bool] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """The outputs of the `val` and `test` splits' units (name -> (units, mask)): one prediction over
        both, validation first, so that one graph is sampled once per evaluation (the test split's rows come
        with it, so they are always returned). `wants_test`, if given, is called once with the validation
        outputs, as `GraphSetTraining.evaluate` calls it."""
        (val_units, _), (test_units, _) = splits["val"], splits["test"]
        outputs = self.predict(torch.cat([val_units, test_units]), network)
        val_outputs, test_outputs = outputs[: val_units.numel()], outputs[val_units.numel():]
        if wants_test is not None:
            wants_test(val_outputs)
        return val_outputs, test_outputs

    def loss_sum(self, nodes: torch.Tensor, network: nn.Module) -> torch.Tensor:
        """The summed loss of one Algorithm 2 batch of target nodes through `network` (a rank's share)."""
        input_nodes, layers = self.sampler.batch(nodes)
        outputs = network(self.x[input_nodes], self.node_kind[input_nodes], layers,
                          self.extras.select(input_nodes))  # [|nodes|, C]
        return self.task.loss_sum(outputs, self.y[nodes])

    def epoch_batches(self, units: torch.Tensor) -> list[torch.Tensor]:
        """An epoch's training batches of `units` in a random order (the generator's), or [units] whole."""
        if self.batch_size is None:
            return [units]
        order = torch.randperm(units.numel(), generator=self.generator, device=units.device)
        chunks = list(units[order].split(self.batch_size))
        if len(chunks) > 1 and chunks[-1].numel() < 2:  # batch norm needs two rows in training mode
            chunks[-2:] = [torch.cat(chunks[-2:])]
        return chunks

    def forward_batch(self, units: torch.Tensor, network: nn.Module) -> torch.Tensor:
        """One training batch of `units` through `network`, as a training step runs it."""
        return self.predict(units, network)

    def train_epoch(self, train_nodes: torch.Tensor) -> float:
        """One epoch over `train_nodes` (shuffled batches, or one full-graph step); returns the mean loss."""
        self.model.train()
        losses = [self._step(chunk) for chunk in self.epoch_batches(train_nodes)]
        return sum(losses) / len(losses)

    @torch.no_grad()
    def recalibrate_batch_norm(self, network: nn.Module, units: torch.Tensor, num_batches: int) -> None:
        """Precise batch norm (Wu & Johnson, 2021, "Rethinking 'Batch' in BatchNorm"): every batch norm of
        `network` gets as running statistics the plain average of the statistics of `num_batches` training
        batches of `units` (an epoch's, if it has fewer) at the current weights.

        Why: a step normalises by its own batch's statistics, evaluation by the running averages, which
        trail the weights by about 1 / momentum steps; while a high learning rate moves the weights fast,
        evaluation then normalises by the statistics of weights already left behind and its metrics swing
        from one epoch to the next. The batches run as in training (dropout included), without gradients;
        the sampler's generator draws them, so training goes on from another point of its stream.
        """
        norms = [module for module in network.modules() if isinstance(module, _BatchNorm)]
        if not norms:
            return
        momenta, mode = [norm.momentum for norm in norms], network.training
        for norm in norms:
            norm.reset_running_stats()
            norm.momentum = None  # a cumulative average: every batch counts alike
        network.train()
        for batch in self.epoch_batches(units)[:num_batches]:
            self.forward_batch(batch, network)
        for norm, momentum in zip(norms, momenta, strict=True):
            norm.momentum = momentum
        network.train(mode)

    def _step(self, nodes: torch.Tensor) -> float:
        loss = self.task.loss(self.predict(nodes), self.y[nodes])
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer_step()
        return loss.item()

    def optimizer_step(self) -> None:
        """The optimiser's step, then the moving average's, if any (also each DDP step, `Ranks.train_epoch`)."""
        self.optimizer.step()
        if self.averaged is not None:
            self.averaged.update_parameters(self.model)


def network_parts(cfg: dict, graph: InteractionGraph, layer_scores: torch.Tensor, device: torch.device,
                   propagation: PropagationRows | None) -> tuple:
    """What both trainings build alike: the node extras, the sampler, its generator, the network and its
    optimiser (`optimizer.name`: AdamW or Adam)."""
    network, sampling, optimizer, _train = read_groups(cfg)
    # real graph degrees only for a network that reads them (local branch, degree signal)
    reads_degrees = network.local != "none" or network.degree_signal
    extras = NodeExtras.from_graph(graph, NODE_KINDS.index("substructure"),
                                   GRAPH_EDGE_TYPE if reads_degrees else None).to(device)
    edge_spd = graph.edge_spd.to(device) if graph.num_spd_buckets else None
    edge_attr = graph.edge_attr.to(device) if graph.num_edge_attr_codes else None
    # continuous edge features only where the graph has them: nothing changes for the others
    edge_features = graph.edge_features.to(device) if graph.edge_features.shape[1] else None
    generator = torch.Generator(device=device).manual_seed(cfg["seed"])
    if propagation is not None:  # the appnp branch's K steps as top-k rows, for every layer
        propagation = propagation.to(device)
    sampler = LayerSampler(graph.edge_index.to(device), graph.edge_type.to(device), graph.ptr.to(device),
                           layer_scores.to(device), degrees=network.degrees, method=sampling.method,
                           generator=generator, edge_spd=edge_spd, propagation=propagation, edge_attr=edge_attr,
                           edge_features=edge_features)
    # The graph's sizes (features, classes, edge types, node kinds, SPD, LPE and tokens) and the group's; a
    # node task has no readout, whatever the group says.
    arguments = {**network.network_arguments(), "readout": network.readout if graph.graph_level else None}
    model = Spexphormer(**graph.model_input_sizes(), graph_edge_type=GRAPH_EDGE_TYPE, **arguments).to(device)
    adam = OPTIMIZERS[optimizer.name](model.parameters(), **optimizer.arguments())  # AdamW or Adam
    return extras, sampler, generator, model, adam
