"""Seeded, vectorised generator of large node-classification graphs with a tunable edge homophily."""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
from torch_geometric.data import Data

from sgt_core.data.splits import check_split_fractions, stratified_split
from sgt_core.data.validate import build_graph
from sgt_core.errors import ConfigError, DatasetError

# Rounds of topping up edges lost to repeats and self-loops. The density cap that `generate_synthetic` checks
# keeps every class pair's pool of possible edges at most about half used, so one or two rounds suffice; the
# limit only guards against an endless loop.
MAX_DRAW_ROUNDS = 50


def _is_integer(value: object) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | np.integer)


def _is_number(value: object) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float | np.number) and math.isfinite(value)


def class_means(
    num_classes: int, num_features: int, feature_signal: float, rng: np.random.Generator
) -> np.ndarray:
    """Random class centres, any two `feature_signal` apart (exactly when num_features >= num_classes).

    Args:
        num_classes: C.
        num_features: F.
        feature_signal: Distance between two class centres, in units of the per-feature noise.
        rng: Source of randomness.

    Returns:
        float64 [C, F]; orthogonal rows of norm feature_signal / sqrt(2) if F >= C, else random directions of
        that norm (whose distances then vary around feature_signal).
    """
    directions = rng.standard_normal((num_features, num_classes))  # [F, C]
    if num_features >= num_classes:
        directions, _ = np.linalg.qr(directions)  # orthonormal columns
    else:
        directions /= np.linalg.norm(directions, axis=0, keepdims=True)
    return directions.T * (feature_signal / math.sqrt(2))  # [C, F]


def _draw_edge_keys(
    count: int,
    labels: np.ndarray,
    partner: np.ndarray,
    homophily: float,
    nodes_by_class: np.ndarray,
    class_start: np.ndarray,
    class_size: np.ndarray,
    rng: np.random.Generator,
) -> np.ndarray:
    """Draws `count` random edges and returns them as sorted keys min·N + max, self-loops dropped.

    One end is a uniform random node of class c; the other a uniform random node of class c with probability
    `homophily`, else of class partner[c].
    """
    num_nodes = labels.shape[0]
    first = rng.integers(0, num_nodes, count)  # [M]
    first_class = labels[first]
    other_class = np.where(rng.random(count) < homophily, first_class, partner[first_class])
    # A uniform position inside the other class (float64 keeps every position reachable for any class size).
    position = (rng.random(count) * class_size[other_class]).astype(np.int64)
    second = nodes_by_class[class_start[other_class] + position]  # [M]
    del first_class, other_class, position
    keep = first != second
    first, second = first[keep], second[keep]
    keys = np.minimum(first, second)
    np.maximum(first, second, out=second)
    keys *= num_nodes
    keys += second
    keys.sort()
    return keys


def _unique_sorted(keys: np.ndarray) -> np.ndarray:
    """The distinct values of a sorted array, in order."""
    if keys.size == 0:
        return keys
    distinct = np.empty(keys.size, dtype=bool)
    distinct[0] = True
    np.not_equal(keys[1:], keys[:-1], out=distinct[1:])
    return keys[distinct]


def undirected_edge_index(keys: np.ndarray, num_nodes: int) -> np.ndarray:
    """Both directions of each undirected edge, sorted by (source, target) as PyG's `to_undirected` sorts them.

    Args:
        keys: int64 [M] sorted distinct keys min·N + max of the undirected edges (no self-loops).
        num_nodes: N.

    Returns:
        int64 [2, 2M] edge_index.
    """
    low = keys // num_nodes
    mirrored = keys - low * num_nodes  # the high ends
    mirrored *= num_nodes
    mirrored += low  # keys max·N + min of the reverse directions
    del low
    mirrored.sort()
    directed = np.concatenate([keys, mirrored])
    del mirrored
    # Two sorted runs: the stable sort (timsort) merges them in one linear pass instead of sorting afresh.
    directed.sort(kind="stable")
    edge_index = np.empty((2, directed.size), dtype=np.int64)
    np.floor_divide(directed, num_nodes, out=edge_index[0])
    np.multiply(edge_index[0], num_nodes, out=edge_index[1])
    np.subtract(directed, edge_index[1], out=edge_index[1])
    return edge_index


