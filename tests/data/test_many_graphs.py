"""The many-graphs contract: what build_graph_set refuses, one clear error each, and what it builds."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sgt_core.data.many_graphs import build_graph_set
from sgt_core.errors import DatasetError

# Four graphs: a triangle (nodes 0-2), an edge (3-4), a single node (5) and an edge (6-7), each edge once.
PTR = np.array([0, 3, 5, 6, 8])
EDGES = np.array([[0, 1, 2, 3, 6], [1, 2, 0, 4, 7]])
BONDS = np.array([[0], [1], [2], [1], [0]])
GRAPHS = {"graph_ptr": PTR, "edge_index": EDGES, "x_cat": np.zeros((8, 1), dtype=np.int64), "x_cat_sizes": [1],
              "y": np.array([0, 1, 1, 0]), "train_mask": np.array([True, True, False, False]),
              "val_mask": np.array([False, False, True, False]), "test_mask": np.array([False, False, False, True])}


def build(**changes):
    return build_graph_set("toy", **{"task": "graph_classification", **GRAPHS, **changes})


@pytest.mark.parametrize("changes, message", [
    ({"graph_ptr": np.array([0, 3, 3, 6, 8])}, r"^toy: graph 1 has no nodes"),
    ({"graph_ptr": np.array([0, 3, 5, 6, 7])}, r"the graphs hold 7 nodes but there are 8 node rows; nodes 7\.\. belong"),
    ({"edge_index": np.array([[0, 2], [1, 3]])}, r"1 edges join two graphs \(first: edge 1 joins node 2 of graph 0"),
    ({"x_cat": np.array([[0], [1], [5], [0], [1], [0], [0], [0]]), "x_cat_sizes": [3]},
     r"x_cat \(categorical node features\) row 2, column 0 holds code 5, outside its vocabulary \[0, 3\)"),
    ({"y": np.array([0.0, 0.5, 1.0, 0.0]), "task": "graph_multilabel"}, r"graph_multilabel targets must be \[4, T\]"),
    ({"y": np.array([[0.0], [0.5], [1.0], [1.0]]), "task": "graph_multilabel"}, r"must be 0, 1 or NaN.*graph 1 holds 0\.5"),
    ({"metric": "mae"}, r"metric 'mae' does not fit the task graph_classification"),
    ({"task": "graph_ranking"}, r"unknown task 'graph_ranking'"),
    ({"val_mask": np.array([False, False, False, False])}, r"the val split is empty; expected at least one graph"),
    ({"y": np.array([0, 0, 1, 1])}, r"the train split has only one class \(label 0 on all 2 train graphs\)"),
])
def test_bad_input_is_one_error_naming_the_problem(changes, message):
    with pytest.raises(DatasetError, match=message):
        build(**changes)


def test_builds_both_directions_with_their_codes_and_the_graph_level_fields():
    data = build(task="graph_regression", y=np.array([1.5, float("nan"), 2.0, 0.5]), edge_attr_cat=BONDS,
                 edge_attr_cat_sizes=[3], notes={"train": "stand-in"})
    assert data.task == "graph_regression" and data.metric == "mae" and data.num_tasks == 1
    assert data.y.shape == (4, 1) and torch.isnan(data.y[1, 0])
    assert data.x.shape == (8, 0) and data.notes == {"train": "stand-in"} and data.graph_ptr.tolist() == PTR.tolist()
    pairs = {(int(s), int(d)): int(c) for (s, d), c in zip(data.edge_index.t(), data.edge_attr_cat[:, 0])}
    assert pairs == {(0, 1): 0, (1, 0): 0, (1, 2): 1, (2, 1): 1, (2, 0): 2, (0, 2): 2, (3, 4): 1, (4, 3): 1,
                     (6, 7): 0, (7, 6): 0}
