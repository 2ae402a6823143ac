"""Load a dataset of many graphs brought as node, edge and graph tables (Parquet or CSV files) through DuckDB.

One concept, kept in one file although it is long: the graph-level table form, from its configuration to the
loaded graphs.

`dataset=parquet` takes this graph-level form when `dataset.nodes.graph_id` names a column; with it null,
the one-graph form (`sgt_core.data.tables.load_tables`) reads the tables exactly as before. Here:

- the graphs table (`dataset.graphs`) has one row per graph: its id, its label (a class id, a value, a list
  column of labels, or a list of label columns) and optionally its split (train, val, test; NULL: none);
- the node table has one row per node: its graph's id, its id (unique within its graph), continuous
  features (`features`) and categorical columns (`categorical`, read as integer codes, each column's
  distinct values numbered in sorted order);
- the edge table has one row per edge: its two end nodes' ids and, when node ids repeat across graphs,
  its graph's id (`dataset.edges.graph_id`), plus continuous and categorical edge columns.

Graphs are numbered in graph-id order and nodes in (graph, node id) order. The task is inferred from the
label column's type unless `dataset.task` names it: integers (or booleans, or strings, numbered in sorted
order) are classes, floats are regression targets, lists of integers are several binary labels (NULL
entries unknown), lists of floats several regression targets. A node-level task (`node_classification`,
`node_multilabel`) reads the labels from `dataset.nodes.label` instead and splits whole graphs.

Errors name the file and the row (rows counted from 1 in file order, a CSV's header not counted; the line
for a CSV file), and the problem: a node of no graph, a graph with no nodes, an edge across two graphs or
to a missing node, a missing column.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from torch_geometric.data import Data

from sgt_core.data.many_graphs import build_graph_set
from sgt_core.data.splits import SPLIT_NAMES, stratified_split
from sgt_core.data.tables import (
    DEFAULT_SPLIT,
    EDGE_KEYS,
    _feature_columns,
    _feature_matrix,
    _features_sql,
    _identifier,
    _is_list,
    _is_number,
    _reader,
    _require_column,
    _Tables,
    load_tables,
    table_files,
    table_paths,
)
from sgt_core.errors import ConfigError, DatasetError
from sgt_core.tasks import TASKS

# The keys the graph-level form adds to dataset.nodes and dataset.edges, and the graphs table's keys.
GRAPH_NODE_KEYS = ("graph_id", "categorical")
GRAPH_EDGE_KEYS = ("graph_id", "features", "categorical")
GRAPHS_KEYS = ("path", "id", "label", "split")


def is_graph_form(nodes: object) -> bool:
    """Whether a dataset.nodes config asks for the graph-level form (a graph_id column)."""
    return isinstance(nodes, Mapping) and nodes.get("graph_id") is not None


def _names(value: object) -> list[str] | None:
    """A column name or a list of them as a list; None for null or anything else."""
    if isinstance(value, str) and value:
        return [value]
    if isinstance(value, list | tuple) and value and all(isinstance(name, str) and name for name in value):
        return list(value)
    return None


def _check_keys(section: str, cfg: object, required: tuple[str, ...], optional: tuple[str, ...]) -> Mapping:
    if not isinstance(cfg, Mapping):
        raise ConfigError(f"dataset.{section} must be a mapping with keys {', '.join(required + optional)}; "
                          f"found {cfg!r}")
    missing = [key for key in required if key not in cfg]
    unknown = sorted(set(cfg) - set(required) - set(optional))
    if missing or unknown:
        raise ConfigError(f"dataset.{section} must have the keys {', '.join(required)} (optional: "
                          f"{', '.join(optional)}); missing {missing}, not understood {unknown}")
    return cfg


def check_graph_config(nodes: object, edges: object, graphs: object, task: object) -> None:
    """Checks the graph-level form's table configs and task.

    Raises:
        ConfigError: Naming the first key that is missing, unknown or of the wrong kind.
    """
    nodes = _check_keys("nodes", nodes, ("path", "id", "graph_id"), ("features", "label", "split", "categorical"))
    edges = _check_keys("edges", edges, ("path", "src", "dst"), GRAPH_EDGE_KEYS)
    graphs = _check_keys("graphs", graphs, ("path", "id"), ("label", "split"))
    strings = [("nodes", key) for key in ("path", "id", "graph_id")] + [("edges", key) for key in EDGE_KEYS]
    strings += [("graphs", "path"), ("graphs", "id")]
    config = {"nodes": nodes, "edges": edges, "graphs": graphs}
    for section, key in strings:
        value = config[section][key]
        if not (isinstance(value, str) and value):
            hint = " (the graphs table, required with dataset.nodes.graph_id)" if section == "graphs" else ""
            raise ConfigError(f"dataset.{section}.{key}={value!r}: expected a non-empty string{hint}")
    optional_names = [("nodes", "features"), ("nodes", "label"), ("nodes", "split"), ("nodes", "categorical"),
                      ("edges", "graph_id"), ("edges", "features"), ("edges", "categorical"),
                      ("graphs", "label"), ("graphs", "split")]
    for section, key in optional_names:
        value = config[section].get(key)
        single = key in ("graph_id", "split")
        if value is not None and (_names(value) is None or (single and not isinstance(value, str))):
            expected = "a column name or null" if single else "a column name, a list of column names, or null"
            raise ConfigError(f"dataset.{section}.{key}={value!r}: expected {expected}")
    if task is not None and task not in TASKS:
        raise ConfigError(f"dataset.task={task!r}: expected null (inferred from the labels) or one of "
                          f"{', '.join(TASKS)}")


def _one_graph_config(nodes: Mapping, edges: Mapping, graphs: Mapping | None, task: object) -> tuple[dict, dict]:
    """The one-graph form's nodes and edges configs: the graph-level keys, which must be null, removed.

    Raises:
        ConfigError: If a graph-level key is set without dataset.nodes.graph_id.
    """
    set_keys = [f"nodes.{key}" for key in GRAPH_NODE_KEYS if isinstance(nodes, Mapping) and nodes.get(key)]
    set_keys += [f"edges.{key}" for key in GRAPH_EDGE_KEYS if isinstance(edges, Mapping) and edges.get(key)]
    if isinstance(graphs, Mapping) and graphs.get("path"):
        set_keys.append("graphs.path")
    if set_keys:
        raise ConfigError(f"dataset.{set_keys[0]} is read by the graph-level form only: set dataset.nodes.graph_id "
                          "to the column naming each node's graph (null reads one graph)")
    if task not in (None, "node_classification"):
        raise ConfigError(f"dataset.task={task!r}: one graph (dataset.nodes.graph_id null) is node_classification; "
                          "set dataset.nodes.graph_id for a set of many graphs")

    def strip(cfg: object, extra: tuple[str, ...]) -> object:
        return {key: value for key, value in cfg.items() if key not in extra} if isinstance(cfg, Mapping) else cfg

    return strip(nodes, GRAPH_NODE_KEYS), strip(edges, GRAPH_EDGE_KEYS)


def parquet_table_paths(dataset_cfg: Mapping) -> dict[str, list[Path]]:
    """The files of every table dataset=parquet reads, in either form (for cache keys).

    Raises:
        ConfigError: As the loader would for the same config.
        DatasetError: As the loader would for the same config.
    """
    nodes, edges, graphs = dataset_cfg.get("nodes"), dataset_cfg.get("edges"), dataset_cfg.get("graphs")
    if not is_graph_form(nodes):
        return table_paths(*_one_graph_config(nodes, edges, graphs, dataset_cfg.get("task")))
    check_graph_config(nodes, edges, graphs, dataset_cfg.get("task"))
    return {table: table_files(table, config["path"]) for table, config in
            (("nodes", nodes), ("edges", edges), ("graphs", graphs))}


class _Located:
    """Says where a row of a table is: its file and row (CSV: line), or its row in the table read."""

    def __init__(self, tables: _Tables, files: dict[str, list[Path]], reshaped: set[str]) -> None:
        self.tables, self.files, self.reshaped = tables, files, reshaped

    def row(self, table: str, rowid: int) -> str:
        """`rowid` (0-based, in file order) as "<file>, row n" (1-based; a CSV file: "<file>, line n")."""
        files = self.files[table]
        if len(files) == 1 and table not in self.reshaped:
            if _reader(files[0])[1] is not None:
                return f"{files[0]}, line {rowid + 2}"  # the header is line 1
            return f"{files[0]}, row {rowid + 1}"
        how = f"as dataset.{table}_sql returns it" if table in self.reshaped else "its files read in name order"
        return f"{self.tables.sources[table]}, row {rowid + 1} of the {table} table ({how})"

    def fail(self, table: str, query: str, doing: str, message) -> None:
        """Runs `query` (its first column a rowid, the rest what `message` names) and raises on its first row.

        Raises:
            DatasetError: "<where>: <message(row)>" when the query returns a row.
        """
        found = self.tables.fetch(table, f"{query} ORDER BY 1 LIMIT 1", doing)
        if found:
            rowid, *values = found[0]
            raise DatasetError(f"{self.row(table, int(rowid))}: {message(*values)}")


def _count(number: int, thing: str) -> str:
    return f"{number} {thing}" + ("" if number == 1 else "s")


def _no_nulls(located: _Located, table: str, columns: list[str], what: str) -> None:
    """Fails at the first row of `table` where one of `columns` is NULL."""
    for name in columns:
        located.fail(table, f"SELECT rowid, COUNT(*) OVER () FROM {table} WHERE {_identifier(name)} IS NULL",
                     "checking for NULL", lambda count, name=name: (
                         f"{what} column {name!r} is NULL ({_count(count, 'row')} in all); expected a value in every row"))


def _codes_sql(table: str, names: list[str]) -> str:
    """SQL for a list of codes per row: each column's distinct values numbered 0.. in sorted order."""
    ranks = [f"CAST(DENSE_RANK() OVER (ORDER BY {table}.{_identifier(name)}) - 1 AS BIGINT)" for name in names]
    return f"list_value({', '.join(ranks)})"


