"""Substructure matching, coverage-balanced sampling, token edges and DFS encoding on tiny graphs."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from sgt_core.errors import ConfigError, DatasetError
from sgt_core.preprocess.substructures import (
    CYCLE_SIZES,
    DEFAULT_SUBSTRUCTURE_CAPS,
    PATH_SIZES,
    STAR_LEAVES,
    SUBSTRUCTURE_TYPES,
    Substructures,
    _random_walk_sets,
    _simple_csr,
    coverage_balanced_sample,
    dfs_adjacency_encoding,
    dfs_adjacency_encodings,
    match_substructures,
    substructure_token_edges,
)

GEOMETRIC = [f"cycle_{k}" for k in CYCLE_SIZES] + [f"star_{k}" for k in STAR_LEAVES]
GEOMETRIC += [f"path_{k}" for k in PATH_SIZES]


# ---------------------------------------------------------------- tiny graphs, both directions per edge


def _both_ways(pairs) -> np.ndarray:
    e = np.asarray(pairs, dtype=np.int64).reshape(-1, 2).T
    return np.concatenate([e, e[::-1]], axis=1)


def cycle_with_chord():
    return _both_ways([(i, (i + 1) % 6) for i in range(6)] + [(0, 3)]), 6


def k4():
    return _both_ways(list(itertools.combinations(range(4), 2))), 4


def grid(rows, cols, king=False):
    moves = [(0, 1), (1, 0)] + ([(1, 1), (1, -1)] if king else [])
    pairs = []
    for r, c in itertools.product(range(rows), range(cols)):
        for dr, dc in moves:
            if 0 <= r + dr < rows and 0 <= c + dc < cols:
                pairs.append((r * cols + c, (r + dr) * cols + c + dc))
    return _both_ways(pairs), rows * cols


def star(leaves):
    return _both_ways([(0, i) for i in range(1, leaves + 1)]), leaves + 1


def path(nodes):
    return _both_ways([(i, i + 1) for i in range(nodes - 1)]), nodes


def petersen():
    outer = [(i, (i + 1) % 5) for i in range(5)]
    spokes = [(i, i + 5) for i in range(5)]
    inner = [(5 + i, 5 + (i + 2) % 5) for i in range(5)]
    return _both_ways(outer + spokes + inner), 10


SMALL_GRAPHS = {
    "cycle_with_chord": cycle_with_chord,
    "k4": k4,
    "grid_3x4": lambda: grid(3, 4),
    "king_3x3": lambda: grid(3, 3, king=True),
    "star_6": lambda: star(6),
    "path_8": lambda: path(8),
    "petersen": petersen,
}


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
    seen, stack = {nodes[0]}, [nodes[0]]
    while stack:
        for w in adj[stack.pop()] & inside:
            if w not in seen:
                seen.add(w)
                stack.append(w)
    if len(seen) != k:
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
    indptr, indices = _simple_csr(edge_index, n, "test")
    starts = np.random.default_rng(0).permutation(n)
    walks = _random_walk_sets(indptr, indices, starts, 10, np.random.default_rng(1))
    for start, nodes in zip(starts.tolist(), walks):
        assert start in nodes and 1 <= len(nodes) <= 11 and list(nodes) == sorted(set(nodes))
        assert _is_connected(nodes, adj)
    subs = match_substructures(edge_index, n, types={"random_walk": 20}, generator=np.random.default_rng(0))
    assert 0 < len(subs) <= 20
    assert all(_is_connected(subs.instance(i).tolist(), adj) for i in range(len(subs)))


def test_isolated_node_walk_stays_put():
    indptr, indices = _simple_csr(_both_ways([(0, 1)]), 3, "test")
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


# ---------------------------------------------------------------- coverage-balanced sampling


def test_coverage_reaches_threshold():
    edge_index, n = grid(20, 20, king=True)
    caps = dict.fromkeys(GEOMETRIC, 200) | {"hop2": None, "random_walk": None}
    subs = match_substructures(edge_index, n, types=caps, generator=np.random.default_rng(0))
    for threshold in (1, 2, 3):
        picks = coverage_balanced_sample(subs, n, threshold, np.random.default_rng(threshold))
        assert len(np.unique(picks)) == len(picks)
        coverage = np.bincount(subs.select(picks).members, minlength=n)
        assert coverage.min() >= threshold
        assert len(picks) < len(subs)  # stops once the target is met


def test_coverage_stops_when_candidates_run_out():
    subs = Substructures.from_lists([[0, 1], [0, 1], [2], [0, 1, 2]], [0, 0, 0, 1])
    picks = coverage_balanced_sample(subs, 6, 5, np.random.default_rng(0))
    assert sorted(picks.tolist()) == [0, 1, 2, 3]  # everything useful taken; nodes 3-5 are in nothing
    # A candidate that covers no under-covered node is never taken.
    subs = Substructures.from_lists([[0, 1], [0, 1], [2]], [0, 0, 0])
    picks = coverage_balanced_sample(subs, 3, 1, np.random.default_rng(0))
    assert len(picks) == 2 and 2 in picks.tolist()
    assert coverage_balanced_sample(subs, 3, 0, np.random.default_rng(0)).size == 0


def test_coverage_balances_types():
    n, copies = 60, 5
    instances, types = [], []
    for type_id, width in [(0, 2), (3, 3), (17, 5)]:
        for start in range(n - width + 1):
            for _ in range(copies):
                instances.append(range(start, start + width))
                types.append(type_id)
    subs = Substructures.from_lists(instances, types)
    picks = coverage_balanced_sample(subs, n, 4, np.random.default_rng(0))
    used = np.bincount(subs.type_id[picks], minlength=len(SUBSTRUCTURE_TYPES))[[0, 3, 17]]
    assert used.max() - used.min() <= 1, used
    assert np.bincount(subs.select(picks).members, minlength=n).min() >= 4


def test_coverage_prefers_least_covered_nodes():
    # Type 0 only. After {0..3} is taken, {0..3}-overlapping candidates lose to the disjoint {4..7}.
    subs = Substructures.from_lists([[0, 1, 2, 3], [1, 2, 3, 4], [4, 5, 6, 7]], [0, 0, 0])
    picks = coverage_balanced_sample(subs, 8, 1, np.random.default_rng(0))
    assert sorted(picks.tolist()) == [0, 2]


# ---------------------------------------------------------------- token edges


def test_token_edges_join_each_token_to_exactly_its_members():
    subs = Substructures.from_lists([[0, 1, 2], [2, 3], [4, 5, 6, 7]], [0, 5, 17])
    selection = subs.select(np.array([2, 0]))
    edge_index, num_tokens = substructure_token_edges(selection, 8)
    assert num_tokens == 2 and edge_index.dtype == np.int64 and edge_index.shape == (2, 14)
    pairs = set(map(tuple, edge_index.T.tolist()))
    assert len(pairs) == 14
    for t, members in enumerate([[4, 5, 6, 7], [0, 1, 2]]):
        token = 8 + t
        assert {s for s, d in pairs if d == token} == set(members)
        assert {d for s, d in pairs if s == token} == set(members)
    assert all(s >= 8 or d >= 8 for s, d in pairs)  # no member-member edges


# ---------------------------------------------------------------- DFS-ordered adjacency encoding


def _relabelled(pairs, num_nodes, rng, total=50):
    """The same small graph with its nodes mapped to random distinct ids in [0, total)."""
    ids = rng.choice(total, size=num_nodes, replace=False)
    return _both_ways([(ids[u], ids[v]) for u, v in pairs]), ids


SHAPES = {
    "star": [(0, i) for i in range(1, 6)],
    "path": [(i, i + 1) for i in range(6)],
    "cycle": [(i, (i + 1) % 7) for i in range(7)],
    "spider": [(0, 1), (1, 2), (0, 3), (3, 4), (4, 5), (0, 6)],
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_dfs_encoding_is_invariant_to_relabelling(shape):
    pairs = SHAPES[shape]
    num = max(max(p) for p in pairs) + 1
    rng = np.random.default_rng(0)
    codes = []
    for _ in range(6):
        edge_index, ids = _relabelled(pairs, num, rng)
        # Extra edges elsewhere in the graph must not matter.
        others = np.setdiff1d(np.arange(50), ids)[:4]
        extra = _both_ways([(others[0], others[1]), (others[2], ids[0])])
        edge_index = np.concatenate([edge_index, extra], axis=1)
        codes.append(dfs_adjacency_encoding(ids, edge_index, 9))
    for code in codes[1:]:
        np.testing.assert_array_equal(code, codes[0])
    block = codes[0].reshape(9, 9)
    assert block.sum() == 2 * len(pairs) and np.array_equal(block, block.T)
    assert block[num:].sum() == 0 and block[:, num:].sum() == 0  # padding stays zero


def test_dfs_encoding_of_a_star_and_a_path_by_hand():
    star_code = dfs_adjacency_encoding(np.arange(4), _both_ways([(3, 0), (3, 1), (3, 2)]), 4).reshape(4, 4)
    expected = np.zeros((4, 4), dtype=np.float32)
    expected[0, 1:] = expected[1:, 0] = 1  # centre first, then the leaves
    np.testing.assert_array_equal(star_code, expected)
    # Path 0-1-2-3-4: start at the middle (2), then 1 (smaller id) down to 0, then 3, 4.
    path_code = dfs_adjacency_encoding(np.arange(5), path(5)[0], 5).reshape(5, 5)
    order = [2, 1, 0, 3, 4]
    adj = np.zeros((5, 5), dtype=np.float32)
    for i in range(4):
        adj[i, i + 1] = adj[i + 1, i] = 1
    np.testing.assert_array_equal(path_code, adj[np.ix_(order, order)])


def test_dfs_batch_matches_single_and_truncates():
    edge_index, n = grid(4, 4, king=True)
    subs = Substructures.from_lists([[0, 1, 4, 5], [0, 1, 2, 3, 4, 5, 6, 7], [10]], [1, 16, 17])
    batch = dfs_adjacency_encodings(subs, edge_index, n, 6)
    assert batch.shape == (3, 36) and batch.dtype == np.float32
    for i in range(3):
        np.testing.assert_array_equal(batch[i], dfs_adjacency_encoding(subs.instance(i), edge_index, 6))
    assert batch[0].reshape(6, 6)[:4, :4].sum() == 12  # a king-grid 2x2 block is a K4
    assert batch[1].reshape(6, 6).sum() > 0 and batch[2].sum() == 0


def test_cycles_agree_with_networkx_chordless_cycles():
    nx = pytest.importorskip("networkx")
    graph = nx.gnm_random_graph(40, 90, seed=3)
    edge_index = _both_ways(list(graph.edges()))
    got = as_sets(_match(edge_index, 40, {f"cycle_{k}": None for k in CYCLE_SIZES}))
    expected = {k: set() for k in CYCLE_SIZES}
    for cycle in nx.chordless_cycles(graph, length_bound=8):
        if len(cycle) >= 3:
            expected[len(cycle)].add(tuple(sorted(cycle)))
    assert sum(map(len, expected.values())) > 100
    for k in CYCLE_SIZES:
        assert got[f"cycle_{k}"] == expected[k], k
