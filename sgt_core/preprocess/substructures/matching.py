"""Matching: finds the instances of DeepGraph's substructure vocabulary in a graph (Appendix C).

One concept, kept in one file although it is long: matching the vocabulary (paths, cycles, stars) in a graph.
"""

from __future__ import annotations

import itertools
import math
import operator
from collections.abc import Callable, Iterator, Mapping

import numpy as np

from sgt_core.errors import ConfigError
from sgt_core.preprocess.adjacency import segment_positions, simple_csr
from sgt_core.preprocess.interaction_graph import CYCLE_SIZES, PATH_SIZES, STAR_LEAVES, SUBSTRUCTURE_TYPES
from sgt_core.preprocess.substructures.instances import Substructures

__all__ = ["DEFAULT_SUBSTRUCTURE_CAPS", "hop2_members", "match_substructures", "random_walk_members", "validate_caps"]

# The vocabulary (SUBSTRUCTURE_TYPES) lives in the interaction graph's schema, which loads without scipy.
_TYPE_ID = {name: i for i, name in enumerate(SUBSTRUCTURE_TYPES)}

# Caps (maximum instances per type); a type missing from the mapping, or with cap 0, is off; None means
# "all of them". Geometric types are capped at 1000 each (matching takes ~2 s on a 10^4-node king grid);
# hop2 and random_walk keep one instance per node (vectorised, cheap up to ~10^6 nodes), which puts every
# node in at least two candidates, so coverage sampling can always reach threshold 2.
DEFAULT_SUBSTRUCTURE_CAPS: dict[str, int | None] = {name: 1000 for name in SUBSTRUCTURE_TYPES} | {
    "hop2": None,
    "random_walk": None,
}

# Per-root instance limit = ceil(_ROOT_OVERSAMPLE * cap / num_nodes): spreads capped samples over the graph.
_ROOT_OVERSAMPLE = 2.0


