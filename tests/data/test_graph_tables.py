"""dataset=parquet's graph-level form: node, edge and graph tables (Parquet and CSV) written here."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq
import pytest
import torch

from sgt_core.config import compose_config
from sgt_core.data import load_dataset
from sgt_core.data.splits import stratified_split
from sgt_core.errors import ConfigError, DatasetError
from sgt_core.pipeline import stage_keys
from tests.data.test_tables import with_changes

SIZES = [4, 3, 5, 3, 4, 6, 3, 5]  # atoms of each molecule, in graph-id order
GRAPH_IDS = [f"mol-{index}" for index in range(len(SIZES))]
ATOMS = np.array(["C", "N", "O"])  # codes 0, 1, 2 (sorted)


def molecules(seed: int = 0) -> tuple[dict, dict, dict]:
    """Eight small 'molecules' as node, edge and graph columns, every table's rows shuffled.

    Node ids restart at 0 in each molecule; graph g's atoms are a chain with a ring closure on even g. Atom
    types, a float charge, bond orders 1/2 and a float bond length; labels g % 2 and a split column.
    """
    rng = np.random.default_rng(seed)
    nodes = {"mol": [], "atom_id": [], "atom": [], "charge": []}
    edges = {"mol": [], "a": [], "b": [], "bond": [], "length": []}
    for graph, size in enumerate(SIZES):
        for atom in range(size):
            nodes["mol"].append(GRAPH_IDS[graph])
            nodes["atom_id"].append(atom)
            nodes["atom"].append(str(ATOMS[(graph + atom) % 3]))
            nodes["charge"].append(round(0.25 * atom - graph, 2))
        pairs = [(atom, atom + 1) for atom in range(size - 1)] + ([(0, size - 1)] if graph % 2 == 0 else [])
        for a, b in pairs:
            edges["mol"].append(GRAPH_IDS[graph])
            edges["a"].append(a)
            edges["b"].append(b)
            edges["bond"].append(1 + (a + b) % 2)
            edges["length"].append(round(1.0 + 0.1 * a, 2))
    graphs = {"id": GRAPH_IDS, "label": [graph % 2 for graph in range(len(SIZES))],
              "split": ["train", "train", "train", "train", "val", "val", "test", "test"]}
    shuffled = []
    for columns in (nodes, edges, graphs):
        order = rng.permutation(len(next(iter(columns.values()))))
        shuffled.append({key: [values[index] for index in order] for key, values in columns.items()})
    return tuple(shuffled)


def write_table(path: Path, columns: dict) -> Path:
    table = pa.table(columns) if not isinstance(columns, pa.Table) else columns
    if path.suffix == ".csv":
        pa_csv.write_csv(table, path)
    else:
        pq.write_table(table, path)
    return path


def write_molecules(folder: Path, suffix: str = ".parquet", nodes=None, edges=None, graphs=None) -> dict[str, Path]:
    base = molecules()
    columns = {"nodes": nodes or base[0], "edges": edges or base[1], "graphs": graphs or base[2]}
    return {table: write_table(folder / f"{table}{suffix}", columns[table]) for table in columns}


def config(paths: dict[str, Path], **changes) -> dict:
    """The dataset config of the molecules (as Hydra composes it); changes as section__key=value or key=value."""
    cfg = {
        "name": "parquet", "graph_name": None, "task": None, "nodes_sql": None, "edges_sql": None,
        "split": {"train": 0.5, "val": 0.25, "test": 0.25},
        "nodes": {"path": str(paths["nodes"]), "id": "atom_id", "features": "charge", "label": "label",
                  "split": "split", "graph_id": "mol", "categorical": ["atom"]},
        "edges": {"path": str(paths["edges"]), "src": "a", "dst": "b", "graph_id": "mol", "features": ["length"],
                  "categorical": ["bond"]},
        "graphs": {"path": str(paths["graphs"]), "id": "id", "label": "label", "split": "split"},
    }
    return with_changes(cfg, changes)


def expected_nodes() -> dict[str, np.ndarray]:
    """The node arrays in (graph id, node id) order."""
    rows = [(graph, atom) for graph, size in enumerate(SIZES) for atom in range(size)]
    return {"atom": np.array([(graph + atom) % 3 for graph, atom in rows]),
            "charge": np.array([round(0.25 * atom - graph, 2) for graph, atom in rows]),
            "start": np.concatenate([[0], np.cumsum(SIZES)])}


def edge_set(graph) -> dict[tuple[int, int], tuple[int, float]]:
    """{(low, high): (bond code, length)} of a loaded set's undirected edges."""
    pairs = {}
    for (a, b), code, length in zip(graph.edge_index.T.tolist(), graph.edge_attr_cat[:, 0].tolist(),
                                    graph.edge_attr[:, 0].tolist()):
        pairs[(min(a, b), max(a, b))] = (code, round(length, 4))
    return pairs


