"""Load a graph classification set in the TU Dortmund text format, split by stratified k-fold cross-validation.

A TU folder NAME/ (Morris et al. 2020, https://chrsmrrs.github.io/datasets/docs/format/) holds one row per
line, comma-separated, node ids 1-based over the whole set:

| file | rows | holds |
|---|---|---|
| NAME_A.txt | one per directed edge | `src, dst` (TU lists both directions) |
| NAME_graph_indicator.txt | one per node | the node's graph, 1..G |
| NAME_graph_labels.txt | one per graph | its class (any integers, e.g. -1/1) |
| NAME_node_labels.txt (optional) | one per node | categorical codes, one or more columns |
| NAME_node_attributes.txt (optional) | one per node | floats |
| NAME_edge_labels.txt (optional) | one per line of _A | categorical codes |
| NAME_edge_attributes.txt (optional) | one per line of _A | floats |

The literature scores these sets by accuracy, mean ± std over 10 stratified folds; `dataset.fold` picks the
test fold, and the folds are seeded by `dataset.split_seed`, not the run's seed, so they stay fixed across
model seeds and a sweep over the folds covers every graph once.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
from torch_geometric.data import Data

from sgt_core.config.dataset import fold_problems, raise_problems
from sgt_core.data.many_graphs import build_graph_set
from sgt_core.errors import DatasetError

REQUIRED = ("A", "graph_indicator", "graph_labels")
OPTIONAL = ("node_labels", "node_attributes", "edge_labels", "edge_attributes")
DEFAULT_PATH = "../shared/datasets/tu/MUTAG"


def dataset_name(folder: Path) -> str:
    """NAME of a TU folder: its own name, or the prefix of its only `*_A.txt` when the folder was renamed."""
    if (folder / f"{folder.name}_A.txt").is_file():
        return folder.name
    candidates = sorted(folder.glob("*_A.txt"))
    return candidates[0].name[: -len("_A.txt")] if len(candidates) == 1 else folder.name


def read_rows(file: Path, kind: str) -> np.ndarray:
    """The comma-separated rows of a TU file as [rows, C] integers ("int") or floats ("float").

    Blank lines at the end are ignored; anywhere else a blank line, a missing or extra value, or a value
    that is not a number is an error naming the line.

    Raises:
        DatasetError: Naming the file, the line and the problem.
    """
    try:
        frame = pd.read_csv(file, header=None, sep=",", skipinitialspace=True, skip_blank_lines=False)
    except pd.errors.EmptyDataError:
        raise DatasetError(f"{file}: the file is empty; expected one comma-separated row per line") from None
    except pd.errors.ParserError as error:
        found = re.search(r"Expected (\d+) fields in line (\d+), saw (\d+)", str(error))
        if found is None:
            raise DatasetError(f"{file}: cannot be parsed: {error}") from None
        expected, line, saw = found.groups()
        raise DatasetError(f"{file}, line {line}: {saw} comma-separated values, expected {expected} as on the "
                           "first line") from None
    except (OSError, UnicodeDecodeError) as error:
        raise DatasetError(f"{file}: cannot be read: {error}") from None
    blank = frame.isna().all(axis=1).to_numpy()  # [rows]
    rows = len(frame) - int(np.argmin(blank[::-1])) if not blank.all() else 0  # trailing blank lines dropped
    frame = frame.iloc[:rows]
    if rows == 0:
        raise DatasetError(f"{file}: the file has no rows; expected one comma-separated row per line")
    columns = []
    for column in frame.columns:
        values = frame[column]
        if not pd.api.types.is_numeric_dtype(values):
            numbers = pd.to_numeric(values.astype(str).str.strip(), errors="coerce")
            bad = (numbers.isna() & values.notna()).to_numpy()
            if bad.any():
                line = int(np.flatnonzero(bad)[0]) + 1
                raise DatasetError(f"{file}, line {line}: {str(values.iloc[line - 1]).strip()!r} is not a number")
            values = numbers
        columns.append(values.to_numpy(dtype=np.float64, na_value=np.nan))
    table = np.stack(columns, axis=1)  # [rows, C]
    missing = np.isnan(table).any(axis=1)
    if missing.any():
        line = int(np.flatnonzero(missing)[0]) + 1
        what = "is empty" if blank[line - 1] else f"has fewer than {table.shape[1]} comma-separated values"
        raise DatasetError(f"{file}, line {line}: {what}; expected {table.shape[1]} as on the first line")
    if kind == "float":
        return table
    fractional = (table != np.round(table)).any(axis=1)
    if fractional.any():
        line = int(np.flatnonzero(fractional)[0]) + 1
        raise DatasetError(f"{file}, line {line}: {table[line - 1].tolist()} holds a fraction; expected integers")
    return table.astype(np.int64)


def check_length(file: Path, rows: int, expected: int, per: str, reference: Path) -> None:
    """Checks that a file has one row per node, edge or graph, naming the first missing or extra line."""
    if rows < expected:
        raise DatasetError(f"{file}, line {rows + 1}: missing; the file has {rows} lines but {reference.name} "
                           f"gives {expected} {per}s (one line each)")
    if rows > expected:
        raise DatasetError(f"{file}, line {expected + 1}: one line too many; the file has {rows} lines but "
                           f"{reference.name} gives {expected} {per}s (one line each)")


def codes(table: np.ndarray) -> tuple[np.ndarray, list[int]]:
    """Each column's values remapped to 0..K-1 in increasing order; returns the codes [R, C] and each K."""
    columns, sizes = [], []
    for column in table.T:
        values, inverse = np.unique(column, return_inverse=True)
        columns.append(inverse.reshape(-1))
        sizes.append(int(values.size))
    return np.stack(columns, axis=1).astype(np.int64), sizes


