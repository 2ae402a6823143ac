"""The PyG loader without network: offline errors, partial downloads, and raw files placed by hand."""

import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import torch
from torch_geometric.datasets import HeterophilousGraphDataset

from sgt_core.data import load_dataset
from sgt_core.data.pyg import _guarded, load_pyg
from sgt_core.errors import ConfigError, DatasetError

SPLIT = {"train": 0.6, "val": 0.2, "test": 0.2}


def pyg_config(root: Path, pyg_name: str, split_index: int = 0) -> dict:
    """The pyg dataset config, as Hydra hands it over."""
    return {
        "name": "pyg",
        "pyg_name": pyg_name,
        "root": str(root),
        "split_index": split_index,
        "split": SPLIT,
    }


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    """Makes every download fail as it would without network, so no test can reach the internet."""

    def refuse(*args, **kwargs):
        raise urllib.error.URLError("offline")

    monkeypatch.setattr(urllib.request, "urlopen", refuse)


class _BrokenResponse:
    """A response that delivers a few bytes and then loses the connection."""

    def __init__(self):
        self.chunks = [b"half of a file"]

    def read(self, size=-1):
        if self.chunks:
            return self.chunks.pop()
        raise ConnectionResetError("connection reset by peer")


def all_files(folder: Path) -> list[Path]:
    return [path for path in folder.rglob("*") if path.is_file()] if folder.exists() else []


def test_unknown_name_lists_the_known_ones(tmp_path):
    with pytest.raises(ConfigError, match="unknown PyG dataset 'Karate'.*Cora, CiteSeer, PubMed.*WikiCS"):
        load_dataset(pyg_config(tmp_path, "Karate"), seed=0)


@pytest.mark.parametrize(
    ("pyg_name", "canonical"), [("cora", "Cora"), ("ROMAN-EMPIRE", "Roman-empire"), ("wikics", "WikiCS")]
)
def test_offline_download_raises_one_clear_error(tmp_path, pyg_name, canonical):
    root = tmp_path / "pyg"
    with pytest.raises(DatasetError) as caught:
        load_dataset(pyg_config(root, pyg_name), seed=0)
    message = str(caught.value)
    assert f"PyG dataset {canonical} could not be downloaded into {root} (no network?)" in message
    assert "offline" in message
    assert "machine with internet access" in message and "dataset=npz dataset.path=FILE" in message
    assert all_files(tmp_path) == []


def test_half_downloaded_file_is_removed_and_not_used(tmp_path, monkeypatch):
    root = tmp_path / "pyg"
    monkeypatch.setattr(urllib.request, "urlopen", lambda *args, **kwargs: _BrokenResponse())
    with pytest.raises(DatasetError, match="could not be downloaded"):
        load_pyg("Computers", root)
    assert all_files(root) == []

    # A second attempt must try to download again, not process the truncated file.
    def network_down(*args, **kwargs):
        raise OSError("network is unreachable")

    monkeypatch.setattr(urllib.request, "urlopen", network_down)
    with pytest.raises(DatasetError, match="could not be downloaded"):
        load_pyg("Computers", root)


def test_existing_files_under_root_survive_a_failed_download(tmp_path):
    keep = tmp_path / "Cora" / "raw" / "notes.txt"
    keep.parent.mkdir(parents=True)
    keep.write_text("mine")
    with pytest.raises(DatasetError):
        load_pyg("Cora", tmp_path)
    assert all_files(tmp_path) == [keep]


def test_stored_2d_masks_use_the_split_index_column(tmp_path):
    # HeterophilousGraphDataset reads root/<name>/raw/<name>.npz, so placing it there needs no download.
    raw = tmp_path / "minesweeper" / "raw"
    raw.mkdir(parents=True)
    np.savez(
        raw / "minesweeper.npz",
        node_features=np.eye(4, dtype=np.float32),
        node_labels=np.array([0, 1, 1, 0]),
        edges=np.array([[0, 1], [1, 2], [2, 3]]),
        train_masks=np.array([[1, 1, 0, 0], [0, 0, 1, 1]], dtype=bool),
        val_masks=np.array([[0, 0, 1, 0], [1, 0, 0, 0]], dtype=bool),
        test_masks=np.array([[0, 0, 0, 1], [0, 1, 0, 0]], dtype=bool),
    )
    graph = load_dataset(pyg_config(tmp_path, "Minesweeper", split_index=1), seed=0)
    assert graph.train_mask.tolist() == [False, False, True, True]
    assert graph.test_mask.tolist() == [False, True, False, False]
    assert graph.edge_index.shape == (2, 6) and graph.num_classes == 2
    assert "HeterophilousGraphDataset" in graph.source

    with pytest.raises(ConfigError, match=r"train_mask: dataset.split_index=2 is out of range: it holds 2 splits"):
        load_pyg("minesweeper", tmp_path, split_index=2)


