"""Every malformed-input case of the loaders raises one DatasetError that names the file and the problem."""

from pathlib import Path

import numpy as np
import pytest
import torch

from sgt_core.data.npz import load_npz
from sgt_core.data.validate import build_graph
from sgt_core.errors import ConfigError, DatasetError


def heterophilous_arrays() -> dict[str, np.ndarray]:
    """A valid 6-node path graph 0-1-2-3-4-5 in the heterophilous format, with two stored splits."""
    train = np.array([[1, 1, 0, 0, 0, 0], [0, 0, 1, 1, 0, 0]], dtype=bool)
    val = np.array([[0, 0, 1, 1, 0, 0], [0, 0, 0, 0, 1, 1]], dtype=bool)
    test = np.array([[0, 0, 0, 0, 1, 1], [1, 1, 0, 0, 0, 0]], dtype=bool)
    return {
        "node_features": np.arange(18, dtype=np.float32).reshape(6, 3),
        "node_labels": np.array([0, 1, 0, 1, 0, 1], dtype=np.int64),
        "edges": np.array([[0, 1], [1, 2], [2, 3], [3, 4], [4, 5]], dtype=np.int64),
        "train_masks": train,
        "val_masks": val,
        "test_masks": test,
    }


def gnn_benchmark_arrays() -> dict[str, np.ndarray]:
    """A valid 4-node graph in the gnn-benchmark format: directed edges 0->1, 1->2, 2->3."""
    return {
        "adj_data": np.ones(3, dtype=np.float32),
        "adj_indices": np.array([1, 2, 3], dtype=np.int32),
        "adj_indptr": np.array([0, 1, 2, 3, 3], dtype=np.int32),
        "adj_shape": np.array([4, 4]),
        "attr_data": np.ones(4, dtype=np.float32),
        "attr_indices": np.array([0, 1, 2, 0], dtype=np.int32),
        "attr_indptr": np.array([0, 1, 2, 3, 4], dtype=np.int32),
        "attr_shape": np.array([4, 3]),
        "labels": np.array([0, 1, 0, 1], dtype=np.int64),
    }


def write(tmp_path: Path, arrays: dict[str, np.ndarray], name: str = "graph.npz") -> Path:
    """Saves arrays as an .npz file in tmp_path and returns its path."""
    path = tmp_path / name
    np.savez(path, **arrays)
    return path


def load_error(path: Path, **kwargs) -> str:
    """Loads `path`, expecting exactly one DatasetError; returns its message."""
    with pytest.raises(DatasetError) as caught:
        load_npz(path, **kwargs)
    message = str(caught.value)
    assert message.startswith(str(path)), message
    return message


def with_changes(arrays: dict[str, np.ndarray], **changes) -> dict[str, np.ndarray]:
    """Returns a copy of `arrays` with some arrays replaced (None deletes the key)."""
    changed = {**arrays, **changes}
    return {key: value for key, value in changed.items() if value is not None}


def test_valid_files_load(tmp_path):
    assert load_npz(write(tmp_path, heterophilous_arrays(), "h.npz")).num_nodes == 6
    split = {"train": 0.5, "val": 0.25, "test": 0.25}
    assert load_npz(write(tmp_path, gnn_benchmark_arrays(), "g.npz"), split=split).num_nodes == 4


# --- the file itself ------------------------------------------------------------------------------------


def test_missing_file(tmp_path):
    assert "file not found" in load_error(tmp_path / "absent.npz")


def test_directory_instead_of_file(tmp_path):
    folder = tmp_path / "folder.npz"
    folder.mkdir()
    assert load_error(folder) == f"{folder}: is a directory; expected a .npz file"


def test_not_an_archive(tmp_path):
    path = tmp_path / "text.npz"
    path.write_text("node,label\n0,1\n")
    assert "not a valid .npz archive" in load_error(path)


def test_truncated_archive(tmp_path):
    path = write(tmp_path, heterophilous_arrays())
    path.write_bytes(path.read_bytes()[:200])
    assert "not a valid .npz archive" in load_error(path)


def test_single_npy_array(tmp_path):
    path = tmp_path / "array.npz"
    with path.open("wb") as handle:
        np.save(handle, np.zeros((3, 2)))
    assert "holds a single .npy array of shape (3, 2)" in load_error(path)


