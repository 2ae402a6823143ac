"""The node/edge table loader (dataset=parquet) on small Parquet and CSV files written here, and one run."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq
import pytest
from mlflow.tracking import MlflowClient

from flows.cli import main
from sgt_core.config import compose_config
from sgt_core.data import load_dataset
from sgt_core.data.splits import stratified_split
from sgt_core.errors import ConfigError, DatasetError
from sgt_core.pipeline import stage_keys
from tests.conftest import TINY_MODEL

SPLIT = {"train": 0.6, "val": 0.2, "test": 0.2}
NUM_NODES = 30


def graph_columns(seed: int = 0, string_ids: bool = False) -> tuple[dict, dict]:
    """A ring of 30 nodes plus chords, as node and edge columns keyed by arbitrary ids in shuffled rows."""
    rng = np.random.default_rng(seed)
    ids = rng.choice(1000, size=NUM_NODES, replace=False) * 7 - 300  # non-contiguous, some negative
    if string_ids:
        ids = np.array([f"user-{value}" for value in ids])
    features = rng.normal(size=(NUM_NODES, 3)).round(3)
    rank = np.argsort(np.argsort(ids))  # each node's position once sorted by id
    nodes = {
        "id": ids.tolist(),
        "features": features.tolist(),
        "label": (rank % 3).tolist(),
        "split": np.array(["train", "val", "test"])[rank % 5 % 3].tolist(),
    }
    by_rank = ids[np.argsort(ids)]
    sources = np.concatenate([np.arange(NUM_NODES), np.arange(0, NUM_NODES, 5)])
    targets = np.concatenate([(np.arange(NUM_NODES) + 1) % NUM_NODES, (np.arange(0, NUM_NODES, 5) + 7) % NUM_NODES])
    edges = {"src": by_rank[sources].tolist(), "dst": by_rank[targets].tolist()}
    return nodes, edges


def expected_arrays(nodes: dict) -> dict[str, np.ndarray]:
    """What the loader must produce from `nodes`: rows in id order."""
    order = np.argsort(np.array(nodes["id"]))
    split = np.array(nodes["split"])[order]
    return {
        "x": np.array(nodes["features"], dtype=np.float32)[order],
        "y": np.array(nodes["label"])[order],
        **{f"{name}_mask": split == name for name in ("train", "val", "test")},
    }


def expected_pairs(edges: dict, nodes: dict) -> set[tuple[int, int]]:
    """The undirected edges as (low, high) positions in id order."""
    position = {node: rank for rank, node in enumerate(sorted(nodes["id"]))}
    pairs = ((position[a], position[b]) for a, b in zip(edges["src"], edges["dst"]))
    return {(min(pair), max(pair)) for pair in pairs if pair[0] != pair[1]}


def undirected_pairs(edge_index) -> set[tuple[int, int]]:
    low, high = edge_index.min(dim=0).values, edge_index.max(dim=0).values
    return set(zip(low.tolist(), high.tolist()))


def write_table(path: Path, columns: dict) -> Path:
    """Writes columns as Parquet or CSV, by the file's extension."""
    table = pa.table(columns)
    if path.suffix == ".csv":
        pa_csv.write_csv(table, path)
    else:
        pq.write_table(table, path)
    return path


def with_changes(cfg: dict, changes: dict) -> dict:
    """`cfg` with `changes` applied: `section__key=value` sets a key of a section, `key=value` a top-level one."""
    for key, value in changes.items():
        section, _, name = key.partition("__")
        if name:
            cfg[section][name] = value
        else:
            cfg[key] = value
    return cfg


def table_config(nodes_path: Path, edges_path: Path, **changes) -> dict:
    """The parquet dataset config, as Hydra hands it over; `changes` replace nodes.*/edges.*/top-level keys."""
    cfg = {
        "name": "parquet",
        "graph_name": None,
        "nodes": {"path": str(nodes_path), "id": "id", "features": "features", "label": "label", "split": "split"},
        "edges": {"path": str(edges_path), "src": "src", "dst": "dst"},
        "nodes_sql": None,
        "edges_sql": None,
        "split": SPLIT,
    }
    return with_changes(cfg, changes)