def _code_sizes(tables: _Tables, table: str, names: list[str]) -> list[int]:
    counts = ", ".join(f"COUNT(DISTINCT {_identifier(name)})" for name in names)
    return [int(count) for count in tables.fetch(table, f"SELECT {counts} FROM {table}", "counting codes")[0]]


def _list_matrix(column: pa.ChunkedArray) -> np.ndarray:
    """[R, C] int64 from a column of equal-length integer lists (checked non-NULL and even by the caller)."""
    column = column.combine_chunks()
    width = int(pc.list_value_length(column)[0].as_py()) if len(column) else 0
    return pc.list_flatten(column).to_numpy(zero_copy_only=False).astype(np.int64).reshape(len(column), width)


def _label_kind(source: str, key: str, names: list[str], columns: dict[str, pa.DataType]) -> tuple[str, bool]:
    """What the label columns hold: ("class"|"binary"|"value"|"text", whether several per row).

    "class": one integer/boolean; "text": one string (classes numbered in sorted order); "binary": integers
    per task (several); "value": floats (one or several).

    Raises:
        DatasetError: For a missing column or one of another type.
    """
    for name in names:
        _require_column(source, key, name, columns)
    if len(names) == 1 and _is_list(columns[names[0]]):
        value_type = columns[names[0]].value_type
        if not _is_number(value_type):
            raise DatasetError(f"{source}: label column {names[0]!r} holds lists of {value_type}, expected lists of "
                               "numbers (several labels per row)")
        return ("value" if pa.types.is_floating(value_type) else "binary"), True
    for name in names:
        if not (_is_number(columns[name]) or (len(names) == 1 and pa.types.is_string(columns[name]))):
            raise DatasetError(f"{source}: label column {name!r} has type {columns[name]}, expected numbers (class "
                               "ids, values), strings (class names) or a list column")
    if len(names) > 1:
        floats = any(pa.types.is_floating(columns[name]) for name in names)
        return ("value" if floats else "binary"), True
    kind = columns[names[0]]
    return ("text" if pa.types.is_string(kind) else "value" if pa.types.is_floating(kind) else "class"), False


