"""A dataset of many small graphs: checks its arrays against the contract and builds the validated `Data`.

The dataset is the disjoint union of its G graphs, each graph's nodes one contiguous range
(`graph_ptr`, PyG's `ptr`): graph g holds nodes graph_ptr[g]:graph_ptr[g+1]. Its targets, splits and
metric follow its task (`sgt_core.tasks`): one target per graph for graph tasks, one per node for node
tasks (PATTERN, CLUSTER), and the split masks are over those targets. Categorical node and edge features
(atom and bond types) stay integer codes, read through embeddings; continuous ones stay floats. One graph
with edge features or several labels per node (ogbn-proteins) is a set of one graph.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch_geometric.data import Data
from torch_geometric.utils import to_undirected

from sgt_core.data.validate import (
    SPLIT_NAMES,
    ArrayLike,
    _first_index,
    _to_numpy,
    check_edges,
    check_features,
    check_labels,
    check_masks,
    check_train_classes,
)
from sgt_core.errors import DatasetError
from sgt_core.tasks import TASKS, Task, default_metric, task_kind


def check_graph_ptr(source: str, graph_ptr: np.ndarray, num_nodes: int) -> None:
    """Checks that `graph_ptr` [G+1] cuts the N nodes into G non-empty contiguous graphs, none left over."""
    if graph_ptr.ndim != 1 or graph_ptr.size < 2 or not np.issubdtype(graph_ptr.dtype, np.integer):
        raise DatasetError(f"{source}: graph_ptr must be an integer array [G+1] with G >= 1, found shape "
                           f"{graph_ptr.shape} and dtype {graph_ptr.dtype}")
    if graph_ptr[0] != 0:
        raise DatasetError(f"{source}: graph_ptr starts at {graph_ptr[0]}; nodes 0..{graph_ptr[0] - 1} belong to "
                           "no graph")
    sizes = np.diff(graph_ptr)
    if (sizes <= 0).any():
        graph = _first_index(sizes <= 0)
        raise DatasetError(f"{source}: graph {graph} has no nodes (graph_ptr[{graph}] = graph_ptr[{graph + 1}] = "
                           f"{graph_ptr[graph]}, or decreasing); every graph needs at least one")
    if graph_ptr[-1] != num_nodes:
        raise DatasetError(f"{source}: the graphs hold {graph_ptr[-1]} nodes but there are {num_nodes} node rows"
                           + (f"; nodes {graph_ptr[-1]}.. belong to no graph" if graph_ptr[-1] < num_nodes else ""))


def check_within_graphs(source: str, edge_index: np.ndarray, graph_ptr: np.ndarray) -> None:
    """Checks that no edge joins two graphs."""
    if edge_index.size == 0:
        return
    # A gather from each node's graph: linear in E, where a searchsorted per end costs E·log G.
    graph_of_node = np.repeat(np.arange(graph_ptr.size - 1), np.diff(graph_ptr))  # [N]
    graph_of = graph_of_node[edge_index]  # [2, E]
    across = graph_of[0] != graph_of[1]
    if across.any():
        edge = _first_index(across)
        (a, b), (g, h) = edge_index[:, edge], graph_of[:, edge]
        raise DatasetError(f"{source}: {int(across.sum())} edges join two graphs (first: edge {edge} joins node {a} "
                           f"of graph {g} and node {b} of graph {h}); edges must stay inside one graph")


def check_codes(source: str, what: str, codes: np.ndarray, sizes: Sequence[int], rows: int) -> None:
    """Checks categorical codes [rows, C]: integers, column c in [0, sizes[c])."""
    if codes.ndim != 2 or codes.shape[0] != rows:
        raise DatasetError(f"{source}: {what} must be an integer array [{rows}, C], found shape {codes.shape}")
    if not np.issubdtype(codes.dtype, np.integer):
        raise DatasetError(f"{source}: {what} must hold integer codes, found dtype {codes.dtype}")
    if len(sizes) != codes.shape[1]:
        raise DatasetError(f"{source}: {what} has {codes.shape[1]} columns but {len(sizes)} vocabulary sizes")
    if rows == 0:
        return
    outside = (codes < 0) | (codes >= np.asarray(sizes, dtype=np.int64))  # [rows, C]
    if outside.any():
        row, column = (int(index[0]) for index in np.nonzero(outside))
        raise DatasetError(f"{source}: {what} row {row}, column {column} holds code {codes[row, column]}, outside "
                           f"its vocabulary [0, {sizes[column]})")


def check_targets(source: str, task: str, y: np.ndarray, count: int, unit: str) -> np.ndarray:
    """Checks the targets of a task, one row per target `unit` (node or graph); returns them as stored.

    Class ids for classification; [count, T] floats in {0, 1, NaN} for multilabel; [count] or [count, T]
    floats (NaN: unknown) for regression, returned as [count, T].
    """
    kind = task_kind(task)
    if kind == "classification":
        check_labels(source, y, count)
        return y
    if y.ndim == 1 and kind == "regression":
        y = y[:, None]
    if y.ndim != 2 or y.shape[0] != count:
        raise DatasetError(f"{source}: {task} targets must be [{count}, T] (one row per {unit}), found shape {y.shape}")
    if not np.issubdtype(y.dtype, np.number):
        raise DatasetError(f"{source}: targets must be numeric, found dtype {y.dtype}")
    y = y.astype(np.float32)
    if np.isinf(y).any():
        raise DatasetError(f"{source}: targets hold inf (first: {unit} {_first_index(np.isinf(y).any(axis=1))}); "
                           "use NaN for an unknown target")
    if kind == "multilabel":
        bad = ~(np.isnan(y) | (y == 0) | (y == 1))
        if bad.any():
            row = _first_index(bad.any(axis=1))
            raise DatasetError(f"{source}: multi-label targets must be 0, 1 or NaN (unknown); {unit} {row} holds "
                               f"{y[row][bad[row]][0]}")
    return y


def check_trainable(source: str, kind: str, y: np.ndarray, train_mask: np.ndarray, unit: str) -> None:
    """The training split must give something to learn: two classes, a task with both labels, a known value."""
    if kind == "classification":
        check_train_classes(source, y, train_mask, unit)
        return
    train = y[train_mask.astype(bool)]
    if kind == "regression" and np.isnan(train).all():
        raise DatasetError(f"{source}: every training target is unknown (NaN)")
    if kind == "multilabel":
        positives, known = np.nansum(train, axis=0), (~np.isnan(train)).sum(axis=0)
        if not ((positives > 0) & (positives < known)).any():
            raise DatasetError(f"{source}: no task has both labels among the training targets")


def build_graph_set(
    source: str,
    *,
    task: str,
    graph_ptr: ArrayLike,
    edge_index: ArrayLike,
    y: ArrayLike,
    train_mask: ArrayLike,
    val_mask: ArrayLike,
    test_mask: ArrayLike,
    x: ArrayLike | None = None,
    x_cat: ArrayLike | None = None,
    x_cat_sizes: Sequence[int] | None = None,
    edge_attr_cat: ArrayLike | None = None,
    edge_attr_cat_sizes: Sequence[int] | None = None,
    edge_attr: ArrayLike | None = None,
    num_classes: int | None = None,
    metric: str | None = None,
    notes: dict[str, str] | None = None,
    coalesced: bool = False,
) -> Data:
    """Checks a dataset of many graphs against the contract and returns it as one validated `Data`.

    Edges are made undirected with self-loops and duplicates removed (an edge's features: the larger code
    of its two directions, the mean of their floats), so loaders may pass each undirected edge once.

    Args:
        source: file or generator named in error messages; stored as `data.source`.
        task: one of `sgt_core.tasks.TASKS`.
        graph_ptr: int [G+1], graph g's nodes are graph_ptr[g]:graph_ptr[g+1] (every graph non-empty).
        edge_index: int [2, E] global node ids, never joining two graphs.
        y: targets per graph ([G] class ids, or [G, T] floats) or per node ([N] or [N, T]) by the task's
            level; NaN marks an unknown multi-label or regression target.
        train_mask: bool over the targets ([G] or [N]), disjoint from the other two, not empty.
        val_mask: bool over the targets, as `train_mask`.
        test_mask: bool over the targets, as `train_mask`.
        x: float [N, F] continuous node features (None: none).
        x_cat: int [N, C] categorical node codes.
        x_cat_sizes: the vocabulary size of each column of `x_cat`.
        edge_attr_cat: int [E, Ce] categorical edge codes aligned with `edge_index`.
        edge_attr_cat_sizes: the vocabulary size of each column of `edge_attr_cat`.
        edge_attr: float [E, Fe] continuous edge features aligned with `edge_index`.
        num_classes: classes of a classification task (default: the largest label + 1).
        metric: the metric that selects the best epoch (default: the task's, `default_metric`).
        notes: short facts a report must carry (e.g. which training set ZINC used), stored as `data.notes`.
        coalesced: the edges already hold both directions of each edge, sorted by (source, target), with no
            self-loops or repeats and their features aligned (as the PATTERN and CLUSTER generators make
            them): checked (node ids, graphs) and kept as they are, since PyG's to_undirected sorts with
            torch.sort, which on PATTERN's 8·10^7 edges takes longer than generating them.

    Returns:
        `Data` with x float32 [N, F] (F may be 0 with categorical features), x_cat int64 [N, C] or None,
        x_cat_sizes, edge_index int64 [2, E'], edge_attr_cat int64 [E', Ce] or None, edge_attr_cat_sizes,
        edge_attr float32 [E', Fe] or None, y (int64 [U] or float32 [U, T]), bool masks [U], graph_ptr
        int64 [G+1], task, metric, num_classes (classification) or num_tasks, notes, source.

    Raises:
        DatasetError: at the first problem, naming the source, where it is and what was expected.
    """
    if task not in TASKS:
        raise DatasetError(f"{source}: unknown task {task!r}; expected one of {', '.join(TASKS)}")
    graph_ptr = _to_numpy(graph_ptr)
    num_nodes = int(len(x) if x is not None else len(x_cat) if x_cat is not None else -1)
    if num_nodes < 0:
        raise DatasetError(f"{source}: no node features: give continuous features x or categorical codes x_cat")
    check_graph_ptr(source, graph_ptr, num_nodes)
    x = np.zeros((num_nodes, 0), np.float32) if x is None else _to_numpy(x)
    if x.ndim != 2 or x.shape[0] != num_nodes:
        raise DatasetError(f"{source}: node features must be [N, F] with N = {num_nodes}, found shape {x.shape}")
    if x.shape[1] or x_cat is None:
        check_features(source, x)
    if x_cat is not None:
        x_cat = _to_numpy(x_cat)
        check_codes(source, "x_cat (categorical node features)", x_cat, list(x_cat_sizes or ()), num_nodes)
    edge_index = _to_numpy(edge_index)
    check_edges(source, edge_index, num_nodes)
    check_within_graphs(source, edge_index, graph_ptr)
    num_edges = edge_index.shape[1]
    if edge_attr_cat is not None:
        edge_attr_cat = _to_numpy(edge_attr_cat)
        check_codes(source, "edge_attr_cat (categorical edge features)", edge_attr_cat,
                    list(edge_attr_cat_sizes or ()), num_edges)
    if edge_attr is not None:
        edge_attr = _to_numpy(edge_attr)
        if edge_attr.ndim != 2 or edge_attr.shape[0] != num_edges:
            raise DatasetError(f"{source}: edge_attr must be [E, F] with E = {num_edges}, found {edge_attr.shape}")
        if not np.isfinite(edge_attr).all():
            raise DatasetError(f"{source}: edge_attr holds NaN or inf (first: edge "
                               f"{_first_index(~np.isfinite(edge_attr).all(axis=1))})")

    level, kind = task.split("_", 1)[0], task_kind(task)
    count, unit = (graph_ptr.size - 1, "graph") if level == "graph" else (num_nodes, "node")
    y = check_targets(source, task, _to_numpy(y), count, unit)
    masks = dict(zip(SPLIT_NAMES, (_to_numpy(train_mask), _to_numpy(val_mask), _to_numpy(test_mask))))
    check_masks(source, masks, count, unit=unit)
    check_trainable(source, kind, y, masks["train"], unit)
    if kind == "classification":
        largest = int(y.max()) + 1
        if num_classes is not None and num_classes < largest:
            raise DatasetError(f"{source}: label {largest - 1} is not below num_classes={num_classes}")
        num_outputs = num_classes or largest
    else:
        num_outputs = y.shape[1]
    metric = metric or default_metric(task, num_outputs)
    try:
        Task(task, metric, num_outputs)
    except ValueError as error:
        raise DatasetError(f"{source}: {error}") from None

    if coalesced:
        edges = torch.as_tensor(edge_index).to(torch.int64)
        edge_attr_cat = None if edge_attr_cat is None else torch.as_tensor(edge_attr_cat).to(torch.int64)
        edge_attr = None if edge_attr is None else torch.as_tensor(edge_attr).to(torch.float32)
    else:
        edges, edge_attr_cat, edge_attr = _undirected(edge_index, edge_attr_cat, edge_attr, num_nodes)
    data = Data(
        x=torch.as_tensor(x).to(torch.float32),
        edge_index=edges,
        y=torch.as_tensor(y).to(torch.int64 if kind == "classification" else torch.float32),
        **{f"{name}_mask": torch.as_tensor(masks[name]).to(torch.bool) for name in SPLIT_NAMES},
        graph_ptr=torch.as_tensor(graph_ptr).to(torch.int64),
        task=task,
        metric=metric,
        notes=dict(notes or {}),
        source=source,
    )
    if kind == "classification":
        data.num_classes = num_outputs
    else:
        data.num_tasks = num_outputs
    if x_cat is not None:
        data.x_cat, data.x_cat_sizes = torch.as_tensor(x_cat).to(torch.int64), [int(s) for s in x_cat_sizes]
    if edge_attr_cat is not None:
        data.edge_attr_cat, data.edge_attr_cat_sizes = edge_attr_cat, [int(s) for s in edge_attr_cat_sizes]
    if edge_attr is not None:
        data.edge_attr = edge_attr
    return data


def _undirected(edge_index: np.ndarray, codes: np.ndarray | None, floats: np.ndarray | None,
                num_nodes: int) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """Both directions of every edge, sorted, no self-loops or repeats, each edge's features carried along."""
    edges = torch.as_tensor(edge_index).to(torch.int64)
    loops = edges[0] == edges[1]
    edges = edges[:, ~loops]
    if codes is None and floats is None:
        return to_undirected(edges, num_nodes=num_nodes), None, None
    undirected_codes = undirected_floats = None
    if codes is not None:  # the larger code where the two directions disagree
        undirected, undirected_codes = to_undirected(edges, torch.as_tensor(codes)[~loops].long(), num_nodes,
                                                     reduce="max")
    if floats is not None:
        undirected, undirected_floats = to_undirected(edges, torch.as_tensor(floats)[~loops].float(), num_nodes,
                                                      reduce="mean")
    return undirected, undirected_codes, undirected_floats
