"""The pipeline's stages as data: what each reads from the config, what it depends on, how it is keyed."""

from __future__ import annotations

import importlib
import json
from dataclasses import dataclass
from pathlib import Path

from sgt_core.artifacts import file_fingerprint, fingerprint
from sgt_core.code_version import PACKAGE_ROOT, code_files, code_version
from sgt_core.errors import ConfigError, DatasetError
from sgt_core.estimate import outputs as estimate_outputs
from sgt_core.export import outputs as export_outputs
from sgt_core.train import outputs as train_outputs


@dataclass(frozen=True)
class StageResult:
    """What a finished stage hands its trackers, every file already resolved in its folder.

    Attributes:
        metrics: what the stage function returned (numbers, and a few words such as its device).
        history: its per-epoch rows (each with an "epoch"), or None for a stage that has no epochs.
        files: the files and folders of its result that its tracking run keeps a copy of.
        out_dir: the local folder holding its complete result.
    """

    metrics: dict
    history: list[dict] | None
    files: tuple[Path, ...]
    out_dir: Path


@dataclass(frozen=True)
class Stage:
    """One pipeline stage: a plain function (config, upstream artifact dirs, output dir) -> metrics.

    Its code, which enters its cache key, is not listed here: it is every sgt_core module that the
    stage function's module imports, directly or not (`code_files`), found from the sources.

    Attributes:
        name: stage name, also its folder under `artifacts/` and its `sgt.stage` tag.
        function: the stage function as "module:name", imported when the stage runs: a process that only
            plans a run (the flow's: cache keys, MLflow) never imports torch_geometric and the models.
        config_sections: top-level config keys the stage reads; only these enter its cache key.
        upstream: stages whose artifacts it reads.
        kernel_device: where it runs the attention kernels, whose backend enters its cache key: "cpu", a
            `section.option` config path naming its device (auto/cpu/cuda), or None when it runs none.
        history_file: its file of per-epoch rows, or None. Names come from the stage's `outputs` module,
            where its files are declared once; the stage module itself is imported only when it runs.
        logged: the files and folders of its result that a tracking run keeps a copy of when it computes.
    """

    name: str
    function: str
    config_sections: tuple[str, ...]
    upstream: tuple[str, ...]
    kernel_device: str | None = None
    history_file: str | None = None
    logged: tuple[str, ...] = ()

    @property
    def module(self) -> str:
        """The dotted name of the module defining the stage function, where its import closure starts."""
        return self.function.partition(":")[0]

    def run(self, cfg: dict, inputs: dict[str, Path], out_dir: Path) -> dict:
        """Runs the stage function: (config, upstream artifact folders, output folder) -> metrics."""
        module, _, name = self.function.partition(":")
        return getattr(importlib.import_module(module), name)(cfg, inputs, out_dir)

    def result(self, out_dir: Path, metrics: dict) -> StageResult:
        """What the stage's complete result in `out_dir`, with its metrics, gives its trackers."""
        history = out_dir / self.history_file if self.history_file else None
        return StageResult(metrics, json.loads(history.read_text()) if history and history.is_file() else None,
                           tuple(out_dir / name for name in self.logged), out_dir)

    def code_files(self, root: Path = PACKAGE_ROOT) -> tuple[str, ...]:
        """The sources (paths relative to root's parent) whose content enters the stage's cache key."""
        return code_files(self.module, root)


STAGES: tuple[Stage, ...] = (
    Stage("preprocess", "sgt_core.preprocess.stage:run_preprocess", ("dataset", "preprocess", "seed"), ()),
    Stage("estimate", "sgt_core.estimate.stage:run_estimate", ("estimator", "seed"), ("preprocess",),
          kernel_device="cpu", history_file=estimate_outputs.HISTORY_FILE,
          logged=(estimate_outputs.ESTIMATOR_FILE,)),
    Stage("export", "sgt_core.export.stage:run_export", ("export",), ("preprocess", "estimate"),
          logged=(export_outputs.SCORES_DIR,)),
    Stage("train", "sgt_core.train.stage:run_train", ("model", "sampler", "optimizer", "train", "seed"),
          ("preprocess", "export"), kernel_device="train.device", history_file=train_outputs.HISTORY_FILE,
          logged=(train_outputs.MODEL_FILE,)),
)
STAGE_BY_NAME = {stage.name: stage for stage in STAGES}


def kernel_backend(requested: str) -> str:
    """Which attention kernels run on a device setting (auto/cpu/cuda): "cuda", "compiled",
    "compiled-native" (SGT_KERNELS_NATIVE=1) or "torch".

    They draw different random streams (the compiled kernels seed their own generator per call), and the
    native build's sums round differently, so the same config gives different results on each. On CUDA
    the torch kernels run; on the CPU the compiled ones unless they are switched off (SGT_CPU_KERNELS=0)
    or cannot be built. `kernels.backend()` answers that as the stage will: it never raises, and builds
    once per machine (about a minute, or ahead of time by `make setup`), then loads in milliseconds.
    It imports torch: a process that must not (the flow's) has the keys computed in a stage's process
    (flows/keys.py).
    """
    import torch

    from sgt_core import kernels
    from sgt_core.train.device import resolve_device

    try:
        device = resolve_device(requested)
    except ConfigError:  # cuda asked for on a machine without it: the stage itself reports that clearly
        device = torch.device(requested)
    if device.type != "cpu":
        return device.type
    return kernels.backend()