def _task_for(level: str, kind: str, several: bool, task: str | None, source: str, key: str) -> str:
    """The task: `task` when given (of this level; checked against the labels), else the one the labels imply."""
    implied = {("class", False): "classification", ("text", False): "classification",
               ("binary", True): "multilabel", ("value", False): "regression", ("value", True): "regression"}
    if task is None:
        kind_name = implied[(kind, several)]
        if level == "node" and kind_name == "regression":
            raise DatasetError(f"{source}: label column(s) {key} hold floats, but node-level regression is not a "
                               "task; give class ids or lists of 0/1 labels")
        return f"{level}_{kind_name}"
    wanted = task.split("_", 1)[1]
    if wanted == "classification" and (several or kind == "value"):
        raise DatasetError(f"{source}: dataset.task={task} needs one class id per {level}, but dataset.{key} holds "
                           f"{'several labels' if several else 'floats'} per row")
    if wanted != "classification" and kind == "text":
        raise DatasetError(f"{source}: dataset.task={task} needs numbers, but dataset.{key} holds strings")
    return task


def _labels(located: _Located, table: str, key: str, names: list[str], kind: str, several: bool, task: str,
            order_sql: str) -> np.ndarray:
    """The labels in target order: int64 [U] class ids, or float32 [U, T] (NULL: NaN, unknown).

    Raises:
        DatasetError: For a NULL class id, a NULL list, or lists of different lengths, naming the row.
    """
    columns = ", ".join(f"{table}.{_identifier(name)}" for name in names)
    classification = task.endswith("classification")
    if classification:
        located.fail(table, f"SELECT rowid, COUNT(*) OVER () FROM {table} WHERE {columns} IS NULL",
                     "checking labels", lambda count: (
                         f"the label ({names[0]!r}) is NULL ({_count(count, 'row')} in all); every one needs a class id"))
        value = f"DENSE_RANK() OVER (ORDER BY {columns}) - 1" if kind == "text" else columns
    elif several:
        value = f"CAST({columns} AS DOUBLE[])" if len(names) == 1 else f"CAST(list_value({columns}) AS DOUBLE[])"
        located.fail(table, f"SELECT rowid FROM {table} WHERE {value} IS NULL", "checking labels",
                     lambda: "the label list is NULL; expected a list (NULL entries: unknown labels)")
        located.fail(table, f"SELECT row, length, first_length FROM (SELECT rowid AS row, len({value}) AS length, "
                            f"FIRST(len({value})) OVER (ORDER BY rowid) AS first_length FROM {table}) "
                            "WHERE length != first_length", "checking labels",
                     lambda length, first: f"{length} labels, but the first row has {first}; every row needs as many")
    else:
        value = f"CAST({columns} AS DOUBLE)"
    result = located.tables.fetch(table, f"SELECT {value} AS label FROM {table} {order_sql}", "reading labels",
                                  "arrow")
    labels = result.column("label").combine_chunks()
    if classification:
        return labels.to_numpy(zero_copy_only=False).astype(np.int64)
    if not several:  # one regression target or binary label per row: [U, 1], NULL unknown
        return labels.to_numpy(zero_copy_only=False).astype(np.float32)[:, None]
    width = int(pc.list_value_length(labels)[0].as_py())
    flat = pc.list_flatten(labels).to_numpy(zero_copy_only=False).astype(np.float32)  # NULL entries: NaN
    return flat.reshape(len(labels), width)


