"""Dispatch a dataset config to the loader it names."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping

from torch_geometric.data import Data

from sgt_core.data.long_range import generate_long_range_rings
from sgt_core.data.minesweeper import generate_minesweeper
from sgt_core.data.npz import load_npz
from sgt_core.data.pyg import load_pyg
from sgt_core.data.tables import load_tables
from sgt_core.errors import ConfigError

# Config name -> loader; each loader's parameters (besides `seed`) are the config's keys, one to one.
LOADERS: dict[str, Callable[..., Data]] = {
    "minesweeper": generate_minesweeper,
    "npz": load_npz,
    "pyg": load_pyg,
    "long_range": generate_long_range_rings,
    "parquet": load_tables,
}


def load_dataset(cfg: Mapping, seed: int) -> Data:
    """Loads the dataset a config describes.

    Args:
        cfg: The `dataset` config group: `name` (one of `LOADERS`) plus that loader's keyword arguments,
            e.g. {"name": "npz", "path": "x.npz", "split_index": 0, "split": {...}}.
        seed: Drives every random choice (generated graph, split); the same seed gives the same graph.

    Returns:
        A validated graph meeting the contract of `sgt_core.data`.

    Raises:
        ConfigError: If the name is unknown, or keys are missing or not understood by the loader.
        DatasetError: If the data cannot be loaded or breaks the contract.
    """
    if "name" not in cfg:
        raise ConfigError(f"dataset config has no 'name'; known datasets: {', '.join(LOADERS)}")
    name = cfg["name"]
    if name not in LOADERS:
        raise ConfigError(f"unknown dataset {name!r}; known datasets: {', '.join(LOADERS)}")
    loader = LOADERS[name]
    arguments = {key: value for key, value in cfg.items() if key != "name"}

    parameters = inspect.signature(loader).parameters
    accepted = [key for key in parameters if key != "seed"]
    unknown = sorted(set(arguments) - set(accepted))
    if unknown:
        raise ConfigError(f"dataset {name!r} does not take keys {unknown}; it takes {accepted}")
    missing = [
        key for key in accepted if key not in arguments and parameters[key].default is inspect.Parameter.empty
    ]
    if missing:
        raise ConfigError(f"dataset {name!r} needs keys {missing}; found {sorted(arguments)}")
    return loader(**arguments, seed=seed)
