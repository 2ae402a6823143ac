"""Load a graph brought as a node table and an edge table (Parquet or CSV files) through DuckDB.

One concept, kept in one file although it is long: the one-graph table form, from checking its files to
building the graph.
"""

from __future__ import annotations

import csv
import fnmatch
import glob
import gzip
import itertools
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sgt_core.data.splits import SPLIT_NAMES, stratified_split
from sgt_core.errors import ConfigError, DatasetError

if TYPE_CHECKING:  # torch only where the graph is built: `check_table_files` runs before torch is imported
    from torch_geometric.data import Data

# File name endings (lower-cased) -> the DuckDB table function that reads them and, for CSV, the delimiter.
READERS = {
    ".parquet": ("read_parquet", None),
    ".pq": ("read_parquet", None),
    ".csv": ("read_csv", ","),
    ".tsv": ("read_csv", "\t"),
    ".csv.gz": ("read_csv", ","),
    ".tsv.gz": ("read_csv", "\t"),
}
NODE_KEYS = ("path", "id", "features", "label", "split")
EDGE_KEYS = ("path", "src", "dst")
GLOB_CHARACTERS = "*?["
DEFAULT_SPLIT = {"train": 0.6, "val": 0.2, "test": 0.2}


def _identifier(name: str) -> str:
    """A column or table name quoted for SQL, so any name (spaces, keywords, quotes) is read literally."""
    return '"' + name.replace('"', '""') + '"'


def _literal(text: str) -> str:
    """A string quoted as an SQL literal."""
    return "'" + text.replace("'", "''") + "'"


def _message(error: duckdb.Error) -> str:
    """DuckDB's message on one line, without what it appends: the query and a caret after a "LINE n:" line,
    or after "Possible fixes:" reader options (strict_mode=false, ignore_errors=true) no config key sets."""
    lines = [line.strip() for line in str(error).strip().splitlines()]
    ends = ("LINE ", "Possible fixes")
    kept = [line for line in itertools.takewhile(lambda line: not line.startswith(ends), lines) if line]
    return "; ".join(kept)


def _check_table_config(table: str, cfg: object, keys: tuple[str, ...]) -> None:
    """Checks `dataset.nodes` or `dataset.edges`: exactly `keys`, with column names as strings."""
    if not isinstance(cfg, Mapping):
        raise ConfigError(f"dataset.{table} must be a mapping with keys {', '.join(keys)}; found {cfg!r}")
    missing = [key for key in keys if key not in cfg]
    unknown = sorted(set(cfg) - set(keys))
    if missing or unknown:
        raise ConfigError(
            f"dataset.{table} must have the keys {', '.join(keys)}; missing {missing}, not understood {unknown}"
        )
    for key in keys:
        value = cfg[key]
        if key == "features":
            names = value if isinstance(value, list | tuple) else [value]
            valid = bool(names) and all(isinstance(name, str) and name for name in names)
            expected = "a column name, a list of column names or a pattern such as feat_*"
        elif key == "split":
            valid = value is None or (isinstance(value, str) and bool(value))
            expected = "a column name, or null for a seeded split"
        else:
            valid = isinstance(value, str) and bool(value)
            expected = "a non-empty string"
        if not valid:
            raise ConfigError(f"dataset.{table}.{key}={value!r}: expected {expected}")


def table_files(table: str, path: str) -> list[Path]:
    """The files one table is read from: `path` itself, or every match of it when it is a glob pattern.

    Args:
        table: "nodes" or "edges", named in error messages.
        path: Parquet or CSV file (or glob pattern), relative to the working directory or absolute.

    Returns:
        Absolute paths, sorted; the same list every time for the same files, so they can be fingerprinted.

    Raises:
        DatasetError: If nothing matches, or a file has an extension other than those of `READERS`.
    """
    pattern = os.path.abspath(os.path.expanduser(path))
    if os.path.isfile(pattern):  # first, so that a file whose path holds "[" is not taken for a pattern
        files = [Path(pattern)]
    elif os.path.isdir(pattern):
        raise DatasetError(
            f"{pattern}: is a directory; expected a Parquet or CSV file, or a glob pattern such as "
            f"{os.path.join(pattern, '*.parquet')} (dataset.{table}.path)"
        )
    elif any(character in path for character in GLOB_CHARACTERS):
        files = sorted(Path(match) for match in glob.glob(pattern, recursive=True) if os.path.isfile(match))
    else:
        files = []
    if not files:
        raise DatasetError(f"{pattern}: no such file (dataset.{table}.path)")
    for file in files:
        if _reader(file) is None:
            raise DatasetError(
                f"{file}: unknown file type for the {table} table; expected one of {', '.join(READERS)}"
            )
    if len({_reader(file) for file in files}) > 1:
        endings = sorted({_ending(file) for file in files})
        raise DatasetError(
            f"{pattern}: matches files of different formats ({', '.join(endings)}); the {table} table needs one"
        )
    return files