def assert_graph_matches(graph, nodes: dict, edges: dict) -> None:
    expected = expected_arrays(nodes)
    np.testing.assert_allclose(graph.x.numpy(), expected["x"], rtol=1e-6)
    np.testing.assert_array_equal(graph.y.numpy(), expected["y"])
    for name in ("train_mask", "val_mask", "test_mask"):
        np.testing.assert_array_equal(getattr(graph, name).numpy(), expected[name])
    assert graph.is_undirected()
    assert undirected_pairs(graph.edge_index) == expected_pairs(edges, nodes)


@pytest.mark.parametrize("list_type", [pa.list_(pa.float64()), pa.list_(pa.float32(), 3)], ids=["list", "array"])
def test_parquet_list_column_gives_the_written_graph(tmp_path, list_type):
    nodes, edges = graph_columns()
    columns = {**nodes, "features": pa.array(nodes["features"], type=list_type)}
    nodes_path = write_table(tmp_path / "nodes.parquet", columns)
    edges_path = write_table(tmp_path / "edges.parquet", edges)
    graph = load_dataset(table_config(nodes_path, edges_path), seed=0)
    assert_graph_matches(graph, nodes, edges)
    assert graph.num_classes == 3 and graph.source == str(nodes_path)


@pytest.mark.parametrize(
    "features", ["f_*", "*", ["f_0", "f_1", "f_2"]], ids=["pattern", "every-other-column", "column-list"]
)
def test_csv_scalar_feature_columns(tmp_path, features):
    nodes, edges = graph_columns(seed=1)
    matrix = np.array(nodes["features"])
    # Columns out of name order: a pattern keeps the table's order, so f_0 must still come first.
    columns = {"f_0": matrix[:, 0], "id": nodes["id"], "f_1": matrix[:, 1], "label": nodes["label"],
               "f_2": matrix[:, 2], "split": nodes["split"]}
    nodes_path = write_table(tmp_path / "nodes.csv", columns)
    edges_path = write_table(tmp_path / "edges.csv", edges)
    graph = load_dataset(table_config(nodes_path, edges_path, nodes__features=features), seed=0)
    assert_graph_matches(graph, nodes, edges)


def test_string_ids_are_numbered_in_sorted_order(tmp_path):
    nodes, edges = graph_columns(seed=2, string_ids=True)
    nodes_path = write_table(tmp_path / "nodes.parquet", nodes)
    edges_path = write_table(tmp_path / "edges.csv", edges)
    graph = load_dataset(table_config(nodes_path, edges_path), seed=0)
    assert_graph_matches(graph, nodes, edges)
    # The ids' own (string) order is not their numbers' order ("user-1008" < "user-97"), so this checks it.
    numbers = [int(node.removeprefix("user-")) for node in nodes["id"]]
    assert np.argsort(nodes["id"]).tolist() != np.argsort(numbers).tolist()


def test_null_split_leaves_a_node_out_of_every_split(tmp_path):
    nodes, edges = graph_columns()
    nodes["split"][3] = nodes["split"][8] = None
    nodes_path = write_table(tmp_path / "nodes.parquet", nodes)
    graph = load_dataset(table_config(nodes_path, write_table(tmp_path / "edges.csv", edges)), seed=0)
    in_a_split = graph.train_mask | graph.val_mask | graph.test_mask
    left_out = sorted(np.argsort(np.argsort(nodes["id"]))[[3, 8]].tolist())  # their positions in id order
    assert np.flatnonzero(~in_a_split.numpy()).tolist() == left_out


def test_without_split_column_draws_the_seeded_stratified_split(tmp_path):
    nodes, edges = graph_columns()
    del nodes["split"]
    nodes_path = write_table(tmp_path / "nodes.parquet", nodes)
    edges_path = write_table(tmp_path / "edges.parquet", edges)
    cfg = table_config(nodes_path, edges_path, nodes__split=None)
    graph = load_dataset(cfg, seed=4)
    labels = np.array(nodes["label"])[np.argsort(nodes["id"])]
    expected = stratified_split(labels, SPLIT, np.random.default_rng(4))
    for mask, want in zip((graph.train_mask, graph.val_mask, graph.test_mask), expected):
        np.testing.assert_array_equal(mask.numpy(), want)
    assert not np.array_equal(load_dataset(cfg, seed=5).train_mask.numpy(), graph.train_mask.numpy())