def test_pickled_array_is_refused(tmp_path):
    pickled = np.empty(6, dtype=object)
    path = write(tmp_path, with_changes(heterophilous_arrays(), node_labels=pickled))
    message = load_error(path)
    assert "array 'node_labels' could not be read" in message and "allow_pickle" in message


# --- keys and format ------------------------------------------------------------------------------------


def test_missing_keys_of_heterophilous_format(tmp_path):
    path = write(tmp_path, with_changes(heterophilous_arrays(), edges=None, test_masks=None))
    message = load_error(path)
    assert "recognised the heterophilous format but keys are missing: edges, test_masks" in message


def test_missing_keys_of_gnn_benchmark_format(tmp_path):
    path = write(tmp_path, with_changes(gnn_benchmark_arrays(), attr_data=None))
    assert "recognised the gnn-benchmark format but keys are missing: attr_data" in load_error(path)


def test_no_format_recognised(tmp_path):
    message = load_error(write(tmp_path, {"weights": np.zeros(3)}))
    assert "no known dataset format recognised" in message and "['weights']" in message
    assert "node_features" in message and "adj_data" in message


# --- shapes and dtypes ----------------------------------------------------------------------------------


def test_features_not_2d(tmp_path):
    path = write(tmp_path, with_changes(heterophilous_arrays(), node_features=np.zeros(6, dtype=np.float32)))
    assert "node features must be a 2-D array [N, F], found shape (6,)" in load_error(path)


def test_features_not_numeric(tmp_path):
    path = write(tmp_path, with_changes(heterophilous_arrays(), node_features=np.full((6, 2), "a")))
    assert "node features must be numeric, found dtype <U1" in load_error(path)


def test_labels_not_1d(tmp_path):
    path = write(tmp_path, with_changes(heterophilous_arrays(), node_labels=np.zeros((6, 2), dtype=np.int64)))
    assert "labels must be a 1-D array [N], found shape (6, 2)" in load_error(path)


def test_labels_wrong_length(tmp_path):
    path = write(tmp_path, with_changes(heterophilous_arrays(), node_labels=np.zeros(5, dtype=np.int64)))
    assert "there are 5 labels but the graph has 6 nodes" in load_error(path)


def test_edges_not_pairs(tmp_path):
    path = write(tmp_path, with_changes(heterophilous_arrays(), edges=np.zeros((5, 3), dtype=np.int64)))
    assert "edges has shape (5, 3), expected [E, 2]" in load_error(path)


def test_edges_not_integers(tmp_path):
    path = write(tmp_path, with_changes(heterophilous_arrays(), edges=np.array([[0.0, 1.0]])))
    assert "edges must hold integer node ids, found dtype float64" in load_error(path)


def test_masks_wrong_length(tmp_path):
    path = write(tmp_path, with_changes(heterophilous_arrays(), train_masks=np.ones((2, 5), dtype=bool)))
    assert "train_masks has shape (2, 5) but the graph has 6 nodes" in load_error(path)


def test_masks_with_different_numbers_of_splits(tmp_path):
    arrays = heterophilous_arrays()
    path = write(tmp_path, with_changes(arrays, val_masks=arrays["val_masks"][:1]))
    assert "different numbers of splits (train_masks 2, val_masks 1, test_masks 2)" in load_error(path)


def test_split_index_out_of_range(tmp_path):
    path = write(tmp_path, heterophilous_arrays())
    expected = r"split_index=2 is out of range: it holds 2 splits \(0\.\.1\)"
    with pytest.raises(ConfigError, match=expected):
        load_npz(path, split_index=2)


# --- values ---------------------------------------------------------------------------------------------


def test_edges_beyond_last_node(tmp_path):
    path = write(tmp_path, with_changes(heterophilous_arrays(), edges=np.array([[0, 1], [5, 12]])))
    assert "edges reference node 12 but the graph has 6 nodes" in load_error(path)


def test_negative_edges(tmp_path):
    path = write(tmp_path, with_changes(heterophilous_arrays(), edges=np.array([[0, 1], [-1, 2]])))
    assert "edges reference node -1; node ids must be >= 0" in load_error(path)


