"""Checks a run before it starts: its config and dataset, before any stage runs or any run is recorded.

Two steps. `check_start` answers in about a second, before any Prefect server starts and before torch is
imported: where the run writes (the artifacts folder and the MLflow store's, writable, with room to start)
and what it reads (the dataset's files exist and parse). `check_run` then loads the dataset as the
preprocess stage will, with every check of the data contract, while the Prefect server starts: in a
process of the stages' own, so that the flow's process never imports torch.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import zipfile
from pathlib import Path

from sgt_core.errors import DatasetError, SGTError

# Less free space than this and not even a new MLflow store fits (~600 KB): fail before anything starts.
MIN_FREE_BYTES = 1 << 20


def preflight(overrides: list[str]) -> dict:
    """Composes the run's config and checks it and its dataset (`check_start`, `check_run`); returns the config."""
    from sgt_core.config import compose_config

    cfg = compose_config(overrides)
    check_start(cfg)
    return check_run(cfg)


def check_start(cfg: dict) -> None:
    """What can be checked in a second, without torch or Prefect: the folders the run writes and the files
    it reads. Raises SGTError naming the path and the system's words (`Read-only file system`)."""
    from flows.locations import tracking_uri
    from sgt_core.artifacts import is_url

    check_dataset_files(cfg["dataset"])  # first: a run refused for its input creates no folder
    folders = [] if is_url(cfg["paths"]["artifacts"]) else [Path(cfg["paths"]["artifacts"])]
    store = tracking_uri(cfg)
    if store.startswith("sqlite:///"):
        folders.append(Path(store.removeprefix("sqlite:///")).parent)
    for folder in dict.fromkeys(path.resolve() for path in folders):
        check_writable(folder)


def check_writable(folder: Path) -> None:
    """Writes (and removes) a file in `folder`, which must have room to start; folders created for that are
    removed again: a run refused later, for its dataset's content, leaves nothing behind."""
    created = [parent for parent in (folder, *folder.parents) if not parent.exists()]
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".sgt-write-check-"):
            pass
        free = shutil.disk_usage(folder).free
    except OSError as error:
        raise SGTError(f"{error.filename or folder}: {error.strerror or error}") from None
    finally:
        for parent in created:  # deepest first; the run creates them again when it starts
            with contextlib.suppress(OSError):
                parent.rmdir()
    if free < MIN_FREE_BYTES:
        raise SGTError(f"{folder}: No space left on device ({free // 1024} KiB free; a run needs at least "
                       f"{MIN_FREE_BYTES >> 20} MiB to start)")


# The files a folder dataset must hold ({name} stands for a TU folder's own name).
FOLDER_FILES = {
    "zinc": ("valid.txt", "test.txt", "subset_val.index", "subset_test.index", "subset_train.index",
             "subset_reference_targets.csv", "vocabulary.json"),
    "tu": ("{name}_A.txt", "{name}_graph_indicator.txt", "{name}_graph_labels.txt"),
}
# Datasets whose full load takes tens of seconds (RDKit over every molecule, a generated set of millions of
# edges): the run checks their files here and leaves their content to the preprocess stage, which reports a
# bad molecule in the same one line and caches nothing, rather than loading them twice.
LOADED_BY_THE_STAGE = ("zinc", "molecules", "ogb", "sbm_pattern", "sbm_cluster")


