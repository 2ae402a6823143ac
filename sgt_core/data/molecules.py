"""Any CSV of SMILES with label columns, as a set of molecular graphs with OGB's atom and bond features.

Each row is a molecule, featurised as `ogb.utils.smiles2graph` does (9 categorical atom features, 3
categorical bond features, the vocabularies of `ogb.utils.features`): the features of ogbg-molhiv and of
the Long Range Graph Benchmark's peptides. Labels are numbers, empty (unknown: NaN) or, in a list column,
lists of numbers such as "[0, 1, 0]". RDKit, ogb and pandas are imported inside the functions, so that only
a run that loads molecules pays for them.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from torch_geometric.data import Data

from sgt_core.data.many_graphs import build_graph_set
from sgt_core.data.molecule_graphs import describe_skipped, join_graphs, parse_molecules
from sgt_core.data.molecule_splits import (
    random_split,
    read_split_file,
    scaffold_split,
    scaffolds,
)
from sgt_core.data.splits import check_split_fractions
from sgt_core.errors import ConfigError, DatasetError

log = logging.getLogger(__name__)

GRAPH_TASKS = ("graph_classification", "graph_multilabel", "graph_regression")
SPLITS = ("random", "scaffold", "file")
DEFAULT_FRACTIONS = {"train": 0.8, "val": 0.1, "test": 0.1}


def row_place(row: int) -> str:
    """Where a data row is: its 0-based row and its 1-based line in the file (the header is line 1)."""
    return f"row {row} (0-based; line {row + 2})"


def read_table(path: Path, smiles_column: str, label_columns: list[str]):
    """The SMILES and label columns as strings (NaN where empty), after checking that they exist.

    Raises:
        DatasetError: If the file is unreadable or a column is missing, listing the columns found.
    """
    import pandas

    source = str(path)
    try:
        columns = list(pandas.read_csv(path, nrows=0).columns)
        missing = [(key, name) for key, names in (("smiles_column", [smiles_column]), ("label_columns", label_columns))
                   for name in names if name not in columns]
        if missing:
            key, name = missing[0]
            raise DatasetError(f"{source}: no column {name!r} (dataset.{key}); the file's columns are "
                               f"{', '.join(map(repr, columns))}")
        # Strings throughout: labels are parsed below, so that a bad one is named with its row.
        return pandas.read_csv(path, usecols=[smiles_column, *label_columns], dtype=str, keep_default_na=False,
                               na_values=[""])
    except (OSError, UnicodeDecodeError, EOFError, ValueError, pandas.errors.ParserError) as error:
        if isinstance(error, DatasetError):
            raise
        first_line = " ".join(str(error).split())
        raise DatasetError(f"{source}: not a readable CSV with a header row ({type(error).__name__}: {first_line})"
                           ) from error


def parse_labels(source: str, column: str, texts: Sequence) -> tuple[np.ndarray, bool]:
    """A label column as float64 [R, L], one column of numbers (L = 1) or of lists of L numbers (NaN: empty),
    and whether it holds lists.

    Raises:
        DatasetError: Naming the column, the row and the value that is not a number (or not a list of L).
    """
    import pandas

    texts = np.asarray(texts, dtype=object)
    known = np.array([isinstance(text, str) for text in texts], dtype=bool)  # [R] empty cells are NaN
    if any(text.lstrip().startswith("[") for text in texts[known]):
        return _parse_lists(source, column, texts, known), True
    values = pandas.to_numeric(pandas.Series(texts), errors="coerce").to_numpy(dtype=np.float64)
    bad = known & ~np.isfinite(values)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise DatasetError(f"{source}: {row_place(row)}: column {column!r} holds {texts[row]!r}, not a finite number")
    return values[:, None], False


def _parse_lists(source: str, column: str, texts: np.ndarray, known: np.ndarray) -> np.ndarray:
    """A column of lists like "[0, 1, 0]", all of one length, as float64 [R, L]; an empty cell is NaN."""
    parsed, length = [], None
    for row, text in enumerate(texts):
        if not known[row]:
            parsed.append(None)
            continue
        try:
            values = json.loads(text)
        except ValueError:
            values = None
        numbers = isinstance(values, list) and all(
            isinstance(value, int | float) and not isinstance(value, bool) for value in values)
        if not numbers or (length is not None and len(values) != length) or not values:
            expected = f"a list of {length} numbers" if length else "a list of numbers like [0, 1, 0]"
            raise DatasetError(f"{source}: {row_place(row)}: column {column!r} holds {text!r}, not {expected}")
        length = len(values)
        parsed.append(values)
    if length is None:  # every cell empty: one unknown label
        return np.full((texts.size, 1), np.nan)
    missing = [np.nan] * length
    return np.array([values if values is not None else missing for values in parsed], dtype=np.float64)


def infer_task(labels: np.ndarray, has_list: bool) -> str:
    """The task the labels suggest: one integer column: classification; several 0/1 (or a list column):
    multilabel; otherwise regression."""
    known = labels[~np.isnan(labels)]
    binary = bool(np.isin(known, (0.0, 1.0)).all())
    if labels.shape[1] > 1 or has_list:
        return "graph_multilabel" if binary else "graph_regression"
    return "graph_classification" if bool((known == np.round(known)).all()) else "graph_regression"


def check_task_labels(source: str, task: str, labels: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The targets of `task`: int64 [G] class ids for classification, float32 [G, T] otherwise.

    Raises:
        DatasetError: If classification labels are not one column of non-negative integers, one per
            molecule, naming the row.
    """
    if task != "graph_classification":
        return labels.astype(np.float32)
    if labels.shape[1] != 1:
        raise DatasetError(f"{source}: graph_classification takes one label column of class ids; found "
                           f"{labels.shape[1]} label columns (several 0/1 labels: dataset.task=graph_multilabel)")
    values = labels[:, 0]
    bad = np.isnan(values) | (values < 0) | (values != np.round(values))
    if bad.any():
        row = int(rows[np.flatnonzero(bad)[0]])
        found = "no label" if np.isnan(values[bad][0]) else f"label {values[bad][0]:g}"
        raise DatasetError(f"{source}: {row_place(row)}: {found}; graph_classification needs a class id (an integer "
                           ">= 0) for every molecule (unknown 0/1 labels: dataset.task=graph_multilabel)")
    return values.astype(np.int64)


