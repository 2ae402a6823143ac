"""Train/val/test splits of a set of molecules: seeded random, Bemis-Murcko scaffold (as OGB), or a file's rows."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from sgt_core.data.splits import SPLIT_NAMES
from sgt_core.errors import DatasetError


def random_split(count: int, fractions: np.ndarray, seed: int) -> np.ndarray:
    """A seeded random split of `count` molecules: floor(fraction × count) each; test takes the rest when the
    fractions sum to 1.

    Returns:
        int8 [count]: 0 train, 1 val, 2 test, -1 in no split.
    """
    sizes = np.floor(fractions * count).astype(np.int64)
    if fractions.sum() >= 1 - 1e-9:
        sizes[2] = count - sizes[:2].sum()
    split = np.full(count, -1, dtype=np.int8)
    order = np.random.default_rng(seed).permutation(count)
    bounds = np.cumsum(sizes)
    for part, (start, stop) in enumerate(zip(np.concatenate(([0], bounds[:-1])), bounds, strict=True)):
        split[order[start:stop]] = part
    return split


def scaffolds(molecules: Sequence) -> list[str]:
    """Each molecule's Bemis-Murcko scaffold as canonical SMILES with chirality ("" without rings), as OGB."""
    from rdkit.Chem.Scaffolds import MurckoScaffold

    return [MurckoScaffold.MurckoScaffoldSmiles(mol=molecule, includeChirality=True) for molecule in molecules]


def scaffold_split(scaffold_of: Sequence[str], fractions: np.ndarray) -> np.ndarray:
    """The deterministic scaffold split of OGB's molecule datasets (Hu et al. 2020, after deepchem).

    Molecules are grouped by scaffold; groups go, largest first (ties: the group whose first molecule comes
    later first), to train while train stays within fraction × count, else to val while train and val stay
    within their fractions, else to test. No scaffold straddles two splits, and test, last, holds the rare
    scaffolds. Every molecule is assigned.

    Args:
        scaffold_of: each molecule's scaffold (`scaffolds`).
        fractions: float64 [3] train, val, test (test takes what is left).

    Returns:
        int8 [count]: 0 train, 1 val, 2 test.
    """
    names, first, group_of, sizes = np.unique(np.asarray(scaffold_of, dtype=str), return_index=True,
                                              return_inverse=True, return_counts=True)
    order = np.lexsort((-first, -sizes))  # largest first, then the later first molecule
    train_limit = fractions[0] * len(scaffold_of)
    val_limit = (fractions[0] + fractions[1]) * len(scaffold_of)
    part_of_group = np.empty(names.size, dtype=np.int8)
    in_train = in_val = 0
    for group in order.tolist():  # sequential by nature: each group's place depends on those before it
        size = int(sizes[group])
        if in_train + size <= train_limit:
            part_of_group[group], in_train = 0, in_train + size
        elif in_train + in_val + size <= val_limit:
            part_of_group[group], in_val = 1, in_val + size
        else:
            part_of_group[group] = 2
    return part_of_group[group_of]


def read_split_file(path: str | Path, num_rows: int, source: str) -> np.ndarray:
    """A JSON file {"train": [rows], "val": [rows], "test": [rows]} of 0-based data rows of `source`.

    Returns:
        int8 [num_rows]: 0 train, 1 val, 2 test, -1 in no split.

    Raises:
        DatasetError: If the file is unreadable, its keys differ, or a row is not an integer, outside the
            file's rows, or listed twice, naming the split and the row.
    """
    where = str(path)
    try:
        stored = json.loads(Path(path).read_text())
    except OSError as error:
        raise DatasetError(f"{where}: cannot read the split file ({error.strerror or error})") from error
    except ValueError as error:
        raise DatasetError(f"{where}: not JSON ({error})") from error
    if not isinstance(stored, dict) or set(stored) != set(SPLIT_NAMES):
        found = sorted(stored) if isinstance(stored, dict) else type(stored).__name__
        raise DatasetError(f"{where}: expected an object with the keys train, val, test (lists of 0-based rows of "
                           f"{source}); found {found}")
    split = np.full(num_rows, -1, dtype=np.int8)
    for part, name in enumerate(SPLIT_NAMES):
        rows = stored[name]
        bad = next((row for row in rows if isinstance(row, bool) or not isinstance(row, int)), None) \
            if isinstance(rows, list) else rows
        if not isinstance(rows, list) or bad is not None:
            raise DatasetError(f"{where}: {name} must be a list of integer rows; it holds {bad!r}")
        rows = np.asarray(rows, dtype=np.int64)
        outside = (rows < 0) | (rows >= num_rows)
        if outside.any():
            raise DatasetError(f"{where}: {name} lists row {int(rows[outside][0])}, outside the {num_rows:,} data "
                               f"rows of {source} (0-based rows 0..{num_rows - 1:,})")
        unique, counts = np.unique(rows, return_counts=True)
        if (counts > 1).any():
            raise DatasetError(f"{where}: {name} lists row {int(unique[counts > 1][0])} twice")
        taken = split[rows] >= 0
        if taken.any():
            row = int(rows[taken][0])
            raise DatasetError(f"{where}: row {row} is in both {SPLIT_NAMES[split[row]]} and {name}; the splits must "
                               "not overlap")
        split[rows] = part
    return split
