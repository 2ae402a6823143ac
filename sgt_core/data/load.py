"""Dispatch a dataset config to the loader it names."""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Mapping

import torch
from torch_geometric.data import Data

from sgt_core.data.graph_tables import load_parquet
from sgt_core.data.long_range import generate_long_range_rings
from sgt_core.data.minesweeper import generate_minesweeper
from sgt_core.data.molecules import load_molecules
from sgt_core.data.npz import load_npz
from sgt_core.data.ogb_nodes import load_ogb
from sgt_core.data.pyg import load_pyg
from sgt_core.data.sbm import generate_sbm_cluster, generate_sbm_pattern
from sgt_core.data.synthetic import generate_synthetic
from sgt_core.data.synthetic_multilabel import generate_synthetic_multilabel
from sgt_core.data.tu import load_tu
from sgt_core.data.zinc import load_zinc
from sgt_core.errors import ConfigError
from sgt_core.numerics import LARGE_FEATURE

log = logging.getLogger(__name__)

# Config name -> loader; each loader's parameters (besides `seed`) are the config's keys, one to one, except
# the keys `load_dataset` handles itself (`name`, `standardize`).
LOADERS: dict[str, Callable[..., Data]] = {
    "minesweeper": generate_minesweeper,
    "npz": load_npz,
    "pyg": load_pyg,
    "long_range": generate_long_range_rings,
    "parquet": load_parquet,
    "synthetic": generate_synthetic,
    "zinc": load_zinc,
    "molecules": load_molecules,
    "ogb": load_ogb,
    "sbm_pattern": generate_sbm_pattern,
    "sbm_cluster": generate_sbm_cluster,
    "tu": load_tu,
    "synthetic_multilabel": generate_synthetic_multilabel,
}



def standardize_features(x: torch.Tensor) -> torch.Tensor:
    """Each column shifted and scaled to zero mean and unit variance over all nodes; constant columns are 0.

    All nodes, labelled or not, count: the graph is transductive, every node's features are known when
    training starts (no labels are used). Computed in float64, so that large values do not lose precision.

    Args:
        x: Node features [N, F].

    Returns:
        The standardised features [N, F], float32.
    """
    values = x.to(torch.float64)
    centred = values - values.mean(dim=0)  # [N, F]
    scale = centred.square().mean(dim=0).sqrt()  # [F]
    # Compared exactly, not by a tiny std: the mean of equal values need not equal them in floating point.
    constant = (values == values[0]).all(dim=0)  # [F]
    standardized = torch.where(constant, 0.0, centred / torch.where(constant, 1.0, scale))
    return standardized.to(torch.float32)


def warn_if_large(graph: Data) -> None:
    """Logs a warning naming the column of the largest feature magnitude if it reaches `LARGE_FEATURE`."""
    if graph.x.numel() == 0:
        return
    row, column = divmod(int(graph.x.abs().argmax()), graph.x.shape[1])
    value = float(graph.x[row, column])
    if abs(value) >= LARGE_FEATURE:
        log.warning(
            "%s: feature column %d holds %.6g (node %d); features this large train poorly, and from about "
            "1e19 the loss is NaN; set dataset.standardize=true to scale each column to zero mean and unit "
            "variance",
            graph.source, column, value, row,
        )


def load_dataset(cfg: Mapping, seed: int) -> Data:
    """Loads the dataset a config describes.

    Args:
        cfg: The `dataset` config group: `name` (one of `LOADERS`), optionally `standardize` (bool, default
            false: scale each feature column to zero mean and unit variance), plus that loader's keyword
            arguments, e.g. {"name": "npz", "path": "x.npz", "split_index": 0, "split": {...}}.
        seed: Drives every random choice (generated graph, split); the same seed gives the same graph.

    Returns:
        A validated graph meeting the contract of `sgt_core.data`.

    Raises:
        ConfigError: If the name is unknown, `standardize` not a boolean, or keys are missing or not understood
            by the loader.
        DatasetError: If the data cannot be loaded or breaks the contract.
    """
    if "name" not in cfg:
        raise ConfigError(f"dataset config has no 'name'; known datasets: {', '.join(LOADERS)}")
    name = cfg["name"]
    if name not in LOADERS:
        raise ConfigError(f"unknown dataset {name!r}; known datasets: {', '.join(LOADERS)}")
    loader = LOADERS[name]
    standardize = cfg.get("standardize", False)
    if not isinstance(standardize, bool):
        raise ConfigError(f"dataset.standardize: must be true or false, found {standardize!r}")
    arguments = {key: value for key, value in cfg.items() if key not in ("name", "standardize")}

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
    graph = loader(**arguments, seed=seed)
    if standardize:
        graph.x = standardize_features(graph.x)
    else:
        warn_if_large(graph)
    return graph