def table_paths(nodes: Mapping, edges: Mapping) -> dict[str, list[Path]]:
    """The files of the node and the edge table, after checking both table configs (also for cache keys).

    Raises:
        ConfigError: If `nodes` or `edges` lacks keys, has unknown ones, or names columns with non-strings.
        DatasetError: See `table_files`.
    """
    _check_table_config("nodes", nodes, NODE_KEYS)
    _check_table_config("edges", edges, EDGE_KEYS)
    return {"nodes": table_files("nodes", nodes["path"]), "edges": table_files("edges", edges["path"])}


def _ending(file: Path) -> str | None:
    """The key of `READERS` that `file`'s name ends with; None for an unknown type."""
    name = file.name.lower()
    return next((ending for ending in READERS if name.endswith(ending)), None)


def _reader(file: Path) -> tuple[str, str | None] | None:
    """The DuckDB table function that reads `file` and its CSV delimiter, by its extension; None if unknown."""
    return READERS.get(_ending(file))


def _read_sql(paths: list[Path]) -> str:
    """The table function call that reads `paths`, which are all of one format."""
    function, delimiter = _reader(paths[0])
    file_list = "[" + ", ".join(_literal(str(path)) for path in paths) + "]"
    if delimiter is None:
        return f"{function}({file_list})"
    # Left to guess, DuckDB's sniffer takes a file with one short row for a single-column table (the error
    # then names a missing column, not the row), and one with a long row for a table whose header is that
    # row, skipping the rows above it. Stated, a row that does not fit the header fails the read.
    return (
        f"{function}({file_list}, delim = {_literal(delimiter)}, header = true, skip = 0, strict_mode = true)"
    )


def _csv_problem(connection: duckdb.DuckDBPyConnection, path: Path) -> str | None:
    """DuckDB's message for the first row of a CSV file that does not parse, naming its line; None if all do.

    A bad row among those DuckDB's sniffer samples to detect the column types fails the sniffing without a
    line number ("not possible to automatically detect the CSV parsing dialect"). Read as text, in as many
    columns as the header has, nothing is sniffed and the parser names the line.
    """
    delimiter = _reader(path)[1]
    opener = gzip.open if path.name.lower().endswith(".gz") else open
    try:
        with opener(path, "rt", newline="", encoding="utf-8") as handle:
            header = next(csv.reader(handle, delimiter=delimiter), None)
    except (OSError, UnicodeDecodeError, csv.Error):
        return None  # the first read's own error says more
    if not header:
        return None
    columns = ", ".join(f"'column{index}': 'VARCHAR'" for index in range(len(header)))
    try:
        connection.execute(
            f"SELECT COUNT(*) FROM read_csv({_literal(str(path))}, auto_detect = false, header = true, "
            f"delim = {_literal(delimiter)}, quote = '\"', escape = '\"', strict_mode = true, columns = {{{columns}}})"
        ).fetchall()
    except duckdb.Error as error:
        return _message(error)
    return None


def _csv_error(connection: duckdb.DuckDBPyConnection, source: str, paths: list[Path], error: duckdb.Error) -> DatasetError:
    """The error for CSV files that DuckDB could not read: the first row that does not parse, with its file
    and line, else DuckDB's message naming the table's `source`."""
    for path in paths:
        problem = _csv_problem(connection, path)
        if problem:
            return DatasetError(f"{path}: CSV parse error: {problem}")
    doing = "CSV parse error" if isinstance(error, duckdb.InvalidInputException) else "reading failed"
    return DatasetError(f"{source}: {doing}: {_message(error)}")