def random_edge_keys(
    num_edges: int, labels: np.ndarray, partner: np.ndarray, homophily: float, rng: np.random.Generator
) -> np.ndarray:
    """Exactly `num_edges` distinct undirected edges between class c and itself or partner[c].

    Draws that repeat an edge or join a node to itself are replaced by further rounds of draws, each a little
    larger than the shortfall; the overshoot of the last round is removed as a random subset of all edges.

    Args:
        num_edges: M, the number of undirected edges.
        labels: int [N] class of each node.
        partner: int [C] the class that class c's heterophilous edges go to.
        homophily: Probability that a drawn edge stays inside its class.
        rng: Source of randomness.

    Returns:
        int64 [M] sorted keys min·N + max.
    """
    nodes_by_class = np.argsort(labels, kind="stable")  # [N]
    class_size = np.bincount(labels, minlength=partner.size)  # [C]
    class_start = np.cumsum(class_size) - class_size  # [C]
    draw_args = (labels, partner, homophily, nodes_by_class, class_start, class_size, rng)

    keys = _unique_sorted(_draw_edge_keys(num_edges, *draw_args))
    for _ in range(MAX_DRAW_ROUNDS):
        shortfall = num_edges - keys.size
        if shortfall <= 0:
            break
        # Draw a little more than missing (some of these repeat too), then merge the two sorted runs.
        extra = _draw_edge_keys(shortfall + shortfall // 4 + 16, *draw_args)
        keys = np.concatenate([keys, extra])
        keys.sort(kind="stable")
        keys = _unique_sorted(keys)
    else:
        raise DatasetError(
            f"synthetic generator: only {keys.size} distinct edges of {num_edges} after {MAX_DRAW_ROUNDS} rounds "
            "of drawing; lower dataset.avg_degree"
        )
    if keys.size > num_edges:
        keys = np.delete(keys, rng.choice(keys.size, keys.size - num_edges, replace=False))
    return keys


def generate_synthetic(
    num_nodes: int,
    avg_degree: float,
    num_classes: int,
    num_features: int,
    homophily: float,
    feature_signal: float,
    split: Mapping[str, float],
    seed: int,
) -> Data:
    """A stochastic block model with Gaussian features: a stand-in for large graphs such as Amazon2M or Pokec.

    Labels are balanced (N / C nodes per class, shuffled). The classes sit on a seeded random ring, and each
    class's heterophilous edges go to the next class on it: a fraction `homophily` of the round(N · d / 2)
    undirected edges join two nodes of the same class, the rest join class c to its successor on the ring,
    so a node of class c sees, on average, a share `homophily` of neighbours of its own class and
    (1 - homophily) / 2 of each of c's two ring neighbours. That mix differs between classes at any homophily
    (for C >= 5; for C = 2 except at homophily 0.5, C = 3 except at 1/3, C = 4 except at 0), so the
    neighbourhood reveals the class even when few neighbours share it. Ends are uniform within their
    class, so every node has about d neighbours (a binomial degree, not a power law).

    Features are the class centre plus unit Gaussian noise, with centres `feature_signal` apart: at a small
    signal the features alone classify poorly, while the mean of a node's ~d neighbours' features averages
    their noise away and points at the class's neighbourhood mix.

    Args:
        num_nodes: N >= 2.
        avg_degree: d, the average number of neighbours; at most (N // C - 1) / 2.
        num_classes: C >= 2, at most N.
        num_features: F >= 1.
        homophily: Share of edges inside one class, in [0, 1].
        feature_signal: Distance between two class centres relative to the unit noise, >= 0.
        split: {"train": f, "val": f, "test": f}, a stratified random split.
        seed: Drives every random choice; the same seed and values give the same graph.

    Returns:
        The validated graph: x float32 [N, F], y int64 [N], edge_index int64 [2, 2·round(N·d/2)], sorted by
        (source, target), both directions of each edge, no self-loops or duplicates.

    Raises:
        ConfigError: If a value or the split is invalid.
        DatasetError: If the graph is too small for every split to get a node.
    """
    integer_minimums = (
        ("num_nodes", num_nodes, 2),
        ("num_classes", num_classes, 2),
        ("num_features", num_features, 1),
    )
    for key, value, minimum in integer_minimums:
        if not _is_integer(value) or value < minimum:
            raise ConfigError(f"dataset.{key}: must be an integer >= {minimum}, found {value!r}")
    if num_classes > num_nodes:
        raise ConfigError(f"dataset.num_classes: must be at most num_nodes={num_nodes}, found {num_classes}")
    if not _is_number(homophily) or not 0 <= homophily <= 1:
        raise ConfigError(f"dataset.homophily: must be a number in [0, 1], found {homophily!r}")
    if not _is_number(feature_signal) or feature_signal < 0:
        raise ConfigError(f"dataset.feature_signal: must be a number >= 0, found {feature_signal!r}")
    if not _is_number(avg_degree) or avg_degree < 0:
        raise ConfigError(f"dataset.avg_degree: must be a number >= 0, found {avg_degree!r}")
    # Edges are drawn at random and repeats dropped; past this density repeats would dominate (and a class
    # pair's pool of possible edges could run out), so the graph would not have the requested edges.
    max_degree = (num_nodes // num_classes - 1) / 2
    if avg_degree > max_degree:
        raise ConfigError(
            f"dataset.avg_degree: must be at most {max_degree:g} with num_nodes={num_nodes} and "
            f"num_classes={num_classes} (half the smallest class's size minus one), found {avg_degree!r}"
        )
    check_split_fractions(split)
    rng = np.random.default_rng(seed)

    labels = rng.permutation(num_nodes) % num_classes  # [N] balanced classes
    ring = rng.permutation(num_classes)
    partner = np.empty(num_classes, dtype=np.int64)
    partner[ring] = np.roll(ring, -1)  # each class's successor on the ring
    means = class_means(num_classes, num_features, feature_signal, rng)  # [C, F]
    features = rng.standard_normal((num_nodes, num_features), dtype=np.float32)
    features += means.astype(np.float32)[labels]

    keys = random_edge_keys(round(num_nodes * avg_degree / 2), labels, partner, float(homophily), rng)
    edge_index = undirected_edge_index(keys, num_nodes)
    del keys
    train_mask, val_mask, test_mask = stratified_split(labels, split, rng)

    source = (
        f"synthetic generator (num_nodes={num_nodes}, avg_degree={avg_degree}, num_classes={num_classes}, "
        f"num_features={num_features}, homophily={homophily}, feature_signal={feature_signal}, seed={seed})"
    )
    # The edges are symmetric, sorted and distinct by construction: checked, not coalesced again.
    return build_graph(source, features, labels, edge_index, train_mask, val_mask, test_mask, coalesced=True)