def test_sql_renames_columns_maps_label_names_and_filters_edges(tmp_path):
    nodes, edges = graph_columns(seed=3)
    class_names = np.array(["cat", "ant", "bee"])  # sorted: ant=0, bee=1, cat=2
    raw_nodes = {"key": nodes["id"], "emb": nodes["features"], "kind": class_names[nodes["label"]].tolist(),
                 "part": nodes["split"]}
    weight = np.where(np.arange(len(edges["src"])) % 4 == 0, 0.0, 1.0)
    raw_edges = {"a": edges["src"], "b": edges["dst"], "weight": weight}
    nodes_path = write_table(tmp_path / "nodes.parquet", raw_nodes)
    edges_path = write_table(tmp_path / "edges.csv", raw_edges)
    cfg = table_config(
        nodes_path,
        edges_path,
        nodes_sql="SELECT key AS id, emb AS features, DENSE_RANK() OVER (ORDER BY kind) - 1 AS label, part "
        "FROM nodes;",
        edges_sql="SELECT a AS src, b AS dst FROM edges WHERE weight > 0",
        nodes__split="part",
    )
    graph = load_dataset(cfg, seed=0)
    kept = {"src": np.array(edges["src"])[weight > 0].tolist(), "dst": np.array(edges["dst"])[weight > 0].tolist()}
    relabelled = {**nodes, "label": np.array([2, 0, 1])[nodes["label"]].tolist()}  # cat->2, ant->0, bee->1
    assert_graph_matches(graph, relabelled, kept)
    assert undirected_pairs(graph.edge_index) != expected_pairs(edges, nodes)  # the filter dropped edges


def test_glob_reads_every_part_and_the_cache_key_follows_the_files(tmp_path):
    nodes, edges = graph_columns()
    parts = tmp_path / "nodes"
    parts.mkdir()
    half = NUM_NODES // 2
    for index, rows in enumerate((slice(0, half), slice(half, None))):
        write_table(parts / f"part-{index}.parquet", {key: values[rows] for key, values in nodes.items()})
    edges_path = write_table(tmp_path / "edges.parquet", edges)
    graph = load_dataset(table_config(parts / "part-*.parquet", edges_path), seed=0)
    assert_graph_matches(graph, nodes, edges)

    overrides = ["dataset=parquet", f"dataset.nodes.path={parts}/part-*.parquet", f"dataset.edges.path={edges_path}"]
    before = stage_keys(compose_config(overrides))["preprocess"]
    write_table(parts / "part-0.parquet", {key: values[:half] for key, values in nodes.items()})  # same rows
    assert stage_keys(compose_config(overrides))["preprocess"] == before
    changed = {**nodes, "label": [1 - label if label < 2 else label for label in nodes["label"]]}
    write_table(parts / "part-0.parquet", {key: values[:half] for key, values in changed.items()})
    assert stage_keys(compose_config(overrides))["preprocess"] != before


def corrupt(path: Path) -> None:
    path.write_bytes(b"PAR1 this is not a parquet file")


def set_row(column: str, row: int, value):
    """A change to the node columns that sets one cell."""

    def change(nodes: dict) -> None:
        nodes[column] = [value if index == row else item for index, item in enumerate(nodes[column])]

    return change