def check_table_files(nodes: Mapping, edges: Mapping) -> None:
    """Checks what `load_tables` reads first, without building a table or the graph (and without torch):
    both tables' files exist with a known type, every CSV row parses against its header, and every Parquet
    file opens. The errors are `load_tables`' own.

    Raises:
        ConfigError: see `table_paths`.
        DatasetError: naming the file: a missing one, a CSV row that does not parse (with its line), a file
            DuckDB cannot read.
    """
    files = table_paths(nodes, edges)
    connection = duckdb.connect()
    try:
        for table, config in (("nodes", nodes), ("edges", edges)):
            paths, source = files[table], os.path.abspath(os.path.expanduser(config["path"]))
            csv_rows = _reader(paths[0])[1] is not None
            try:  # CSV: every row, counted as it streams; Parquet: the footers, read by asking for no rows
                connection.execute(f"SELECT COUNT(*) FROM {_read_sql(paths)}" if csv_rows
                                   else f"SELECT * FROM {_read_sql(paths)} LIMIT 0").fetchall()
            except duckdb.Error as error:
                if csv_rows:
                    raise _csv_error(connection, source, paths, error) from error
                raise DatasetError(f"{source}: reading failed: {_message(error)}") from error
    finally:
        connection.close()


def _is_number(data_type: pa.DataType) -> bool:
    """Integers, floats and booleans: what features and labels may hold."""
    return pa.types.is_integer(data_type) or pa.types.is_floating(data_type) or pa.types.is_boolean(data_type)


def _is_list(data_type: pa.DataType) -> bool:
    """A list column (DuckDB LIST) or a fixed-size one (DuckDB ARRAY)."""
    return any(check(data_type) for check in (pa.types.is_list, pa.types.is_large_list, pa.types.is_fixed_size_list))


class _Tables:
    """An in-memory DuckDB database holding the tables `nodes` and `edges`; its errors name their files."""

    def __init__(self, sources: dict[str, str]) -> None:
        self.sources = sources
        self.connection = duckdb.connect()
        # A query naming an unknown table must fail, not scan a Python variable of that name.
        self.connection.execute("SET python_enable_replacements = false")

    def fetch(self, table: str, query: str, doing: str, form: str = "rows"):
        """Runs `query` and returns its result as "rows" (tuples), "arrow" (a table) or "numpy" (arrays).

        Raises:
            DatasetError: Naming the file of `table`, what was being done and DuckDB's message.
        """
        try:
            result = self.connection.sql(query)
            return {"rows": result.fetchall, "arrow": result.to_arrow_table, "numpy": result.fetchnumpy}[form]()
        except duckdb.Error as error:
            raise DatasetError(f"{self.sources[table]}: {doing} failed: {_message(error)}") from error

    def read(self, table: str, paths: list[Path]) -> None:
        """Creates `table` from its files.

        Raises:
            DatasetError: Naming the file; for a CSV row that does not parse, "CSV parse error" and its line.
        """
        query = f"CREATE TABLE {table} AS SELECT * FROM {_read_sql(paths)}"
        if _reader(paths[0])[1] is None:
            self.fetch(table, query, "reading")
            return
        try:
            self.connection.execute(query)
        except duckdb.Error as error:
            raise _csv_error(self.connection, self.sources[table], paths, error) from error

    def load(self, files: dict[str, list[Path]], queries: dict[str, str | None]) -> None:
        """Reads each table's files, then replaces a table by its query's result where one is given.

        Every query runs before any table is replaced, so each one reads both tables as the files hold them.
        """
        for table, paths in files.items():
            self.read(table, paths)
        reshaped = [table for table, query in queries.items() if query]
        for table in reshaped:
            # As a subquery the text can only be one SELECT: nothing that writes or drops.
            query = queries[table].strip().rstrip(";")
            self.fetch(
                table, f"CREATE TABLE {table}_reshaped AS SELECT * FROM ({query})", f"dataset.{table}_sql"
            )
        for table in reshaped:
            self.connection.execute(f"DROP TABLE {table}")
            self.connection.execute(f"ALTER TABLE {table}_reshaped RENAME TO {table}")

    def columns(self, table: str) -> dict[str, pa.DataType]:
        """The table's column names and their Arrow types, in table order."""
        schema = self.fetch(table, f"SELECT * FROM {table} LIMIT 0", "reading columns", "arrow").schema
        return dict(zip(schema.names, schema.types))