def stage_device(stage: Stage, cfg: dict) -> str:
    """The device setting the stage runs its kernels on: "cpu", or the value of its config option."""
    if stage.kernel_device == "cpu":
        return "cpu"
    section, option = stage.kernel_device.split(".")
    return cfg[section][option]


def stage_environment(stage: Stage, cfg: dict) -> dict[str, str]:
    """Environment variables the stage's process starts with: settings that hold for a whole process.

    `orchestration.train_malloc_mmap_threshold_kb` is glibc's `MALLOC_MMAP_THRESHOLD_` (in bytes) for the train stage:
    malloc reads it once, as the process starts, so it holds for that stage's process alone, never for
    the flow's or a later run's. Whoever starts the stage's process sets them: the benchmarks start it
    with them; flows/isolation.py forks it from a server that started without them, so it applies them
    through mallopt, the same setting. A stage run inline in another process cannot have them.
    """
    threshold_kb = cfg["orchestration"]["train_malloc_mmap_threshold_kb"]
    if stage.name == "train" and threshold_kb is not None:
        return {"MALLOC_MMAP_THRESHOLD_": str(threshold_kb * 1024)}
    return {}


# The dataset keys that name files or folders whose content the graph is read from.
DATASET_FILE_KEYS: tuple[str, ...] = ("path", "train_smiles", "split_file")


def dataset_fingerprint(dataset_cfg: dict) -> str | None:
    """The content hash of a file-backed dataset, so editing its files invalidates the cache.

    Every key of `DATASET_FILE_KEYS` that is set counts: a file by its bytes, a folder (ZINC's, a TU
    set's) by every file in it, names included.
    """
    if dataset_cfg.get("name") == "parquet":
        # here: it imports duckdb, pyarrow and torch_geometric
        from sgt_core.data.graph_tables import parquet_table_paths

        # Every file of every table, so that editing, adding or removing a file matched by a glob counts.
        files = parquet_table_paths(dataset_cfg)
        return fingerprint({table: [file_fingerprint(path) for path in paths] for table, paths in files.items()})
    paths = {key: dataset_cfg[key] for key in DATASET_FILE_KEYS if isinstance(dataset_cfg.get(key), str)}
    if not paths:
        return None
    contents = {}
    for key, path in paths.items():
        path = Path(path)
        if path.is_dir():
            if dataset_cfg.get("name") == "npz":
                raise DatasetError(f"{path}: is a directory; expected a .npz file (dataset.path)")
            contents[key] = {str(file.relative_to(path)): file_fingerprint(file)
                             for file in sorted(path.rglob("*")) if file.is_file()}
        elif path.is_file():
            contents[key] = file_fingerprint(path)
        else:
            raise DatasetError(f"{path}: no such file or folder (dataset.{key})")
    # One file under `path` keeps the hash it always had, so that existing caches stay valid.
    return contents["path"] if list(contents) == ["path"] and isinstance(contents["path"], str) else fingerprint(contents)


def stage_material(stage: Stage, cfg: dict, keys: dict[str, str], root: Path = PACKAGE_ROOT) -> dict:
    """What a stage's cache key hashes: its config sections, upstream keys (from `keys`), code, kernel backend."""
    material = {
        "stage": stage.name,
        "config": {section: cfg[section] for section in stage.config_sections},
        "upstream": {name: keys[name] for name in stage.upstream},
        "code": code_version(stage.module, root=root),
    }
    if stage.kernel_device is not None:
        material["kernels"] = kernel_backend(stage_device(stage, cfg))
    if stage.name == "preprocess":
        material["dataset_file"] = dataset_fingerprint(cfg["dataset"])
    return material


def stage_key(stage: Stage, cfg: dict, keys: dict[str, str], root: Path = PACKAGE_ROOT) -> str:
    """One stage's cache key: the hash of its material (`stage_material`), given its upstream stages' `keys`."""
    return fingerprint(stage_material(stage, cfg, keys, root))


def stage_keys(cfg: dict, root: Path = PACKAGE_ROOT) -> dict[str, str]:
    """Each stage's cache key, in pipeline order; `root` is the sgt_core folder whose sources are hashed."""
    keys: dict[str, str] = {}
    for stage in STAGES:
        keys[stage.name] = stage_key(stage, cfg, keys, root)
    return keys


def dataset_id(cfg: dict) -> str:
    """A short readable dataset name for experiment names: minesweeper, npz-tolokers, pyg-cora, parquet-web,
    zinc, tu-mutag, molecules-hiv."""
    dataset = cfg["dataset"]
    if dataset["name"] == "parquet":
        return f"parquet-{dataset['graph_name']}" if dataset.get("graph_name") else "parquet"
    if dataset["name"] == "npz":
        return f"npz-{Path(dataset['path']).stem}"
    if dataset["name"] == "pyg":
        return f"pyg-{str(dataset['pyg_name']).lower()}"
    if dataset["name"] in ("tu", "molecules"):  # a folder's or a file's name: tu-mutag, molecules-hiv
        return f"{dataset['name']}-{Path(str(dataset['path'])).name.split('.')[0].lower()}"
    if dataset["name"] == "ogb":
        return str(dataset.get("ogb_name", "ogb"))
    return dataset["name"]
