"""Seeded generator of a Minesweeper-style grid graph (Platonov et al., ICLR 2023)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from torch_geometric.data import Data

from sgt_core.data.splits import stratified_split
from sgt_core.data.validate import build_graph
from sgt_core.errors import ConfigError

NUM_COUNT_VALUES = 9  # a cell has at most 8 neighbours, so 0..8 neighbouring mines

# Counts the 8 king-move neighbours of each cell, not the cell itself.
_NEIGHBOUR_KERNEL = np.array([[1, 1, 1], [1, 0, 1], [1, 1, 1]])


def grid_edges(height: int, width: int) -> np.ndarray:
    """Lists each undirected edge of a king-move grid once.

    Cell (row, col) is node row * width + col and links to its up-to-8 neighbours, giving
    H(W-1) + (H-1)W + 2(H-1)(W-1) edges (20 for 3×3, 39,402 for 100×100).

    Args:
        height: Number of rows H.
        width: Number of columns W.

    Returns:
        int64 [2, E] edges, one direction each.
    """
    node = np.arange(height * width, dtype=np.int64).reshape(height, width)  # [H, W]
    pairs = [
        (node[:, :-1], node[:, 1:]),  # right neighbour
        (node[:-1, :], node[1:, :]),  # neighbour below
        (node[:-1, :-1], node[1:, 1:]),  # down-right diagonal
        (node[:-1, 1:], node[1:, :-1]),  # down-left diagonal
    ]
    sources = np.concatenate([first.ravel() for first, _ in pairs])
    targets = np.concatenate([second.ravel() for _, second in pairs])
    return np.stack([sources, targets])  # [2, E]


def neighbour_mine_counts(is_mine: np.ndarray) -> np.ndarray:
    """Counts, for every cell, the mines among its up-to-8 neighbours.

    Args:
        is_mine: bool [H, W].

    Returns:
        int64 [H, W] counts in 0..8.
    """
    from scipy.signal import convolve2d  # here, not at the top: scipy.signal takes ~1 s to import

    # Zero padding ("fill") means cells beyond the border count as mine-free.
    return convolve2d(is_mine.astype(np.int64), _NEIGHBOUR_KERNEL, mode="same", boundary="fill")


def _check_config(height: int, width: int, mine_fraction: float, hidden_fraction: float) -> None:
    """Raises ConfigError for a grid size or fraction outside its valid range."""
    for key, value in (("height", height), ("width", width)):
        if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
            raise ConfigError(f"dataset.{key} must be a positive integer, found {value!r}")
    for key, value in (("mine_fraction", mine_fraction), ("hidden_fraction", hidden_fraction)):
        if not isinstance(value, int | float) or not 0 <= value <= 1:
            raise ConfigError(f"dataset.{key} must be a number in [0, 1], found {value!r}")


def generate_minesweeper(
    height: int,
    width: int,
    mine_fraction: float,
    hidden_fraction: float,
    split: Mapping[str, float],
    seed: int,
) -> Data:
    """Generates a Minesweeper graph: classify which grid cells are mines from their neighbours' counts.

    Exactly round(mine_fraction · N) cells are mines (label 1). Node features are a one-hot of the number
    of neighbouring mines (9 columns, 0..8) followed by a "hidden" flag; for round(hidden_fraction · N)
    random cells the one-hot is zeroed and the flag is 1, as in Platonov et al. (2023),
    https://arxiv.org/abs/2302.11640.

    Args:
        height: Grid rows.
        width: Grid columns.
        mine_fraction: Share of cells that are mines.
        hidden_fraction: Share of cells whose count is hidden.
        split: {"train": f, "val": f, "test": f}, a stratified random split.
        seed: Drives the mines, the hidden cells and the split; the same seed gives the same graph.

    Returns:
        The validated graph: x float32 [H·W, 10], y int64 [H·W], 2 classes.

    Raises:
        ConfigError: If a size, fraction or the split is invalid.
        DatasetError: If the grid is too small for every split to get a node.
    """
    _check_config(height, width, mine_fraction, hidden_fraction)
    num_nodes = height * width
    rng = np.random.default_rng(seed)

    is_mine = np.zeros(num_nodes, dtype=bool)
    is_mine[rng.choice(num_nodes, size=round(mine_fraction * num_nodes), replace=False)] = True
    counts = neighbour_mine_counts(is_mine.reshape(height, width)).ravel()  # [N]

    x = np.zeros((num_nodes, NUM_COUNT_VALUES + 1), dtype=np.float32)
    x[np.arange(num_nodes), counts] = 1.0
    hidden = rng.choice(num_nodes, size=round(hidden_fraction * num_nodes), replace=False)
    x[hidden, :NUM_COUNT_VALUES] = 0.0
    x[hidden, NUM_COUNT_VALUES] = 1.0

    y = is_mine.astype(np.int64)
    train_mask, val_mask, test_mask = stratified_split(y, split, rng)
    source = (
        f"minesweeper generator (height={height}, width={width}, mine_fraction={mine_fraction}, "
        f"hidden_fraction={hidden_fraction}, seed={seed})"
    )
    return build_graph(source, x, y, grid_edges(height, width), train_mask, val_mask, test_mask)