def _require_column(source: str, key: str, name: str, columns: Mapping[str, pa.DataType]) -> None:
    if name not in columns:
        raise DatasetError(
            f"{source}: no column {name!r} (dataset.{key}); the table has columns {', '.join(columns)}"
        )


def _feature_columns(source: str, features: str | list[str], others: set[str], columns: dict) -> list[str]:
    """The feature columns the config names: one column, a list of columns, or those matching a pattern.

    A pattern skips the id, label and split columns, so `*` means "every other column".
    """
    if isinstance(features, str) and any(character in features for character in GLOB_CHARACTERS):
        matches = [name for name in columns if fnmatch.fnmatchcase(name, features) and name not in others]
        if not matches:
            raise DatasetError(
                f"{source}: no column matches dataset.nodes.features={features!r}; the table has columns "
                f"{', '.join(columns)}"
            )
        return matches
    names = [features] if isinstance(features, str) else list(features)
    for name in names:
        _require_column(source, "nodes.features", name, columns)
    return names


def _features_sql(source: str, names: list[str], columns: dict[str, pa.DataType], table: str = "nodes") -> str:
    """SQL for one DOUBLE[] per row of `table` (nodes, or edges in the graph-level form): the list column
    itself, or the scalar columns packed into a list."""
    if len(names) == 1 and _is_list(columns[names[0]]):
        value_type = columns[names[0]].value_type
        if not _is_number(value_type):
            raise DatasetError(
                f"{source}: feature column {names[0]!r} holds lists of {value_type}, expected lists of numbers"
            )
        return f"CAST({table}.{_identifier(names[0])} AS DOUBLE[])"
    for name in names:
        if not _is_number(columns[name]):
            raise DatasetError(
                f"{source}: feature column {name!r} has type {columns[name]}, expected numbers (or a single "
                "column of numeric lists)"
            )
    packed = ", ".join(f"{table}.{_identifier(name)}" for name in names)
    return f"CAST(list_value({packed}) AS DOUBLE[])"


def _first_null(values: pa.Array | pa.ChunkedArray) -> int:
    """The position of the first NULL entry."""
    return int(np.flatnonzero(values.is_null().to_numpy(zero_copy_only=False))[0])


def _feature_matrix(source: str, features: pa.ChunkedArray, ids: pa.ChunkedArray, names: list[str]) -> np.ndarray:
    """The float64 [N, F] matrix from one list per node; no list or entry may be NULL, all of one length."""
    features = features.combine_chunks()
    if features.null_count:
        raise DatasetError(
            f"{source}: {features.null_count} nodes have NULL features (first: node id "
            f"{ids[_first_null(features)].as_py()!r})"
        )
    lengths = pc.list_value_length(features).to_numpy(zero_copy_only=False)  # [N]
    num_nodes, num_features = len(features), int(lengths[0])
    uneven = lengths != num_features
    if uneven.any():
        node = int(np.flatnonzero(uneven)[0])
        raise DatasetError(
            f"{source}: feature lists differ in length: node id {ids[0].as_py()!r} has {num_features} values, "
            f"node id {ids[node].as_py()!r} has {int(lengths[node])}"
        )
    values = pc.list_flatten(features)  # [N * F]
    if values.null_count:
        node, position = divmod(_first_null(values), num_features)
        where = f"column {names[position]!r}" if len(names) > 1 else f"position {position}"
        raise DatasetError(
            f"{source}: {values.null_count} feature values are NULL (first: node id {ids[node].as_py()!r}, "
            f"{where})"
        )
    # A writable copy: Arrow's buffers are read-only, which torch.as_tensor warns about.
    return values.to_numpy(zero_copy_only=False, writable=True).reshape(num_nodes, num_features)