@pytest.mark.parametrize("bad_value", [np.nan, np.inf, -np.inf])
def test_non_finite_features(tmp_path, bad_value):
    features = heterophilous_arrays()["node_features"]
    features[[1, 4], 2] = bad_value
    path = write(tmp_path, with_changes(heterophilous_arrays(), node_features=features))
    assert "node features contain NaN or inf in 2 of 6 rows (first: row 1)" in load_error(path)


def test_negative_labels(tmp_path):
    labels = np.array([0, 1, -1, 1, 0, 1])
    path = write(tmp_path, with_changes(heterophilous_arrays(), node_labels=labels))
    assert "1 labels are negative (first: node 2 has label -1)" in load_error(path)


def test_non_integral_labels(tmp_path):
    labels = np.array([0, 1, 0.5, 1, 0, 1])
    path = write(tmp_path, with_changes(heterophilous_arrays(), node_labels=labels))
    assert "1 labels are not whole numbers (first: node 2 has label 0.5)" in load_error(path)


def test_integral_float_labels_are_accepted(tmp_path):
    labels = np.array([0.0, 1.0, 0.0, 2.0, 0.0, 1.0])
    graph = load_npz(write(tmp_path, with_changes(heterophilous_arrays(), node_labels=labels)))
    assert graph.y.dtype == torch.int64 and graph.y.tolist() == [0, 1, 0, 2, 0, 1] and graph.num_classes == 3


def test_empty_split(tmp_path):
    arrays = heterophilous_arrays()
    arrays["val_masks"][0] = False
    assert "the val split is empty" in load_error(write(tmp_path, arrays))


def test_overlapping_splits(tmp_path):
    arrays = heterophilous_arrays()
    arrays["train_masks"][0, 4] = True  # node 4 is also in test for split 0
    message = load_error(write(tmp_path, arrays))
    assert "the train and test splits overlap on 1 nodes (first: node 4)" in message


# --- gnn-benchmark specifics ----------------------------------------------------------------------------


def test_adjacency_beyond_last_node(tmp_path):
    arrays = with_changes(gnn_benchmark_arrays(), adj_indices=np.array([1, 2, 7], dtype=np.int32))
    message = load_error(write(tmp_path, arrays))
    assert "adj_indices reference node 7 but there are 4 nodes (adj_shape)" in message


def test_adjacency_shape_disagrees_with_features(tmp_path):
    arrays = with_changes(gnn_benchmark_arrays(), adj_shape=np.array([5, 5]))
    message = load_error(write(tmp_path, arrays))
    assert "adj_shape is (5, 5), expected a square (4, 4) adjacency for the 4 nodes of attr_shape" in message


def test_invalid_row_pointer(tmp_path):
    arrays = with_changes(gnn_benchmark_arrays(), adj_indptr=np.array([0, 2, 1, 3, 3], dtype=np.int32))
    assert "adj_indptr is not a valid CSR row pointer for 4 rows" in load_error(write(tmp_path, arrays))


def test_sparse_features_with_nan(tmp_path):
    arrays = with_changes(gnn_benchmark_arrays(), attr_data=np.array([1, np.nan, 1, 1], dtype=np.float32))
    assert "NaN or inf in 1 of 4 rows (first: row 1)" in load_error(write(tmp_path, arrays))


def test_gnn_benchmark_labels_wrong_length(tmp_path):
    arrays = with_changes(gnn_benchmark_arrays(), labels=np.array([0, 1, 0]))
    assert "there are 3 labels but the graph has 4 nodes" in load_error(write(tmp_path, arrays))


# --- the functions themselves ---------------------------------------------------------------------------


def test_loading_writes_nothing(tmp_path):
    path = write(tmp_path, heterophilous_arrays())
    before = sorted(tmp_path.rglob("*"))
    load_npz(path)
    assert sorted(tmp_path.rglob("*")) == before


def test_build_graph_accepts_tensors_and_names_the_source():
    x, y = torch.zeros(4, 2), torch.tensor([0, 1, 0, 1])
    edge_index = torch.tensor([[0, 1], [1, 2]])
    masks = [torch.tensor(m, dtype=torch.bool) for m in ([1, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1])]
    build_graph("toy", x, y, edge_index, *masks)
    expected = r"^toy: edge_index must have shape \[2, E\], found shape \(2, 2, 1\)"
    with pytest.raises(DatasetError, match=expected):
        build_graph("toy", x, y, edge_index[..., None], *masks)
    with pytest.raises(DatasetError, match=r"^toy: val mask must be boolean \(or 0/1\), found dtype float32"):
        build_graph("toy", x, y, edge_index, masks[0], masks[1].float(), masks[2])