def _split_masks(located: _Located, column: str | None, split: Mapping[str, float], y: np.ndarray | None,
                 count: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Masks over the graphs [G]: the graphs table's split column, or a seeded split from `split`.

    The seeded split is stratified by class for graph classification (`y` given), plain random otherwise.
    """
    if column is None:
        strata = y if y is not None else np.zeros(count, dtype=np.int64)
        return stratified_split(strata, split, np.random.default_rng(seed))
    column_sql = f"CAST(graphs.{_identifier(column)} AS VARCHAR)"
    allowed = ", ".join(f"'{name}'" for name in SPLIT_NAMES)
    located.fail("graphs", f"SELECT rowid, {column_sql} FROM graphs WHERE {column_sql} NOT IN ({allowed})",
                 "checking splits", lambda value: (
                     f"split {value!r} (column {column!r}); expected train, val, test, or NULL for a graph in no split"))
    values = located.tables.fetch("graphs", f"SELECT {column_sql} AS split FROM graphs JOIN graph_position AS g "
                                            "ON graphs.rowid = g.row ORDER BY g.position", "reading splits", "arrow")
    split_of_graph = values.column("split").to_numpy(zero_copy_only=False)  # object [G], None where NULL
    return tuple(split_of_graph == name for name in SPLIT_NAMES)


def _read_graphs(located: _Located, graphs: Mapping) -> int:
    """Numbers the graphs in id order (table graph_position: id, row, position); returns G."""
    tables, source = located.tables, located.tables.sources["graphs"]
    columns = tables.columns("graphs")
    for key in ("id", "split"):
        if graphs.get(key) is not None:
            _require_column(source, f"graphs.{key}", graphs[key], columns)
    graph_id = _identifier(graphs["id"])
    _no_nulls(located, "graphs", [graphs["id"]], "graph id")
    located.fail("graphs", f"SELECT MAX(rowid), {graph_id}, MIN(rowid) FROM graphs GROUP BY {graph_id} "
                           "HAVING COUNT(*) > 1", "checking graph ids",
                 lambda value, first: f"graph id {value!r} again (first in row {first + 1}); expected one row per graph")
    tables.fetch("graphs", f"CREATE TABLE graph_position AS SELECT {graph_id} AS id, rowid AS row, "
                           f"ROW_NUMBER() OVER (ORDER BY {graph_id}) - 1 AS position FROM graphs", "numbering graphs")
    (count,) = tables.fetch("graphs", "SELECT COUNT(*) FROM graph_position", "counting graphs")[0]
    if count == 0:
        raise DatasetError(f"{source}: the graphs table has no rows")
    return int(count)


def _read_nodes(located: _Located, nodes: Mapping, ids_repeat_across_graphs: bool) -> int:
    """Numbers the nodes in (graph, id) order (table node_position); returns N.

    Raises:
        DatasetError: For a NULL id, a node of no graph, a repeated id, a graph without nodes.
    """
    tables, source = located.tables, located.tables.sources["nodes"]
    columns = tables.columns("nodes")
    for key in ("id", "graph_id"):
        _require_column(source, f"nodes.{key}", nodes[key], columns)
    node_id, graph_id = f"nodes.{_identifier(nodes['id'])}", f"nodes.{_identifier(nodes['graph_id'])}"
    _no_nulls(located, "nodes", [nodes["graph_id"]], "graph id")
    _no_nulls(located, "nodes", [nodes["id"]], "node id")
    located.fail("nodes", f"SELECT nodes.rowid, {graph_id}, COUNT(*) OVER () FROM nodes ANTI JOIN graph_position AS g "
                          f"ON {graph_id} = g.id", "matching nodes to graphs",
                 lambda value, count: (f"node of no graph: graph id {value!r} is not in the graphs table "
                                       f"{tables.sources['graphs']} ({_count(count, 'node')} in all name graphs it lacks)"))
    # An id twice in one graph is wrong in either form; only an id shared by two graphs is fixed by
    # dataset.edges.graph_id, so that hint is given for that case alone.
    located.fail("nodes", f"SELECT MAX(nodes.rowid), {graph_id}, {node_id}, MIN(nodes.rowid) FROM nodes "
                          f"GROUP BY {graph_id}, {node_id} HAVING COUNT(*) > 1", "checking node ids",
                 lambda graph, value, first: (f"node id {value!r} of graph {graph!r} again (first in row {first + 1}); "
                                              "node ids must be unique within a graph"))
    if not ids_repeat_across_graphs:
        located.fail("nodes", f"SELECT MAX(nodes.rowid), arg_max({graph_id}, nodes.rowid), {node_id}, "
                              f"MIN(nodes.rowid), arg_min({graph_id}, nodes.rowid) FROM nodes GROUP BY {node_id} "
                              "HAVING COUNT(*) > 1", "checking node ids",
                     lambda graph, value, first, first_graph: (
                         f"node id {value!r} of graph {graph!r} is also in graph {first_graph!r} (row {first + 1}): "
                         "without dataset.edges.graph_id, node ids must be unique across all graphs, since edges "
                         "name nodes by id alone; set dataset.edges.graph_id to the edge table's graph column"))
    located.fail("graphs", f"SELECT g.row, g.id FROM graph_position AS g ANTI JOIN nodes ON {graph_id} = g.id",
                 "matching graphs to nodes",
                 lambda value: f"graph {value!r} has no nodes in {tables.sources['nodes']}; every graph needs one")
    tables.fetch("nodes", f"CREATE TABLE node_position AS SELECT nodes.rowid AS row, {graph_id} AS graph_id, "
                          f"{node_id} AS id, g.position AS graph, "
                          f"ROW_NUMBER() OVER (ORDER BY g.position, {node_id}) - 1 AS position "
                          f"FROM nodes JOIN graph_position AS g ON {graph_id} = g.id", "numbering nodes")
    (count,) = tables.fetch("nodes", "SELECT COUNT(*) FROM node_position", "counting nodes")[0]
    return int(count)


def _node_features(located: _Located, nodes: Mapping) -> tuple[np.ndarray | None, np.ndarray | None, list[int]]:
    """Continuous features float64 [N, F] (or None) and categorical codes int64 [N, C] (or None), node order."""
    tables, source = located.tables, located.tables.sources["nodes"]
    columns = tables.columns("nodes")
    categorical = _names(nodes.get("categorical")) or []
    for name in categorical:
        _require_column(source, "nodes.categorical", name, columns)
    if nodes.get("features") is None and not categorical:
        raise ConfigError("dataset.nodes.features and dataset.nodes.categorical are both null: the graph-level "
                          "form needs node features, continuous or categorical")
    _no_nulls(located, "nodes", categorical, "categorical")
    selected = ["node_position.graph AS graph"]
    if categorical:
        selected.append(f"{_codes_sql('nodes', categorical)} AS codes")
    names = []
    if nodes.get("features") is not None:
        others = {nodes[key] for key in ("id", "graph_id", "label", "split") if nodes.get(key)} | set(categorical)
        names = _feature_columns(source, nodes["features"], others, columns)
        selected.append(f"{_features_sql(source, names, columns)} AS features")
    result = tables.fetch("nodes", f"SELECT node_position.id AS id, {', '.join(selected)} FROM nodes JOIN node_position "
                                   "ON nodes.rowid = node_position.row ORDER BY node_position.position",
                          "reading nodes", "arrow")
    x = _feature_matrix(source, result.column("features"), result.column("id"), names) if names else None
    codes = _list_matrix(result.column("codes")) if categorical else None
    return x, codes, _code_sizes(tables, "nodes", categorical) if categorical else []


def _read_edges(located: _Located, edges: Mapping) -> tuple[np.ndarray, np.ndarray | None, list[int],
                                                              np.ndarray | None]:
    """The edges as [2, E] node positions, with their codes [E, Ce] and floats [E, Fe] (or None each).

    Raises:
        DatasetError: For a NULL end, an edge to a missing node, or one joining two graphs.
    """
    tables, source = located.tables, located.tables.sources["edges"]
    columns = tables.columns("edges")
    for key in ("src", "dst", "graph_id"):
        if edges.get(key) is not None:
            _require_column(source, f"edges.{key}", edges[key], columns)
    _no_nulls(located, "edges", [edges[key] for key in ("src", "dst", "graph_id") if edges.get(key)], "edge")
    src, dst = f"edges.{_identifier(edges['src'])}", f"edges.{_identifier(edges['dst'])}"
    categorical = _names(edges.get("categorical")) or []
    for name in categorical:
        _require_column(source, "edges.categorical", name, columns)
    _no_nulls(located, "edges", categorical, "categorical")
    float_names = []
    if edges.get("features") is not None:
        others = {edges[key] for key in ("src", "dst", "graph_id") if edges.get(key)} | set(categorical)
        float_names = _feature_columns(source, edges["features"], others, columns)
        _no_nulls(located, "edges", [name for name in float_names if not _is_list(columns[name])], "feature")
    if edges.get("graph_id") is not None:
        graph_id = f"edges.{_identifier(edges['graph_id'])}"
        located.fail("edges", f"SELECT edges.rowid, {graph_id} FROM edges ANTI JOIN graph_position AS g "
                              f"ON {graph_id} = g.id", "matching edges to graphs",
                     lambda value: f"graph id {value!r} is not in the graphs table {tables.sources['graphs']}")
        joins = (f"LEFT JOIN node_position AS a ON {graph_id} = a.graph_id AND {src} = a.id "
                 f"LEFT JOIN node_position AS b ON {graph_id} = b.graph_id AND {dst} = b.id")
        located.fail("edges", f"SELECT edges.rowid, {graph_id}, CASE WHEN a.position IS NULL THEN {src} ELSE {dst} END, "
                              f"COUNT(*) OVER () FROM edges {joins} WHERE a.position IS NULL OR b.position IS NULL",
                     "matching edges to nodes",
                     lambda graph, value, count: (
                         f"edge to a missing node: graph {graph!r} has no node id {value!r} in "
                         f"{tables.sources['nodes']}; an edge joins two nodes of its own graph ({_count(count, 'edge')} "
                         "in all name missing nodes)"))
    else:
        joins = f"LEFT JOIN node_position AS a ON {src} = a.id LEFT JOIN node_position AS b ON {dst} = b.id"
        located.fail("edges", f"SELECT edges.rowid, CASE WHEN a.position IS NULL THEN {src} ELSE {dst} END, "
                              f"COUNT(*) OVER () FROM edges {joins} WHERE a.position IS NULL OR b.position IS NULL",
                     "matching edges to nodes",
                     lambda value, count: (f"edge to a missing node: node id {value!r} is not in the node table "
                                           f"{tables.sources['nodes']} ({_count(count, 'edge')} in all name missing nodes)"))
        located.fail("edges", f"SELECT edges.rowid, {src}, a.graph_id, {dst}, b.graph_id FROM edges {joins} "
                              "WHERE a.graph != b.graph", "matching edges to nodes",
                     lambda first, graph, second, other: (
                         f"edge across two graphs: node {first!r} of graph {graph!r} and node {second!r} of graph "
                         f"{other!r}; edges must stay inside one graph"))
    selected = ["a.position AS source", "b.position AS target"]
    if categorical:
        selected.append(f"{_codes_sql('edges', categorical)} AS codes")
    if float_names:
        selected.append(f"{_features_sql(source, float_names, columns, table='edges')} AS features")
    result = tables.fetch("edges", f"SELECT {', '.join(selected)} FROM edges {joins}", "reading edges", "arrow")
    edge_index = np.stack([result.column(name).to_numpy() for name in ("source", "target")]).astype(np.int64)
    codes = _list_matrix(result.column("codes")) if categorical else None
    floats = None
    if float_names:
        floats = _feature_matrix(source, result.column("features"), result.column("source"), float_names)
    return edge_index, codes, _code_sizes(tables, "edges", categorical) if categorical else [], floats


def load_graph_tables(
    nodes: Mapping,
    edges: Mapping,
    graphs: Mapping,
    task: str | None = None,
    nodes_sql: str | None = None,
    edges_sql: str | None = None,
    split: Mapping[str, float] = DEFAULT_SPLIT,
    seed: int = 0,
) -> Data:
    """Loads a set of many graphs from node, edge and graph tables (see the module docstring).

    Args:
        nodes: {"path", "id", "graph_id", "features", "categorical", "label", "split"}: `features` continuous
            columns (as in the one-graph form, or null), `categorical` columns read as codes (or null),
            `label` the node labels of a node-level task (else not read), `split` not read.
        edges: {"path", "src", "dst", "graph_id", "features", "categorical"}: `graph_id` null matches edges
            to nodes by id alone (ids then unique across graphs).
        graphs: {"path", "id", "label", "split"}: `label` a column (scalar or list) or a list of columns,
            null for a node-level task; `split` train/val/test/NULL, or null for a seeded split from `split`.
        task: one of `sgt_core.tasks.TASKS`, or None to infer it from the labels.
        nodes_sql: a SELECT replacing the node table, as in the one-graph form.
        edges_sql: a SELECT replacing the edge table, as in the one-graph form.
        split: {"train": f, "val": f, "test": f} of the graphs, used when graphs.split is null.
        seed: seeds that split.

    Returns:
        The validated set (`sgt_core.data.many_graphs.build_graph_set`); `source` is the node table's path.

    Raises:
        ConfigError: If a key is malformed.
        DatasetError: Naming the file, the row and the problem.
    """
    check_graph_config(nodes, edges, graphs, task)
    files = {table: table_files(table, config["path"]) for table, config in
             (("nodes", nodes), ("edges", edges), ("graphs", graphs))}
    queries = {"nodes": nodes_sql, "edges": edges_sql}
    for table, query in queries.items():
        if query is not None and not (isinstance(query, str) and query.strip()):
            raise ConfigError(f"dataset.{table}_sql={query!r}: expected a SELECT query or null")
    sources = {table: os.path.abspath(os.path.expanduser(config["path"])) for table, config in
               (("nodes", nodes), ("edges", edges), ("graphs", graphs))}
    tables = _Tables(sources)
    located = _Located(tables, files, {table for table, query in queries.items() if query})
    try:
        tables.load(files, queries)
        num_graphs = _read_graphs(located, graphs)
        _read_nodes(located, nodes, ids_repeat_across_graphs=edges.get("graph_id") is not None)
        graph_of_node = tables.fetch("nodes", "SELECT graph FROM node_position ORDER BY position", "reading nodes",
                                     "numpy")["graph"]
        graph_ptr = np.concatenate([[0], np.cumsum(np.bincount(np.asarray(graph_of_node), minlength=num_graphs))])
        x, x_cat, x_cat_sizes = _node_features(located, nodes)
        edge_index, edge_codes, edge_code_sizes, edge_floats = _read_edges(located, edges)

        node_task = task is not None and task.startswith("node_")
        if task is None and graphs.get("label") is None:
            node_task = nodes.get("label") is not None
        table, key = ("nodes", "nodes.label") if node_task else ("graphs", "graphs.label")
        label_names = _names((nodes if node_task else graphs).get("label"))
        if label_names is None:
            level = "node" if node_task else "graph"
            raise ConfigError(f"dataset.{key} is null, but a {level}-level task reads its labels from it")
        kind, several = _label_kind(sources[table], key, label_names, tables.columns(table))
        task = _task_for("node" if node_task else "graph", kind, several, task, sources[table], key)
        order_sql = ("JOIN node_position AS p ON nodes.rowid = p.row ORDER BY p.position" if node_task else
                     "JOIN graph_position AS p ON graphs.rowid = p.row ORDER BY p.position")
        y = _labels(located, table, key, label_names, kind, several, task, order_sql)
        stratify = y if task == "graph_classification" else None
        masks = _split_masks(located, graphs.get("split"), split, stratify, num_graphs, seed)
    finally:
        tables.connection.close()
    if node_task:
        sizes = np.diff(graph_ptr)
        masks = tuple(np.repeat(mask, sizes) for mask in masks)
    notes = {}
    if kind == "text":
        notes["labels"] = f"class names in {key} numbered in sorted order"
    return build_graph_set(
        sources["nodes"], task=task, graph_ptr=graph_ptr, edge_index=edge_index, y=y, train_mask=masks[0],
        val_mask=masks[1], test_mask=masks[2], x=x, x_cat=x_cat, x_cat_sizes=x_cat_sizes or None,
        edge_attr_cat=edge_codes, edge_attr_cat_sizes=edge_code_sizes or None, edge_attr=edge_floats, notes=notes,
    )


def load_parquet(
    nodes: Mapping,
    edges: Mapping,
    graphs: Mapping | None = None,
    task: str | None = None,
    nodes_sql: str | None = None,
    edges_sql: str | None = None,
    split: Mapping[str, float] = DEFAULT_SPLIT,
    graph_name: str | None = None,
    seed: int = 0,
) -> Data:
    """dataset=parquet: many graphs when `nodes.graph_id` names a column (`load_graph_tables`), else one graph
    read exactly as `sgt_core.data.tables.load_tables` reads it (the graph-level keys then null).

    Args:
        nodes: the node table's keys, as `load_tables` (one graph) or `load_graph_tables` (many) reads them.
        edges: the edge table's keys, likewise.
        graphs: the graphs table (graph-level form only; its path null in the one-graph form).
        task: the task, or None to infer it (graph-level form; one graph is node_classification).
        nodes_sql: the SELECT replacing the node table, as in `load_tables` and `load_graph_tables`.
        edges_sql: the SELECT replacing the edge table, likewise.
        split: the split's fractions, as in `load_tables` and `load_graph_tables`.
        graph_name: only names the dataset in experiment names.
        seed: seeds that split.

    Raises:
        ConfigError: As the form's loader raises it.
        DatasetError: As the form's loader raises it.
    """
    if is_graph_form(nodes):
        return load_graph_tables(nodes, edges, graphs, task, nodes_sql, edges_sql, split, seed)
    one_graph_nodes, one_graph_edges = _one_graph_config(nodes, edges, graphs, task)
    return load_tables(one_graph_nodes, one_graph_edges, nodes_sql, edges_sql, split, graph_name, seed)
