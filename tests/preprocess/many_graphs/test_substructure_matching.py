"""Substructures per graph: the one-graph matcher's instances of every graph, per-graph caps, coverage sampling
inside each graph."""

from __future__ import annotations

import numpy as np
import pytest

from sgt_core.preprocess.interaction_graph import SUBSTRUCTURE_TYPES
from sgt_core.preprocess.many_graphs import substructure_matching as matching_module
from sgt_core.preprocess.many_graphs.substructure_coverage import coverage_balanced_sample_per_graph
from sgt_core.preprocess.many_graphs.substructure_matching import match_substructures_per_graph
from sgt_core.preprocess.substructures.matching import match_substructures
from tests.preprocess.many_graphs.graph_sets import graph_set_of, random_graph_set

GEOMETRIC = [name for name in SUBSTRUCTURE_TYPES if name.split("_")[0] in ("cycle", "star", "path")]


def _sets(subs, which):
    return {tuple(subs.instance(i).tolist()) for i in which}


def _sparse_set(seed, count=50):
    return graph_set_of(random_graph_set(count, seed=seed, max_nodes=24, kinds=("tree", "ring", "split")))


@pytest.mark.parametrize("seed", [0, 1])
def test_every_graph_gets_the_one_graph_matchers_instances(seed):
    graphs = _sparse_set(seed)
    types = dict.fromkeys(GEOMETRIC)  # uncapped: exhaustive, as the one-graph matcher is then
    subs, instance_graph = match_substructures_per_graph(graphs, types=types, generator=np.random.default_rng(0))
    node_graph = graphs.node_graph
    assert np.array_equal(node_graph[subs.members], instance_graph[subs.instance_of_member])  # inside one graph
    assert np.all(np.diff(subs.type_id) >= 0)
    for g in range(graphs.num_graphs):
        n, offset = int(graphs.sizes[g]), int(graphs.ptr[g])
        alone = match_substructures(graphs.graph_edges(g), n, types=types, generator=np.random.default_rng(0))
        for t, name in enumerate(SUBSTRUCTURE_TYPES):
            if name not in types:
                continue
            mine = {tuple(m - offset for m in members)
                    for members in _sets(subs, np.flatnonzero((subs.type_id == t) & (instance_graph == g)))}
            assert mine == _sets(alone, np.flatnonzero(alone.type_id == t)), (g, name)


def test_caps_apply_per_graph_and_starve_no_graph():
    graphs = graph_set_of(random_graph_set(40, seed=2, min_nodes=12, max_nodes=30, kinds=("ring",)))
    names = ("path_4", "star_2", "cycle_6")
    uncapped, graph_all = match_substructures_per_graph(graphs, types=dict.fromkeys(names),
                                                        generator=np.random.default_rng(0))
    # a cap above every graph's count keeps everything: a cap per graph, not one budget the first graphs use up
    roomy, _ = match_substructures_per_graph(graphs, types=dict.fromkeys(names, 200), generator=np.random.default_rng(0))
    for t in map(SUBSTRUCTURE_TYPES.index, names):
        assert _sets(roomy, np.flatnonzero(roomy.type_id == t)) == _sets(uncapped, np.flatnonzero(uncapped.type_id == t))
    # small caps: at most the cap in every graph, a subset of the graph's instances, and (almost) every graph served
    capped, graph_capped = match_substructures_per_graph(graphs, types=dict.fromkeys(names, 2),
                                                         generator=np.random.default_rng(0))
    for t in map(SUBSTRUCTURE_TYPES.index, names):
        every = np.bincount(graph_all[uncapped.type_id == t], minlength=graphs.num_graphs)
        kept = np.bincount(graph_capped[capped.type_id == t], minlength=graphs.num_graphs)
        assert np.all(kept <= 2) and np.all(kept <= every)
        assert np.mean(kept[every >= 2] >= 1) >= 0.9
        assert _sets(capped, np.flatnonzero(capped.type_id == t)) <= _sets(uncapped, np.flatnonzero(uncapped.type_id == t))


def test_neighbourhood_types_per_graph():
    graphs = _sparse_set(3)
    subs, instance_graph = match_substructures_per_graph(graphs, types={"hop2": None, "random_walk": 2},
                                                         generator=np.random.default_rng(1), hop2_max_size=5)
    hop2, walk = (subs.type_id == SUBSTRUCTURE_TYPES.index(name) for name in ("hop2", "random_walk"))
    assert np.array_equal(graphs.node_graph[subs.members], instance_graph[subs.instance_of_member])
    assert subs.sizes[hop2].max() <= 5
    assert np.all(np.bincount(instance_graph[walk], minlength=graphs.num_graphs) <= 2)
    sets = [tuple(subs.instance(i).tolist()) for i in np.flatnonzero(hop2)]
    assert len(sets) == len(set(sets))  # repeated node sets dropped


