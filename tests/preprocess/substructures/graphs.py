"""Tiny graphs for the substructure tests, every edge in both directions: (edge_index int64 [2, E], n)."""

from __future__ import annotations

import itertools

import numpy as np

from sgt_core.preprocess.interaction_graph import CYCLE_SIZES, PATH_SIZES, STAR_LEAVES

GEOMETRIC = [f"cycle_{k}" for k in CYCLE_SIZES] + [f"star_{k}" for k in STAR_LEAVES]
GEOMETRIC += [f"path_{k}" for k in PATH_SIZES]


def both_ways(pairs) -> np.ndarray:
    e = np.asarray(pairs, dtype=np.int64).reshape(-1, 2).T
    return np.concatenate([e, e[::-1]], axis=1)


def cycle_with_chord():
    return both_ways([(i, (i + 1) % 6) for i in range(6)] + [(0, 3)]), 6


def k4():
    return both_ways(list(itertools.combinations(range(4), 2))), 4


def grid(rows, cols, king=False):
    moves = [(0, 1), (1, 0)] + ([(1, 1), (1, -1)] if king else [])
    pairs = []
    for r, c in itertools.product(range(rows), range(cols)):
        for dr, dc in moves:
            if 0 <= r + dr < rows and 0 <= c + dc < cols:
                pairs.append((r * cols + c, (r + dr) * cols + c + dc))
    return both_ways(pairs), rows * cols


def star(leaves):
    return both_ways([(0, i) for i in range(1, leaves + 1)]), leaves + 1


def path(nodes):
    return both_ways([(i, i + 1) for i in range(nodes - 1)]), nodes


def petersen():
    outer = [(i, (i + 1) % 5) for i in range(5)]
    spokes = [(i, i + 5) for i in range(5)]
    inner = [(5 + i, 5 + (i + 2) % 5) for i in range(5)]
    return both_ways(outer + spokes + inner), 10


SMALL_GRAPHS = {
    "cycle_with_chord": cycle_with_chord,
    "k4": k4,
    "grid_3x4": lambda: grid(3, 4),
    "king_3x3": lambda: grid(3, 3, king=True),
    "star_6": lambda: star(6),
    "path_8": lambda: path(8),
    "petersen": petersen,
}