# case -> (change to the node columns, change to the edge columns, config changes, which file is named,
# text the error must contain)
BAD_TABLES = {
    "missing nodes file": (None, None, {"nodes__path": "absent.parquet"}, "absent", "no such file"),
    "missing edges file": (None, None, {"edges__path": "absent.csv"}, "absent", "no such file"),
    "unknown extension": (None, None, {"nodes__path": "nodes.json"}, "nodes.json", "unknown file type"),
    "unreadable parquet": ("corrupt", None, {}, "nodes", "reading failed"),
    "missing id column": (None, None, {"nodes__id": "node"}, "nodes", "no column 'node'"),
    "missing feature column": (None, None, {"nodes__features": ["features", "nope"]}, "nodes", "'nope'"),
    "no column matches the pattern": (None, None, {"nodes__features": "zz_*"}, "nodes", "zz_*"),
    "missing label column": (None, None, {"nodes__label": "class"}, "nodes", "no column 'class'"),
    "missing split column": (None, None, {"nodes__split": "fold"}, "nodes", "no column 'fold'"),
    "missing src column": (None, None, {"edges__src": "from"}, "edges", "no column 'from'"),
    "sql error": (None, None, {"nodes_sql": "SELECT nope FROM nodes"}, "nodes", "dataset.nodes_sql failed"),
    "sql syntax error": (None, None, {"edges_sql": "SELEC src FROM edges"}, "edges", "dataset.edges_sql failed"),
    "sql must be one select": (None, None, {"nodes_sql": "DROP TABLE nodes"}, "nodes", "dataset.nodes_sql"),
    "null feature value": (set_row("features", 4, [1.0, None, 2.0]), None, {}, "nodes", "feature values are NULL"),
    "null feature list": (set_row("features", 4, None), None, {}, "nodes", "NULL features"),
    "uneven feature lists": (set_row("features", 4, [1.0, 2.0]), None, {}, "nodes", "differ in length"),
    "nan feature": (set_row("features", 4, [1.0, float("nan"), 2.0]), None, {}, "nodes", "NaN"),
    "text features": (lambda nodes: nodes.update(features=[[str(v) for v in row] for row in nodes["features"]]),
                      None, {}, "nodes", "expected lists of numbers"),
    "null label": (set_row("label", 4, None), None, {}, "nodes", "NULL label"),
    "text labels": (lambda nodes: nodes.update(label=[str(v) for v in nodes["label"]]), None, {}, "nodes",
                    "expected integer class ids"),
    "null id": (set_row("id", 4, None), None, {}, "nodes", "NULL id"),
    "duplicate ids": ("duplicate", None, {}, "nodes", "occur more than once"),
    "unknown split value": (set_row("split", 4, "training"), None, {}, "nodes", "'training'"),
    "empty split": (lambda nodes: nodes.update(split=["train"] * NUM_NODES), None, {}, "nodes", "val split is empty"),
    "no nodes": ("empty", None, {}, "nodes", "no rows"),
    "unknown node in edges": (None, lambda edges: edges.update(dst=[*edges["dst"][:-1], 123456]), {}, "edges",
                              "123456"),
    "null edge end": (None, lambda edges: edges.update(src=[None, *edges["src"][1:]]), {}, "edges", "NULL"),
    "edge ids of another type": (None, lambda edges: edges.update(src=[f"n{v}" for v in edges["src"]]), {}, "edges",
                                 "matching edges to node ids failed"),
}


@pytest.mark.parametrize("case", sorted(BAD_TABLES))
def test_bad_tables_give_one_error_naming_the_file(case, tmp_path, monkeypatch):
    change_nodes, change_edges, changes, named_file, expected = BAD_TABLES[case]
    monkeypatch.chdir(tmp_path)  # relative paths in `changes` resolve here
    nodes, edges = graph_columns()
    if callable(change_nodes):
        change_nodes(nodes)
    elif change_nodes == "duplicate":
        nodes["id"][4] = nodes["id"][7]
    elif change_nodes == "empty":
        nodes = {key: pa.array([], type=pa.array(values).type) for key, values in nodes.items()}
    if change_edges:
        change_edges(edges)
    nodes_path = write_table(tmp_path / "nodes.parquet", nodes)
    edges_path = write_table(tmp_path / "edges.csv", edges)
    if change_nodes == "corrupt":
        corrupt(nodes_path)
    (tmp_path / "nodes.json").write_text("{}")
    with pytest.raises(DatasetError) as raised:
        load_dataset(table_config(nodes_path, edges_path, **changes), seed=0)
    message = str(raised.value)
    named = {"nodes": nodes_path, "edges": edges_path}.get(named_file, tmp_path / named_file)
    assert str(named) in message and expected in message, message
    if case == "duplicate ids":
        assert repr(nodes["id"][7]) in message


