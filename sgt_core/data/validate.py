"""Check a graph's arrays against the data contract and build the validated `Data` object."""

from __future__ import annotations

import numpy as np
import torch
from torch_geometric.data import Data
from torch_geometric.utils import remove_self_loops, to_undirected

from sgt_core.errors import DatasetError

ArrayLike = np.ndarray | torch.Tensor

SPLIT_NAMES = ("train", "val", "test")
# The largest magnitude a float32 holds: larger features become inf when the graph is cast to float32.
FLOAT32_MAX = float(np.finfo(np.float32).max)


def _to_numpy(array: ArrayLike) -> np.ndarray:
    """Returns a NumPy view of a tensor or array (tensors are moved to the CPU first)."""
    if isinstance(array, torch.Tensor):
        return array.detach().cpu().numpy()
    return np.asarray(array)


def _first_index(flags: np.ndarray) -> int:
    """Returns the position of the first True entry of a 1-D boolean array."""
    return int(np.flatnonzero(flags)[0])


def check_features(source: str, x: np.ndarray) -> None:
    """Checks node features: a numeric 2-D array with finite entries within float32's range.

    Args:
        source: File path or description named in error messages.
        x: Node features, expected [N, F].

    Raises:
        DatasetError: If the features are not a finite numeric [N, F] array that float32 can hold.
    """
    if x.ndim != 2:
        raise DatasetError(f"{source}: node features must be a 2-D array [N, F], found shape {x.shape}")
    if not (np.issubdtype(x.dtype, np.number) or x.dtype == np.bool_):
        raise DatasetError(f"{source}: node features must be numeric, found dtype {x.dtype}")
    if x.shape[0] == 0:
        raise DatasetError(f"{source}: the graph has no nodes (features have shape {x.shape})")
    if x.shape[1] == 0:
        raise DatasetError(f"{source}: node features have no columns (shape {x.shape}), expected F >= 1")
    if np.issubdtype(x.dtype, np.floating):
        bad_rows = ~np.isfinite(x).all(axis=1)
        if bad_rows.any():
            raise DatasetError(
                f"{source}: node features contain NaN or inf in {int(bad_rows.sum())} of {x.shape[0]} rows "
                f"(first: row {_first_index(bad_rows)}); expected finite values"
            )
        if np.finfo(x.dtype).max > FLOAT32_MAX:
            too_large = np.abs(x) > FLOAT32_MAX  # [N, F]
            if too_large.any():
                row, column = (int(index[0]) for index in np.nonzero(too_large))
                raise DatasetError(
                    f"{source}: {int(too_large.sum())} node feature values exceed float32's range "
                    f"(+-{FLOAT32_MAX:.4g}), which the features are stored in (first: row {row}, column {column}, "
                    f"value {x[row, column]:.6g}); rescale that column"
                )


def check_labels(source: str, y: np.ndarray, num_nodes: int) -> None:
    """Checks class labels: one finite, integral, non-negative value per node.

    Args:
        source: File path or description named in error messages.
        y: Labels, expected [N].
        num_nodes: N, the number of feature rows.

    Raises:
        DatasetError: If the labels are not N non-negative integers.
    """
    if y.ndim != 1:
        raise DatasetError(f"{source}: labels must be a 1-D array [N], found shape {y.shape}")
    if y.shape[0] != num_nodes:
        raise DatasetError(
            f"{source}: there are {y.shape[0]} labels but the graph has {num_nodes} nodes (feature rows)"
        )
    if not (np.issubdtype(y.dtype, np.number) or y.dtype == np.bool_):
        raise DatasetError(f"{source}: labels must be integer class ids, found dtype {y.dtype}")
    if np.issubdtype(y.dtype, np.floating):
        # Float labels are accepted only when they are whole numbers, so casting cannot change a class.
        non_integral = ~np.isfinite(y) | (y != np.round(y))
        if non_integral.any():
            node = _first_index(non_integral)
            raise DatasetError(
                f"{source}: {int(non_integral.sum())} labels are not whole numbers (first: node {node} has "
                f"label {y[node]}); expected integer class ids"
            )
    negative = y < 0
    if negative.any():
        node = _first_index(negative)
        raise DatasetError(
            f"{source}: {int(negative.sum())} labels are negative (first: node {node} has label {y[node]}); "
            "expected class ids >= 0"
        )


def check_train_classes(source: str, y: np.ndarray, train_mask: np.ndarray, unit: str = "node") -> None:
    """Checks that the training nodes (or graphs) hold at least two classes, so that a classifier can be trained.

    Args:
        source: File path or description named in error messages.
        y: Labels [N] (or [G]), already checked by `check_labels`.
        train_mask: Boolean (or 0/1) [N] (or [G]), already checked by `check_masks`, not empty.
        unit: What one label belongs to, "node" or "graph", named in the message.

    Raises:
        DatasetError: If every training node (graph) has the same label.
    """
    train_labels = y[train_mask.astype(bool)].reshape(-1)
    if (train_labels == train_labels[0]).all():
        holders = f"all {train_labels.size} train {unit}s" if train_labels.size > 1 else f"its only {unit}"
        raise DatasetError(
            f"{source}: the train split has only one class (label {int(train_labels[0])} on {holders}); "
            "a classifier needs at least two"
        )


