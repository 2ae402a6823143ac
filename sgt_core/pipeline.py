"""The pipeline's stages as data: what each reads from the config, what it depends on, how it is keyed."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sgt_core.artifacts import code_version, file_fingerprint, fingerprint
from sgt_core.data.tables import table_paths
from sgt_core.errors import DatasetError
from sgt_core.estimate.stage import run_estimate
from sgt_core.export.stage import run_export
from sgt_core.preprocess.stage import run_preprocess
from sgt_core.train.stage import run_train

StageFunction = Callable[[dict, dict[str, Path], Path], dict]


@dataclass(frozen=True)
class Stage:
    """One pipeline stage: a plain function (config, upstream artifact dirs, output dir) -> metrics.

    Attributes:
        name: stage name, also its folder under `artifacts/` and its `sgt.stage` tag.
        run: the stage function.
        config_sections: top-level config keys the stage reads; only these enter its cache key.
        upstream: stages whose artifacts it reads.
        code: sgt_core sub-packages/modules whose source enters its cache key.
    """

    name: str
    run: StageFunction
    config_sections: tuple[str, ...]
    upstream: tuple[str, ...]
    code: tuple[str, ...]


STAGES: tuple[Stage, ...] = (
    Stage("preprocess", run_preprocess, ("dataset", "preprocess", "seed"), (), ("data", "preprocess")),
    Stage("estimate", run_estimate, ("estimator", "seed"), ("preprocess",),
          ("estimate", "models", "kernels", "metrics", "schedules", "seeding")),
    Stage("export", run_export, (), ("preprocess", "estimate"), ("export",)),
    Stage("train", run_train, ("model", "train", "seed"), ("preprocess", "export"),
          ("train", "models", "kernels", "sampling", "metrics", "schedules", "seeding")),
)
STAGE_BY_NAME = {stage.name: stage for stage in STAGES}


def dataset_fingerprint(dataset_cfg: dict) -> str | None:
    """The content hash of a file-backed dataset, so editing the file invalidates the cache."""
    if dataset_cfg.get("name") == "parquet":
        # Every file of both tables, so that editing, adding or removing a file matched by a glob counts.
        files = table_paths(dataset_cfg.get("nodes"), dataset_cfg.get("edges"))
        return fingerprint({table: [file_fingerprint(path) for path in paths] for table, paths in files.items()})
    path = dataset_cfg.get("path")
    if not path:
        return None
    if Path(path).is_dir():
        raise DatasetError(f"{path}: is a directory; expected a .npz file (dataset.path)")
    if not Path(path).is_file():
        raise DatasetError(f"{path}: no such file")
    return file_fingerprint(Path(path))


def stage_keys(cfg: dict) -> dict[str, str]:
    """Each stage's cache key: a hash of its own config sections, its upstream keys and its code."""
    keys: dict[str, str] = {}
    for stage in STAGES:
        material = {
            "stage": stage.name,
            "config": {section: cfg[section] for section in stage.config_sections},
            "upstream": {name: keys[name] for name in stage.upstream},
            "code": code_version(*stage.code),
        }
        if stage.name == "preprocess":
            material["dataset_file"] = dataset_fingerprint(cfg["dataset"])
        keys[stage.name] = fingerprint(material)
    return keys


def dataset_id(cfg: dict) -> str:
    """A short readable dataset name for experiment names: minesweeper, npz-tolokers, pyg-cora, parquet-web."""
    dataset = cfg["dataset"]
    if dataset["name"] == "parquet":
        return f"parquet-{dataset['graph_name']}" if dataset.get("graph_name") else "parquet"
    if dataset["name"] == "npz":
        return f"npz-{Path(dataset['path']).stem}"
    if dataset["name"] == "pyg":
        return f"pyg-{str(dataset['pyg_name']).lower()}"
    return dataset["name"]
