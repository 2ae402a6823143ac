"""dataset=ogb on tiny hand-made folders in OGB's raw format, and its fast one-line failure offline."""

import gzip
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from sgt_core.data import load_dataset, ogb_nodes
from sgt_core.data.ogb_nodes import fetch, mean_incident_edge_features
from sgt_core.errors import ConfigError, DatasetError
from tests.conftest import REPO_ROOT, free_port

# Five nodes, edges stored once: 0-1, 1-2, 2-0, 3-4; node 4 is also in edge 3-4 only.
EDGES = [[0, 1], [1, 2], [2, 0], [3, 4]]
SPLIT = {"train": [0, 1, 4], "valid": [2], "test": [3]}


def write_csv_gz(path: Path, rows) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress("".join(",".join(map(str, row)) + "\n" for row in rows).encode()))


def write_ogb_folder(root: Path, name: str, split_name: str, files: dict) -> Path:
    """OGB's layout: <root>/<name with _>/{RELEASE_v1.txt, raw/*.csv.gz, split/<split_name>/*.csv.gz}."""
    folder = root / name.replace("-", "_")
    for file, rows in {"edge": EDGES, "num-node-list": [[5]], "num-edge-list": [[len(EDGES)]], **files}.items():
        write_csv_gz(folder / "raw" / f"{file}.csv.gz", rows)
    for part, nodes in SPLIT.items():
        write_csv_gz(folder / "split" / split_name / f"{part}.csv.gz", [[node] for node in nodes])
    (folder / "RELEASE_v1.txt").write_text("")
    return folder


def load(root: Path, name: str):
    return load_dataset({"name": "ogb", "ogb_name": name, "root": str(root)}, seed=0)


def test_ogbn_proteins_is_multilabel_with_mean_edge_features_as_node_features(tmp_path):
    edge_features = [[0.1 * (e + 1) * (f + 1) for f in range(8)] for e in range(len(EDGES))]
    labels = [[(node + task) % 2 for task in range(112)] for node in range(5)]
    write_ogb_folder(tmp_path, "ogbn-proteins", "species", {
        "edge-feat": edge_features, "node-label": labels, "node_species": [[3702], [3702], [4932], [9606], [3702]]})
    data = load(tmp_path, "ogbn-proteins")
    assert data.task == "node_multilabel" and data.metric == "roc_auc" and data.num_tasks == 112
    assert data.graph_ptr.tolist() == [0, 5] and data.y.shape == (5, 112) and data.y[1, 0] == 1.0
    features = np.array(edge_features)
    # Node 0 touches edges 0 (0-1) and 2 (2-0); node 3 only edge 3.
    assert data.x[0].numpy() == pytest.approx((features[0] + features[2]) / 2)
    assert data.x[3].numpy() == pytest.approx(features[3])
    assert data.x_cat[:, 0].tolist() == [0, 0, 1, 2, 0] and data.x_cat_sizes == [3]
    assert data.edge_index.shape == (2, 8) and data.edge_attr.shape == (8, 8)
    assert data.train_mask.tolist() == [True, True, False, False, True] and data.test_mask.tolist()[3]
    assert "incident edge features" in data.notes["ogb_node_features"]


def test_ogbn_arxiv_is_node_classification_scored_by_accuracy(tmp_path):
    write_ogb_folder(tmp_path, "ogbn-arxiv", "time", {
        "node-feat": [[node, -node] for node in range(5)], "node-label": [[3], [0], [3], [1], [0]],
        "node_year": [[2019]] * 5})
    data = load(tmp_path, "ogbn-arxiv")
    assert data.task == "node_classification" and data.metric == "accuracy" and data.num_classes == 40
    assert data.y.tolist() == [3, 0, 3, 1, 0] and data.x[2].tolist() == [2.0, -2.0]
    assert data.is_undirected() and data.edge_index.shape == (2, 8)  # directed citations symmetrised
    assert data.notes["ogb_split"] == "OGB's official split (time)"