def check_edges(source: str, edge_index: np.ndarray, num_nodes: int) -> None:
    """Checks an edge list: integer node ids in [0, N), laid out as [2, E].

    Args:
        source: File path or description named in error messages.
        edge_index: Edges, expected [2, E] (source row, target row).
        num_nodes: N, the number of nodes.

    Raises:
        DatasetError: If the edges are malformed or reference missing nodes.
    """
    if edge_index.ndim != 2 or edge_index.shape[0] != 2:
        raise DatasetError(f"{source}: edge_index must have shape [2, E], found shape {edge_index.shape}")
    if not np.issubdtype(edge_index.dtype, np.integer):
        raise DatasetError(f"{source}: edges must hold integer node ids, found dtype {edge_index.dtype}")
    if edge_index.size == 0:
        return
    smallest, largest = int(edge_index.min()), int(edge_index.max())
    if smallest < 0:
        raise DatasetError(f"{source}: edges reference node {smallest}; node ids must be >= 0")
    if largest >= num_nodes:
        raise DatasetError(f"{source}: edges reference node {largest} but the graph has {num_nodes} nodes")


def check_masks(source: str, masks: dict[str, np.ndarray], num_nodes: int, unit: str = "node") -> None:
    """Checks the split masks: boolean [N] each, none empty, pairwise disjoint.

    Args:
        source: File path or description named in error messages.
        masks: Split name ("train", "val", "test") to mask.
        num_nodes: N, the number of nodes (of graphs, for a split over graphs).
        unit: what the masks select, named in messages: node, or graph.

    Raises:
        DatasetError: If a mask has the wrong length or type, is empty, or overlaps another.
    """
    for name, mask in masks.items():
        if mask.ndim != 1 or mask.shape[0] != num_nodes:
            raise DatasetError(
                f"{source}: {name} mask has shape {mask.shape} but there are {num_nodes} {unit}s; "
                f"expected [{num_nodes}]"
            )
        is_zero_one = np.issubdtype(mask.dtype, np.integer) and np.isin(mask, (0, 1)).all()
        if mask.dtype != np.bool_ and not is_zero_one:
            raise DatasetError(f"{source}: {name} mask must be boolean (or 0/1), found dtype {mask.dtype}")
        if not mask.any():
            raise DatasetError(f"{source}: the {name} split is empty; expected at least one {unit}")
    names = list(masks)
    for position, first in enumerate(names):
        for second in names[position + 1 :]:
            overlap = masks[first].astype(bool) & masks[second].astype(bool)
            if overlap.any():
                raise DatasetError(
                    f"{source}: the {first} and {second} splits overlap on {int(overlap.sum())} {unit}s "
                    f"(first: {unit} {_first_index(overlap)}); expected disjoint splits"
                )


def build_graph(
    source: str,
    x: ArrayLike,
    y: ArrayLike,
    edge_index: ArrayLike,
    train_mask: ArrayLike,
    val_mask: ArrayLike,
    test_mask: ArrayLike,
    coalesced: bool = False,
) -> Data:
    """Checks a graph's arrays against the contract of `sgt_core.data` and returns them as a `Data` object.

    Edges are made undirected (both directions present) with self-loops and duplicates removed, so loaders
    may pass each undirected edge once, or a directed adjacency.

    Args:
        source: File path or description; stored as `data.source` and named in error messages.
        x: Node features [N, F], numeric, finite and within float32's range.
        y: Class labels [N], whole non-negative numbers.
        edge_index: Edges [2, E], integer node ids in [0, N), in one or both directions.
        train_mask: Boolean [N], its nodes of at least two classes.
        val_mask: Boolean [N].
        test_mask: Boolean [N].
        coalesced: the edges already hold both directions of each edge, sorted by (source, target), with no
            self-loops or duplicates (as the synthetic generator makes them): they are checked (node ids)
            and kept as they are, since PyG's to_undirected on 10^8 edges costs more than generating them.

    Returns:
        The graph with x float32, y int64, edge_index int64, bool masks, `num_classes` and `source`.

    Raises:
        DatasetError: At the first problem found, naming the source, what was expected and what was found;
            also when the train split holds a single class.
    """
    x, y, edge_index = _to_numpy(x), _to_numpy(y), _to_numpy(edge_index)
    check_features(source, x)
    num_nodes = x.shape[0]
    check_labels(source, y, num_nodes)
    check_edges(source, edge_index, num_nodes)
    masks = dict(zip(SPLIT_NAMES, (_to_numpy(train_mask), _to_numpy(val_mask), _to_numpy(test_mask))))
    check_masks(source, masks, num_nodes)
    check_train_classes(source, y, masks["train"])
    x_tensor = torch.as_tensor(x).to(torch.float32)
    y_tensor = torch.as_tensor(y).to(torch.int64)
    edges = torch.as_tensor(edge_index).to(torch.int64)
    if not coalesced:
        edges, _ = remove_self_loops(edges)
        edges = to_undirected(edges, num_nodes=num_nodes)  # also sorts and removes duplicates
    train, val, test = (torch.as_tensor(masks[name]).to(torch.bool) for name in SPLIT_NAMES)
    return Data(
        x=x_tensor,
        y=y_tensor,
        edge_index=edges,
        train_mask=train,
        val_mask=val,
        test_mask=test,
        num_classes=int(y_tensor.max()) + 1,
        source=source,
    )