def expected_edges() -> dict[tuple[int, int], tuple[int, float]]:
    start = expected_nodes()["start"]
    pairs = {}
    for graph, size in enumerate(SIZES):
        chain = [(atom, atom + 1) for atom in range(size - 1)] + ([(0, size - 1)] if graph % 2 == 0 else [])
        for a, b in chain:
            pairs[(start[graph] + a, start[graph] + b)] = ((a + b) % 2, round(1.0 + 0.1 * a, 4))
    return pairs


@pytest.mark.parametrize("suffix", [".parquet", ".csv"])
def test_tables_of_many_graphs_give_the_written_set(tmp_path, suffix):
    graph = load_dataset(config(write_molecules(tmp_path, suffix)), seed=0)
    expected = expected_nodes()
    assert graph.task == "graph_classification" and graph.num_classes == 2 and graph.metric == "roc_auc"
    assert graph.graph_ptr.tolist() == expected["start"].tolist()  # graphs in id order, nodes in (graph, id) order
    assert graph.x_cat[:, 0].tolist() == expected["atom"].tolist() and graph.x_cat_sizes == [3]
    np.testing.assert_allclose(graph.x[:, 0].numpy(), expected["charge"], rtol=1e-6)
    assert graph.edge_attr_cat_sizes == [2]
    assert edge_set(graph) == expected_edges()
    assert graph.y.tolist() == [index % 2 for index in range(len(SIZES))]
    assert graph.train_mask.tolist() == [True] * 4 + [False] * 4
    assert graph.val_mask.tolist() == [False] * 4 + [True] * 2 + [False] * 2
    assert graph.test_mask.tolist() == [False] * 6 + [True] * 2


