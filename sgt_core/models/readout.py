"""GraphReadout: one vector per graph from its nodes' final representations (mean, sum, virtual, attention)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

READOUTS: tuple[str, ...] = ("mean", "sum", "virtual", "attention")


@dataclass(frozen=True)
class GraphRows:
    """Which graph each output row of a forward pass belongs to, for a graph-level readout.

    Attributes:
        graph: int64 [Q] each row's graph, numbered 0..num_graphs-1 within the batch.
        num_graphs: B, the graphs of the batch (each has at least one real node among the rows).
        node_kind: int64 [Q] each row's node kind (NODE_KINDS: real, virtual, substructure).
    """

    graph: Tensor
    num_graphs: int
    node_kind: Tensor

    def to(self, device) -> GraphRows:
        return GraphRows(self.graph.to(device), self.num_graphs, self.node_kind.to(device))


class GraphReadout(nn.Module):
    r"""Pools each graph's rows into one vector (PyG's `global_mean_pool` and friends, as scatters).

    \[
    \mathrm{mean}: \frac{1}{|V_g|}\sum_{v \in V_g} h_v, \quad \mathrm{sum}: \sum_{v \in V_g} h_v, \quad
    \mathrm{virtual}: \frac{1}{|U_g|}\sum_{u \in U_g} h_u, \quad
    \mathrm{attention}: \sum_{v \in V_g} \mathrm{softmax}_{v \in V_g}(w^\top h_v + c)\, h_v
    \]

    V_g are graph g's real nodes (virtual nodes and substructure tokens are helpers of the attention, not
    part of the graph), U_g its virtual nodes (`preprocess.virtual_nodes`, Exphormer's global nodes, whose
    final state is read as the graph's, as a [CLS] token's); attention is Li et al.'s global attention
    pooling (PyG's `AttentionalAggregation` with a linear gate).

    Args:
        kind: one of `READOUTS`.
        hidden: the representations' width D.

    Shapes:
        h [Q, D], rows (`GraphRows`) -> [B, D].
    """

    def __init__(self, kind: str, hidden: int) -> None:
        super().__init__()
        if kind not in READOUTS:
            raise ValueError(f"readout must be one of {', '.join(READOUTS)}, got {kind!r}")
        self.kind = kind
        self.gate = nn.Linear(hidden, 1) if kind == "attention" else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.gate is not None:
            self.gate.reset_parameters()

    def forward(self, h: Tensor, rows: GraphRows) -> Tensor:
        pooled_kind = 1 if self.kind == "virtual" else 0  # NODE_KINDS: real 0, virtual 1
        keep = rows.node_kind == pooled_kind  # [Q]
        if self.kind == "virtual" and not bool(keep.any()):
            raise ValueError("the virtual readout needs virtual nodes (preprocess.virtual_nodes >= 1)")
        values, graph = h[keep], rows.graph[keep]  # [Q', D], [Q']
        if self.gate is not None:
            gate = self.gate(values).squeeze(1)  # [Q']
            # softmax within each graph; its max is a constant per graph, so no gradient through it
            largest = gate.new_full((rows.num_graphs,), float("-inf")).scatter_reduce(
                0, graph, gate.detach(), "amax")  # [B]
            weights = (gate - largest[graph]).exp()  # [Q']
            totals = weights.new_zeros(rows.num_graphs).index_add_(0, graph, weights)  # [B]
            values = values * (weights / totals[graph]).unsqueeze(1)  # [Q', D]
        pooled = h.new_zeros(rows.num_graphs, h.shape[1]).index_add_(0, graph, values)  # [B, D]
        if self.kind in ("mean", "virtual"):
            counts = torch.bincount(graph, minlength=rows.num_graphs).clamp_min(1)  # [B]
            pooled = pooled / counts.unsqueeze(1).to(h.dtype)
        return pooled

    def extra_repr(self) -> str:
        return f"kind={self.kind}"


def prediction_head(hidden: int, num_outputs: int, graph_level: bool) -> nn.Module:
    """The output layer: a linear map per node, or for graph tasks GraphGPS's MLP on the pooled vector
    (two hidden layers of width D with ReLU, then the outputs)."""
    if not graph_level:
        return nn.Linear(hidden, num_outputs)
    return nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                         nn.Linear(hidden, num_outputs))