def _read_nodes(tables: _Tables, nodes: Mapping, split_fractions: Mapping[str, float], seed: int) -> tuple:
    """The node table in id order: features [N, F], labels [N] and the (train, val, test) masks."""
    source = tables.sources["nodes"]
    columns = tables.columns("nodes")
    for key in ("id", "label", "split"):
        if nodes[key] is not None:
            _require_column(source, f"nodes.{key}", nodes[key], columns)
    others = {nodes[key] for key in ("id", "label", "split")}
    feature_names = _feature_columns(source, nodes["features"], others, columns)
    features_sql = _features_sql(source, feature_names, columns)
    if not _is_number(columns[nodes["label"]]):
        raise DatasetError(
            f"{source}: label column {nodes['label']!r} has type {columns[nodes['label']]}, expected integer "
            "class ids (map names to ids in dataset.nodes_sql: DENSE_RANK() OVER (ORDER BY name) - 1 AS label)"
        )

    node_id = f"nodes.{_identifier(nodes['id'])}"
    (null_ids,) = tables.fetch("nodes", f"SELECT COUNT(*) FROM nodes WHERE {node_id} IS NULL", "checking ids")[0]
    if null_ids:
        raise DatasetError(f"{source}: {null_ids} nodes have a NULL id (column {nodes['id']!r})")
    repeated = tables.fetch(
        "nodes",
        f"SELECT {node_id}, COUNT(*) FROM nodes GROUP BY {node_id} HAVING COUNT(*) > 1 ORDER BY {node_id}",
        "checking ids",
    )
    if repeated:
        example, count = repeated[0]
        raise DatasetError(
            f"{source}: {len(repeated)} node ids occur more than once (first: id {example!r}, {count} rows); "
            "expected one row per node"
        )

    split_sql = f"CAST(nodes.{_identifier(nodes['split'])} AS VARCHAR)" if nodes["split"] else "NULL"
    # Qualified names (nodes.x) so that ORDER BY cannot bind to one of the aliases instead.
    table = tables.fetch(
        "nodes",
        f"SELECT {node_id} AS id, {features_sql} AS features, nodes.{_identifier(nodes['label'])} AS label, "
        f"{split_sql} AS split FROM nodes ORDER BY {node_id}",
        "reading nodes",
        "arrow",
    )
    if table.num_rows == 0:
        raise DatasetError(f"{source}: the node table has no rows")
    ids = table.column("id")
    x = _feature_matrix(source, table.column("features"), ids, feature_names)
    labels = table.column("label")
    if labels.null_count:
        raise DatasetError(
            f"{source}: {labels.null_count} nodes have a NULL label (first: node id "
            f"{ids[_first_null(labels)].as_py()!r})"
        )
    y = labels.combine_chunks().to_numpy(zero_copy_only=False, writable=True)

    if nodes["split"] is None:
        masks = stratified_split(y.astype(np.int64), split_fractions, np.random.default_rng(seed))
        return x, y, masks
    split = table.column("split")
    unknown = sorted(set(pc.unique(split).drop_null().to_pylist()) - set(SPLIT_NAMES))
    if unknown:
        raise DatasetError(
            f"{source}: split column {nodes['split']!r} holds {', '.join(map(repr, unknown[:5]))}; expected "
            "train, val, test, or NULL for a node in no split"
        )
    split = split.to_numpy(zero_copy_only=False)  # object [N], None where NULL
    return x, y, tuple(split == name for name in SPLIT_NAMES)