def check_dataset_files(dataset: dict) -> None:
    """The dataset's files exist and parse, as its loader will read them: an .npz archive (`dataset.path`),
    the node and edge tables (every CSV row against its header, every Parquet file's footer), a folder
    dataset's files (ZINC's, a TU set's), a SMILES table's header and the files its keys name. Generated
    datasets have none, PyG's are checked when loaded (`check_run`)."""
    if dataset["name"] in ("zinc", "tu", "molecules"):
        check_named_files(dataset)
    if dataset["name"] == "parquet":
        from sgt_core.data.tables import EDGE_KEYS, NODE_KEYS, check_table_files, table_files  # no torch

        nodes, edges = dataset["nodes"], dataset["edges"]
        if nodes.get("graph_id") is None:  # one graph: its tables as load_tables reads them
            check_table_files({k: v for k, v in nodes.items() if k in NODE_KEYS},
                              {k: v for k, v in edges.items() if k in EDGE_KEYS})
        else:  # many graphs: their three tables' files (their content is checked as they are loaded)
            for table in ("nodes", "edges", "graphs"):
                table_files(table, (dataset.get(table) or {}).get("path"))
    elif dataset["name"] == "npz":
        path = Path(os.path.abspath(Path(dataset["path"]).expanduser()))
        if path.is_dir():
            raise DatasetError(f"{path}: is a directory; expected a .npz file (dataset.path)")
        if not path.is_file():
            raise DatasetError(f"{path}: no such file")
        try:
            with zipfile.ZipFile(path) as archive:  # reads the archive's directory, not its arrays
                archive.namelist()
        except OSError as error:
            raise DatasetError(f"{path}: {error.strerror or error}") from None
        except zipfile.BadZipFile as error:
            raise DatasetError(f"{path}: not a valid .npz archive ({error})") from None


def check_named_files(dataset: dict) -> None:
    """The files and folders the dataset's keys name exist; a folder holds its dataset's files; a SMILES
    table's header names its SMILES and label columns."""
    for key in ("path", "train_smiles", "split_file"):
        if isinstance(dataset.get(key), str) and not Path(dataset[key]).exists():
            raise DatasetError(f"{Path(dataset[key]).resolve()}: no such file or folder (dataset.{key})")
    folder = Path(dataset["path"])
    if dataset["name"] in FOLDER_FILES:
        if not folder.is_dir():
            raise DatasetError(f"{folder.resolve()}: not a folder (dataset.path of dataset={dataset['name']})")
        for pattern in FOLDER_FILES[dataset["name"]]:
            if not (folder / pattern.format(name=folder.name)).is_file():
                raise DatasetError(f"{(folder / pattern.format(name=folder.name)).resolve()}: no such file")
    if dataset["name"] == "molecules":
        import csv
        import gzip

        try:
            with (gzip.open if folder.suffix == ".gz" else open)(folder, "rt", newline="") as handle:
                header = next(csv.reader(handle), [])
        except (OSError, UnicodeDecodeError, csv.Error) as error:
            raise DatasetError(f"{folder.resolve()}: cannot read its header ({error})") from None
        wanted = [dataset.get("smiles_column", "smiles"), *(dataset.get("label_columns") or [])]
        missing = [column for column in wanted if column not in header]
        if missing:
            raise DatasetError(f"{folder.resolve()}: no column {missing[0]!r}; its columns are {', '.join(header)}")


def check_run(cfg: dict) -> dict:
    """Checks a composed config and its dataset before any stage runs or any run is recorded; returns it.

    The dataset is loaded where the stages run: in a process of the stages' server (stage_isolation=process),
    whose torch and loaders are imported already, so that the flow's process never imports them; here
    otherwise.
    """
    from flows.locations import tracking_uri

    tracking_uri(cfg)  # an object-store artifacts root needs an MLflow store named elsewhere
    if cfg["stage"] in ("all", "preprocess") and cfg["dataset"]["name"] not in LOADED_BY_THE_STAGE:
        from flows.isolation import call_in_stage_process, uses_stage_server

        if uses_stage_server(cfg):
            call_in_stage_process("flows.preflight:load_dataset_unless_cached", cfg)
        else:
            load_dataset_unless_cached(cfg)
    return cfg


def load_dataset_unless_cached(cfg: dict) -> None:
    """Loads the dataset as the preprocess stage will, for its errors only (DatasetError names the file and the
    problem), unless the run will reuse a cached preprocess result instead."""
    from sgt_core.data import load_dataset  # its loaders take seconds to import
    from sgt_core.object_store import open_store
    from sgt_core.pipeline import STAGES, stage_key

    preprocess_key = stage_key(STAGES[0], cfg, {})  # the first stage's key needs no other
    if cfg["stage"] == "all" and open_store(cfg["paths"]["artifacts"]).is_complete("preprocess", preprocess_key):
        return
    load_dataset(cfg["dataset"], seed=cfg["seed"])
