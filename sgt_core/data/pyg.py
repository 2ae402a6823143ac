"""Load a PyTorch Geometric benchmark dataset by name, with a clear error when it cannot be downloaded."""

from __future__ import annotations

import functools
import logging
import os
import pickle
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch_geometric.data import Data, InMemoryDataset
from torch_geometric.datasets import Amazon, Coauthor, HeterophilousGraphDataset, Planetoid, WikiCS

from sgt_core.data.splits import check_split_index, stratified_split
from sgt_core.data.validate import build_graph, check_labels
from sgt_core.errors import ConfigError, DatasetError

# Each dataset class and the names it serves, as it expects them; None for a class of one graph (WikiCS).
DATASET_CLASSES: dict[type[InMemoryDataset], tuple[str | None, ...]] = {
    Planetoid: ("Cora", "CiteSeer", "PubMed"),
    HeterophilousGraphDataset: ("Minesweeper", "Tolokers", "Roman-empire", "Amazon-ratings", "Questions"),
    Amazon: ("Computers", "Photo"),
    Coauthor: ("CS", "Physics"),
    WikiCS: (None,),
}
# Lower-cased config name (a single graph's: its class's) -> (dataset class, the name that class expects).
PYG_DATASETS: dict[str, tuple[type[InMemoryDataset], str | None]] = {
    (name or dataset_class.__name__).lower(): (dataset_class, name)
    for dataset_class, names in DATASET_CLASSES.items() for name in names
}
KNOWN_NAMES = ", ".join(name or dataset_class.__name__ for dataset_class, name in PYG_DATASETS.values())

DEFAULT_SPLIT = {"train": 0.6, "val": 0.2, "test": 0.2}
# What PyG writes beside the processed data: repr(pre_transform) and repr(pre_filter), which it compares on
# every later run after reading them with torch.load(weights_only=False).
PROCESSING_RECORDS = ("pre_transform.pt", "pre_filter.pt")

# What a processed file that is not plain tensors raises: torch.load refusing a global (UnpicklingError),
# a corrupt or truncated archive (RuntimeError, EOFError), or `_unpack` an unexpected layout (ValueError).
UNSAFE_FILE_ERRORS = (pickle.UnpicklingError, RuntimeError, EOFError, ValueError)

log = logging.getLogger(__name__)


class _DownloadFailed(Exception):
    """Marks an exception raised while PyG was downloading, as opposed to processing."""


def _load_safely(path: str | Path) -> Any:
    """Unpickles only tensors, containers and the classes PyG registers as safe globals: no code runs."""
    return torch.load(path, map_location="cpu", weights_only=True)


def _reason(error: Exception) -> str:
    """Why a file did not load, in one line: the global torch refused, else the message's first line.

    torch's refusal opens with advice to load with weights_only=False, which is exactly what not to do.
    """
    refused = re.search(r"Unsupported global: GLOBAL \S+", str(error))
    first_line = re.sub(r"\x1b\[[0-9;]*m", "", str(error).strip()).split("\n")[0]
    return f"{type(error).__name__}: {refused.group() if refused else first_line}"


def _unpack(stored: Any, data_cls: type) -> tuple[Any, Any, type]:
    """(data, slices, data class) from what `InMemoryDataset.save` wrote: (data, slices[, data class])."""
    if not (isinstance(stored, tuple) and len(stored) in (2, 3)):
        raise ValueError(f"expected a tuple (data, slices[, data class]), found {type(stored).__name__}")
    return stored[0], stored[1], stored[2] if len(stored) == 3 else data_cls


@functools.cache
def _guarded(dataset_class: type[InMemoryDataset]) -> type[InMemoryDataset]:
    """Returns a subclass that reads its processed files safely and tags download failures.

    PyG runs `download` only when a raw file is missing, so every exception from it is a failed download.
    PyG also writes straight to the final file name, so an interrupted download would leave a truncated
    file that the next run takes for the dataset: whatever the attempt added to the raw folder is deleted.

    PyG reads the processed files with `torch.load`, retrying with `weights_only=False` when the safe load
    fails, which runs whatever code a crafted file was pickled to run. Here they are read with
    `weights_only=True` only; a processed file that does not load so is deleted and rebuilt from the raw
    files, a processing record is deleted (PyG writes it again when it next processes).
    """

    def download(self) -> None:
        raw_dir = Path(self.raw_dir)
        existing = _paths_under(raw_dir)
        try:
            dataset_class.download(self)
        except BaseException as error:  # Ctrl-C mid-download leaves a truncated file too
            _remove_new_paths(raw_dir, existing)
            if isinstance(error, Exception):
                raise _DownloadFailed(repr(error)) from error
            raise

    def load(self, path: str, data_cls: type = Data) -> None:
        # InMemoryDataset.load, with the safe load only; every dataset class's __init__ calls it.
        try:
            data, slices, data_cls = _unpack(_load_safely(path), data_cls)
        except UNSAFE_FILE_ERRORS as error:
            _process_again(self, path, error)
            data, slices, data_cls = _unpack(_load_safely(path), data_cls)
        self.slices = slices
        self.data = data_cls.from_dict(data) if isinstance(data, dict) else data

    def _process(self) -> None:
        for name in PROCESSING_RECORDS:
            record = Path(self.processed_dir) / name
            if record.exists():
                try:
                    _load_safely(record)
                except UNSAFE_FILE_ERRORS as error:
                    log.warning("%s: deleted, it does not load safely (%s)", record, _reason(error))
                    record.unlink()
        dataset_class._process(self)

    # PyG decides whether to download/process by looking for these methods on the class itself.
    methods = {"download": download, "process": dataset_class.process, "load": load, "_process": _process}
    return type(dataset_class.__name__, (dataset_class,), methods)