def _read_edges(tables: _Tables, nodes: Mapping, edges: Mapping) -> np.ndarray:
    """The edges as [2, E] node positions (ranks by id, as `_read_nodes` orders them), all ids known."""
    source = tables.sources["edges"]
    columns = tables.columns("edges")
    for key in ("src", "dst"):
        _require_column(source, f"edges.{key}", edges[key], columns)
    src, dst = f"edges.{_identifier(edges['src'])}", f"edges.{_identifier(edges['dst'])}"
    node_id = f"nodes.{_identifier(nodes['id'])}"
    (null_ends,) = tables.fetch(
        "edges", f"SELECT COUNT(*) FROM edges WHERE {src} IS NULL OR {dst} IS NULL", "checking edges"
    )[0]
    if null_ends:
        raise DatasetError(f"{source}: {null_ends} edges have a NULL {edges['src']} or {edges['dst']}")
    tables.fetch(
        "edges",
        f"CREATE TABLE matched AS WITH position AS (SELECT {node_id} AS id, "
        f"ROW_NUMBER() OVER (ORDER BY {node_id}) - 1 AS position FROM nodes) "
        f"SELECT {src} AS src, {dst} AS dst, from_node.position AS source, to_node.position AS target "
        f"FROM edges LEFT JOIN position AS from_node ON {src} = from_node.id "
        f"LEFT JOIN position AS to_node ON {dst} = to_node.id",
        "matching edges to node ids",
    )
    unknown = tables.fetch(
        "edges",
        "SELECT COUNT(*) OVER (), CASE WHEN source IS NULL THEN src ELSE dst END FROM matched "
        "WHERE source IS NULL OR target IS NULL LIMIT 1",
        "matching edges to node ids",
    )
    if unknown:
        count, example = unknown[0]
        raise DatasetError(
            f"{source}: {count} edges name a node id that is not in the node table {tables.sources['nodes']} "
            f"(first: id {example!r})"
        )
    positions = tables.fetch("edges", "SELECT source, target FROM matched", "reading edges", "numpy")
    return np.stack([positions["source"], positions["target"]]).astype(np.int64)  # [2, E]


def load_tables(
    nodes: Mapping,
    edges: Mapping,
    nodes_sql: str | None = None,
    edges_sql: str | None = None,
    split: Mapping[str, float] = DEFAULT_SPLIT,
    graph_name: str | None = None,
    seed: int = 0,
) -> Data:
    """Loads a graph from a node table and an edge table, each a Parquet or CSV file (or a glob of them).

    Node ids may be any integers or strings: nodes are numbered 0..N-1 in id order and edges are matched to
    them by id. Edges may list each undirected edge once or in both directions.

    Args:
        nodes: {"path", "id", "features", "label", "split"}: the file and its column names. `features` is one
            column of numeric lists, a list of numeric columns, or a pattern such as "feat_*" (matching
            columns in table order, skipping the id, label and split columns). The `split` column holds
            train, val or test (NULL: in no split); None draws a seeded stratified split from `split`.
        edges: {"path", "src", "dst"}: the file and the columns holding the two end nodes' ids.
        nodes_sql: A SELECT over the tables `nodes` and `edges` (as the files hold them) whose result becomes
            the node table, e.g. to rename columns or drop rows; None keeps the file's table.
        edges_sql: The same for the edge table.
        split: {"train": f, "val": f, "test": f}, used when `nodes["split"]` is None.
        graph_name: Only names the dataset in experiment names (`sgt_core.pipeline.dataset_id`).
        seed: Drives the split of a node table without a split column.

    Returns:
        The validated graph; `source` is the node table's path.

    Raises:
        ConfigError: If the table configs, the queries or `split` are malformed.
        DatasetError: Naming the file and the problem: a missing file or column, an SQL error, NULL values,
            duplicate ids, unknown split values, edges naming unknown nodes, anything breaking the contract.
    """
    files = table_paths(nodes, edges)
    queries = {"nodes": nodes_sql, "edges": edges_sql}
    for table, query in queries.items():
        if query is not None and not (isinstance(query, str) and query.strip()):
            raise ConfigError(f"dataset.{table}_sql={query!r}: expected a SELECT query or null")
    sources = {table: os.path.abspath(os.path.expanduser(config["path"])) for table, config in
               (("nodes", nodes), ("edges", edges))}
    tables = _Tables(sources)
    try:
        tables.load(files, queries)
        x, y, masks = _read_nodes(tables, nodes, split, seed)
        edge_index = _read_edges(tables, nodes, edges)
    finally:
        tables.connection.close()
    from sgt_core.data.validate import build_graph  # torch: imported once the tables are read

    return build_graph(sources["nodes"], x, y, edge_index, *masks)
