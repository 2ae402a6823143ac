"""OGB's node-property datasets (ogbn-proteins, -arxiv, -products) as a set of one graph with the official split.

Read through `ogb.nodeproppred.NodePropPredDataset`, with three of its steps replaced: its download asks
on the terminal before a large file and waits on the network without a timeout, and it caches the graph
as a pickle it reads back with `torch.load` (this project never unpickles). Here the download fails fast
and in one line when offline, and the graph is read from OGB's raw CSV files each time.

ogbn-proteins has no node features: as is common practice (OGB's examples, GraphGPS, Spexphormer), a
node's features are the mean of its incident edges' 8 features, and its species is a categorical code.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import shutil
import socket
import threading
import urllib.parse
import urllib.request
import zipfile
from pathlib import Path

import numpy as np
from torch_geometric.data import Data

from sgt_core.data.many_graphs import build_graph_set
from sgt_core.errors import ConfigError, DatasetError

log = logging.getLogger(__name__)

# name -> (task, metric): OGB's evaluators' (ROC-AUC averaged over ogbn-proteins' 112 tasks, else accuracy).
OGB_DATASETS = {
    "ogbn-proteins": ("node_multilabel", "roc_auc"),
    "ogbn-arxiv": ("node_classification", "accuracy"),
    "ogbn-products": ("node_classification", "accuracy"),
}
# Seconds to resolve the server's name, to connect, and to wait for each read: offline, fail within them.
NETWORK_TIMEOUT_S = 15.0
SPLIT_FILES = {"train": "train", "val": "valid", "test": "test"}


def resolve_within(host: str, timeout_s: float) -> None:
    """Resolves `host`, giving up after `timeout_s` (name lookups have no timeout of their own).

    Raises:
        OSError: The name does not resolve (TimeoutError: not within `timeout_s`).
    """
    outcome: dict[str, BaseException] = {}

    def resolve() -> None:
        try:
            socket.getaddrinfo(host, None)
        except OSError as error:
            outcome["error"] = error

    # A daemon thread: a lookup that never returns must not keep the process alive.
    lookup = threading.Thread(target=resolve, name=f"resolve {host}", daemon=True)
    lookup.start()
    lookup.join(timeout_s)
    if lookup.is_alive():
        raise TimeoutError(f"looking up {host} took over {timeout_s:g} s")
    if "error" in outcome:
        raise outcome["error"]


def fetch(url: str, destination: Path, timeout_s: float = NETWORK_TIMEOUT_S) -> None:
    """Downloads `url` to `destination`, through a `.part` file renamed when complete (deleted if not).

    Raises:
        OSError: The server cannot be reached, or stops answering for `timeout_s` (urllib's URLError and
            socket timeouts are OSErrors).
    """
    resolve_within(urllib.parse.urlsplit(url).hostname or "", timeout_s)
    partial = destination.with_name(destination.name + ".part")
    destination.parent.mkdir(parents=True, exist_ok=True)
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response, partial.open("wb") as file:
            size = response.headers.get("Content-Length")
            log.info("downloading %s (%s) into %s", url, f"{int(size) / 2**20:,.0f} MiB" if size else "size unknown",
                     destination.parent)
            shutil.copyfileobj(response, file, 2**20)
        partial.replace(destination)
    finally:
        partial.unlink(missing_ok=True)


def _dataset_class():
    """`NodePropPredDataset` with a fail-fast download, raw CSV reading and no pickles (built on first use)."""
    from sgt_core.data.ogb_package import import_ogb

    import_ogb()
    import ogb.nodeproppred
    import pandas
    from ogb.io.read_graph_raw import read_csv_graph_raw
    from ogb.nodeproppred import NodePropPredDataset

    master_file = Path(ogb.nodeproppred.__file__).parent / "master.csv"  # OGB's table of its datasets

    class RawNodePropPredDataset(NodePropPredDataset):
        """OGB's node-property dataset read from its raw files; downloads them when they are missing."""

        def __init__(self, name: str, root: str) -> None:
            master = pandas.read_csv(master_file, index_col=0, keep_default_na=False)
            folder = Path(root) / "_".join(name.split("-"))
            release = folder / f"RELEASE_v{master[name]['version']}.txt"
            # OGB would ask on the terminal whether to delete a folder of another release of its files.
            if folder.is_dir() and not release.exists():
                raise DatasetError(f"{folder}: holds no {release.name}: files of another OGB release or an "
                                   "interrupted download; delete the folder to download the dataset again")
            super().__init__(name=name, root=root)

        def pre_process(self) -> None:
            raw = Path(self.root) / "raw"
            if not (raw / "edge.csv.gz").exists():
                self._download()
            additional = self.meta_info["additional node files"]
            # OGB's reader prints progress meant for datasets of many graphs.
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                self.graph = read_csv_graph_raw(str(raw), add_inverse_edge=False, additional_node_files=(
                    [] if additional == "None" else additional.split(",")))[0]
            self.labels = pandas.read_csv(raw / "node-label.csv.gz", header=None).to_numpy()

        def _download(self) -> None:
            url, root = self.meta_info["url"], Path(self.original_root)
            archive = root / url.rpartition("/")[2]
            try:
                fetch(url, archive, NETWORK_TIMEOUT_S)
            except OSError as error:
                reason = " ".join(str(getattr(error, "reason", error)).split())
                raise DatasetError(f"{self.name}: cannot download from {url} ({type(error).__name__}: {reason}; no "
                                   f"internet?): place the dataset under {self.root} or run online once") from None
            try:
                with zipfile.ZipFile(archive) as files:
                    files.extractall(root)
            except zipfile.BadZipFile as error:
                raise DatasetError(f"{archive}: not a zip archive ({error}); deleted, run again") from error
            finally:
                archive.unlink(missing_ok=True)
            shutil.rmtree(self.root, ignore_errors=True)  # what an earlier attempt left, as OGB does
            shutil.move(root / self.download_name, self.root)

        def get_idx_split(self, split_type: str | None = None) -> dict[str, np.ndarray]:
            # The CSV files only: OGB reads a split_dict.pt first where one exists, a pickle.
            folder = Path(self.root) / "split" / (split_type or self.meta_info["split"])
            try:
                return {name: pandas.read_csv(folder / f"{stored}.csv.gz", header=None).to_numpy()[:, 0]
                        for name, stored in SPLIT_FILES.items()}
            except FileNotFoundError as error:
                raise DatasetError(f"{folder}: the official split's file {Path(error.filename).name} is missing"
                                   ) from error

    return RawNodePropPredDataset


