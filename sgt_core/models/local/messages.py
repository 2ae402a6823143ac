"""What the local branches share: a layer's kept graph edges and sums of messages over them."""

from __future__ import annotations

import torch
from torch import Tensor

from sgt_core.layers import FullLayer, SampledLayer


def graph_edges(layer: SampledLayer | FullLayer, num_queries: int,
                graph_edge_type: int) -> tuple[Tensor, Tensor, Tensor]:
    """The layer's kept edges of the input graph as (source input row [E'], target query [E']) and each
    query's count of them [Q]: in a `SampledLayer` the slots of type `graph_edge_type`, row-major (sorted by
    target), in a `FullLayer` every graph edge."""
    if isinstance(layer, FullLayer):
        is_graph = layer.edge_type == graph_edge_type  # [E]
        source, target = layer.edge_index[0][is_graph], layer.edge_index[1][is_graph]
    else:
        is_graph = layer.neighbour_mask & (layer.neighbour_type == graph_edge_type)  # [Q, deg]
        target, slot = is_graph.nonzero(as_tuple=True)  # row-major: sorted by target
        source = layer.neighbours[target, slot]
    kept = torch.bincount(target, minlength=num_queries)  # [Q]
    return source, target, kept


def query_rows(h: Tensor, layer: SampledLayer | FullLayer) -> Tensor:
    """The input row of each query [Q]: every row in a `FullLayer`, the layer's `queries` otherwise."""
    return torch.arange(h.shape[0], device=h.device) if isinstance(layer, FullLayer) else layer.queries


def gcn_weights(graph_degree: Tensor, rows: Tensor, source: Tensor, target: Tensor, kept: Tensor,
                dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    r"""GCN's normalisation of the kept graph edges with the sampled sum's correction, and of the self-loops.

    Edge j -> i weighs \(\frac{n_i}{s_i} \frac{1}{\sqrt{\hat d_i \hat d_j}}\), \(\hat d = n + 1\) from
    the real graph degrees n (s_i of i's n_i neighbours kept; `GCNConv` with self-loops where all are).

    Shapes:
        graph_degree [K] real in-degree of each input row, rows [Q] each query's input row, source and
        target [E'], kept [Q] -> (edge weight [E'], 1 / sqrt(d_i) [Q]).
    """
    real = graph_degree.index_select(0, rows).to(dtype)  # [Q] n_i
    correction = real / kept.clamp_min(1).to(dtype)  # [Q] n_i / s_i: 1 where every neighbour is kept
    degree_root = (graph_degree.to(dtype) + 1).rsqrt()  # [K] 1 / sqrt(d_j)
    query_root = (real + 1).rsqrt()  # [Q] 1 / sqrt(d_i)
    return correction[target] * query_root[target] * degree_root[source], query_root  # [E'], [Q]


def sum_messages(x: Tensor, source: Tensor, target: Tensor, weight: Tensor | None, into: Tensor) -> Tensor:
    """Adds the messages weight_e * x[source_e] into their targets' rows of `into` (in place) -> into [Q, D].

    The same sum as `sum_by_target(x[source] * weight, ...)`, for edge weights that take no gradient (the
    graph's normalisation). Autograd's index_add_ keeps its whole [E', D] message tensor for the backward
    pass, one per layer and per propagation step (ten steps took the train stage at 10^6 nodes past
    20 GB); `_MessageSum` keeps only the indices and weights, which the gather and the product keep anyway.

    x's gradient is scattered with index_add_, which sums each row's terms in edge order on CPU at any
    thread count, so training is bit-reproducible there. Autograd's backward of indexing (`x[source]`,
    which the one-hop branches used before) is an accumulating index_put_: on one thread the very same
    sums, bit for bit, but on several its order changes from run to run (on two threads every repeat
    differed in the last bits, and `sgt run`'s default model ended a few 1e-6 apart), and it took 2.6x
    index_add_'s time.
    """
    return _MessageSum.apply(x, into, source, target, weight)


class _MessageSum(torch.autograd.Function):
    """`sum_messages`: gradients for x and into only; saves source, target and weight, never the messages."""

    @staticmethod
    def forward(ctx, x: Tensor, into: Tensor, source: Tensor, target: Tensor, weight: Tensor | None) -> Tensor:
        if weight is not None and weight.requires_grad:
            raise ValueError("sum_messages takes fixed edge weights; these require a gradient")
        messages = x.index_select(0, source)  # [E', D]
        if weight is not None:
            messages = messages * weight
        ctx.save_for_backward(source, target, weight)
        ctx.num_rows = x.shape[0]
        ctx.mark_dirty(into)  # summed in place, as before: no [Q, D] copy per layer and step
        return into.index_add_(0, target, messages)

    @staticmethod
    def backward(ctx, grad: Tensor):
        source, target, weight = ctx.saved_tensors
        grad_x = None
        if ctx.needs_input_grad[0]:
            grad_messages = grad.index_select(0, target)  # [E', D]
            if weight is not None:
                grad_messages = grad_messages * weight
            grad_x = grad.new_zeros((ctx.num_rows, *grad.shape[1:])).index_add_(0, source, grad_messages)  # [K, D]
        grad_into = grad if ctx.needs_input_grad[1] else None
        return grad_x, grad_into, None, None, None


def sum_by_target(values: Tensor, target: Tensor, num_targets: int) -> Tensor:
    """values [E, ...] summed into their targets' rows -> [num_targets, ...]."""
    return values.new_zeros((num_targets, *values.shape[1:])).index_add_(0, target, values)


def with_self_edges(source: Tensor, target: Tensor, rows: Tensor) -> tuple[Tensor, Tensor]:
    """The edges plus query q's own input row -> q, for every query: ([E' + Q], [E' + Q])."""
    queries = torch.arange(rows.numel(), device=rows.device)
    return torch.cat([source, rows]), torch.cat([target, queries])