def test_coalesced_edges_are_checked_and_kept_as_given():
    x, y = np.zeros((4, 2), dtype=np.float32), np.array([0, 1, 0, 1])
    masks = [np.array(m, dtype=bool) for m in ([1, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1])]
    edge_index = np.array([[0, 1, 1, 2], [1, 0, 2, 1]])
    graph = build_graph("toy", x, y, edge_index, *masks, coalesced=True)
    assert graph.edge_index.tolist() == edge_index.tolist() and graph.num_classes == 2
    assert np.shares_memory(graph.x.numpy(), x)  # no copy of a float32 graph's features
    with pytest.raises(DatasetError, match=r"^toy: edges reference node 4 but the graph has 4 nodes"):
        build_graph("toy", x, y, np.array([[0, 4], [4, 0]]), *masks, coalesced=True)


def test_build_graph_meets_the_contract():
    # Edge 0-1 given once, 1-2 given twice in the same direction, plus a self-loop on 2.
    edge_index = np.array([[0, 1, 1, 2], [1, 2, 2, 2]])
    masks = [np.array(m, dtype=bool) for m in ([1, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1])]
    graph = build_graph("toy", np.eye(4, dtype=np.float64), np.array([0, 2, 1, 1]), edge_index, *masks)
    assert graph.edge_index.tolist() == [[0, 1, 1, 2], [1, 0, 2, 1]]
    assert graph.x.dtype == torch.float32 and graph.y.dtype == torch.int64
    assert graph.edge_index.dtype == torch.int64
    assert graph.train_mask.dtype == torch.bool and graph.num_classes == 3 and graph.source == "toy"


# --- feature range and classes ----------------------------------------------------------------------------


def test_features_beyond_float32_range(tmp_path):
    # 1e39 is a finite float64 that becomes inf when the graph is cast to float32.
    features = heterophilous_arrays()["node_features"].astype(np.float64)
    features[4, 1] = 1e39
    features[5, 2] = -1e300
    path = write(tmp_path, with_changes(heterophilous_arrays(), node_features=features))
    message = load_error(path)
    assert "2 node feature values exceed float32's range" in message, message
    assert "(first: row 4, column 1, value 1e+39)" in message, message


def test_large_features_within_float32_range_are_accepted(tmp_path):
    features = heterophilous_arrays()["node_features"].astype(np.float64)
    features[4, 1] = 1e38
    graph = load_npz(write(tmp_path, with_changes(heterophilous_arrays(), node_features=features)))
    assert graph.x[4, 1].item() == pytest.approx(1e38, rel=1e-6) and torch.isfinite(graph.x).all()


def test_single_class_train_split(tmp_path):
    # Split 0 trains on nodes 0 and 1.
    labels = np.array([1, 1, 0, 1, 0, 1])
    path = write(tmp_path, with_changes(heterophilous_arrays(), node_labels=labels))
    assert load_error(path) == (
        f"{path}: the train split has only one class (label 1 on all 2 train nodes); a classifier needs at "
        "least two"
    )
    assert load_npz(path, split_index=1).num_classes == 2  # split 1 trains on nodes 2 and 3


def test_single_class_val_and_test_splits_are_accepted(tmp_path):
    labels = np.array([0, 1, 1, 1, 0, 0])  # split 0: val holds class 1 only, test class 0 only
    graph = load_npz(write(tmp_path, with_changes(heterophilous_arrays(), node_labels=labels)))
    assert graph.y[graph.val_mask].unique().tolist() == [1] and graph.y[graph.test_mask].unique().tolist() == [0]


def test_single_class_train_split_from_any_loader():
    masks = [np.array(m, dtype=bool) for m in ([1, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1])]
    with pytest.raises(DatasetError, match=r"^toy: the train split has only one class \(label 3 on all 2 train"):
        build_graph("toy", np.eye(4), np.array([3, 3, 0, 1]), np.array([[0], [1]]), *masks)
