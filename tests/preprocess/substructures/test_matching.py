"""Matching: induced cycles, stars and paths against brute force, caps, hop-2 balls and random walks."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from sgt_core.errors import ConfigError, DatasetError
from sgt_core.preprocess.adjacency import simple_csr
from sgt_core.preprocess.interaction_graph import CYCLE_SIZES, PATH_SIZES, SUBSTRUCTURE_TYPES
from sgt_core.preprocess.substructures.instances import Substructures
from sgt_core.preprocess.substructures.matching import (
    DEFAULT_SUBSTRUCTURE_CAPS,
    _random_walk_sets,
    match_substructures,
)
from tests.preprocess.substructures.graphs import (
    GEOMETRIC,
    SMALL_GRAPHS,
    both_ways,
    cycle_with_chord,
    grid,
    k4,
    path,
    petersen,
)

# ---------------------------------------------------------------- independent brute force


def _adjacency(edge_index, n):
    adj = [set() for _ in range(n)]
    for u, v in edge_index.T.tolist():
        if u != v:
            adj[u].add(v)
            adj[v].add(u)
    return adj


def _classify(nodes, adj) -> set[str]:
    """Type names the node set induces (by degree sequence of the induced subgraph + connectivity)."""
    nodes = tuple(nodes)
    k = len(nodes)
    inside = set(nodes)
    deg = {u: len(adj[u] & inside) for u in nodes}
    edges = sum(deg.values()) // 2
    if not _is_connected(nodes, adj):
        return set()
    names = set()
    degrees = sorted(deg.values())
    if k >= 3 and all(d == 2 for d in degrees):
        names.add(f"cycle_{k}")
    if edges == k - 1 and k >= 3 and degrees[-1] == k - 1:  # a tree with a node touching all others
        names.add(f"star_{k - 1}")
    if edges == k - 1 and degrees[-1] <= 2 and k >= 2:  # a tree with max degree 2
        names.add(f"path_{k}")
    return names


def brute_force(edge_index, n) -> dict[str, set[tuple[int, ...]]]:
    adj = _adjacency(edge_index, n)
    found = {name: set() for name in GEOMETRIC}
    for k in range(3, 9):
        for nodes in itertools.combinations(range(n), k):
            for name in _classify(nodes, adj):
                if name in found:
                    found[name].add(nodes)
    return found


def _match(edge_index, n, types, seed=0, **kwargs) -> Substructures:
    return match_substructures(edge_index, n, types=types, generator=np.random.default_rng(seed), **kwargs)


def as_sets(subs: Substructures) -> dict[str, set[tuple[int, ...]]]:
    out = {name: set() for name in SUBSTRUCTURE_TYPES}
    for i in range(len(subs)):
        out[SUBSTRUCTURE_TYPES[subs.type_id[i]]].add(tuple(subs.instance(i).tolist()))
    return out


def _is_connected(nodes, adj) -> bool:
    nodes = list(nodes)
    inside = set(nodes)
    seen, stack = {nodes[0]}, [nodes[0]]
    while stack:
        for w in adj[stack.pop()] & inside:
            if w not in seen:
                seen.add(w)
                stack.append(w)
    return len(seen) == len(nodes)


# ---------------------------------------------------------------- matching


@pytest.mark.parametrize("graph", list(SMALL_GRAPHS))
def test_uncapped_matches_equal_brute_force(graph):
    edge_index, n = SMALL_GRAPHS[graph]()
    subs = _match(edge_index, n, dict.fromkeys(GEOMETRIC))
    got = as_sets(subs)
    expected = brute_force(edge_index, n)
    for name in GEOMETRIC:
        assert got[name] == expected[name], f"{graph}: {name}"
    # No instance twice (a cycle from every rotation and direction counts once).
    keys = [(int(t), tuple(subs.instance(i).tolist())) for i, t in enumerate(subs.type_id)]
    assert len(keys) == len(set(keys))


def test_hand_counts():
    """A few counts checked by hand, so the brute force itself is anchored."""
    chord = as_sets(_match(*cycle_with_chord(), dict.fromkeys(GEOMETRIC)))
    assert chord["cycle_4"] == {(0, 1, 2, 3), (0, 3, 4, 5)} and not chord["cycle_6"]  # induced only
    full = as_sets(_match(*k4(), dict.fromkeys(GEOMETRIC)))
    assert len(full["cycle_3"]) == 4 and not full["star_2"] and not full["path_4"]
    pet = as_sets(_match(*petersen(), dict.fromkeys(GEOMETRIC)))
    assert len(pet["cycle_5"]) == 12 and len(pet["cycle_6"]) == 10 and not pet["cycle_3"]
    assert len(pet["star_3"]) == 10  # every node with its three (pairwise non-adjacent) neighbours
    line = as_sets(_match(*path(8), dict.fromkeys(GEOMETRIC)))
    assert [len(line[f"path_{k}"]) for k in PATH_SIZES] == [5, 4, 3, 2, 1]


@pytest.mark.parametrize("graph", ["petersen", "grid_3x4", "king_3x3"])
def test_caps_are_respected_and_filled(graph):
    edge_index, n = SMALL_GRAPHS[graph]()
    expected = brute_force(edge_index, n)
    cap = 3
    subs = _match(edge_index, n, dict.fromkeys(GEOMETRIC, cap), seed=1)
    got = as_sets(subs)
    for name in GEOMETRIC:
        assert got[name] <= expected[name], name  # every reported instance is real
        assert len(got[name]) == min(cap, len(expected[name])), name


def test_caps_stop_early_on_a_larger_graph():
    edge_index, n = grid(40, 40, king=True)
    adj = _adjacency(edge_index, n)
    types = dict.fromkeys(GEOMETRIC, 5) | {"hop2": 7, "random_walk": 9}
    subs = match_substructures(edge_index, n, types=types, generator=np.random.default_rng(0))
    counts = subs.type_counts()
    assert all(counts[name] <= cap for name, cap in types.items())
    # Induced 5-cycles do not exist on a king grid; the others are plentiful and reach the cap.
    assert counts["cycle_5"] == 0
    assert counts["cycle_4"] == counts["path_8"] == counts["star_4"] == 5
    for i in range(len(subs)):
        name = SUBSTRUCTURE_TYPES[subs.type_id[i]]
        if name in GEOMETRIC:
            assert name in _classify(subs.instance(i).tolist(), adj)


def test_hop2_balls_exact_when_uncut():
    edge_index, n = petersen()
    adj = _adjacency(edge_index, n)
    subs = _match(edge_index, n, {"hop2": None}, hop2_max_size=100)
    balls = {tuple(sorted({v} | adj[v] | set().union(*(adj[u] for u in adj[v])))) for v in range(n)}
    assert as_sets(subs)["hop2"] == balls


def test_hop2_size_cap_keeps_centre_side_connected():
    edge_index, n = grid(10, 10, king=True)
    adj = _adjacency(edge_index, n)
    subs = _match(edge_index, n, {"hop2": None}, hop2_max_size=12)
    assert len(subs) > 0 and subs.sizes.max() == 12
    for i in range(len(subs)):
        members = subs.instance(i).tolist()
        assert _is_connected(members, adj)
        # Some member (the centre) has all its neighbours inside: 1-hop nodes are kept first (<= 8 < 12).
        assert any(adj[v] <= set(members) for v in members)


def test_random_walks_contain_start_and_are_connected():
    edge_index, n = grid(8, 8)
    adj = _adjacency(edge_index, n)
    indptr, indices = simple_csr(edge_index, n, "test")
    starts = np.random.default_rng(0).permutation(n)
    walks = _random_walk_sets(indptr, indices, starts, 10, np.random.default_rng(1))
    for start, nodes in zip(starts.tolist(), walks):
        assert start in nodes and 1 <= len(nodes) <= 11 and list(nodes) == sorted(set(nodes))
        assert _is_connected(nodes, adj)
    subs = match_substructures(edge_index, n, types={"random_walk": 20}, generator=np.random.default_rng(0))
    assert 0 < len(subs) <= 20
    assert all(_is_connected(subs.instance(i).tolist(), adj) for i in range(len(subs)))


def test_isolated_node_walk_stays_put():
    indptr, indices = simple_csr(both_ways([(0, 1)]), 3, "test")
    walks = _random_walk_sets(indptr, indices, np.array([2, 0]), 10, np.random.default_rng(0))
    assert walks == [(2,), (0, 1)]


def test_same_seed_same_result():
    edge_index, n = grid(12, 12, king=True)
    runs = [_match(edge_index, n, DEFAULT_SUBSTRUCTURE_CAPS, seed=7) for _ in range(2)]
    for field in ("members", "ptr", "type_id"):
        np.testing.assert_array_equal(getattr(runs[0], field), getattr(runs[1], field))


def test_bad_input_is_reported():
    edge_index, n = k4()
    with pytest.raises(ConfigError, match="unknown substructure type"):
        match_substructures(edge_index, n, types={"hexagon": 3}, generator=np.random.default_rng(0))
    with pytest.raises(ConfigError, match="cap"):
        match_substructures(edge_index, n, types={"cycle_3": -1}, generator=np.random.default_rng(0))
    with pytest.raises(DatasetError, match="outside"):
        match_substructures(edge_index, 3, types={"cycle_3": 1}, generator=np.random.default_rng(0))


def test_cycles_agree_with_networkx_chordless_cycles():
    nx = pytest.importorskip("networkx")
    graph = nx.gnm_random_graph(40, 90, seed=3)
    edge_index = both_ways(list(graph.edges()))
    got = as_sets(_match(edge_index, 40, {f"cycle_{k}": None for k in CYCLE_SIZES}))
    expected = {k: set() for k in CYCLE_SIZES}
    for cycle in nx.chordless_cycles(graph, length_bound=8):
        if len(cycle) >= 3:
            expected[len(cycle)].add(tuple(sorted(cycle)))
    assert sum(map(len, expected.values())) > 100
    for k in CYCLE_SIZES:
        assert got[f"cycle_{k}"] == expected[k], k