class _Search:
    """Rooted, bounded enumeration of induced cycles, stars and paths over adjacency lists.

    Each enumerator is a generator over (size key, nodes) that reads ``wanted`` (a list of bools indexed
    by size key) on every step, so the caller can switch sizes off mid-search and the search prunes to the
    largest size still wanted. Steps (candidate extensions looked at) are counted against ``step_limit``;
    past it every level of the search returns. A search path holds at most 8 nodes, so whether a node is
    on it is a scan of the list (as fast as a set lookup, without a set to keep in step).
    """

    def __init__(self, nbrs: list[list[int]], adj: list[set[int]], rank: list[int]) -> None:
        self.nbrs, self.adj, self.rank = nbrs, adj, rank
        self.steps = 0
        self.step_limit = math.inf

    @staticmethod
    def _max_wanted(wanted: list[bool]) -> int:
        for k in range(len(wanted) - 1, -1, -1):
            if wanted[k]:
                return k
        return 0

    def _distances(self, root: int, radius: int) -> dict[int, int]:
        """BFS hop distances from root, up to `radius`."""
        dist = {root: 0}
        frontier = [root]
        for d in range(1, radius + 1):
            nxt = []
            for u in frontier:
                for v in self.nbrs[u]:
                    if v not in dist:
                        dist[v] = d
                        nxt.append(v)
            frontier = nxt
        return dist

    def cycles(self, root: int, wanted: list[bool]) -> Iterator[tuple[int, list[int]]]:
        """Induced cycles whose lowest-rank node is `root`, each once (key = number of nodes).

        The path root=p0, p1, ..., pj grows through nodes ranked above the root and stays induced: a new
        node v touches p_j, no interior node p1..p_{j-1}, and closes the cycle iff it touches p0. Of the
        two directions of a cycle only the one with rank(p1) < rank(last) is reported. A node farther
        from the root than the remaining budget of the longest wanted cycle cannot lie on it: pruned.
        """
        nbrs, adj, rank = self.nbrs, self.adj, self.rank
        r0 = rank[root]
        root_adj = adj[root]
        max_k = self._max_wanted(wanted)
        if max_k < 3:
            return
        dist = self._distances(root, max_k // 2)
        path = [root]

        def extend() -> Iterator[tuple[int, list[int]]]:
            last = path[-1]
            j = len(path) - 1
            for v in nbrs[last]:
                self.steps += 1
                if self.steps > self.step_limit:
                    return
                if rank[v] <= r0 or v in path:
                    continue
                adj_v = adj[v]
                if j >= 2 and any(u in adj_v for u in path[1:-1]):
                    continue  # a chord to an interior node
                if j >= 1 and v in root_adj:
                    k = j + 2
                    if k < len(wanted) and wanted[k] and rank[path[1]] < rank[v]:
                        yield k, [*path, v]
                    continue  # touching the root closes the cycle: it cannot be extended
                max_k = self._max_wanted(wanted)
                # v would be node j+2 (1-based); closing a cycle of max_k nodes needs dist(v, root)
                # <= max_k - j - 1 remaining edges.
                if max_k >= j + 3 and dist.get(v, max_k) <= max_k - j - 1:
                    path.append(v)
                    yield from extend()
                    path.pop()

        yield from extend()

    def paths(self, root: int, wanted: list[bool]) -> Iterator[tuple[int, list[int]]]:
        """Induced paths with endpoint `root` whose other endpoint ranks above it, each once (key = nodes)."""
        nbrs, adj, rank = self.nbrs, self.adj, self.rank
        r0 = rank[root]
        path = [root]

        def extend() -> Iterator[tuple[int, list[int]]]:
            last = path[-1]
            k = len(path) + 1  # nodes once v is added
            for v in nbrs[last]:
                self.steps += 1
                if self.steps > self.step_limit:
                    return
                if v in path:
                    continue
                adj_v = adj[v]
                if any(u in adj_v for u in path[:-1]):
                    continue  # a chord: the path would not be induced
                if k < len(wanted) and wanted[k] and rank[v] > r0:
                    yield k, [*path, v]
                if k < self._max_wanted(wanted):
                    path.append(v)
                    yield from extend()
                    path.pop()

        yield from extend()

    def stars(self, centre: int, wanted: list[bool]) -> Iterator[tuple[int, list[int]]]:
        """Induced stars centred at `centre`: independent sets of its neighbours (key = leaves)."""
        nb, adj = self.nbrs[centre], self.adj
        leaves: list[int] = []

        def extend(start: int) -> Iterator[tuple[int, list[int]]]:
            k = len(leaves) + 1
            for i in range(start, len(nb)):
                self.steps += 1
                if self.steps > self.step_limit:
                    return
                v = nb[i]
                adj_v = adj[v]
                if any(u in adj_v for u in leaves):
                    continue  # two adjacent leaves: not an induced star
                leaves.append(v)
                if k >= 2 and k < len(wanted) and wanted[k]:
                    yield k, [centre, *leaves]
                if k < self._max_wanted(wanted):
                    yield from extend(i + 1)
                leaves.pop()

        yield from extend(0)


def _enumerate_family(
    search_fn: Callable[[int, list[bool]], Iterator[tuple[int, list[int]]]],
    search: _Search,
    caps: dict[int, int | None],
    roots: list[int],
    num_nodes: int,
    max_steps_per_root: int,
    max_steps: int,
) -> dict[int, list[tuple[int, ...]]]:
    """Runs one rooted enumerator over the roots (in the given random order) until every size is capped.

    Uncapped (None) sizes make the whole family exhaustive: no limits at all. Otherwise two passes:
    pass 1 takes at most ceil(2 * cap / n) new instances per size from each root (so a capped sample is
    spread over the graph instead of piling up around the first roots) and at most `max_steps_per_root`
    search steps; pass 2 revisits, in the same order, the roots that hit the instance limit, without it.
    All passes together stop after `max_steps` steps. Results are deduplicated by sorted node tuple.
    """
    size_len = max(caps) + 1
    found: dict[int, list[tuple[int, ...]]] = {k: [] for k in caps}
    seen: dict[int, set[tuple[int, ...]]] = {k: set() for k in caps}
    full = {k: cap == 0 for k, cap in caps.items()}
    exhaustive = any(cap is None for cap in caps.values())
    if exhaustive:
        per_root_limits: list[int | None] = [None]
    else:
        per_root_limits = [max(1, math.ceil(_ROOT_OVERSAMPLE * max(caps.values()) / max(num_nodes, 1))), None]
    search.steps = 0
    retry: list[int] = roots
    for limit in per_root_limits:
        truncated: list[int] = []
        for root in retry:
            if all(full.values()) or (not exhaustive and search.steps >= max_steps):
                return found
            wanted = [False] * size_len
            for k in caps:
                wanted[k] = not full[k]
            new_here = dict.fromkeys(caps, 0)
            hit_limit = False
            search.step_limit = math.inf if exhaustive else min(search.steps + max_steps_per_root, max_steps)
            for k, nodes in search_fn(root, wanted):
                key = tuple(sorted(nodes))
                if key in seen[k]:
                    continue
                seen[k].add(key)
                found[k].append(key)
                new_here[k] += 1
                if caps[k] is not None and len(found[k]) >= caps[k]:
                    full[k] = True
                    wanted[k] = False
                elif limit is not None and new_here[k] >= limit:
                    wanted[k] = False
                    hit_limit = True
                if not any(wanted):
                    break
            if hit_limit:
                truncated.append(root)
        retry = truncated
        if not retry:
            break
    return found


def _rows_to_tuples(rows: np.ndarray, nodes: np.ndarray, num_rows: int) -> list[tuple[int, ...]]:
    """Groups (row, node) pairs sorted by row into one tuple per row."""
    bounds = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=num_rows))]).tolist()
    flat = nodes.tolist()
    return [tuple(flat[a:b]) for a, b in itertools.pairwise(bounds)]