@pytest.mark.parametrize("threshold", [1, 2, 3])
def test_coverage_inside_each_graph(threshold):
    graphs = _sparse_set(4, count=60)
    types = {name: 5 for name in GEOMETRIC} | {"hop2": None, "random_walk": None}
    subs, instance_graph = match_substructures_per_graph(graphs, types=types, generator=np.random.default_rng(0))
    picks = coverage_balanced_sample_per_graph(subs, instance_graph, graphs.node_graph, threshold,
                                               np.random.default_rng(0))
    assert np.unique(picks).size == picks.size
    assert np.all(np.diff(instance_graph[picks]) >= 0)  # graph by graph
    chosen = subs.select(picks)
    coverage = np.bincount(chosen.members, minlength=graphs.num_nodes)
    for g in range(graphs.num_graphs):
        lo, hi = graphs.ptr[g], graphs.ptr[g + 1]
        under = np.flatnonzero(coverage[lo:hi] < threshold) + lo
        if under.size:  # then no unpicked candidate of the graph holds an under-covered node
            rest = np.setdiff1d(np.flatnonzero(instance_graph == g), picks)
            assert not np.isin(subs.members[np.isin(subs.instance_of_member, rest)], under).any()
        _replay_rule(subs, picks[instance_graph[picks] == g], np.flatnonzero(instance_graph == g), lo, hi,
                     threshold)
    again = coverage_balanced_sample_per_graph(subs, instance_graph, graphs.node_graph, threshold,
                                               np.random.default_rng(0))
    assert np.array_equal(picks, again)


def _replay_rule(subs, picks, candidates, lo, hi, threshold):
    """Each pick of one graph: a least-used type among those with a useful candidate, and in it a candidate
    covering the most under-covered nodes (Appendix D's rule, as `coverage_balanced_sample` keeps it)."""
    coverage = np.zeros(hi - lo, dtype=np.int64)
    used = np.zeros(len(SUBSTRUCTURE_TYPES), dtype=np.int64)
    taken = set()
    for pick in picks.tolist():
        gain = {c: int(np.count_nonzero(coverage[subs.instance(c) - lo] < threshold))
                for c in candidates.tolist() if c not in taken}
        useful = {int(subs.type_id[c]) for c, value in gain.items() if value > 0}
        kind = int(subs.type_id[pick])
        assert kind in useful and used[kind] == min(used[t] for t in useful)
        assert gain[pick] == max(value for c, value in gain.items() if subs.type_id[c] == kind)
        used[kind] += 1
        taken.add(pick)
        coverage[subs.instance(pick) - lo] += 1


@pytest.mark.parametrize("key_entries", [1 << 24, 50])  # 50: the crowded starts in chunks of a few rows
def test_hop2_of_a_node_whose_neighbours_fill_it(key_entries, monkeypatch):
    monkeypatch.setattr(matching_module, "_KEY_ENTRIES", key_entries)
    graphs = graph_set_of(random_graph_set(30, seed=6, min_nodes=10, max_nodes=30, kinds=("dense",)))
    subs, _ = match_substructures_per_graph(graphs, types={"hop2": None}, generator=np.random.default_rng(2),
                                            hop2_max_size=5)
    indptr = np.concatenate([[0], np.cumsum(graphs.degree)])
    neighbours = {v: set(graphs.edge_index[1, indptr[v] : indptr[v + 1]].tolist()) for v in range(graphs.num_nodes)}
    full = 0
    for i in range(len(subs)):
        members = set(subs.instance(i).tolist())
        # the instance of a node of degree >= 4 is the node and 4 of its neighbours (no 2-hop node fits)
        centres = [v for v in members if graphs.degree[v] >= 4 and members - {v} <= neighbours[v]]
        if len(members) == 5 and centres:
            full += 1
        assert len(members) <= 5
    assert full > 100


@pytest.mark.parametrize("chunk_rows", [1, 97])  # one partial instance's extensions (one graph's rows) at a time, or a few
def test_thinned_search_in_chunks_matches_the_search_at_once(chunk_rows, monkeypatch):
    """Dense graphs and small caps thin every level; listing the extensions and dropping repeated instances in
    chunks gives the same instances from the same random numbers."""
    graphs = graph_set_of(random_graph_set(30, seed=7, min_nodes=20, max_nodes=40, kinds=("dense",)))
    types = dict.fromkeys(GEOMETRIC, 2)  # a beam of 32 partial instances per graph: far fewer than the dense graphs hold

    def matched():
        subs, graph_of = match_substructures_per_graph(graphs, types=types, generator=np.random.default_rng(3))
        return subs.members, subs.ptr, subs.type_id, graph_of

    at_once = matched()
    monkeypatch.setattr(matching_module, "_CHUNK_ROWS", chunk_rows)
    in_chunks = matched()
    assert all(np.array_equal(a, b) for a, b in zip(at_once, in_chunks, strict=True))
    kept = np.bincount(at_once[2], minlength=len(SUBSTRUCTURE_TYPES))
    assert all(kept[SUBSTRUCTURE_TYPES.index(name)] > 0 for name in ("cycle_3", "star_4", "path_4"))