def ogb_features(molecules: Sequence) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The molecules' joined graph with `ogb.utils.smiles2graph`'s features, from molecules already parsed.

    The atom and bond features are OGB's own functions, as smiles2graph applies them; only the second
    parse of each SMILES is saved.

    Returns:
        graph_ptr int64 [G+1], edge_index int64 [2, B] (each bond once), atom codes int64 [N, 9], bond
        codes int64 [B, 3].
    """
    from sgt_core.data.ogb_package import import_ogb

    import_ogb()
    from ogb.utils.features import atom_to_feature_vector, bond_to_feature_vector

    atom_counts, bond_counts, atoms, ends, bonds = [], [], [], [], []
    for molecule in molecules:
        # Atoms and bonds by index: faster than iterating RDKit's GetAtoms() sequence, same order.
        atoms += map(atom_to_feature_vector, map(molecule.GetAtomWithIdx, range(molecule.GetNumAtoms())))
        molecule_bonds = list(map(molecule.GetBondWithIdx, range(molecule.GetNumBonds())))
        for bond in molecule_bonds:
            ends += (bond.GetBeginAtomIdx(), bond.GetEndAtomIdx())
        bonds += map(bond_to_feature_vector, molecule_bonds)
        atom_counts.append(molecule.GetNumAtoms())
        bond_counts.append(len(molecule_bonds))
    graph_ptr, edge_index = join_graphs(atom_counts, bond_counts, ends)
    return (graph_ptr, edge_index, np.asarray(atoms, dtype=np.int64).reshape(-1, 9),
            np.asarray(bonds, dtype=np.int64).reshape(-1, 3))


def load_molecules(
    path: str | Path,
    label_columns: Sequence[str] | str,
    smiles_column: str = "smiles",
    task: str | None = None,
    metric: str | None = None,
    split: str = "random",
    split_fractions: dict[str, float] = DEFAULT_FRACTIONS,
    split_seed: int = 0,
    split_file: str | Path | None = None,
    skip_invalid: bool = False,
    seed: int = 0,
) -> Data:
    """Loads a CSV (or .csv.gz) of SMILES and labels as a set of molecular graphs.

    Args:
        path: the CSV file, with a header row.
        label_columns: the label columns (a single name is one column); a column may hold lists of numbers.
        smiles_column: the SMILES column.
        task: graph_classification, graph_multilabel or graph_regression; None: inferred (`infer_task`).
        metric: the metric that selects the best epoch; None: the task's default (`sgt_core.tasks`).
        split: random (seeded by `split_seed`), scaffold (Bemis-Murcko, OGB's rule) or file (`split_file`).
        split_fractions: {"train", "val", "test"} shares for random and scaffold splits.
        split_seed: seeds the random split; fixed by this key, not the run's seed, so that every model seed
            sees the same split.
        split_file: JSON {"train": [rows], "val": [rows], "test": [rows]}, 0-based data rows (split=file).
        skip_invalid: skip molecules RDKit cannot parse (logged and noted) instead of failing.
        seed: the run's seed; unused (see `split_seed`).

    Returns:
        The graph set: x_cat [N, 9] OGB atom features, edge_attr_cat [E, 3] OGB bond features, y per molecule,
        masks over molecules in file order; `notes` says how the split was made and what was skipped.

    Raises:
        DatasetError: The file, a column, a SMILES, a label or the split file is bad, naming where.
        ConfigError: A key's value is not one it takes.
    """
    label_columns = [label_columns] if isinstance(label_columns, str) else list(label_columns)
    _check_keys(label_columns, task, split, split_file, split_seed, skip_invalid)
    fractions = check_split_fractions(split_fractions, "dataset.split_fractions") if split != "file" else None
    path = Path(os.path.abspath(Path(path).expanduser()))
    source = str(path)
    if not path.is_file():
        raise DatasetError(f"{source}: file not found (dataset.path)")
    table = read_table(path, smiles_column, label_columns)
    columns, is_list = zip(*(parse_labels(source, name, table[name].to_numpy()) for name in label_columns),
                           strict=True)
    file_split = read_split_file(split_file, len(table), source) if split == "file" else None

    molecules, kept = parse_molecules(source, table[smiles_column].tolist(), row_place, skip_invalid)
    labels = np.concatenate(columns, axis=1)[kept]  # [G, T]
    task = task or infer_task(labels, any(is_list))
    y = check_task_labels(source, task, labels, kept)

    notes = {}
    if split == "random":
        part = random_split(kept.size, fractions, split_seed)
        notes["molecules_split"] = (f"random {_shares(fractions)} (split_seed={split_seed})")
    elif split == "scaffold":
        part = scaffold_split(scaffolds(molecules), fractions)
        notes["molecules_split"] = (f"scaffold split computed here, not OGB's official split file: Bemis-Murcko "
                                    f"scaffolds (RDKit, with chirality), largest groups first to train, then val, "
                                    f"then test, {_shares(fractions)}")
    else:
        part = file_split[kept]
        notes["molecules_split"] = f"the split file {Path(split_file).name}"
    if kept.size < len(table):
        skipped = np.setdiff1d(np.arange(len(table)), kept)
        notes["molecules_skipped"] = describe_skipped(skipped.tolist(), len(table), row_place)
    graph_ptr, edge_index, atoms, bonds = ogb_features(molecules)
    from ogb.utils.features import get_atom_feature_dims, get_bond_feature_dims

    return build_graph_set(
        source,
        task=task,
        graph_ptr=graph_ptr,
        edge_index=edge_index,
        y=y,
        train_mask=part == 0,
        val_mask=part == 1,
        test_mask=part == 2,
        x_cat=atoms,
        x_cat_sizes=get_atom_feature_dims(),
        edge_attr_cat=bonds,
        edge_attr_cat_sizes=get_bond_feature_dims(),
        metric=metric,
        notes=notes,
    )


def _shares(fractions: np.ndarray) -> str:
    return "/".join(f"{100 * share:g}" for share in fractions)


def _check_keys(label_columns: list, task: str | None, split: str, split_file: object, split_seed: object,
                skip_invalid: object) -> None:
    """The keys' values a run can check before reading the file."""
    if not label_columns or not all(isinstance(name, str) for name in label_columns):
        raise ConfigError(f"dataset.label_columns must be a non-empty list of column names, found {label_columns!r}")
    if task is not None and task not in GRAPH_TASKS:
        raise ConfigError(f"dataset.task must be null (inferred) or one of {', '.join(GRAPH_TASKS)}; found {task!r}")
    if split not in SPLITS:
        raise ConfigError(f"dataset.split must be one of {', '.join(SPLITS)}; found {split!r}")
    if (split == "file") != (split_file is not None):
        raise ConfigError("dataset.split=file needs dataset.split_file (a JSON of train/val/test rows)"
                          if split == "file" else f"dataset.split_file is read only with dataset.split=file; "
                          f"found split={split!r}")
    if isinstance(split_seed, bool) or not isinstance(split_seed, int | np.integer):
        raise ConfigError(f"dataset.split_seed must be an integer, found {split_seed!r}")
    if not isinstance(skip_invalid, bool):
        raise ConfigError(f"dataset.skip_invalid must be true or false, found {skip_invalid!r}")