def mean_incident_edge_features(edge_index: np.ndarray, edge_features: np.ndarray, num_nodes: int) -> np.ndarray:
    """Each node's mean over its incident edges (each stored once, counted at both ends); 0 for no edge.

    Returns:
        float32 [N, F].
    """
    ends = edge_index.reshape(-1)  # [2E] both ends of every edge
    degree = np.bincount(ends, minlength=num_nodes)  # [N]
    sums = np.stack([np.bincount(ends, weights=np.tile(column, 2), minlength=num_nodes)
                     for column in edge_features.T.astype(np.float64)], axis=1)  # [N, F]
    return (sums / np.maximum(degree, 1)[:, None]).astype(np.float32)


def load_ogb(ogb_name: str, root: str | Path = "data/ogb", seed: int = 0) -> Data:
    """Loads an OGB node-property dataset, downloading it under `root` the first time (needs the internet).

    Args:
        ogb_name: ogbn-proteins, ogbn-arxiv or ogbn-products.
        root: the folder that holds (or receives) OGB's dataset folders, e.g. data/ogb/ogbn_proteins.
        seed: the run's seed; unused (the split is OGB's official one).

    Returns:
        A set of one graph (graph_ptr [0, N]) with OGB's official split. ogbn-proteins: node_multilabel
        (112 tasks, ROC-AUC), x the mean incident edge features [N, 8], x_cat the species [N, 1], edge_attr
        [E, 8]; ogbn-arxiv and ogbn-products: node_classification (accuracy) on their node features.

    Raises:
        ConfigError: An unknown `ogb_name`.
        DatasetError: The files are missing and cannot be downloaded, or are incomplete.
    """
    if ogb_name not in OGB_DATASETS:
        raise ConfigError(f"dataset.ogb_name must be one of {', '.join(OGB_DATASETS)}; found {ogb_name!r}")
    root = Path(os.path.abspath(Path(root).expanduser()))
    dataset = _dataset_class()(ogb_name, str(root))
    graph, labels, split = dataset.graph, dataset.labels, dataset.get_idx_split()
    num_nodes = int(graph["num_nodes"])
    task, metric = OGB_DATASETS[ogb_name]
    masks = {}
    for name, nodes in split.items():
        masks[name] = np.zeros(num_nodes, dtype=bool)
        masks[name][nodes] = True
    features: dict = {}
    notes = {"ogb_split": f"OGB's official split ({dataset.meta_info['split']})"}
    if ogb_name == "ogbn-proteins":
        species, codes = np.unique(graph["node_species"][:, 0], return_inverse=True)
        features = {"x": mean_incident_edge_features(graph["edge_index"], graph["edge_feat"], num_nodes),
                    "x_cat": codes[:, None], "x_cat_sizes": [species.size], "edge_attr": graph["edge_feat"]}
        notes["ogb_node_features"] = ("none in ogbn-proteins: the mean of each node's incident edge features, "
                                      "and its species as a categorical code")
        y = labels.astype(np.float32)
    else:
        features = {"x": graph["node_feat"], "num_classes": int(dataset.meta_info["num classes"])}
        y = labels[:, 0].astype(np.int64)
    return build_graph_set(
        dataset.root,
        task=task,
        graph_ptr=np.array([0, num_nodes]),
        edge_index=graph["edge_index"],
        y=y,
        train_mask=masks["train"],
        val_mask=masks["val"],
        test_mask=masks["test"],
        metric=metric,
        notes=notes,
        **features,
    )
