"""How much of the graph one of Algorithm 2's batches reaches, and what an epoch of such batches costs."""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass

log = logging.getLogger(__name__)

# A batch reaches "most of the graph" when its first layer reads more than this share of the nodes; an epoch
# of such batches is worth a warning when it costs at least this many full-graph epochs.
MOST_OF_THE_GRAPH = 0.5
COSTLY_EPOCHS = 2.0


@dataclass(frozen=True)
class BatchReach:
    """What sampling batches backwards from their targets touches, and what an epoch of them costs.

    Attributes:
        fractions: per layer, first to last, the expected share of the graph's nodes that are the layer's
            inputs for one batch of `batch_size` targets (the last layer's queries are the targets).
        batches: batches in an epoch.
        epoch_cost: an epoch of batches over a full-graph epoch, both counted in attention edges and input
            rows summed over the layers: 1 costs what full-graph training costs, 20 twenty times that.
    """

    fractions: tuple[float, ...]
    batches: int
    epoch_cost: float

    @property
    def reach(self) -> float:
        """The share of the graph one batch reads: its first layer's inputs."""
        return self.fractions[0]


def layer_fractions(num_nodes: int, targets: int, degrees: Sequence[float]) -> list[float]:
    """The expected share of the nodes each layer reads, first to last, for `targets` target nodes.

    Sampling works backwards from the last layer: its queries are the targets, and the queries of layer l
    are the inputs of layer l + 1. Every query draws `degrees[l]` neighbours; taking them uniformly at random
    and independently of the other queries', a layer whose queries are a share f of the N nodes reads

        f' = 1 - (1 - f) exp(-f d)

    of them (a node is out when it is no query and none of the f N d draws hits it). Real graphs cluster,
    so their draws overlap more and reach less: this is an upper estimate (random expander edges come close).
    """
    share = min(1.0, targets / num_nodes)
    fractions = []
    for degree in reversed(degrees):
        share = 1.0 - (1.0 - share) * math.exp(-share * degree)
        fractions.append(share)
    return fractions[::-1]


def _batch_cost(num_nodes: int, targets: int, degrees: Sequence[float]) -> float:
    """Attention edges plus input rows of one batch of `targets`, summed over the layers (in nodes' units)."""
    inputs = layer_fractions(num_nodes, targets, degrees)  # [L] shares read by each layer
    queries = [*inputs[1:], min(1.0, targets / num_nodes)]  # [L] layer l's queries are layer l + 1's inputs
    return num_nodes * sum(query * degree + read for query, degree, read in zip(queries, degrees, inputs))


def batch_reach(num_nodes: int, num_edges: int, num_targets: int, batch_size: int, degrees: Sequence[int],
                extra_per_query: int = 0) -> BatchReach:
    """Estimates a batch's reach and an epoch's cost against full-graph training (`layer_fractions`' model).

    Args:
        num_nodes: N, the interaction graph's nodes.
        num_edges: its attention edges: a node with fewer candidates than deg_l keeps them all, so a query
            draws min(deg_l, E / N) neighbours on average.
        num_targets: T, the training nodes an epoch steps through in batches.
        batch_size: B, targets per batch (`train.batch_size`); ceil(T / B) batches an epoch.
        degrees: deg_l per layer (`model.degrees`).
        extra_per_query: rows every query adds to its layer's inputs besides the sampled ones
            (`model.local_top_k`'s propagation rows).

    A full-graph epoch costs N (deg_l + 1) per layer: every node's attention edges and its input row.
    """
    drawn = [min(degree, num_edges / num_nodes) + extra_per_query for degree in degrees]
    full, remainder = divmod(num_targets, batch_size)
    epoch = full * _batch_cost(num_nodes, batch_size, drawn) + (_batch_cost(num_nodes, remainder, drawn) if remainder else 0)
    full_graph = num_nodes * sum(degree + 1 for degree in drawn)
    return BatchReach(tuple(layer_fractions(num_nodes, batch_size, drawn)), full + bool(remainder), epoch / full_graph)


def warn_if_batches_reach_the_graph(num_nodes: int, num_edges: int, num_targets: int, batch_size: int | None,
                                    degrees: Sequence[int], extra_per_query: int = 0) -> BatchReach | None:
    """Warns once when batches of `batch_size` reach most of the graph and so make an epoch cost several
    full-graph epochs (`batch_reach`); returns the estimate, None for full-graph training."""
    if batch_size is None:
        return None
    estimate = batch_reach(num_nodes, num_edges, num_targets, batch_size, degrees, extra_per_query)
    if estimate.reach > MOST_OF_THE_GRAPH and estimate.epoch_cost >= COSTLY_EPOCHS:
        log.warning(
            "train: each batch of %d targets reaches about %.0f%% of the graph's %d nodes through %d layers "
            "(model.degrees=%s), so an epoch of %d batches costs about %.0fx a full-graph epoch; use fewer "
            "layers (model.num_layers), smaller degrees (model.degrees), larger batches (train.batch_size) or "
            "the full graph (train.batch_size=null)",
            batch_size, 100 * estimate.reach, num_nodes, len(degrees), list(degrees), estimate.batches,
            estimate.epoch_cost)
    return estimate