def test_mean_incident_edge_features_against_a_loop():
    rng = np.random.default_rng(0)
    edges, features = rng.integers(0, 30, (2, 200)), rng.random((200, 3))
    expected = np.zeros((31, 3))
    for (a, b), row in zip(edges.T, features, strict=True):
        expected[a] += row
        expected[b] += row
    degree = np.bincount(edges.reshape(-1), minlength=31)
    expected[degree > 0] /= degree[degree > 0, None]
    assert mean_incident_edge_features(edges, features, 31) == pytest.approx(expected.astype(np.float32))


def test_offline_it_fails_fast_in_one_line_naming_the_url_and_the_folder(tmp_path, monkeypatch):
    def no_network(*args, **kwargs):
        raise socket.gaierror(-3, "Temporary failure in name resolution")

    monkeypatch.setattr(socket, "getaddrinfo", no_network)
    started = time.monotonic()
    with pytest.raises(DatasetError) as raised:
        load(tmp_path / "ogb", "ogbn-proteins")
    message = str(raised.value)
    assert message == (f"ogbn-proteins: cannot download from http://snap.stanford.edu/ogb/data/nodeproppred/"
                       f"proteins.zip (gaierror: [Errno -3] Temporary failure in name resolution; no internet?): "
                       f"place the dataset under {tmp_path / 'ogb' / 'ogbn_proteins'} or run online once")
    assert "\n" not in message and time.monotonic() - started < 10
    assert not any((tmp_path / "ogb").rglob("*.zip*"))  # no partial download left


def test_a_name_lookup_that_hangs_gives_up_within_the_timeout(tmp_path, monkeypatch):
    release = threading.Event()
    monkeypatch.setattr(socket, "getaddrinfo", lambda *args, **kwargs: release.wait(60))
    monkeypatch.setattr(ogb_nodes, "NETWORK_TIMEOUT_S", 0.5)
    started = time.monotonic()
    with pytest.raises(DatasetError, match=r"ogbn-arxiv: cannot download from .* \(TimeoutError: looking up "
                                           r"snap.stanford.edu took over 0.5 s; no internet\?\)"):
        load(tmp_path, "ogbn-arxiv")
    release.set()
    assert time.monotonic() - started < 5


def test_a_server_that_never_answers_times_out_and_leaves_no_partial_file(tmp_path):
    with socket.socket() as server:  # listens, never answers
        port = free_port()
        server.bind(("127.0.0.1", port))
        server.listen()
        started = time.monotonic()
        with pytest.raises(OSError):
            fetch(f"http://127.0.0.1:{port}/proteins.zip", tmp_path / "proteins.zip", timeout_s=0.5)
    assert time.monotonic() - started < 5 and list(tmp_path.iterdir()) == []


def test_a_folder_of_another_release_is_named_instead_of_asking_on_the_terminal(tmp_path):
    folder = write_ogb_folder(tmp_path, "ogbn-arxiv", "time", {"node-feat": [[0]] * 5, "node-label": [[0]] * 5,
                                                               "node_year": [[2019]] * 5})
    (folder / "RELEASE_v1.txt").unlink()
    with pytest.raises(DatasetError, match=r"ogbn_arxiv: holds no RELEASE_v1.txt"):
        load(tmp_path, "ogbn-arxiv")


def test_an_unknown_name_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="dataset.ogb_name must be one of ogbn-proteins, ogbn-arxiv, ogbn-products"):
        load(tmp_path, "ogbn-mag")


def test_importing_ogb_starts_no_version_check():
    # ogb's __init__ would start a thread asking PyPI for its latest version; a fresh interpreter shows none.
    script = ("import sys, threading\nfrom sgt_core.data.ogb_package import import_ogb\nimport_ogb()\n"
              "print(threading.active_count(), 'outdated' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO_ROOT,
                            timeout=120, check=True)
    assert result.stdout.split() == ["1", "False"] and "outdated" not in result.stderr.lower()
