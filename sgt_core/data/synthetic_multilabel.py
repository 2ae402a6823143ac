"""Seeded, vectorised generator of one graph with edge features and many binary node labels (ogbn-proteins' shape)."""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
from torch_geometric.data import Data

from sgt_core.data.many_graphs import build_graph_set
from sgt_core.data.splits import check_split_fractions
from sgt_core.data.synthetic import random_edge_keys
from sgt_core.errors import ConfigError

# Weights of a node's own features and of the noise in each task's score; the neighbours' term has unit
# variance, so it carries most of the signal (see `generate_synthetic_multilabel`).
OWN_WEIGHT = 0.5
NOISE = 0.5
# Each task's share of positive labels is drawn uniformly from this range (ogbn-proteins' tasks vary too).
POSITIVE_SHARE = (0.1, 0.5)
DEFAULT_SPLIT = {"train": 0.6, "val": 0.2, "test": 0.2}


def _is_integer(value: object) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | np.integer)


def _is_number(value: object) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float | np.number) and math.isfinite(value)


def unit_columns(rows: int, columns: int, rng: np.random.Generator) -> np.ndarray:
    """float64 [rows, columns] random directions: each column a uniformly random unit vector."""
    directions = rng.standard_normal((rows, columns))
    return directions / np.linalg.norm(directions, axis=0, keepdims=True)


def generate_synthetic_multilabel(
    num_nodes: int = 5000,
    avg_degree: float = 20,
    num_tasks: int = 16,
    num_features: int = 8,
    num_edge_features: int = 8,
    unknown_fraction: float = 0.1,
    split: Mapping[str, float] = DEFAULT_SPLIT,
    seed: int = 0,
) -> Data:
    """One random graph whose T binary node labels depend on the neighbours through the edge features.

    The graph has round(N · d / 2) uniformly random undirected edges; node features x are standard normal
    [N, F], edge features e [E, Fe] uniform in [0, 1] (the same in both directions). Task t draws a gate
    direction w_t (Fe), a neighbour direction u_t and an own direction v_t (F), and scores node i as

        s_it = OWN_WEIGHT · x_i·v_t + sum_j g_t(e_ij) · x_j·u_t / sqrt(deg i) + NOISE · noise,
        g_t(e) = sqrt(12) · (e - 1/2)·w_t,

    a neighbour counting with a weight set by the edge between them. The gate g_t has mean zero over
    edges, so without the edge features the neighbours' term is noise: a model that reads only node
    features (its own and its neighbours' mean) ranks by the own term alone, while one that reads the
    edge features, e.g. a linear model on the neighbours' edge-feature-weighted features
    mean_j e_ij ⊗ x_j, also recovers the neighbours' term, which has unit variance against the own
    term's 0.25. The label is 1 where s_it exceeds the task's quantile for a positive share drawn
    uniformly in [0.1, 0.5]; a random `unknown_fraction` of all labels is then NaN (unknown).

    Args:
        num_nodes: N >= 10.
        avg_degree: d, the average number of neighbours, at most (N - 1) / 2.
        num_tasks: T >= 1 binary tasks.
        num_features: F >= 1 node feature columns.
        num_edge_features: Fe >= 1 edge feature columns.
        unknown_fraction: share of labels set to NaN, in [0, 1).
        split: {"train": f, "val": f, "test": f}, a random split of the nodes.
        seed: drives every random choice; the same seed and values give the same graph.

    Returns:
        A set of one graph (graph_ptr [0, N]): x float32 [N, F], edge_index [2, 2E] with edge_attr float32
        [2E, Fe], y float32 [N, T] in {0, 1, NaN}, node masks, task node_multilabel, metric roc_auc.

    Raises:
        ConfigError: If a value is out of range.
    """
    for key, value, minimum in (("num_nodes", num_nodes, 10), ("num_tasks", num_tasks, 1),
                                ("num_features", num_features, 1), ("num_edge_features", num_edge_features, 1)):
        if not _is_integer(value) or value < minimum:
            raise ConfigError(f"dataset.{key}: must be an integer >= {minimum}, found {value!r}")
    max_degree = (num_nodes - 1) / 2  # past it, repeated draws would crowd out new edges
    if not _is_number(avg_degree) or not 0 < avg_degree <= max_degree:
        raise ConfigError(f"dataset.avg_degree: must be a number in (0, {max_degree:g}] with num_nodes={num_nodes}, "
                          f"found {avg_degree!r}")
    if not _is_number(unknown_fraction) or not 0 <= unknown_fraction < 1:
        raise ConfigError(f"dataset.unknown_fraction: must be a number in [0, 1), found {unknown_fraction!r}")
    fractions = check_split_fractions(split)
    rng = np.random.default_rng(seed)

    keys = random_edge_keys(round(num_nodes * avg_degree / 2), np.zeros(num_nodes, np.int64), np.zeros(1, np.int64),
                            1.0, rng)  # [E] uniform random edges, keys low·N + high
    low, high = keys // num_nodes, keys % num_nodes  # [E] each
    x = rng.standard_normal((num_nodes, num_features))  # [N, F]
    edge_features = rng.random((keys.size, num_edge_features))  # [E, Fe]

    gate = np.sqrt(12) * (edge_features - 0.5) @ unit_columns(num_edge_features, num_tasks, rng)  # [E, T]
    neighbour = x @ unit_columns(num_features, num_tasks, rng)  # [N, T] x_j·u_t
    own = x @ unit_columns(num_features, num_tasks, rng)  # [N, T] x_i·v_t
    through_edges = np.zeros((num_nodes, num_tasks))
    np.add.at(through_edges, low, gate * neighbour[high])  # both ends of each undirected edge
    np.add.at(through_edges, high, gate * neighbour[low])
    degree = np.bincount(np.concatenate([low, high]), minlength=num_nodes)  # [N]
    through_edges /= np.sqrt(np.maximum(degree, 1))[:, None]
    score = OWN_WEIGHT * own + through_edges + NOISE * rng.standard_normal((num_nodes, num_tasks))  # [N, T]
    positive_share = rng.uniform(*POSITIVE_SHARE, size=num_tasks)  # [T]
    threshold = np.array([np.quantile(score[:, task], 1 - share) for task, share in enumerate(positive_share)])
    labels = (score > threshold).astype(np.float32)  # [N, T]
    labels[rng.random(labels.shape) < unknown_fraction] = np.nan

    bounds = np.round(np.cumsum(fractions) * num_nodes).astype(np.int64)  # [3] end of each split
    rank = np.empty(num_nodes, dtype=np.int64)
    rank[rng.permutation(num_nodes)] = np.arange(num_nodes)  # each node's place in a random order
    part = np.searchsorted(bounds, rank, side="right")  # [N] 0 train, 1 val, 2 test, 3 none
    source = (f"synthetic_multilabel generator (num_nodes={num_nodes}, avg_degree={avg_degree}, "
              f"num_tasks={num_tasks}, num_features={num_features}, num_edge_features={num_edge_features}, "
              f"unknown_fraction={unknown_fraction}, seed={seed})")
    return build_graph_set(
        source, task="node_multilabel", graph_ptr=np.array([0, num_nodes]), edge_index=np.stack([low, high]),
        y=labels, train_mask=part == 0, val_mask=part == 1, test_mask=part == 2, x=x.astype(np.float32),
        edge_attr=edge_features.astype(np.float32), metric="roc_auc",
    )