def test_the_task_follows_the_label_columns_type(tmp_path):
    nodes, edges, graphs = molecules()
    count = len(graphs["id"])
    labelled = {
        **graphs,
        "logp": [0.5 * index for index in range(count)],
        "flags": pa.array([[1, None, 0], [0, 1, 1]] * (count // 2), type=pa.list_(pa.int64())),
        "a": [float(index) for index in range(count)], "b": [-float(index) for index in range(count)],
        "kind": ["tox" if index % 2 else "safe" for index in range(count)],
    }
    paths = write_molecules(tmp_path, nodes=nodes, edges=edges, graphs=pa.table(labelled))
    regression = load_dataset(config(paths, graphs__label="logp"), seed=0)
    assert regression.task == "graph_regression" and regression.metric == "mae" and regression.y.shape == (count, 1)
    order = np.argsort(graphs["id"])
    np.testing.assert_allclose(regression.y[:, 0].numpy(), np.array(labelled["logp"])[order])
    multilabel = load_dataset(config(paths, graphs__label="flags"), seed=0)
    assert multilabel.task == "graph_multilabel" and multilabel.metric == "ap" and multilabel.num_tasks == 3
    assert int(multilabel.y.isnan().sum()) == count // 2  # the NULL entries are unknown
    columns = load_dataset(config(paths, graphs__label=["a", "b"]), seed=0)
    assert columns.task == "graph_regression" and columns.y.shape == (count, 2)
    assert torch.equal(columns.y[:, 0], -columns.y[:, 1])
    names = load_dataset(config(paths, graphs__label="kind"), seed=0)
    assert names.task == "graph_classification" and "sorted order" in names.notes["labels"]
    assert names.y.tolist() == [int(labelled["kind"][index] == "tox") for index in order]  # safe 0, tox 1
    as_binary = load_dataset(config(paths, graphs__label="label", task="graph_multilabel"), seed=0)
    assert as_binary.task == "graph_multilabel" and as_binary.y.shape == (count, 1)
    with pytest.raises(DatasetError, match="dataset.task=graph_classification needs one class id per graph, but "
                                           r"dataset\.graphs\.label holds several labels per row"):
        load_dataset(config(paths, graphs__label="flags", task="graph_classification"), seed=0)


def test_without_a_split_column_the_graphs_get_a_seeded_stratified_split(tmp_path):
    paths = write_molecules(tmp_path)
    cfg = config(paths, graphs__split=None)
    graph = load_dataset(cfg, seed=3)
    expected = stratified_split(graph.y.numpy(), cfg["split"], np.random.default_rng(3))
    for mask, want in zip((graph.train_mask, graph.val_mask, graph.test_mask), expected):
        assert mask.tolist() == want.tolist()
    assert graph.train_mask.sum() == 4 and graph.y[graph.train_mask].tolist().count(1) == 2
    assert load_dataset(cfg, seed=3).train_mask.tolist() == graph.train_mask.tolist()


def test_node_ids_unique_across_graphs_need_no_graph_column_on_the_edges(tmp_path):
    nodes, edges, graphs = molecules()
    nodes = {**nodes, "atom_id": [f"{mol}/{atom}" for mol, atom in zip(nodes["mol"], nodes["atom_id"])]}
    edges = {**edges, "a": [f"{mol}/{atom}" for mol, atom in zip(edges["mol"], edges["a"])],
             "b": [f"{mol}/{atom}" for mol, atom in zip(edges["mol"], edges["b"])]}
    del edges["mol"]
    paths = write_molecules(tmp_path, ".csv", nodes=nodes, edges=edges, graphs=graphs)
    graph = load_dataset(config(paths, edges__graph_id=None), seed=0)
    assert graph.graph_ptr.tolist() == expected_nodes()["start"].tolist()
    assert set(edge_set(graph)) == set(expected_edges())


def test_a_node_task_on_many_graphs_reads_node_labels_and_splits_whole_graphs(tmp_path):
    nodes, edges, graphs = molecules()
    nodes = {**nodes, "in_ring": [int(atom == 0) for atom in nodes["atom_id"]]}
    graph = load_dataset(config(write_molecules(tmp_path, nodes=nodes, edges=edges, graphs=graphs),
                                task="node_classification", nodes__label="in_ring"), seed=0)
    start = expected_nodes()["start"]
    assert graph.task == "node_classification" and graph.y.shape == (start[-1],)
    assert np.flatnonzero(graph.y.numpy()).tolist() == start[:-1].tolist()
    assert graph.train_mask.tolist() == [True] * int(start[4]) + [False] * int(start[-1] - start[4])


def bad(tables: dict[str, dict], table: str, change) -> dict[str, dict]:
    tables[table] = change(dict(tables[table]))
    return tables


def replace_row(column: str, value, row: int = 0):
    def change(columns: dict) -> dict:
        columns[column] = [value if index == row else item for index, item in enumerate(columns[column])]
        return columns

    return change


@pytest.mark.parametrize("suffix", [".parquet", ".csv"])
@pytest.mark.parametrize("table, change, changes, message", [
    ("nodes", replace_row("mol", "mol-99", 2), {}, r"node of no graph: graph id 'mol-99' is not in the graphs table"),
    ("edges", replace_row("b", 77, 1), {}, r"edge to a missing node: graph '[^']+' has no node id 77 in "),
    ("graphs", lambda columns: {key: [*values, "mol-x" if key == "id" else values[0]]
                                for key, values in columns.items()}, {}, r"graph 'mol-x' has no nodes in "),
    ("nodes", replace_row("atom_id", None, 3), {}, r"node id column 'atom_id' is NULL \(1 row in all\)"),
    ("graphs", replace_row("split", "holdout", 5), {}, r"split 'holdout' \(column 'split'\); expected train, val, test"),
    ("graphs", lambda columns: columns, {"graphs__label": "toxic"}, r"no column 'toxic' \(dataset\.graphs\.label\)"),
])
def test_bad_input_is_one_error_naming_the_file_and_the_row(tmp_path, suffix, table, change, changes, message):
    tables = dict(zip(("nodes", "edges", "graphs"), molecules()))
    paths = write_molecules(tmp_path, suffix, **bad(tables, table, change))
    with pytest.raises(DatasetError) as error:
        load_dataset(config(paths, **changes), seed=0)
    text = str(error.value)
    assert "\n" not in text and len(re.findall(message, text)) == 1, text
    if "no column" not in message:
        where = r"line \d+" if suffix == ".csv" else r"row \d+"
        located = table if "no nodes" not in message else "graphs"
        assert re.match(rf"{re.escape(str(paths[located]))}, {where}: ", text), text


def test_the_row_named_is_the_bad_one(tmp_path):
    nodes, edges, graphs = molecules()
    nodes["mol"][6] = "mol-99"
    paths = write_molecules(tmp_path, ".csv", nodes=nodes, edges=edges, graphs=graphs)
    with pytest.raises(DatasetError, match=rf"^{re.escape(str(paths['nodes']))}, line 8: node of no graph"):
        load_dataset(config(paths), seed=0)  # row 6 from 0 is line 8 after the header
    pq.write_table(pa.table(nodes), paths["nodes"].with_suffix(".parquet"))
    with pytest.raises(DatasetError, match=r"nodes\.parquet, row 7: node of no graph"):
        load_dataset(config({**paths, "nodes": paths["nodes"].with_suffix(".parquet")}), seed=0)


def test_an_edge_across_two_graphs_is_named(tmp_path):
    nodes, edges, graphs = molecules()
    nodes = {**nodes, "atom_id": [f"{mol}/{atom}" for mol, atom in zip(nodes["mol"], nodes["atom_id"])]}
    ends = {end: [f"{mol}/{atom}" for mol, atom in zip(edges["mol"], edges[end])] for end in ("a", "b")}
    ends["b"][4] = "mol-0/0" if not ends["a"][4].startswith("mol-0/") else "mol-1/0"
    edges = {**edges, **ends}
    paths = write_molecules(tmp_path, nodes=nodes, edges=edges, graphs=graphs)
    with pytest.raises(DatasetError, match=rf"^{re.escape(str(paths['edges']))}, row 5: edge across two graphs: "
                                           r"node 'mol-\d/\d' of graph 'mol-\d' and node 'mol-[01]/0' of graph"):
        load_dataset(config(paths, edges__graph_id=None), seed=0)


def test_repeated_node_ids_are_named(tmp_path):
    nodes, edges, graphs = molecules()
    paths = write_molecules(tmp_path, nodes=nodes, edges=edges, graphs=graphs)
    with pytest.raises(DatasetError, match=r"node id \d+ of graph 'mol-\d' is also in graph 'mol-\d' \(row \d+\): "
                                           r"without dataset\.edges\.graph_id, node ids must be unique across all"):
        load_dataset(config(paths, edges__graph_id=None), seed=0)
    twice = {key: [*values, values[0]] for key, values in nodes.items()}
    write_table(paths["nodes"], twice)
    again = rf"^{re.escape(str(paths['nodes']))}, row {len(nodes['mol']) + 1}: node id \d+ of graph 'mol-\d' again " \
            r"\(first in row 1\); node ids must be unique within a graph$"
    with pytest.raises(DatasetError, match=again):
        load_dataset(config(paths), seed=0)
    # Twice in one graph is named as such without a graph column on the edges too: that column would not help.
    with pytest.raises(DatasetError, match=again):
        load_dataset(config(paths, edges__graph_id=None), seed=0)


@pytest.mark.parametrize("changes, message", [
    ({"graphs__path": None}, r"^dataset\.graphs\.path=None: expected a non-empty string \(the graphs table"),
    ({"nodes__features": None, "nodes__categorical": None}, r"^dataset\.nodes\.features and dataset\.nodes\."),
    ({"task": "graph_ranking"}, r"^dataset\.task='graph_ranking': expected null"),
    ({"nodes__graph_id": None}, r"^dataset\.nodes\.categorical is read by the graph-level form only"),
    ({"edges__categorical": "bond", "edges__graph_id": 3}, r"^dataset\.edges\.graph_id=3: expected a column name"),
])
def test_bad_config_is_named(tmp_path, changes, message):
    with pytest.raises(ConfigError, match=message):
        load_dataset(config(write_molecules(tmp_path), **changes), seed=0)


def test_the_shipped_config_and_the_cache_key_cover_the_graphs_table(tmp_path):
    paths = write_molecules(tmp_path)
    overrides = ["dataset=parquet", f"dataset.nodes.path={paths['nodes']}", f"dataset.edges.path={paths['edges']}",
                 f"dataset.graphs.path={paths['graphs']}", "dataset.nodes.graph_id=mol", "dataset.edges.graph_id=mol",
                 "dataset.nodes.id=atom_id", "dataset.nodes.features=null", "dataset.nodes.categorical=[atom]",
                 "dataset.edges.src=a", "dataset.edges.dst=b", "dataset.edges.categorical=[bond]"]
    cfg = compose_config(overrides)
    graph = load_dataset(cfg["dataset"], seed=0)
    assert graph.x.shape == (sum(SIZES), 0) and graph.x_cat_sizes == [3] and graph.edge_attr_cat_sizes == [2]
    before = stage_keys(cfg)["preprocess"]
    _, _, graphs = molecules()
    write_table(paths["graphs"], {**graphs, "label": [1 - label for label in graphs["label"]]})
    assert stage_keys(compose_config(overrides))["preprocess"] != before


def test_label_lists_of_different_lengths_or_null_are_named(tmp_path):
    nodes, edges, graphs = molecules()
    count = len(graphs["id"])
    uneven = [[1, 0]] * 3 + [[1, 0, 1]] + [[0, 1]] * (count - 4)
    missing = [[1, 0]] * 2 + [None] + [[0, 1]] * (count - 3)
    for flags, message in ((uneven, r"row 4: 3 labels, but the first row has 2; every row needs"),
                           (missing, r"row 3: the label list is NULL")):
        table = pa.table({**graphs, "flags": pa.array(flags, type=pa.list_(pa.int64()))})
        paths = write_molecules(tmp_path, nodes=nodes, edges=edges, graphs=table)
        with pytest.raises(DatasetError, match=rf"^{re.escape(str(paths['graphs']))}, {message}"):
            load_dataset(config(paths, graphs__label="flags"), seed=0)
