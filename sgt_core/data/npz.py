"""Load a graph from a `.npz` file in the heterophilous or the gnn-benchmark format."""

from __future__ import annotations

import os
import zipfile
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from torch_geometric.data import Data

from sgt_core.data.splits import check_split_index, stratified_split
from sgt_core.data.validate import build_graph, check_features, check_labels
from sgt_core.errors import DatasetError

# Platonov et al. (ICLR 2023): dense arrays, each undirected edge once, ten stored splits.
HETEROPHILOUS_KEYS = ("node_features", "node_labels", "edges", "train_masks", "val_masks", "test_masks")
# Shchur et al. (2018): scipy CSR parts for the adjacency and the bag-of-words features, no split.
GNN_BENCHMARK_KEYS = (
    "adj_data",
    "adj_indices",
    "adj_indptr",
    "adj_shape",
    "attr_data",
    "attr_indices",
    "attr_indptr",
    "attr_shape",
    "labels",
)
FORMAT_KEYS = {"heterophilous": HETEROPHILOUS_KEYS, "gnn-benchmark": GNN_BENCHMARK_KEYS}

# The Spexphormer paper splits graphs without a stored split 60/20/20.
DEFAULT_SPLIT = {"train": 0.6, "val": 0.2, "test": 0.2}


def detect_format(source: str, keys: list[str]) -> str:
    """Names the format whose keys the file holds.

    Args:
        source: File path named in error messages.
        keys: The array names stored in the file.

    Returns:
        "heterophilous" or "gnn-benchmark".

    Raises:
        DatasetError: If no format's keys are all present, listing the missing ones of the closest format.
    """
    present = set(keys)
    overlap = {name: len(present.intersection(required)) for name, required in FORMAT_KEYS.items()}
    closest = max(overlap, key=overlap.get)
    if overlap[closest] == 0:
        expected = "; ".join(f"{name}: {', '.join(required)}" for name, required in FORMAT_KEYS.items())
        raise DatasetError(
            f"{source}: no known dataset format recognised: the file holds keys {sorted(keys)}; "
            f"expected the keys of one format ({expected})"
        )
    missing = [key for key in FORMAT_KEYS[closest] if key not in present]
    if missing:
        raise DatasetError(
            f"{source}: recognised the {closest} format but keys are missing: {', '.join(missing)} "
            f"(the file holds {sorted(keys)})"
        )
    return closest


def _read_arrays(path: Path, source: str) -> tuple[str, dict[str, np.ndarray]]:
    """Reads the arrays of the detected format from an .npz archive, without unpickling anything.

    Returns:
        The format's name and its arrays by key.
    """
    if not path.exists():
        raise DatasetError(f"{source}: file not found")
    if path.is_dir():
        raise DatasetError(f"{source}: is a directory; expected a .npz file")
    if not path.is_file():
        raise DatasetError(f"{source}: is not a regular file; expected a .npz file")
    try:
        archive = np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as error:
        raise DatasetError(f"{source}: not a valid .npz archive ({error})") from error
    if not isinstance(archive, np.lib.npyio.NpzFile):
        raise DatasetError(
            f"{source}: holds a single .npy array of shape {np.shape(archive)}, expected an .npz archive "
            "of named arrays"
        )
    with archive:
        file_format = detect_format(source, list(archive.files))
        arrays = {}
        for key in FORMAT_KEYS[file_format]:
            try:
                arrays[key] = np.asarray(archive[key])
            except (ValueError, OSError, EOFError, zipfile.BadZipFile) as error:
                # An object array is stored pickled; allow_pickle=False refuses it because unpickling
                # can run arbitrary code.
                raise DatasetError(f"{source}: array '{key}' could not be read ({error})") from error
    return file_format, arrays


def _select_split(source: str, arrays: dict[str, np.ndarray], num_nodes: int, split_index: int) -> list:
    """Picks split `split_index` from the [S, N] (or [N]) mask arrays of the heterophilous format."""
    masks = []
    num_splits = {}
    for key in ("train_masks", "val_masks", "test_masks"):
        mask = arrays[key]
        if mask.ndim not in (1, 2) or mask.shape[-1] != num_nodes:
            raise DatasetError(
                f"{source}: {key} has shape {mask.shape} but the graph has {num_nodes} nodes; "
                f"expected [S, {num_nodes}] or [{num_nodes}]"
            )
        stacked = mask.reshape(-1, num_nodes)  # [S, N]
        num_splits[key] = stacked.shape[0]
        masks.append(stacked)
    if len(set(num_splits.values())) != 1:
        counts = ", ".join(f"{key} {count}" for key, count in num_splits.items())
        raise DatasetError(f"{source}: the mask arrays hold different numbers of splits ({counts})")
    split_index = check_split_index(split_index, num_splits["train_masks"], source)
    return [stacked[split_index] for stacked in masks]


def _load_heterophilous(source: str, arrays: dict[str, np.ndarray], split_index: int) -> Data:
    """Builds the graph from the heterophilous format's arrays."""
    x, y, edges = arrays["node_features"], arrays["node_labels"], arrays["edges"]
    check_features(source, x)
    num_nodes = x.shape[0]
    check_labels(source, y, num_nodes)
    if edges.ndim != 2 or edges.shape[1] != 2:
        raise DatasetError(
            f"{source}: edges has shape {edges.shape}, expected [E, 2] (each undirected edge once)"
        )
    train_mask, val_mask, test_mask = _select_split(source, arrays, num_nodes, split_index)
    return build_graph(source, x, y, edges.T, train_mask, val_mask, test_mask)