def _process_again(dataset: InMemoryDataset, path: str, error: Exception) -> None:
    """Deletes a processed file that did not load safely and rebuilds it from the raw files.

    Raises:
        DatasetError: If a raw file is missing, so the processed file cannot be rebuilt.
    """
    reason = _reason(error)
    log.warning("%s: does not load safely (%s); deleting it and processing the raw files again", path, reason)
    Path(path).unlink(missing_ok=True)
    missing = [raw for raw in dataset.raw_paths if not os.path.exists(raw)]
    if missing:
        raise DatasetError(
            f"{path}: does not load safely ({reason}) and cannot be rebuilt: the raw file {missing[0]} is "
            "missing; the file was deleted, so the next run downloads the dataset again"
        )
    dataset.process()


def _paths_under(folder: Path) -> set[Path]:
    """Lists every file and folder below `folder` (empty if it does not exist)."""
    return set(folder.rglob("*")) if folder.exists() else set()


def _remove_new_paths(folder: Path, before: set[Path]) -> None:
    """Deletes the files and folders below `folder` that are not in `before`."""
    created = _paths_under(folder) - before
    for path in created:
        if not path.is_dir():
            path.unlink(missing_ok=True)
    # Deepest folders first, so a parent is empty by the time it is reached.
    for directory in sorted((p for p in created if p.is_dir()), key=lambda p: -len(p.parts)):
        if not any(directory.iterdir()):
            directory.rmdir()


def _open_dataset(key: str, root: Path) -> InMemoryDataset:
    """Instantiates the PyG dataset under `root`, downloading it if needed."""
    dataset_class, name = PYG_DATASETS[key]
    guarded_class = _guarded(dataset_class)
    # WikiCS takes no name and keeps its files directly under root; give it its own folder.
    folder = root / "WikiCS" if name is None else root
    try:
        if name is None:
            return guarded_class(str(folder), is_undirected=True)
        return guarded_class(str(folder), name)
    except DatasetError:
        raise
    except _DownloadFailed as error:
        raise DatasetError(
            f"PyG dataset {name or 'WikiCS'} could not be downloaded into {root} (no network?): "
            f"{error.__cause__!r}. Download it once on a machine with internet access (into the same root), "
            "or use `dataset=npz dataset.path=FILE` with a local .npz file instead."
        ) from error
    except Exception as error:
        raise DatasetError(
            f"PyG dataset {name or 'WikiCS'} under {root} could not be read ({error!r}); its files may be "
            "incomplete or corrupt: delete that dataset's folder and download it again"
        ) from error


def _stored_mask(mask: torch.Tensor, split_index: int, key: str, source: str) -> np.ndarray:
    """Takes column `split_index` of a [N, S] mask; a [N] mask is shared by all splits."""
    if mask.dim() == 1:
        return mask.numpy()
    return mask[:, check_split_index(split_index, mask.shape[1], f"{source} {key}")].numpy()


def load_pyg(
    pyg_name: str,
    root: str | Path,
    split_index: int = 0,
    split: Mapping[str, float] = DEFAULT_SPLIT,
    seed: int = 0,
) -> Data:
    """Loads a PyG benchmark graph, downloading it into `root` the first time.

    The dataset's stored split is used when it has one (column `split_index` of 2-D masks); otherwise a
    seeded stratified split with the `split` fractions is drawn.

    Args:
        pyg_name: Case-insensitive, one of Cora, CiteSeer, PubMed, Minesweeper, Tolokers, Roman-empire,
            Amazon-ratings, Questions, Computers, Photo, CS, Physics, WikiCS.
        root: Folder PyG downloads into and reads from.
        split_index: Which stored split to use.
        split: {"train": f, "val": f, "test": f} for datasets without a stored split.
        seed: Drives the split of datasets without a stored one.

    Returns:
        The validated graph; `source` names the dataset and its root.

    Raises:
        ConfigError: If the name is unknown or `split_index` out of range.
        DatasetError: If the dataset cannot be downloaded or read, or breaks the data contract.
    """
    key = str(pyg_name).lower()
    if key not in PYG_DATASETS:
        raise ConfigError(f"unknown PyG dataset {pyg_name!r}; known names (case-insensitive): {KNOWN_NAMES}")
    root = Path(root).expanduser()
    dataset = _open_dataset(key, root)
    graph = dataset[0]
    source = f"PyG {type(dataset).__name__}({PYG_DATASETS[key][1] or 'WikiCS'}) in {os.fspath(root)}"

    if getattr(graph, "train_mask", None) is not None:
        masks = [
            _stored_mask(graph[key_name], split_index, key_name, source)
            for key_name in ("train_mask", "val_mask", "test_mask")
        ]
    else:
        # The split needs valid labels, so check them before drawing it.
        check_labels(source, graph.y.numpy(), graph.num_nodes)
        masks = stratified_split(graph.y.numpy(), split, np.random.default_rng(seed))
    return build_graph(source, graph.x, graph.y, graph.edge_index, *masks)
