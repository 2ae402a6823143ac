"""The TU-format loader (dataset=tu): tiny folders written here, the fold protocol, bad input, the real sets."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from sgt_core.config import compose_config
from sgt_core.data import load_dataset
from sgt_core.errors import ConfigError, DatasetError

NUM_GRAPHS = 40  # 20 of each class


def tiny_graphs(num_graphs: int = NUM_GRAPHS) -> dict[str, list[str]]:
    """Graph g: a path of 3 + g % 4 nodes (a triangle closed on odd g), label -1/1 alternating, as TU files.

    Node labels take the values 3, 7, 9 (so that they must be remapped), node attributes are two floats,
    edge labels 5 or 6; _A lists both directions, 1-based ids.
    """
    lines: dict[str, list[str]] = {part: [] for part in ("A", "graph_indicator", "graph_labels", "node_labels",
                                                          "node_attributes", "edge_labels")}
    first = 1
    for graph in range(num_graphs):
        size = 3 + graph % 4
        nodes = list(range(first, first + size))
        pairs = list(itertools.pairwise(nodes)) + ([(nodes[0], nodes[2])] if graph % 2 else [])
        for a, b in pairs:
            label = 5 + (a + b) % 2
            lines["A"] += [f"{a}, {b}", f"{b}, {a}"]
            lines["edge_labels"] += [str(label), str(label)]
        lines["graph_indicator"] += [str(graph + 1)] * size
        lines["graph_labels"].append("-1" if graph % 2 else "1")
        lines["node_labels"] += [str((3, 7, 9)[node % 3]) for node in nodes]
        lines["node_attributes"] += [f"{node * 0.5:.1f}, {-node:.1f}" for node in nodes]
        first += size
    return lines


def write_tu(folder: Path, lines: dict[str, list[str]], name: str | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for part, rows in lines.items():
        (folder / f"{name or folder.name}_{part}.txt").write_text("\n".join(rows) + "\n")
    return folder


def load(folder: Path, seed: int = 0, **changes):
    return load_dataset({"name": "tu", "path": str(folder), "fold": 0, "num_folds": 5, "val_fraction": 0.1,
                         "split_seed": 0, "degree_cap": 64, **changes}, seed=seed)


@pytest.fixture
def tiny(tmp_path) -> Path:
    return write_tu(tmp_path / "TINY", tiny_graphs())


def test_a_tu_folder_becomes_a_graph_classification_set(tiny):
    graphs = load(tiny)
    sizes = [3 + graph % 4 for graph in range(NUM_GRAPHS)]
    assert graphs.graph_ptr.tolist() == np.concatenate([[0], np.cumsum(sizes)]).tolist()
    assert graphs.task == "graph_classification" and graphs.metric == "accuracy" and graphs.num_classes == 2
    assert graphs.y.tolist() == [1, 0] * (NUM_GRAPHS // 2)  # -1 -> 0, 1 -> 1
    assert "-1, 1 are classes 0, 1" in graphs.notes["labels"]
    nodes = np.arange(1, sum(sizes) + 1)
    assert graphs.x_cat[:, 0].tolist() == (nodes % 3).tolist() and graphs.x_cat_sizes == [3]  # 3, 7, 9 -> 0, 1, 2
    np.testing.assert_allclose(graphs.x.numpy(), np.stack([nodes * 0.5, -nodes], axis=1))
    assert graphs.edge_attr_cat_sizes == [2]
    source, target = graphs.edge_index
    assert graphs.edge_index.shape[1] == sum(2 * (size - 1 + graph % 2) for graph, size in enumerate(sizes))
    assert graphs.edge_attr_cat[:, 0].tolist() == ((source + target + 2) % 2).tolist()  # 5 or 6 -> 0 or 1
    graph_of = torch.bucketize(graphs.edge_index, graphs.graph_ptr[1:], right=True)
    assert torch.equal(graph_of[0], graph_of[1])


def test_a_folder_without_node_features_gets_capped_degree_codes(tmp_path):
    lines = tiny_graphs()
    for part in ("node_labels", "node_attributes", "edge_labels"):
        del lines[part]
    graphs = load(write_tu(tmp_path / "BARE", lines))
    degree = torch.bincount(graphs.edge_index[0], minlength=graphs.graph_ptr[-1])
    assert graphs.x.shape[1] == 0 and graphs.x_cat[:, 0].tolist() == degree.tolist()
    assert graphs.x_cat_sizes == [4] and "degree" in graphs.notes["features"]  # degrees 1..3 (a chord: 3)
    assert getattr(graphs, "edge_attr_cat", None) is None
    capped = load(tmp_path / "BARE", degree_cap=1)
    assert capped.x_cat[:, 0].tolist() == [1] * degree.numel() and capped.x_cat_sizes == [2]


def masks(graphs) -> dict[str, np.ndarray]:
    return {name: graphs[f"{name}_mask"].numpy() for name in ("train", "val", "test")}


def test_the_folds_partition_the_graphs_stratified_and_fixed_across_run_seeds(tiny):
    tests = []
    for fold in range(5):
        graphs = load(tiny, fold=fold)
        split = masks(graphs)
        assert (split["train"].astype(int) + split["val"] + split["test"] == 1).all()  # every graph in one split
        labels = graphs.y.numpy()
        assert np.bincount(labels[split["test"]]).tolist() == [4, 4]  # 8 of 40, half of each class
        assert np.bincount(labels[split["val"]], minlength=2).tolist() == [2, 2]  # 10% of 32: 4, stratified
        tests.append(split["test"])
        again = load(tiny, fold=fold, seed=123)  # another model seed: the same split
        assert all((masks(again)[name] == split[name]).all() for name in split)
    assert (np.sum(tests, axis=0) == 1).all()  # the test folds partition the graphs
    other = masks(load(tiny, split_seed=1))
    assert not (other["test"] == tests[0]).all()  # split_seed draws other folds


@pytest.mark.parametrize("key, value, message", [
    ("fold", 5, r"^dataset\.fold: must be an integer in 0\.\.4 \(dataset\.num_folds=5\), found 5"),
    ("num_folds", 1, r"^dataset\.num_folds: must be an integer >= 2, found 1"),
    ("val_fraction", 0.0, r"^dataset\.val_fraction: must be a number in \(0, 1\), found 0\.0"),
    ("split_seed", -2, r"^dataset\.split_seed: must be an integer >= 0, found -2"),
])
def test_bad_fold_keys_are_named(tiny, key, value, message):
    with pytest.raises(ConfigError, match=message):
        load(tiny, **{key: value})


def edit(lines: dict[str, list[str]], part: str, change) -> dict[str, list[str]]:
    lines[part] = change(lines[part])
    return lines


@pytest.mark.parametrize("change, file, message", [
    (lambda lines: edit(lines, "A", lambda rows: rows[:3] + ["4, 9999"] + rows[3:]),
     "TINY_A.txt", r"line 4: node 9999 is in no graph: TINY_graph_indicator\.txt has 180 lines \(nodes 1\.\.180\)"),
    (lambda lines: edit(lines, "A", lambda rows: rows[:5] + ["1, 4"] + rows[5:]),
     "TINY_A.txt", r"line 6: edge 1, 4 joins node 1 of graph 1 and node 4 of graph 2; edges must stay inside one"),
    (lambda lines: edit(lines, "node_labels", lambda rows: rows[:-1]),
     "TINY_node_labels.txt", r"line 180: missing; the file has 179 lines but TINY_graph_indicator\.txt gives 180"),
    (lambda lines: edit(lines, "edge_labels", lambda rows: [*rows, "5"]),
     "TINY_edge_labels.txt", r"line \d+: one line too many; the file has \d+ lines but TINY_A\.txt gives \d+ edges"),
    (lambda lines: edit(lines, "graph_labels", lambda rows: rows[:-1]),
     "TINY_graph_indicator.txt", r"line 175: graph 40, but TINY_graph_labels\.txt has 39 lines \(graphs 1\.\.39\)"),
    (lambda lines: edit(lines, "graph_labels", lambda rows: [*rows, "1"]),
     "TINY_graph_labels.txt", r"line 41: graph 41 has no nodes in TINY_graph_indicator\.txt"),
    (lambda lines: edit(lines, "node_attributes", lambda rows: rows[:9] + ["0.5, abc"] + rows[10:]),
     "TINY_node_attributes.txt", r"line 10: 'abc' is not a number"),
    (lambda lines: edit(lines, "A", lambda rows: rows[:7] + ["1, 2, 3"] + rows[7:]),
     "TINY_A.txt", r"line 8: 3 comma-separated values, expected 2 as on the first line"),
    (lambda lines: edit(lines, "A", lambda rows: rows[:7] + [""] + rows[7:]),
     "TINY_A.txt", r"line 8: is empty; expected 2 as on the first line"),
    (lambda lines: edit(lines, "graph_indicator", lambda rows: rows[:2] + ["1.5"] + rows[3:]),
     "TINY_graph_indicator.txt", r"line 3: \[1\.5\] holds a fraction; expected integers"),
    (lambda lines: {part: rows for part, rows in lines.items() if part != "graph_labels"},
     "TINY_graph_labels.txt", r"no such file; a TU folder TINY/ needs TINY_A\.txt, TINY_graph_indicator\.txt and"),
])
def test_bad_input_is_one_error_naming_the_file_the_line_and_the_problem(tmp_path, change, file, message):
    folder = write_tu(tmp_path / "TINY", change(tiny_graphs()))
    with pytest.raises(DatasetError) as error:
        load(folder)
    text = str(error.value)
    assert text.startswith(str(folder / file)), text
    assert "\n" not in text
    assert len(re.findall(message, text)) == 1, text


def test_a_missing_folder_is_named(tmp_path):
    with pytest.raises(DatasetError, match=r"NOPE: no such folder \(dataset\.path\); expected a TU dataset folder"):
        load(tmp_path / "NOPE")


def test_nodes_listed_out_of_graph_order_are_grouped_by_graph(tmp_path):
    # Two graphs whose nodes interleave: 1 and 3 in graph 1, 2 and 4 in graph 2.
    lines = {"A": ["1, 3", "2, 4"], "graph_indicator": ["1", "2", "1", "2"], "graph_labels": ["0", "1"],
             "node_labels": ["0", "1", "2", "3"]}
    with pytest.raises(DatasetError, match=r"cannot split 2 graphs \(class sizes \[1, 1\]\) into 2 stratified"):
        load(write_tu(tmp_path / "MIXED", lines), num_folds=2)  # too few graphs to fold and validate
    many = {"A": [], "graph_indicator": [], "graph_labels": [], "node_labels": []}
    for pair in range(10):  # ten such pairs of interleaved graphs
        base = 4 * pair
        many["A"] += [f"{base + 1}, {base + 3}", f"{base + 2}, {base + 4}"]
        many["graph_indicator"] += [str(2 * pair + 1), str(2 * pair + 2)] * 2
        many["graph_labels"] += ["0", "1"]
        many["node_labels"] += ["0", "1", "2", "3"]
    graphs = load(write_tu(tmp_path / "MANY", many), num_folds=2)
    assert graphs.graph_ptr.tolist() == list(range(0, 41, 2))
    assert graphs.x_cat[:4, 0].tolist() == [0, 2, 1, 3]  # graph 1 holds old nodes 1 and 3
    assert graphs.edge_index[:, :2].tolist() == [[0, 1], [1, 0]]


def test_a_renamed_folder_is_read_by_its_files_prefix(tmp_path):
    folder = write_tu(tmp_path / "copy-of-tiny", tiny_graphs(), name="TINY")
    assert load(folder).graph_ptr.numel() == NUM_GRAPHS + 1


def test_the_shipped_config_loads_mutag(shared_datasets):
    dataset = compose_config(["dataset=tu", f"dataset.path={shared_datasets / 'tu' / 'MUTAG'}"])["dataset"]
    assert (dataset["fold"], dataset["num_folds"], dataset["val_fraction"], dataset["split_seed"]) == (0, 10, 0.1, 0)
    assert load_dataset(dataset, seed=0).graph_ptr.numel() == 188 + 1


@pytest.mark.parametrize("name, graphs, nodes, classes, node_codes, attributes, edge_codes", [
    ("MUTAG", 188, 3371, 2, [7], 0, [4]),
    ("PROTEINS", 1113, 43471, 2, [3], 1, None),
    ("ENZYMES", 600, 19580, 6, [3], 18, None),
    ("NCI1", 4110, 122747, 2, [37], 0, None),
])
def test_the_real_tu_sets_load(shared_datasets, name, graphs, nodes, classes, node_codes, attributes, edge_codes):
    folder = shared_datasets / "tu" / name
    data = load(folder, num_folds=10)
    assert data.graph_ptr.numel() == graphs + 1 and int(data.graph_ptr[-1]) == nodes
    assert data.num_classes == classes and data.x_cat_sizes == node_codes and data.x.shape == (nodes, attributes)
    assert getattr(data, "edge_attr_cat_sizes", None) == edge_codes
    test_graphs = int(data.test_mask.sum())
    assert graphs // 10 <= test_graphs <= graphs // 10 + 1


def test_editing_a_file_of_the_folder_changes_the_cache_key_and_the_experiment_is_named_by_the_folder(tiny):
    from sgt_core.pipeline import dataset_id, stage_keys

    cfg = compose_config(["dataset=tu", f"dataset.path={tiny}"])
    assert dataset_id(cfg) == "tu-tiny"
    before = stage_keys(cfg)["preprocess"]
    assert stage_keys(cfg)["preprocess"] == before
    labels = tiny / "TINY_graph_labels.txt"
    labels.write_text(labels.read_text().replace("1\n", "2\n", 1))
    assert stage_keys(cfg)["preprocess"] != before


def test_a_fold_sweep_reports_mean_and_std_over_the_folds(capsys):
    from flows.cli.run import print_sweep_summary

    results = [(["dataset.path=tu/MUTAG", f"dataset.fold={fold}"], {"metrics": {"test_accuracy": accuracy}})
               for fold, accuracy in enumerate([0.8, 0.9, 1.0])]
    results.append((["dataset.path=tu/NCI1", "dataset.fold=0"], {"metrics": {"test_accuracy": 0.7}}))
    print_sweep_summary(results)
    out = capsys.readouterr().out
    assert "summary over seeds and folds (mean ± std):" in out
    assert "dataset.path=tu/MUTAG  [3 runs]\n    test_accuracy = 0.9000 ± 0.1000" in out
    assert "dataset.path=tu/NCI1  [1 runs]" in out


def test_the_configuration_check_knows_the_loaders_defaults():
    import inspect

    from sgt_core.config.dataset import TU_SPLIT_DEFAULTS
    from sgt_core.data.tu import load_tu

    defaults = {name: parameter.default for name, parameter in inspect.signature(load_tu).parameters.items()}
    assert {name: defaults[name] for name in TU_SPLIT_DEFAULTS} == TU_SPLIT_DEFAULTS