def _read_shape(source: str, arrays: dict[str, np.ndarray], key: str) -> tuple[int, int]:
    """Reads a stored matrix shape, which must be two non-negative integers."""
    shape = arrays[key]
    if shape.shape != (2,) or not np.issubdtype(shape.dtype, np.integer) or (shape < 0).any():
        raise DatasetError(f"{source}: {key} must hold two non-negative integers, found {shape!r}")
    return int(shape[0]), int(shape[1])


def _read_csr(
    source: str, arrays: dict[str, np.ndarray], prefix: str, shape: tuple[int, int], column_name: str
) -> sp.csr_matrix:
    """Assembles a CSR matrix from its stored parts, checking them first.

    scipy checks index bounds only on request and then with generic messages, so the parts are checked
    here to name the key and the offending value.
    """
    data, indices, indptr = (arrays[f"{prefix}_{part}"] for part in ("data", "indices", "indptr"))
    num_rows, num_columns = shape
    named_parts = {f"{prefix}_data": data, f"{prefix}_indices": indices, f"{prefix}_indptr": indptr}
    for key, array in named_parts.items():
        if array.ndim != 1:
            raise DatasetError(f"{source}: {key} must be 1-D, found shape {array.shape}")
    for key, array in ((f"{prefix}_indices", indices), (f"{prefix}_indptr", indptr)):
        if not np.issubdtype(array.dtype, np.integer):
            raise DatasetError(f"{source}: {key} must hold integers, found dtype {array.dtype}")
    if indices.shape != data.shape:
        raise DatasetError(
            f"{source}: {prefix}_indices has {indices.size} entries but {prefix}_data has {data.size}"
        )
    valid_pointer = (
        indptr.size == num_rows + 1
        and indptr[0] == 0
        and indptr[-1] == indices.size
        and (np.diff(indptr) >= 0).all()
    )
    if not valid_pointer:
        raise DatasetError(
            f"{source}: {prefix}_indptr is not a valid CSR row pointer for {num_rows} rows and "
            f"{indices.size} entries: expected {num_rows + 1} non-decreasing values from 0 to "
            f"{indices.size}, found {indptr.size} values from {indptr[:1].tolist()} to {indptr[-1:].tolist()}"
        )
    if indices.size and (indices.min() < 0 or indices.max() >= num_columns):
        bad = int(indices.min()) if indices.min() < 0 else int(indices.max())
        raise DatasetError(
            f"{source}: {prefix}_indices reference {column_name} {bad} but there are {num_columns} "
            f"{column_name}s ({prefix}_shape)"
        )
    return sp.csr_matrix((data, indices, indptr), shape=shape)


def _load_gnn_benchmark(
    source: str, arrays: dict[str, np.ndarray], split: Mapping[str, float], seed: int
) -> Data:
    """Builds the graph from the gnn-benchmark format's CSR parts, with a seeded stratified split."""
    num_nodes, num_features = _read_shape(source, arrays, "attr_shape")
    adjacency_shape = _read_shape(source, arrays, "adj_shape")
    if adjacency_shape != (num_nodes, num_nodes):
        raise DatasetError(
            f"{source}: adj_shape is {adjacency_shape}, expected a square ({num_nodes}, {num_nodes}) "
            f"adjacency for the {num_nodes} nodes of attr_shape"
        )
    labels = arrays["labels"]
    check_labels(source, labels, num_nodes)
    x = _read_csr(source, arrays, "attr", (num_nodes, num_features), "feature column").toarray()
    adjacency = _read_csr(source, arrays, "adj", adjacency_shape, "node").tocoo()
    # Explicitly stored zeros are not edges.
    is_edge = adjacency.data != 0
    edge_index = np.stack([adjacency.row[is_edge], adjacency.col[is_edge]]).astype(np.int64)  # [2, E]
    train_mask, val_mask, test_mask = stratified_split(
        labels.astype(np.int64), split, np.random.default_rng(seed)
    )
    # build_graph symmetrises the directed adjacency.
    return build_graph(source, x, labels, edge_index, train_mask, val_mask, test_mask)


def load_npz(
    path: str | Path,
    split_index: int = 0,
    split: Mapping[str, float] = DEFAULT_SPLIT,
    seed: int = 0,
) -> Data:
    """Loads a graph from an .npz file, detecting its format from the stored keys.

    Args:
        path: The .npz file, relative to the working directory or absolute. Nothing is written anywhere.
        split_index: Which stored split to use (heterophilous format, 0-based).
        split: {"train": f, "val": f, "test": f} for files without a stored split (gnn-benchmark format).
        seed: Drives the split of files without a stored one.

    Returns:
        The validated graph; `source` is the file path.

    Raises:
        DatasetError: If the file is missing, unreadable, of unknown format, or breaks the data contract.
        ConfigError: If `split_index` or `split` is invalid.
    """
    # An absolute path keeps error messages unambiguous when the working directory changes (Hydra runs).
    path = Path(os.path.abspath(Path(path).expanduser()))
    source = str(path)
    file_format, arrays = _read_arrays(path, source)
    if file_format == "heterophilous":
        return _load_heterophilous(source, arrays, split_index)
    return _load_gnn_benchmark(source, arrays, split, seed)