def degree_codes(edge_index: np.ndarray, num_nodes: int, degree_cap: int) -> tuple[np.ndarray, int]:
    """Each node's degree (distinct neighbours, self-loops not counted) as a code, capped at `degree_cap`.

    A node of degree d gets code min(d, degree_cap): hubs of very different degrees share the last code, so
    the vocabulary (max degree capped, + 1) stays small on social graphs whose degrees reach thousands, while
    the small degrees that molecules and proteins have stay distinct.

    Returns:
        int64 [N, 1] codes and the vocabulary size.
    """
    low, high = edge_index.min(axis=0), edge_index.max(axis=0)
    keys = np.unique(low[low != high] * num_nodes + high[low != high])  # each undirected edge once
    degree = np.bincount(np.concatenate([keys // num_nodes, keys % num_nodes]), minlength=num_nodes)
    capped = np.minimum(degree, degree_cap)
    return capped[:, None].astype(np.int64), int(capped.max()) + 1


def fold_split(labels: np.ndarray, fold: int, num_folds: int, val_fraction: float, split_seed: int,
               source: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Stratified k-fold: fold `fold` tests, a stratified `val_fraction` of the other graphs validates.

    Args:
        labels: int [G] graph classes.
        fold: the test fold, 0..num_folds-1.
        num_folds: k.
        val_fraction: share of the non-test graphs that validate (rounded up, and at least one graph of each
            class).
        split_seed: seeds the folds and the validation draw.
        source: named in errors.

    Returns:
        (train, val, test) bool [G] masks that partition the graphs.

    Raises:
        DatasetError: If the classes are too small to stratify.
    """
    from sklearn.model_selection import StratifiedKFold, train_test_split

    placeholder = np.zeros(labels.size)
    try:
        folds = StratifiedKFold(n_splits=num_folds, shuffle=True, random_state=split_seed)
        rest, test = list(folds.split(placeholder, labels))[fold]
        # At least one graph of each class, which stratifying needs (a larger share on tiny sets only).
        num_val = max(int(np.ceil(val_fraction * rest.size)), int(np.unique(labels).size))
        train, val = train_test_split(rest, test_size=num_val, stratify=labels[rest], random_state=split_seed)
    except ValueError as error:
        sizes = np.bincount(labels)
        raise DatasetError(f"{source}: cannot split {labels.size} graphs (class sizes {sizes.tolist()}) into "
                           f"{num_folds} stratified folds with a validation share of {val_fraction}: {error}"
                           ) from None
    masks = [np.zeros(labels.size, dtype=bool) for _ in range(3)]
    for mask, members in zip(masks, (train, val, test)):
        mask[members] = True
    return masks[0], masks[1], masks[2]


def load_tu(
    path: str = DEFAULT_PATH,
    fold: int = 0,
    num_folds: int = 10,
    val_fraction: float = 0.1,
    split_seed: int = 0,
    degree_cap: int = 64,
    seed: int = 0,
) -> Data:
    """Loads a TU folder as a graph classification set, split by stratified k-fold cross-validation.

    Node labels become categorical codes (each column remapped to 0..K-1), node attributes float features,
    edge labels categorical edge codes, edge attributes float edge features. A folder with neither node
    labels nor attributes gets each node's degree as its code (`degree_codes`). Graph labels are remapped
    to classes 0..K-1 in increasing order (-1, 1 -> 0, 1). Nodes are ordered by graph (stably).

    Args:
        path: the folder NAME/ holding NAME_A.txt, NAME_graph_indicator.txt, NAME_graph_labels.txt.
        fold: the test fold, 0..num_folds-1.
        num_folds: folds of the stratified cross-validation (10 in the literature).
        val_fraction: share of the other graphs, stratified, that validates (selects the best epoch).
        split_seed: seeds the folds and the validation share; not the run's seed, so the folds stay fixed.
        degree_cap: the largest degree code of a folder without node features.
        seed: the run's seed; not used.

    Returns:
        The validated set: graph_classification, metric accuracy, graph masks [G], graph_ptr [G+1].

    Raises:
        ConfigError: If a fold key is out of range.
        DatasetError: Naming the file, the line and the problem: a missing file, a row that does not parse,
            a file of the wrong length, a node in no graph, an edge joining two graphs, a graph with no nodes.
    """
    raise_problems(fold_problems(fold, num_folds, val_fraction, split_seed, degree_cap))  # as the config check
    folder = Path(path).expanduser().resolve()
    if not folder.is_dir():
        what = "is a file" if folder.is_file() else "no such folder"
        raise DatasetError(f"{folder}: {what} (dataset.path); expected a TU dataset folder NAME/ holding "
                           "NAME_A.txt, NAME_graph_indicator.txt and NAME_graph_labels.txt")
    name = dataset_name(folder)
    files = {part: folder / f"{name}_{part}.txt" for part in REQUIRED + OPTIONAL}
    for part in REQUIRED:
        if not files[part].is_file():
            raise DatasetError(f"{files[part]}: no such file; a TU folder {name}/ needs {name}_A.txt, "
                               f"{name}_graph_indicator.txt and {name}_graph_labels.txt")

    indicator = read_rows(files["graph_indicator"], "int")[:, 0]  # [N] 1-based graph of each node
    graph_labels = read_rows(files["graph_labels"], "int")[:, 0]  # [G]
    pairs = read_rows(files["A"], "int")  # [E, 2] 1-based node ids
    num_nodes, num_graphs = indicator.size, graph_labels.size
    outside = (indicator < 1) | (indicator > num_graphs)
    if outside.any():
        line = int(np.flatnonzero(outside)[0]) + 1
        raise DatasetError(f"{files['graph_indicator']}, line {line}: graph {indicator[line - 1]}, but "
                           f"{files['graph_labels'].name} has {num_graphs} lines (graphs 1..{num_graphs})")
    nodes_per_graph = np.bincount(indicator - 1, minlength=num_graphs)  # [G]
    if (nodes_per_graph == 0).any():
        graph = int(np.flatnonzero(nodes_per_graph == 0)[0]) + 1
        raise DatasetError(f"{files['graph_labels']}, line {graph}: graph {graph} has no nodes in "
                           f"{files['graph_indicator'].name}")
    if pairs.shape[1] != 2:
        raise DatasetError(f"{files['A']}, line 1: {pairs.shape[1]} values; expected two node ids: src, dst")
    unknown = (pairs < 1) | (pairs > num_nodes)
    if unknown.any():
        line, end = (int(index[0]) for index in np.nonzero(unknown))
        raise DatasetError(f"{files['A']}, line {line + 1}: node {pairs[line, end]} is in no graph: "
                           f"{files['graph_indicator'].name} has {num_nodes} lines (nodes 1..{num_nodes})")
    ends = indicator[pairs - 1]  # [E, 2] graph of each end
    across = ends[:, 0] != ends[:, 1]
    if across.any():
        line = int(np.flatnonzero(across)[0])
        raise DatasetError(f"{files['A']}, line {line + 1}: edge {pairs[line, 0]}, {pairs[line, 1]} joins node "
                           f"{pairs[line, 0]} of graph {ends[line, 0]} and node {pairs[line, 1]} of graph "
                           f"{ends[line, 1]}; edges must stay inside one graph")

    optional = {}
    for part, per, reference, kind in (("node_labels", "node", "graph_indicator", "int"),
                                       ("node_attributes", "node", "graph_indicator", "float"),
                                       ("edge_labels", "edge", "A", "int"),
                                       ("edge_attributes", "edge", "A", "float")):
        if files[part].is_file():
            table = read_rows(files[part], kind)
            check_length(files[part], table.shape[0], num_nodes if per == "node" else pairs.shape[0], per,
                         files[reference])
            optional[part] = table

    # Nodes grouped by graph, keeping their order inside each graph (TU files already are, as a rule).
    order = np.argsort(indicator, kind="stable")  # [N] new node -> old node
    position = np.empty(num_nodes, dtype=np.int64)
    position[order] = np.arange(num_nodes)
    edge_index = position[pairs.T - 1]  # [2, E]
    graph_ptr = np.concatenate([[0], np.cumsum(nodes_per_graph)])  # [G+1]
    notes = {}
    x_cat = x_cat_sizes = x = None
    if "node_labels" in optional:
        x_cat, x_cat_sizes = codes(optional["node_labels"][order])
    if "node_attributes" in optional:
        x = optional["node_attributes"][order]
    if x is None and x_cat is None:
        x_cat, size = degree_codes(edge_index, num_nodes, degree_cap)
        x_cat_sizes = [size]
        notes["features"] = (f"no node labels or attributes in the folder: each node's degree is its code, "
                             f"capped at {degree_cap} ({size} codes)")
    edge_attr_cat = edge_attr_cat_sizes = None
    if "edge_labels" in optional:
        edge_attr_cat, edge_attr_cat_sizes = codes(optional["edge_labels"])
    classes, labels = np.unique(graph_labels, return_inverse=True)
    labels = labels.reshape(-1).astype(np.int64)
    if classes.size < 2:
        raise DatasetError(f"{files['graph_labels']}: every graph has label {classes[0]}; a classifier needs two "
                           "classes")
    if not np.array_equal(classes, np.arange(classes.size)):
        notes["labels"] = (f"graph labels {', '.join(map(str, classes.tolist()))} are classes "
                           f"{', '.join(map(str, range(classes.size)))}")

    source = str(folder)
    train, val, test = fold_split(labels, fold, num_folds, val_fraction, split_seed, source)
    notes["split"] = (f"stratified {num_folds}-fold cross-validation, fold {fold} tests ({int(test.sum())} "
                      f"graphs), {val_fraction:g} of the rest validates ({int(val.sum())}), split_seed "
                      f"{split_seed}; report mean ± std over the folds")
    return build_graph_set(
        source, task="graph_classification", graph_ptr=graph_ptr, edge_index=edge_index, y=labels,
        train_mask=train, val_mask=val, test_mask=test, x=x, x_cat=x_cat, x_cat_sizes=x_cat_sizes,
        edge_attr_cat=edge_attr_cat, edge_attr_cat_sizes=edge_attr_cat_sizes,
        edge_attr=optional.get("edge_attributes"), num_classes=int(classes.size), metric="accuracy", notes=notes,
    )
