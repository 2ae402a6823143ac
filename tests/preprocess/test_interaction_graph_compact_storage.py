"""Linear-time edge merging, compact dtypes in memory and on disk, and the stage's graph statistics."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from sgt_core.config.preprocess import AnchorsConfig, ExpanderConfig
from sgt_core.errors import DatasetError
from sgt_core.preprocess.adjacency import sorted_csr
from sgt_core.preprocess.builder import build_interaction_graph
from sgt_core.preprocess.interaction_graph import (
    COMPACT_EDGE_FIELDS,
    EDGE_TYPES,
    STORED_DTYPES,
    InteractionGraph,
)
from sgt_core.preprocess.stage import _graph_statistics
from tests.preprocess.test_interaction_graph import path_graph

OPTIONS = {"self_loops": True, "expander": ExpanderConfig(degree=4, ramanujan_slack=1.0, max_tries=50),
           "virtual_nodes": 1, "seed": 0, "anchors": AnchorsConfig(k=2, max_khop_per_node=3, max_spd=5)}
WIDE = ("edge_index", "edge_type", "edge_spd", "node_kind", "token_type")


def test_compact_build_holds_the_stored_dtypes_and_the_same_values():
    wide = build_interaction_graph(path_graph(30), **OPTIONS)
    compact = build_interaction_graph(path_graph(30), **OPTIONS, compact=True)
    for name in WIDE:
        assert getattr(wide, name).dtype == torch.int64, name
        assert getattr(compact, name).dtype == STORED_DTYPES[name], name
        assert torch.equal(getattr(compact, name).long(), getattr(wide, name)), name
    assert compact.stats == {**wide.stats, "seconds_expander": compact.stats["seconds_expander"],
                             "seconds_edges": compact.stats["seconds_edges"],
                             "seconds_anchors": compact.stats["seconds_anchors"]}


@pytest.mark.parametrize("compact", [False, True])
def test_saved_file_is_compact_and_loads_as_int64(tmp_path, compact):
    graph = build_interaction_graph(path_graph(25), **OPTIONS, compact=compact)
    graph.save(tmp_path / "graph.pt")
    stored = torch.load(tmp_path / "graph.pt", weights_only=True)
    loaded = InteractionGraph.load(tmp_path / "graph.pt")
    for name, dtype in STORED_DTYPES.items():
        assert stored[name].dtype == dtype, name
        assert getattr(loaded, name).dtype == torch.int64, name  # what the estimate and train stages read
        assert torch.equal(getattr(loaded, name), getattr(graph, name).long()), name
    assert loaded.stats == graph.stats


def test_compact_load_keeps_the_edge_fields_as_stored_and_widens_the_node_fields(tmp_path):
    graph = build_interaction_graph(path_graph(25), **OPTIONS)
    graph.save(tmp_path / "graph.pt")
    loaded = InteractionGraph.load(tmp_path / "graph.pt", compact=True)
    for name, dtype in STORED_DTYPES.items():
        expected = dtype if name in COMPACT_EDGE_FIELDS else torch.int64  # node fields are small: int64
        assert getattr(loaded, name).dtype == expected, name
        assert torch.equal(getattr(loaded, name).long(), getattr(graph, name)), name
    assert torch.equal(loaded.ptr, graph.ptr)


def test_edges_sorted_by_destination_from_an_unsorted_input():
    graph = path_graph(40)
    shuffle = torch.randperm(graph.edge_index.shape[1], generator=torch.Generator().manual_seed(0))
    graph.edge_index = graph.edge_index[:, shuffle]
    built = build_interaction_graph(graph, **OPTIONS, compact=True)
    src, dst = built.edge_index.long()
    key = dst * built.num_nodes + src
    assert torch.all(key[1:] > key[:-1])
    assert torch.equal(built.edge_index.long(), build_interaction_graph(path_graph(40), **OPTIONS).edge_index)


@pytest.mark.parametrize(("extra", "message"), [([[3], [4]], "repeats a \\(src, dst\\) pair"),
                                                ([[5], [5]], "has self-loops")])
def test_malformed_input_graph_is_refused(extra, message):
    graph = path_graph(10)
    graph.edge_index = torch.cat([graph.edge_index, torch.tensor(extra)], dim=1)
    with pytest.raises(DatasetError, match=f"graph.edge_index: {message}"):
        build_interaction_graph(graph, **OPTIONS)


@pytest.mark.parametrize("presorted", [False, True])
def test_sorted_csr_matches_scipy(presorted):
    rng = np.random.default_rng(0)
    rows, cols = rng.integers(0, 50, 400), rng.integers(0, 50, 400)
    if presorted:
        order = np.lexsort((cols, rows))
        rows, cols = rows[order], cols[order]
    values = rng.integers(1, 5, 400)
    arguments = [rows.copy(), cols.copy(), values.copy()]
    matrix = sorted_csr(rows, cols, values, 50)
    for before, after in zip(arguments, [rows, cols, values]):
        np.testing.assert_array_equal(before, after)  # the arguments are left as they were
    expected = sp.coo_matrix((values, (rows, cols)), shape=(50, 50)).tocsr()
    expected.sum_duplicates()
    assert matrix.has_canonical_format
    np.testing.assert_array_equal(matrix.indptr, expected.indptr)
    np.testing.assert_array_equal(matrix.indices, expected.indices)
    np.testing.assert_array_equal(matrix.data, expected.data)


def test_graph_statistics_count_components_with_isolated_nodes():
    # 0-1-2 a path, 3-4 an edge, 5 and 6 isolated: four components
    pairs = torch.tensor([[0, 1], [1, 2], [3, 4]])
    edge_index = torch.cat([pairs, pairs.flip(1)]).T.contiguous()
    order = torch.argsort(edge_index[0] * 7 + edge_index[1])
    edge_index = edge_index[:, order]  # sorted by (src, dst), as the loaders give it
    built = build_interaction_graph(
        path_graph(7).update({"edge_index": edge_index}), self_loops=True, expander=None,
        virtual_nodes=0, seed=0, compact=True,
    )
    stats = _graph_statistics(edge_index, 7, built)
    assert stats["num_components"] == 4
    assert stats["input_max_degree"] == 2 and stats["input_mean_degree"] == pytest.approx(6 / 7)
    assert stats["max_in_degree"] == 3 and stats["num_real_nodes"] == 7


def test_per_component_expanders_stay_inside_their_components():
    # three paths (30, 50 and 40 nodes) under shuffled ids, so no component is a contiguous id range
    paths = [torch.arange(start, start + size) for start, size in [(0, 30), (30, 50), (80, 40)]]
    shuffle = torch.from_numpy(np.random.default_rng(1).permutation(120))
    one_way = torch.cat([torch.stack([p[:-1], p[1:]]) for p in paths], dim=1)
    graph = path_graph(120).update({"edge_index": shuffle[torch.cat([one_way, one_way.flip(0)], dim=1)]})
    expander = ExpanderConfig(degree=4, ramanujan_slack=2.0, max_tries=50, per_component=True)
    built = build_interaction_graph(graph, self_loops=False, expander=expander, virtual_nodes=0, seed=0)
    component = torch.empty(120, dtype=torch.long)
    for label, path in enumerate(paths):
        component[shuffle[path]] = label
    src, dst = built.edge_index[:, built.edge_type == EDGE_TYPES.index("expander")]
    assert torch.equal(component[src], component[dst])
    assert torch.bincount(dst, minlength=120).eq(4).all() and built.stats["expander_components"] == 3
    graph_pairs = set(zip(*graph.edge_index.tolist()))
    assert not graph_pairs & set(zip(src.tolist(), dst.tolist()))