def _hop2_neighbourhoods(
    indptr: np.ndarray,
    indices: np.ndarray,
    starts: np.ndarray,
    max_size: int,
    generator: np.random.Generator,
    chunk_entries: int = 4_000_000,
) -> list[tuple[int, ...]]:
    """Sorted node sets, one per start: `hop2_members` as tuples."""
    rows, nodes = hop2_members(indptr, indices, starts, max_size, generator, chunk_entries)
    return _rows_to_tuples(rows, nodes, starts.size)


def hop2_members(
    indptr: np.ndarray,
    indices: np.ndarray,
    starts: np.ndarray,
    max_size: int,
    generator: np.random.Generator,
    chunk_entries: int = 4_000_000,
) -> tuple[np.ndarray, np.ndarray]:
    """Each start's 2-hop neighbourhood: centre, then 1-hop, then 2-hop nodes, at most `max_size` (vectorised).

    Each candidate gets a priority (centre 0, 1-hop 1 + u, 2-hop 2 + u with u ~ U[0, 1)); a node reached
    both ways keeps its best priority, and each row keeps its `max_size` best: the centre, all 1-hop
    nodes that fit, then random 2-hop nodes. Starts are processed in chunks of about `chunk_entries` entries.

    Returns:
        (rows, nodes) int64 [M]: row i's members (ascending) are nodes[rows == i]; rows ascend.
    """
    deg = np.diff(indptr)
    src = np.repeat(np.arange(deg.size, dtype=np.int64), deg)
    # Entries one start produces: itself + its neighbours + their neighbours.
    work = 1 + deg + np.bincount(src, weights=deg[indices], minlength=deg.size).astype(np.int64)
    out_rows, out_nodes = [], []
    cum = np.cumsum(work[starts])
    lo = 0
    while lo < starts.size:
        done = int(cum[lo - 1]) if lo else 0
        hi = max(lo + 1, int(np.searchsorted(cum, done + chunk_entries, side="right")))
        block = starts[lo:hi]  # [B]
        b = block.size
        rows0 = np.arange(b, dtype=np.int64)
        rows1 = np.repeat(rows0, deg[block])  # [B1]
        hop1 = indices[segment_positions(indptr[block], deg[block])]  # [B1]
        rows2 = np.repeat(rows1, deg[hop1])  # [B2]
        hop2 = indices[segment_positions(indptr[hop1], deg[hop1])]  # [B2]
        rows = np.concatenate([rows0, rows1, rows2])
        nodes = np.concatenate([block, hop1, hop2])
        prio = np.concatenate(
            [np.zeros(b), 1.0 + generator.random(rows1.size), 2.0 + generator.random(rows2.size)]
        )
        # Best priority per (row, node): sort by row, node, priority and keep each pair's first entry.
        order = np.lexsort((prio, nodes, rows))
        rows, nodes, prio = rows[order], nodes[order], prio[order]
        first = np.concatenate([[True], (rows[1:] != rows[:-1]) | (nodes[1:] != nodes[:-1])])
        rows, nodes, prio = rows[first], nodes[first], prio[first]
        # The `max_size` best per row.
        order = np.lexsort((prio, rows))
        rows, nodes = rows[order], nodes[order]
        row_start = np.searchsorted(rows, rows, side="left")
        keep = np.arange(rows.size) - row_start < max_size
        rows, nodes = rows[keep], nodes[keep]
        order = np.lexsort((nodes, rows))
        out_rows.append(rows[order] + lo)
        out_nodes.append(nodes[order])
        lo = hi
    if not out_rows:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    return np.concatenate(out_rows), np.concatenate(out_nodes)


