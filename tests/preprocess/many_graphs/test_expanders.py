"""Per-graph expanders: inside each graph, regular (or the documented fallback), disjoint from the graph's own
edges, near-Ramanujan, seeded."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from sgt_core.preprocess.many_graphs import expanders as expanders_module
from sgt_core.preprocess.many_graphs import layout
from sgt_core.preprocess.many_graphs.expanders import expanders_per_unit
from tests.preprocess.many_graphs.graph_sets import graph_set_of, random_graph_set

SLACK = 0.1


def _draw(graphs, degree, seed=0, **options):
    return expanders_per_unit(np.arange(graphs.num_nodes), graphs.ptr, graphs.edge_index, degree,
                              generator=np.random.default_rng(seed), ramanujan_slack=SLACK, **options)


def _check(graphs, drawn, degree):
    node_graph = graphs.node_graph
    assert np.array_equal(node_graph[drawn.src], node_graph[drawn.dst]), "an expander edge joins two graphs"
    assert not np.any(drawn.src == drawn.dst)
    keys = drawn.dst * graphs.num_nodes + drawn.src
    assert np.unique(keys).size == keys.size, "an expander pair repeats"
    mirrored = np.sort(drawn.src * graphs.num_nodes + drawn.dst)
    assert np.array_equal(np.sort(keys), mirrored), "not symmetric"
    own = graphs.edge_index[1] * graphs.num_nodes + graphs.edge_index[0]
    assert not np.isin(keys, own).any(), "an expander edge repeats a graph edge"
    in_degree = np.bincount(drawn.dst, minlength=graphs.num_nodes)
    for g in range(graphs.num_graphs):
        lo, hi = graphs.ptr[g], graphs.ptr[g + 1]
        n = int(hi - lo)
        own_degree = np.bincount(graphs.graph_edges(g)[0], minlength=n)
        d = int(drawn.degree[g])
        if drawn.complete[g]:  # every pair but the graph's own edges and self-loops
            assert np.array_equal(in_degree[lo:hi], n - 1 - own_degree)
            assert n < 3 or n - 1 - own_degree.max() < 2 or drawn.tries[g] > 0
            continue
        room = n - 1 - own_degree.max()
        assert 2 <= d <= min(degree, room) and d % 2 == 0
        assert np.all(in_degree[lo:hi] == d), f"graph {g} is not {d}-regular"
        if min(degree, room - room % 2) > d:  # a reduced degree: the draw at the higher one failed
            assert drawn.tries[g] >= 2
        adjacency = np.zeros((n, n))
        inside = (drawn.dst >= lo) & (drawn.dst < hi)
        adjacency[drawn.dst[inside] - lo, drawn.src[inside] - lo] = 1
        magnitudes = np.sort(np.abs(np.linalg.eigvalsh(adjacency)))
        assert magnitudes[-1] == pytest.approx(d)
        if not drawn.over_bound[g]:
            assert magnitudes[-2] <= 2 * math.sqrt(d - 1) + SLACK + 1e-9
        if d > 2:
            assert drawn.second_eigenvalue[g] == pytest.approx(magnitudes[-2], abs=1e-9)


@pytest.mark.parametrize(("degree", "seed"), [(4, 0), (6, 1), (10, 2)])
def test_an_expander_inside_each_graph(degree, seed):
    graphs = graph_set_of(random_graph_set(70, seed=seed))
    drawn = _draw(graphs, degree, seed)
    _check(graphs, drawn, degree)
    assert drawn.complete.sum() >= 2  # the graphs of 1 and 2 nodes
    stats = drawn.stats(degree, SLACK)
    assert stats["expander_graphs"] == graphs.num_graphs
    assert stats["expander_complete_graphs"] == int(drawn.complete.sum())
    assert stats["expander_worst_margin"] <= 0 or stats["expander_over_bound_graphs"] > 0


def test_tiny_graphs_get_the_complete_graph_minus_their_edges():
    # 1 node: nothing to add; 2 nodes: at most the missing pair; 3 nodes with an edge: no room for a cycle. Trees
    # of 4 and 5 nodes have room for a 2-cycle unless a node is adjacent to all others but one.
    data = random_graph_set(sizes=[1, 2, 3, 4, 5], kinds=("tree",), seed=5)
    graphs = graph_set_of(data)
    drawn = _draw(graphs, 10)
    _check(graphs, drawn, 10)
    assert drawn.complete[:3].all()
    assert np.isin(drawn.degree[3:], [0, 2]).all()


def test_seeded():
    graphs = graph_set_of(random_graph_set(40, seed=3))
    first, again, other = _draw(graphs, 6, seed=7), _draw(graphs, 6, seed=7), _draw(graphs, 6, seed=8)
    assert np.array_equal(first.src, again.src) and np.array_equal(first.dst, again.dst)
    assert not (first.src.size == other.src.size and np.array_equal(first.src, other.src))


def test_impossible_bound_keeps_the_last_draw_and_counts_it():
    graphs = graph_set_of(random_graph_set(20, seed=4, min_nodes=12, max_nodes=30, kinds=("tree",)))
    drawn = expanders_per_unit(np.arange(graphs.num_nodes), graphs.ptr, graphs.edge_index, 6,
                               generator=np.random.default_rng(0), ramanujan_slack=-5.0, max_tries=3)
    regular = drawn.degree > 2
    assert regular.any() and drawn.over_bound[regular].all() and (drawn.tries[regular] == 3).all()
    assert drawn.stats(6, -5.0)["expander_over_bound_graphs"] == int(regular.sum())


def test_per_component_units_and_large_units(monkeypatch):
    data = random_graph_set(12, seed=6, min_nodes=20, max_nodes=40, kinds=("split",))
    graphs = graph_set_of(data)
    matrix = coo_matrix((np.ones(graphs.edge_index.shape[1]), tuple(graphs.edge_index)),
                        shape=(graphs.num_nodes,) * 2)
    _, component = connected_components(matrix, directed=False)
    order = np.argsort(component, kind="stable")
    ptr = np.concatenate([[0], np.cumsum(np.bincount(component))])
    monkeypatch.setattr(layout, "DENSE_MAX_NODES", 15)  # the larger components take the one-graph path
    drawn = expanders_per_unit(order, ptr, graphs.edge_index, 4, generator=np.random.default_rng(0))
    assert np.array_equal(component[drawn.src], component[drawn.dst])
    sizes = np.diff(ptr)
    in_degree = np.bincount(drawn.dst, minlength=graphs.num_nodes)
    for unit in np.flatnonzero((sizes > 15) & (drawn.degree == 4)):
        assert np.all(in_degree[order[ptr[unit] : ptr[unit + 1]]] == 4)
    assert ((sizes > 15) & (drawn.degree == 4)).any()


def test_a_tight_degree_is_reduced(monkeypatch):
    monkeypatch.setattr(expanders_module, "_MAX_REPAIR_ROUNDS", 1)  # repairs fail: degrees drop to what a raw draw fits
    graphs = graph_set_of(random_graph_set(30, seed=8, min_nodes=6, max_nodes=12, kinds=("dense",)))
    drawn = _draw(graphs, 10, max_tries=20)
    _check(graphs, drawn, 10)
    assert drawn.stats(10, SLACK)["expander_reduced_degree_graphs"] + drawn.complete.sum() > 0