def write_delimited(path: Path, columns: dict) -> Path:
    """Writes columns as CSV or TSV by the file's name, gzip-compressed if it ends in .gz."""
    delimiter = "\t" if ".tsv" in path.name else ","
    options = pa_csv.WriteOptions(delimiter=delimiter, quoting_style="none")
    with pa.CompressedOutputStream(path, "gzip") if path.name.endswith(".gz") else pa.OSFile(str(path), "wb") as out:
        pa_csv.write_csv(pa.table(columns), out, write_options=options)
    return path


def scalar_node_columns(nodes: dict) -> dict:
    """The node columns with the feature lists spread over the scalar columns f_0, f_1, f_2."""
    matrix = np.array(nodes["features"])
    return {"id": nodes["id"], **{f"f_{i}": matrix[:, i] for i in range(3)}, "label": nodes["label"],
            "split": nodes["split"]}


def test_tsv_and_gzip_files_load(tmp_path):
    nodes, edges = graph_columns(seed=5)
    nodes_path = write_delimited(tmp_path / "nodes.tsv.gz", scalar_node_columns(nodes))
    edges_path = write_delimited(tmp_path / "edges.tsv", edges)
    graph = load_dataset(table_config(nodes_path, edges_path, nodes__features="f_*"), seed=0)
    assert_graph_matches(graph, nodes, edges)