def _random_walk_sets(
    indptr: np.ndarray,
    indices: np.ndarray,
    starts: np.ndarray,
    steps: int,
    generator: np.random.Generator,
) -> list[tuple[int, ...]]:
    """Sorted node sets, one per start: `random_walk_members` as tuples."""
    if indices.size == 0:  # no edges: every walk stays at its start
        return [(int(s),) for s in starts]
    rows, nodes = random_walk_members(indptr, indices, starts, steps, generator)
    return _rows_to_tuples(rows, nodes, starts.size)


def random_walk_members(
    indptr: np.ndarray,
    indices: np.ndarray,
    starts: np.ndarray,
    steps: int,
    generator: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    """The distinct nodes of one `steps`-step uniform random walk from each start (vectorised).

    Returns:
        (rows, nodes) int64 [M]: row i's members (ascending) are nodes[rows == i]; rows ascend.
    """
    if indices.size == 0:  # no edges: every walk stays at its start
        return np.arange(starts.size, dtype=np.int64), starts.astype(np.int64)
    deg = np.diff(indptr)
    visited = np.empty((starts.size, steps + 1), dtype=np.int64)  # [B, steps + 1]
    cur = starts.astype(np.int64)
    visited[:, 0] = cur
    for s in range(1, steps + 1):
        d = deg[cur]
        pick = (generator.random(cur.size) * d).astype(np.int64)  # uniform slot in [0, deg)
        # An isolated node has no neighbour to step to: the walk stays where it is.
        cur = np.where(d > 0, indices[np.minimum(indptr[cur] + pick, indices.size - 1)], cur)
        visited[:, s] = cur
    visited.sort(axis=1)
    keep = np.ones(visited.shape, dtype=bool)  # [B, steps + 1]
    keep[:, 1:] = visited[:, 1:] != visited[:, :-1]  # first of each run of equal nodes
    rows = np.repeat(np.arange(starts.size, dtype=np.int64), steps + 1).reshape(visited.shape)
    return rows[keep], visited[keep]


def match_substructures(
    edge_index: np.ndarray,
    num_nodes: int,
    *,
    types: Mapping[str, int | None],
    generator: np.random.Generator,
    hop2_max_size: int = 16,
    walk_length: int = 10,
    max_steps_per_root: int = 500,
    max_steps: int = 1_000_000,
) -> Substructures:
    """Finds instances of the substructure vocabulary (DeepGraph Appendix C) in a graph.

    Vocabulary (``SUBSTRUCTURE_TYPES``), all geometric types matched as induced subgraphs:

    - ``cycle_k``, k = 3..8: k nodes inducing a cycle (a chordless cycle).
    - ``star_k``, k = 2..6: a centre and k pairwise non-adjacent neighbours (induced K_{1,k}).
    - ``path_k``, k = 4..8: k nodes inducing a simple path.
    - ``hop2``: a node with its 1- and 2-hop neighbours; when that exceeds ``hop2_max_size`` nodes, all
      1-hop neighbours are kept (as many as fit) and the rest is filled with random 2-hop nodes.
    - ``random_walk``: the distinct nodes of one ``walk_length``-step uniform random walk from a node.

    Caps: ``types[name]`` is that type's maximum number of instances (None: all of them; 0 or absent:
    type off). Capped enumeration stops early rather than enumerating everything: roots are visited in
    a random order, each cycle/path search is rooted at one canonical node (a cycle at its lowest-ranked
    node, a path at its lower-ranked endpoint, a star at its centre), each root contributes at most
    ceil(2 * cap / n) new instances per type in a first pass (so a sample is spread over the graph),
    the search stops as soon as every size of a family is capped, and searches are bounded by
    ``max_steps_per_root`` / ``max_steps`` steps per family, so a size that is rare or absent cannot make
    the search exhaustive. With caps, counts can therefore fall short of the cap on graphs where a size is
    rare. A family (cycles, stars or paths) with any uncapped size is enumerated exhaustively, with no
    step limits: use None only on small graphs. ``hop2`` and ``random_walk`` start from up to `cap`
    random distinct nodes (all nodes when uncapped). Instances are deduplicated per type by node set.

    Args:
        edge_index: int [2, E] (src, dst) edges; symmetrised, self-loops and repeats ignored.
        num_nodes: number of nodes n.
        types: type name -> cap, e.g. ``DEFAULT_SUBSTRUCTURE_CAPS``.
        generator: the only source of randomness (root order, neighbour order, walks, hop-2 subsampling).
        hop2_max_size: most nodes in a ``hop2`` instance (>= 1).
        walk_length: steps of a ``random_walk`` instance (>= 1).
        max_steps_per_root: search steps one root may use in a capped family.
        max_steps: search steps one capped family may use in all.

    Returns:
        `Substructures`, ordered by type id, then by discovery order.

    Raises:
        ConfigError: unknown type name, negative cap or bad size parameter.
        DatasetError: malformed edge_index.
    """
    n = operator.index(num_nodes)
    caps = validate_caps(types)
    if hop2_max_size < 1 or walk_length < 1:
        raise ConfigError(
            f"hop2_max_size and walk_length must be >= 1; got hop2_max_size={hop2_max_size}, "
            f"walk_length={walk_length}"
        )
    if max_steps_per_root < 1 or max_steps < 1:
        raise ConfigError(
            f"max_steps_per_root and max_steps must be >= 1; got {max_steps_per_root}, {max_steps}"
        )
    indptr, indices = simple_csr(edge_index, n, "match_substructures")
    instances: list[tuple[int, ...]] = []
    type_ids: list[int] = []

    def emit(name: str, found: list[tuple[int, ...]]) -> None:
        instances.extend(found)
        type_ids.extend([_TYPE_ID[name]] * len(found))

    families = [
        ("cycle", CYCLE_SIZES, "cycles"),
        ("star", STAR_LEAVES, "stars"),
        ("path", PATH_SIZES, "paths"),
    ]
    wanted_families = [
        (prefix, {k: caps[f"{prefix}_{k}"] for k in sizes if caps.get(f"{prefix}_{k}", 0) != 0}, method)
        for prefix, sizes, method in families
    ]
    if any(family_caps for _, family_caps, _ in wanted_families) and n:
        # Random neighbour order makes capped samples random; random rank makes the canonical root random.
        order = generator.permutation(n)
        rank = np.empty(n, dtype=np.int64)
        rank[order] = np.arange(n)
        src = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
        shuffled = indices[np.lexsort((generator.random(indices.size), src))].tolist()
        bounds = indptr.tolist()
        nbrs = [shuffled[a:b] for a, b in itertools.pairwise(bounds)]
        adj = [set(nb) for nb in nbrs]
        search = _Search(nbrs, adj, rank.tolist())
        roots = order.tolist()
        for prefix, family_caps, method in wanted_families:
            if not family_caps:
                continue
            found = _enumerate_family(
                getattr(search, method), search, family_caps, roots, n, max_steps_per_root, max_steps
            )
            for k in sorted(found):
                emit(f"{prefix}_{k}", found[k])

    for name in ("hop2", "random_walk"):
        cap = caps.get(name, 0)
        if cap == 0 or n == 0:
            continue
        starts = generator.permutation(n)
        if cap is not None:
            starts = starts[:cap]
        starts = starts.astype(np.int64)
        if name == "hop2":
            sets = _hop2_neighbourhoods(indptr, indices, starts, hop2_max_size, generator)
        else:
            sets = _random_walk_sets(indptr, indices, starts, walk_length, generator)
        emit(name, list(dict.fromkeys(sets)))  # dedup by node set, keeping discovery order

    # Families were emitted in type-id order except hop2/random_walk; a stable sort fixes the rest.
    type_arr = np.asarray(type_ids, dtype=np.int64)
    order_by_type = np.argsort(type_arr, kind="stable")
    sorted_instances = [instances[i] for i in order_by_type.tolist()]
    # Instances are already sorted tuples of distinct nodes: pack them without per-instance NumPy calls.
    sizes = np.fromiter(map(len, sorted_instances), dtype=np.int64, count=len(sorted_instances))
    flat = itertools.chain.from_iterable(sorted_instances)
    members = np.fromiter(flat, dtype=np.int64, count=int(sizes.sum()))
    ptr = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    return Substructures(members=members, ptr=ptr, type_id=type_arr[order_by_type])


def validate_caps(types: Mapping[str, int | None]) -> dict[str, int | None]:
    """The caps by type name, checked: known names, each an int >= 0 or None."""
    caps: dict[str, int | None] = {}
    for name, cap in dict(types).items():
        if name not in _TYPE_ID:
            raise ConfigError(
                f"unknown substructure type {name!r} in types; expected names from {SUBSTRUCTURE_TYPES}"
            )
        if cap is not None:
            if isinstance(cap, bool) or not isinstance(cap, (int, np.integer)) or cap < 0:
                raise ConfigError(
                    f"cap of substructure type {name!r} must be an int >= 0 or None; got {cap!r}"
                )
            cap = int(cap)
        caps[name] = cap
    return caps
