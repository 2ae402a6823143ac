"""The wide network's training on a dataset of many graphs: steps over batches of whole graphs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from sgt_core.errors import ConfigError
from sgt_core.graph_batches import GraphBatches, induced_edges
from sgt_core.layers import FullLayer, SampledLayer
from sgt_core.preprocess.interaction_graph import InteractionGraph
from sgt_core.train.distributed.ranks import EVALUATION, stream_seed
from sgt_core.train.training import WideNetworkTraining, network_parts, read_groups

# sampler=full on a batch: slots padded to the widest node while that at most multiplies the edges by this
# (PATTERN's and CLUSTER's batches: ~2); beyond it, the edge list, whose cost does not grow with the padding.
SLOT_PADDING = 8


@dataclass
class GraphSetTraining(WideNetworkTraining):
    """`WideNetworkTraining` whose units are graphs: every step takes `batch_size` whole graphs.

    The batch's nodes hold every candidate neighbour of their nodes (graphs are disjoint), so each layer
    samples for all of them and needs nothing outside (`LayerSampler.closed_batch`: Algorithm 2 with
    every node a target). Graph tasks pool each graph's rows (`GraphRows`) into one output per graph;
    node tasks (PATTERN, CLUSTER) keep the outputs of the batch's nodes that hold targets of the split.

    Attributes (beyond the parent's):
        batches: each graph's nodes (`GraphBatches`).
        graph_level: whether targets belong to graphs (else to nodes).
        train_mask: bool [N] the training nodes of a node task; unused for graph tasks.
        evaluation_seed: the seed of every evaluation's own generator (`evaluate`).
    """

    batches: GraphBatches | None = None
    graph_level: bool = True
    train_mask: torch.Tensor | None = None
    evaluation_seed: int = 0

    @classmethod
    def build(cls, cfg: dict, graph: InteractionGraph, layer_scores: torch.Tensor, device: torch.device,
              propagation=None) -> GraphSetTraining:
        network, _sampling, _optimizer, train = read_groups(cfg)
        if network.local_top_k is not None:
            raise ConfigError("model.local_top_k: top-k propagation rows are for one large graph; on a dataset of "
                              "many graphs set it to null (the appnp branch's steps then run inside each batch)")
        extras, sampler, generator, model, adam = network_parts(cfg, graph, layer_scores, device, None)
        batches = GraphBatches.of(graph.node_graph.to(device), graph.node_kind.to(device), graph.num_graphs)
        task = graph.task_spec(train.regression_loss, train.classification_loss)
        return cls(graph.x.to(device), graph.node_kind.to(device), graph.y.to(device), extras, sampler, model,
                   adam, generator, train.batch_size, task, batches=batches, graph_level=graph.graph_level,
                   train_mask=None if graph.graph_level else graph.train_mask.to(device),
                   evaluation_seed=stream_seed(cfg["seed"], 0, EVALUATION))

    def units(self, mask: torch.Tensor) -> torch.Tensor:
        """The graphs holding a split's targets: the split's graphs, or the graphs of its nodes."""
        if self.graph_level:
            return mask.nonzero().flatten()
        return torch.unique(self.batches.node_graph[mask.nonzero().flatten()])

    def num_targets(self, graphs: torch.Tensor, mask: torch.Tensor | None = None) -> int:
        """How many target rows `predict(graphs, mask=mask)` gives: one per graph, or per node in `mask`."""
        if self.graph_level:
            return graphs.numel()
        return int(mask[self.batches.in_graph_order(graphs)].sum())

    def targets(self, graphs: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """The targets of `predict(graphs, mask=mask)`'s rows, in its order."""
        if self.graph_level:
            return self.y[graphs]
        ordered = self.batches.in_graph_order(graphs)
        return self.y[ordered[mask[ordered]]]

    def predict(self, graphs: torch.Tensor, network: nn.Module | None = None,
                mask: torch.Tensor | None = None) -> torch.Tensor:
        """Outputs for `graphs` in batches of `batch_size` graphs, with freshly sampled layers: [B, C] for a
        graph task, else [n, C] for their nodes in `mask`, graph after graph in the given order, ascending
        within each (`targets`' order).
        """
        network = self.model if network is None else network
        outputs = []
        for chunk in (graphs.split(self.batch_size) if self.batch_size is not None else [graphs]):
            if self.graph_level:
                outputs.append(self._forward(network, chunk, self.batches.nodes(chunk)))
                continue
            ordered = self.batches.in_graph_order(chunk)
            nodes, place = torch.sort(ordered)  # nodes = ordered[place]
            out = self._forward(network, chunk, nodes)  # [n, C] in `nodes` order
            in_order = torch.empty_like(out).index_copy_(0, place, out)  # [n, C] in `ordered` order
            outputs.append(in_order[mask[ordered]])
        return torch.cat(outputs)

    def evaluate(self, splits: dict[str, tuple[torch.Tensor, torch.Tensor]], network: nn.Module,
                 wants_test: Callable[[torch.Tensor], bool] | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The outputs of the `val` and `test` splits' graphs (name -> (graphs, mask)), each predicted apart
        so that a node task keeps each split's own nodes; the test split's only if `wants_test(val_outputs)`
        says so (the stage: when validation improved), else None.

        Its layers are drawn from a generator of its own, seeded alike at every evaluation: evaluation then
        leaves training's random stream where it was (so skipping the test split changes nothing else), and
        every evaluation samples the same layers, so that epochs differ by their weights only.
        """
        training_generator = self.sampler.generator
        self.sampler.generator = torch.Generator(device=self.x.device).manual_seed(self.evaluation_seed)
        try:
            (val_graphs, val_mask), (test_graphs, test_mask) = splits["val"], splits["test"]
            val_outputs = self.predict(val_graphs, network, val_mask)
            if wants_test is not None and not wants_test(val_outputs):
                return val_outputs, None
            return val_outputs, self.predict(test_graphs, network, test_mask)
        finally:
            self.sampler.generator = training_generator

    def _forward(self, network: nn.Module, graphs: torch.Tensor, nodes: torch.Tensor) -> torch.Tensor:
        """One batch of whole graphs through `network`: [B, C] per graph, or [n, C] per node."""
        if self.sampler.method == "full":  # every neighbour: one layer, shared by every layer
            layers = [self._every_neighbour(nodes)] * len(self.sampler.degrees)
        else:
            layers = self.sampler.closed_batch(nodes)
        rows = self.batches.rows(graphs, nodes) if self.graph_level else None
        return network(self.x[nodes], self.node_kind[nodes], layers, self.extras.select(nodes), rows)

    def _every_neighbour(self, nodes: torch.Tensor) -> SampledLayer | FullLayer:
        """sampler=full's layer for a batch of whole graphs, in the batch's numbering: masked slots for the
        fused kernels (`LayerSampler.closed_whole`), or the edge list where padding every node to the widest
        would multiply the edges by more than SLOT_PADDING (a virtual node among atoms of degree 3)."""
        sampler = self.sampler
        in_degree = sampler.ptr[nodes + 1] - sampler.ptr[nodes]  # [n]
        if not nodes.numel() or nodes.numel() * int(in_degree.max()) <= SLOT_PADDING * int(in_degree.sum()):
            return sampler.closed_whole(nodes)
        edges, edge_index = induced_edges(sampler.ptr, sampler.edge_index, nodes)
        types, spd, attr, features = sampler.edge_columns(edges)
        return FullLayer(edge_index, types, in_degree.long(), spd, None, attr, features)

    def loss_sum(self, graphs: torch.Tensor, network: nn.Module) -> torch.Tensor:
        """The summed loss of one batch of graphs through `network` (a rank's share of a global batch)."""
        nodes = self.batches.nodes(graphs)
        out = self._forward(network, graphs, nodes)
        if self.graph_level:
            return self.task.loss_sum(out, self.y[graphs])
        keep = self.train_mask[nodes]
        return self.task.loss_sum(out[keep], self.y[nodes[keep]])

    def epoch_batches(self, units: torch.Tensor) -> list[torch.Tensor]:
        """An epoch's batches of whole graphs in a random order (the generator's)."""
        return self.batches.shuffled(units, self.batch_size, self.generator)

    def forward_batch(self, units: torch.Tensor, network: nn.Module) -> torch.Tensor:
        """One training batch of graphs through `network`, as a training step runs it."""
        return self._forward(network, units, self.batches.nodes(units))

    def train_epoch(self, train_graphs: torch.Tensor) -> float:
        """One epoch over the training graphs in shuffled batches; returns the mean batch loss."""
        self.model.train()
        losses = [self._step(batch) for batch in self.epoch_batches(train_graphs)]
        return sum(losses) / len(losses)

    def _step(self, graphs: torch.Tensor) -> float:
        nodes = self.batches.nodes(graphs)
        out = self._forward(self.model, graphs, nodes)
        if self.graph_level:
            loss = self.task.loss(out, self.y[graphs])
        else:
            keep = self.train_mask[nodes]  # [n] the batch's training nodes
            loss = self.task.loss(out[keep], self.y[nodes[keep]])
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer_step()
        return loss.item()
