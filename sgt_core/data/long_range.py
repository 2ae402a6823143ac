"""Seeded generator of a long-range task: disjoint rings whose label is a property of the whole ring."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from torch_geometric.data import Data

from sgt_core.data.splits import stratified_split
from sgt_core.data.validate import build_graph
from sgt_core.errors import ConfigError


def generate_long_range_rings(
    num_rings: int,
    ring_length: int,
    agreement: float,
    split: Mapping[str, float],
    seed: int,
) -> Data:
    """Rings of `ring_length` nodes; each ring has a hidden bit, every node's label is its ring's bit.

    A node's only feature is a colour (one-hot, 2 columns) that equals its ring's bit with probability
    `agreement`. Reading the label off one node, or off the 2L+1 nodes an L-layer network sees along the
    ring, is a noisy vote; reading it off the whole ring is nearly certain. With agreement 0.6 and rings of
    100 nodes, a 2-layer network on ring edges alone is capped by the Bayes accuracy of a 5-node vote
    (0.683), while one that can reach the whole ring can approach 0.978. An expander built per ring
    (`preprocess.expander.per_component=true`, as Exphormer builds one per graph in graph-level tasks)
    gives every node that reach within two layers.

    The ring a node belongs to is not in its features, so no network can memorise bits per ring.

    Args:
        num_rings: number of disjoint rings.
        ring_length: nodes per ring (at least 3).
        agreement: probability that a node's colour equals its ring's bit, in (0.5, 1].
        split: {"train": f, "val": f, "test": f}, a stratified random split over all nodes.
        seed: drives the bits, the colours and the split.
    """
    if num_rings < 1 or ring_length < 3:
        raise ConfigError(f"dataset needs num_rings >= 1 and ring_length >= 3, found {num_rings}, {ring_length}")
    if not 0.5 < agreement <= 1:
        raise ConfigError(f"dataset.agreement must be in (0.5, 1], found {agreement}")
    rng = np.random.default_rng(seed)
    num_nodes = num_rings * ring_length
    ring_of_node = np.repeat(np.arange(num_rings), ring_length)  # [N]
    ring_bit = rng.integers(0, 2, num_rings)  # [C]
    labels = ring_bit[ring_of_node]  # [N]
    colour = np.where(rng.random(num_nodes) < agreement, labels, 1 - labels)  # [N]
    features = np.eye(2, dtype=np.float32)[colour]  # [N, 2]

    position = np.arange(num_nodes)
    successor = ring_of_node * ring_length + (position + 1) % ring_length  # next node on the same ring
    edges = np.stack([position, successor])  # [2, N], each undirected ring edge once
    train_mask, val_mask, test_mask = stratified_split(labels, split, rng)
    source = f"long-range rings generator (num_rings={num_rings}, ring_length={ring_length}, agreement={agreement}, seed={seed})"
    return build_graph(source, features, labels, edges, train_mask, val_mask, test_mask)