def drop_field(path: Path, line: int) -> None:
    """Removes the last field of one line (1-based, the header is line 1) of an uncompressed CSV file."""
    lines = path.read_text().splitlines()
    lines[line - 1] = lines[line - 1].rsplit(",", 1)[0]
    path.write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize(
    "table, num_rows, line",
    [("nodes", NUM_NODES, 4), ("edges", 40, 4), ("edges", 25_000, 24_990)],
    ids=["nodes", "edges", "edges-beyond-the-sniffed-rows"],
)
def test_short_csv_row_is_a_parse_error_naming_its_line(tmp_path, table, num_rows, line):
    # A short row among the rows DuckDB's sniffer samples (20480) made it read the file as one column named
    # "src,dst", and the error then said "no column 'src'".
    nodes, edges = graph_columns()
    edges = {key: (values * (num_rows // len(values) + 1))[:num_rows] for key, values in edges.items()}
    nodes_path = write_delimited(tmp_path / "nodes.csv", scalar_node_columns(nodes))
    edges_path = write_delimited(tmp_path / "edges.csv", edges)
    bad_file = nodes_path if table == "nodes" else edges_path
    drop_field(bad_file, line)
    with pytest.raises(DatasetError) as raised:
        load_dataset(table_config(nodes_path, edges_path, nodes__features="f_*"), seed=0)
    message = str(raised.value)
    assert message.startswith(f"{bad_file}: CSV parse error: ") and f"Line: {line};" in message, message
    fields = 6 if table == "nodes" else 2
    assert f"Expected Number of Columns: {fields} Found: {fields - 1}" in message, message
    assert "\n" not in message and "strict_mode" not in message  # one line, no DuckDB option advice


def test_long_tsv_row_is_a_parse_error_not_a_new_header(tmp_path):
    # With two data rows, one of them long, DuckDB's sniffer took the long row for the header and read no rows.
    nodes, edges = graph_columns()
    nodes_path = write_table(tmp_path / "nodes.parquet", nodes)
    edges_path = tmp_path / "edges.tsv"
    edges_path.write_text(f"src\tdst\n{edges['src'][0]}\t{edges['dst'][0]}\n{edges['src'][1]}\t{edges['dst'][1]}\t7\n")
    with pytest.raises(DatasetError) as raised:
        load_dataset(table_config(nodes_path, edges_path), seed=0)
    message = str(raised.value)
    assert message.startswith(f"{edges_path}: CSV parse error: ") and "Line: 3;" in message, message
    assert "Expected Number of Columns: 2 Found: 3" in message, message


@pytest.mark.parametrize("table", ["nodes", "edges"])
def test_a_directory_as_table_path_is_named_as_such(tmp_path, table, artifacts_dir, capsys):
    nodes, edges = graph_columns()
    paths = {"nodes": write_table(tmp_path / "nodes.parquet", nodes), "edges": write_table(tmp_path / "e.csv", edges)}
    folder = tmp_path / "folder"
    folder.mkdir()
    paths[table] = folder
    expected = (f"{folder}: is a directory; expected a Parquet or CSV file, or a glob pattern such as "
                f"{folder}/*.parquet (dataset.{table}.path)")
    with pytest.raises(DatasetError) as raised:
        load_dataset(table_config(paths["nodes"], paths["edges"]), seed=0)
    assert str(raised.value) == expected
    # The CLI checks the paths when it computes the cache keys, before loading anything.
    overrides = [f"dataset.{name}.path={path}" for name, path in paths.items()]
    assert main(["run", *TINY_MODEL, "dataset=parquet", *overrides]) == 2
    assert capsys.readouterr().err == f"error: {expected}\n"
    assert not artifacts_dir.exists()


@pytest.mark.parametrize(
    "changes, expected",
    [
        ({"nodes__features": []}, "dataset.nodes.features"),
        ({"nodes__label": None}, "dataset.nodes.label"),
        ({"nodes": {"path": "x.parquet"}}, "dataset.nodes must have the keys"),
        ({"nodes_sql": "  "}, "dataset.nodes_sql"),
    ],
)
def test_malformed_table_config_is_a_config_error(tmp_path, changes, expected):
    nodes, edges = graph_columns()
    cfg = table_config(write_table(tmp_path / "n.parquet", nodes), write_table(tmp_path / "e.csv", edges), **changes)
    with pytest.raises(ConfigError, match=expected):
        load_dataset(cfg, seed=0)


def test_cli_rejects_a_missing_table_before_any_stage(tmp_path, artifacts_dir, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    edges_path = write_table(tmp_path / "edges.csv", graph_columns()[1])
    code = main(["run", *TINY_MODEL, "dataset=parquet", "dataset.nodes.path=missing.parquet",
                 f"dataset.edges.path={edges_path}"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: ") and "Traceback" not in err
    assert str(tmp_path / "missing.parquet") in err and "no such file" in err
    assert not artifacts_dir.exists()


def test_pipeline_runs_on_a_parquet_graph(prefect_server, artifacts_dir, tmp_path, capsys):
    rng = np.random.default_rng(0)
    num_nodes = 80
    ids = [f"n{index:03d}" for index in range(num_nodes)]
    labels = np.arange(num_nodes) % 2
    features = (labels[:, None] + rng.normal(scale=0.5, size=(num_nodes, 4))).tolist()
    nodes_path = write_table(
        tmp_path / "nodes.parquet",
        {"id": ids, "features": features, "label": labels, "split": ["train", "train", "train", "val", "test"] * 16},
    )
    ring = np.arange(num_nodes)
    edges_path = write_table(
        tmp_path / "edges.csv",
        {"src": [ids[i] for i in ring], "dst": [ids[i] for i in (ring + 2) % num_nodes]},
    )
    overrides = ["dataset=parquet", f"dataset.nodes.path={nodes_path}", f"dataset.edges.path={edges_path}",
                 "dataset.graph_name=tiny"]
    assert main(["run", *TINY_MODEL, *overrides]) == 0
    out = capsys.readouterr().out
    client = MlflowClient(f"sqlite:///{artifacts_dir / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("sgt-parquet-tiny")
    assert experiment is not None
    (parent,) = client.search_runs([experiment.experiment_id], "tags.`sgt.stage` = 'pipeline'")
    assert parent.info.status == "FINISHED" and 0.0 <= parent.data.metrics["test_roc_auc"] <= 1.0
    assert parent.data.params["dataset.nodes.path"] == str(nodes_path)
    assert f"mlflow run {parent.info.run_id}" in out
    assert any((artifacts_dir / "train").iterdir())