def test_dataset_without_masks_gets_a_seeded_stratified_split(tmp_path):
    # Amazon reads root/Computers/raw/amazon_electronics_computers.npz (gnn-benchmark format).
    raw = tmp_path / "Computers" / "raw"
    raw.mkdir(parents=True)
    num_nodes = 30
    np.savez(
        raw / "amazon_electronics_computers.npz",
        adj_data=np.ones(num_nodes, dtype=np.float32),
        adj_indices=((np.arange(num_nodes) + 1) % num_nodes).astype(np.int32),
        adj_indptr=np.arange(num_nodes + 1, dtype=np.int32),
        adj_shape=np.array([num_nodes, num_nodes]),
        attr_data=np.ones(num_nodes, dtype=np.float32),
        attr_indices=np.zeros(num_nodes, dtype=np.int32),
        attr_indptr=np.arange(num_nodes + 1, dtype=np.int32),
        attr_shape=np.array([num_nodes, 1]),
        labels=np.arange(num_nodes) % 2,
    )
    first, again, other = (load_pyg("computers", tmp_path, split=SPLIT, seed=seed) for seed in (0, 0, 1))
    assert torch.equal(first.train_mask, again.train_mask)
    assert not torch.equal(first.train_mask, other.train_mask)
    assert [int(m.sum()) for m in (first.train_mask, first.val_mask, first.test_mask)] == [18, 6, 6]
    assert first.edge_index.shape == (2, 2 * num_nodes)


def test_corrupt_raw_file_is_a_dataset_error(tmp_path):
    raw = tmp_path / "Photo" / "raw"
    raw.mkdir(parents=True)
    (raw / "amazon_electronics_photo.npz").write_bytes(b"not an archive")
    with pytest.raises(DatasetError, match="could not be read.*delete that dataset's folder"):
        load_pyg("Photo", tmp_path)


# --- processed files are read without unpickling code ------------------------------------------------------


class _Payload:
    """Unpickling this runs `marker.touch()`: a stand-in for arbitrary code in a crafted processed file."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return Path.touch, (self.marker,)


def write_minesweeper_raw(root: Path) -> None:
    """HeterophilousGraphDataset's raw file, root/minesweeper/raw/minesweeper.npz, so nothing is downloaded."""
    raw = root / "minesweeper" / "raw"
    raw.mkdir(parents=True)
    np.savez(
        raw / "minesweeper.npz",
        node_features=np.arange(12, dtype=np.float32).reshape(6, 2),
        node_labels=np.array([0, 1, 1, 0, 1, 0]),
        edges=np.array([[0, 1], [1, 2], [2, 3], [3, 4], [4, 5]]),
        train_masks=np.array([[1, 1, 0, 0, 0, 0]], dtype=bool),
        val_masks=np.array([[0, 0, 1, 1, 0, 0]], dtype=bool),
        test_masks=np.array([[0, 0, 0, 0, 1, 1]], dtype=bool),
    )


def assert_same_graph(graph, expected) -> None:
    for key in ("x", "y", "edge_index", "train_mask", "val_mask", "test_mask"):
        assert torch.equal(graph[key], expected[key]), key


@pytest.mark.parametrize("crafted", ["data.pt", "pre_transform.pt", "pre_filter.pt"])
def test_crafted_processed_file_never_runs_and_is_rebuilt_from_raw(tmp_path, caplog, crafted):
    root, marker = tmp_path / "pyg", tmp_path / "payload_ran"
    write_minesweeper_raw(root)
    expected = load_pyg("Minesweeper", root)  # processes the raw file into processed/data.pt
    processed = root / "minesweeper" / "processed"
    assert (processed / crafted).is_file()
    assert_same_graph(load_pyg("Minesweeper", root), expected)  # a genuine processed file loads safely

    torch.save((_Payload(marker), None), processed / crafted)
    with caplog.at_level("WARNING", logger="sgt_core"):
        graph = load_pyg("Minesweeper", root)
    assert not marker.exists()
    assert_same_graph(graph, expected)
    assert any(str(processed / crafted) in record.getMessage() and "does not load safely" in record.getMessage()
               for record in caplog.records), caplog.text
    assert_same_graph(load_pyg("Minesweeper", root), expected)  # what was rebuilt loads again, quietly
    assert not marker.exists()


def test_unsafe_processed_file_without_raw_files_is_a_dataset_error(tmp_path):
    root, marker = tmp_path / "pyg", tmp_path / "payload_ran"
    write_minesweeper_raw(root)
    dataset = _guarded(HeterophilousGraphDataset)(str(root), "Minesweeper")
    (root / "minesweeper" / "raw" / "minesweeper.npz").unlink()
    processed = Path(dataset.processed_paths[0])
    torch.save(_Payload(marker), processed)
    with pytest.raises(DatasetError) as raised:
        dataset.load(str(processed))
    message = str(raised.value)
    assert message.startswith(f"{processed}: does not load safely"), message
    assert "minesweeper.npz is missing" in message and "the next run downloads the dataset again" in message
    assert not marker.exists() and not processed.exists()
