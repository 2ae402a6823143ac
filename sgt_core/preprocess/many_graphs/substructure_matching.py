"""DeepGraph's substructure vocabulary matched inside every graph at once, with per-graph caps."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from sgt_core.errors import ConfigError
from sgt_core.preprocess.adjacency import segment_positions
from sgt_core.preprocess.interaction_graph import CYCLE_SIZES, PATH_SIZES, STAR_LEAVES, SUBSTRUCTURE_TYPES
from sgt_core.preprocess.many_graphs.layout import GraphSet
from sgt_core.preprocess.substructures.instances import Substructures
from sgt_core.preprocess.substructures.matching import hop2_members, random_walk_members, validate_caps

__all__ = ["PairLookup", "match_substructures_per_graph"]

_TYPE_ID = {name: i for i, name in enumerate(SUBSTRUCTURE_TYPES)}
# A capped family keeps about this many times its largest cap of partial instances per graph and search
# level (a Bernoulli thinning), so its work is bounded on dense graphs; it looks at _OVERSAMPLE times as many
# extensions (thinned before the lookups) to fill that beam with valid ones.
_BEAM = 4
_OVERSAMPLE = 4
# ... and at least this many, so that a small cap still lets long cycles be reached.
_BEAM_MIN = 32
# Random keys drawn at once for the neighbour subsets of crowded 2-hop instances (`_hop2`).
_KEY_ENTRIES = 1 << 24
# Seed of the fixed multipliers of the node-set hash (`_distinct_sets`): not a random choice of the run.
_HASH_SEED = 0
# Pair lookups go through per-graph n x n bitmaps while their entries (sum of n^2) stay below this.
_BITMAP_ENTRIES = 1 << 28
# Rows the steps that list many per graph hold at once: a level's extensions before a thinning keeps about
# _OVERSAMPLE x beam of them per graph (on dense graphs all of them number beam x degree per graph, many times
# what is kept), and the instances found at a level while their repeats are dropped (`_distinct_rows`).
_CHUNK_ROWS = 1 << 22


class PairLookup:
    """Whether two nodes of one graph are adjacent, for arrays of pairs: per-graph bitmaps, or sorted keys."""

    def __init__(self, graphs: GraphSet) -> None:
        sizes = graphs.sizes
        squares = sizes.astype(np.int64) ** 2
        src, dst = graphs.edge_index
        self.num_nodes = graphs.num_nodes
        if int(squares.sum()) <= _BITMAP_ENTRIES:
            base = np.concatenate([[0], np.cumsum(squares)[:-1]])  # [G]
            g = graphs.node_graph
            # entry (u, v) of u's graph sits at offset[u] + u * size[u] + v
            self.offset = (base - graphs.ptr[:-1] * sizes - graphs.ptr[:-1])[g]  # [N]
            self.size = sizes[g]  # [N]
            self.bitmap = np.zeros(int(squares.sum()), dtype=bool)
            self.bitmap[self.offset[src] + src * self.size[src] + dst] = True
            self.keys = None
        else:
            self.keys = np.sort(src.astype(np.int64) * self.num_nodes + dst)

    def __call__(self, u: np.ndarray, v: np.ndarray) -> np.ndarray:
        if self.keys is None:
            return self.bitmap[self.offset[u] + u * self.size[u] + v]
        query = u * self.num_nodes + v
        position = np.minimum(np.searchsorted(self.keys, query), self.keys.size - 1)
        return self.keys[position] == query


def match_substructures_per_graph(
    graphs: GraphSet,
    *,
    types: Mapping[str, int | None],
    generator: np.random.Generator,
    hop2_max_size: int = 16,
    walk_length: int = 10,
) -> tuple[Substructures, np.ndarray]:
    """The vocabulary of `substructures.matching.match_substructures`, matched inside every graph at once.

    Every type is matched as in the one-graph matcher (induced cycles of 3..8 nodes, induced stars of 2..6
    leaves, induced paths of 4..8 nodes, capped 2-hop neighbourhoods, random-walk node sets); every instance
    lies in one graph (they are connected, and no edge joins two graphs).

    Caps apply per graph: ``types[name]`` is the most instances of that type one graph keeps (None: all of
    them), so the first graphs never use up a shared budget and starve the later ones. The geometric types
    are found by extending partial instances level by level for all graphs at once (cycles and paths from the
    same partial induced paths, each kept once: found canonically while a graph's search is exhaustive, a
    cycle from its lowest node towards its smaller neighbour and a path from its lower end, deduplicated once
    it is thinned; stars as ascending leaf subsets of the centre's neighbours). A family with an
    uncapped size is enumerated exhaustively, as DeepGraph's matcher does (molecules have few instances). In
    a capped family each graph keeps about `_BEAM` times the family's largest cap of partial instances per
    level (a random thinning), and a type with more instances than its cap in a graph keeps a uniformly
    random subset of them: on dense graphs this samples rather than enumerates, which is what bounds the work
    (the one-graph matcher's step limits play that part there). ``hop2`` and ``random_walk`` start from every
    node, or from `cap` random nodes of each graph.

    Args:
        graphs: the union's graphs.
        types: type name -> cap per graph (0 or absent: off; None: all).
        generator: the only source of randomness.
        hop2_max_size: as `match_substructures`'s.
        walk_length: as `match_substructures`'s.

    Returns:
        (instances ordered by type id, then graph; int64 [S] the graph of each).
    """
    caps = validate_caps(types)
    if hop2_max_size < 1 or walk_length < 1:
        raise ConfigError(f"hop2_max_size and walk_length must be >= 1; got hop2_max_size={hop2_max_size}, "
                          f"walk_length={walk_length}")
    src, dst = graphs.edge_index
    order = np.lexsort((dst, src)) if src.size > 1 and bool(np.any(np.diff(src) < 0)) else slice(None)
    indptr = np.concatenate([[0], np.cumsum(np.bincount(src, minlength=graphs.num_nodes))]).astype(np.int64)
    indices = dst[order].astype(np.int64)
    found: dict[str, np.ndarray] = {}  # type -> member rows [m, k], ascending per row

    wanted = {name: cap for name, cap in caps.items() if cap != 0}
    path_caps = {k: wanted[f"path_{k}"] for k in PATH_SIZES if f"path_{k}" in wanted}
    cycle_caps = {k: wanted[f"cycle_{k}"] for k in CYCLE_SIZES if f"cycle_{k}" in wanted}
    star_caps = {k: wanted[f"star_{k}"] for k in STAR_LEAVES if f"star_{k}" in wanted}
    adjacent = PairLookup(graphs) if path_caps or cycle_caps or star_caps else None
    if path_caps or cycle_caps:
        beam = _beam(list(path_caps.values()) + list(cycle_caps.values()))
        found.update(_paths_and_cycles(graphs, indptr, indices, adjacent, path_caps, cycle_caps, beam, generator))
    if star_caps:
        found.update(_stars(graphs, indptr, indices, adjacent, star_caps, _beam(list(star_caps.values())),
                            generator))

    members, graph_of, type_ids = [], [], []
    for name in SUBSTRUCTURE_TYPES[: _TYPE_ID["hop2"]]:
        rows = found.pop(name, None)  # capped per graph by the search
        if rows is None or rows.size == 0:
            continue
        members.append((np.full(rows.shape[0], rows.shape[1]), rows.ravel()))
        graph_of.append(graphs.node_graph[rows[:, 0]])
        type_ids.append(np.full(rows.shape[0], _TYPE_ID[name]))
    for name in ("hop2", "random_walk"):
        cap = caps.get(name, 0)
        if cap == 0 or graphs.num_nodes == 0:
            continue
        starts = _starts(graphs, cap, generator)
        if name == "hop2":
            rows, nodes = _hop2(indptr, indices, starts, hop2_max_size, generator)
        else:
            rows, nodes = random_walk_members(indptr, indices, starts, walk_length, generator)
        sizes, nodes = _distinct_sets(np.bincount(rows, minlength=starts.size), nodes)
        members.append((sizes, nodes))
        graph_of.append(graphs.node_graph[nodes[np.concatenate([[0], np.cumsum(sizes)[:-1]])]])
        type_ids.append(np.full(sizes.size, _TYPE_ID[name]))
    if not members:
        empty = np.empty(0, dtype=np.int64)
        return Substructures(members=empty, ptr=np.zeros(1, dtype=np.int64), type_id=empty), empty
    sizes = np.concatenate([size for size, _ in members]).astype(np.int64, copy=False)
    flat = np.concatenate([nodes for _, nodes in members]).astype(np.int64, copy=False)
    members.clear()  # the parts, as large as `flat`, are not needed while it is reordered below
    instances = Substructures(members=flat, ptr=np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64),
                              type_id=np.concatenate(type_ids).astype(np.int64, copy=False))
    del flat
    graph_of = np.concatenate(graph_of)
    by_type_and_graph = np.argsort(instances.type_id * graphs.num_graphs + graph_of, kind="stable")
    return instances.select(by_type_and_graph), graph_of[by_type_and_graph]


def _hop2(indptr: np.ndarray, indices: np.ndarray, starts: np.ndarray, max_size: int,
          generator: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """`hop2_members`, without the second hop where the first fills the instance.

    A start with max_size - 1 or more neighbours keeps itself and a uniformly random subset of max_size - 1
    neighbours (what `hop2_members` keeps then: 2-hop nodes only fill what the 1-hop ones leave), so on dense
    graphs its O(degree^2) 2-hop expansion is skipped; the subset is a row-wise partition of random keys.
    """
    degree = np.diff(indptr)[starts]
    full = degree >= max_size - 1
    sizes = np.where(full, max_size, 0)  # [S] members per start (the others' come from hop2_members)
    parts = []
    if (~full).any():
        rows, nodes = hop2_members(indptr, indices, starts[~full], max_size, generator)
        sizes[~full] = np.bincount(rows, minlength=int((~full).sum()))
        parts.append((np.flatnonzero(~full), nodes))
    crowded = np.flatnonzero(full)
    crowded = crowded[np.argsort(degree[crowded], kind="stable")]  # by degree: chunks of similar widths
    while crowded.size:
        # a chunk's [B, d_max] keys stay within _KEY_ENTRIES (a hub's row alone if it must)
        width = np.maximum.accumulate(degree[crowded])
        take = max(1, int(np.searchsorted(np.arange(1, crowded.size + 1) * width, _KEY_ENTRIES, side="right")))
        which, crowded = crowded[:take], crowded[take:]
        centre, count = starts[which], degree[which]  # [B]
        keys = generator.random((which.size, int(count.max())))  # [B, d_max] a random key per neighbour slot
        keys[np.arange(keys.shape[1]) >= count[:, None]] = np.inf  # past the row's neighbours
        slot = np.argpartition(keys, max_size - 2, axis=1)[:, : max_size - 1]  # [B, max_size - 1] smallest keys
        members = np.concatenate([centre[:, None], indices[indptr[centre][:, None] + slot]], axis=1)
        parts.append((which, np.sort(members, axis=1).ravel()))
    offsets = np.concatenate([[0], np.cumsum(sizes)])  # rows in start order, members ascending in each
    nodes = np.empty(int(offsets[-1]), dtype=np.int64)
    for which, flat in parts:
        nodes[segment_positions(offsets[which], sizes[which])] = flat
    return np.repeat(np.arange(starts.size), sizes), nodes


def _beam(caps: list[int | None]) -> int | None:
    """Partial instances a graph keeps per level of a family: None (all) when a size is uncapped."""
    return None if any(cap is None for cap in caps) else max(_BEAM * max(caps), _BEAM_MIN)


def _thin(graph: np.ndarray, beam: int | None, num_graphs: int,
          generator: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Rows kept (`graph`: each row's graph): in a graph of more than `beam` rows each row with probability
    beam / count, so about `beam` stay; all when `beam` is None. Also which graphs were thinned: bool [G]."""
    count = np.bincount(graph, minlength=num_graphs)  # [G]
    if beam is None or count.max(initial=0) <= beam:
        return np.arange(graph.size), np.zeros(num_graphs, dtype=bool)
    keep_probability = np.minimum(1.0, beam / np.maximum(count, 1))[graph]
    return np.flatnonzero(generator.random(graph.size) < keep_probability), count > beam


def _first_edges(graphs: GraphSet, indptr: np.ndarray, beam: int | None,
                 generator: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The first level of a search, (node, CSR slot) per edge: every edge of a graph with at most `beam` of
    them, else about `beam` random distinct ones, drawn without touching the graph's other edges (a dense
    graph's millions of edges are never listed). Also which graphs were thinned: bool [G]."""
    first = indptr[graphs.ptr]  # [G+1] each graph's slots are first[g]:first[g+1]
    count = np.diff(first)
    thinned = np.zeros(graphs.num_graphs, dtype=bool) if beam is None else count > beam
    exact = np.flatnonzero(~thinned)
    slots = [segment_positions(first[exact], count[exact])]
    if thinned.any():
        crowded = np.flatnonzero(thinned)
        picks = first[crowded][:, None] + (generator.random((crowded.size, beam)) * count[crowded][:, None]).astype(
            np.int64)  # [C, beam] with repeats
        slots.append(np.unique(picks))
    slot = np.sort(np.concatenate(slots))
    return np.searchsorted(indptr, slot, side="right") - 1, slot, thinned


def _expand_thinned(last: np.ndarray, graph: np.ndarray, indptr: np.ndarray, beam: int | None, num_graphs: int,
                    generator: np.random.Generator, after: np.ndarray | None = None):
    """Each partial row's extensions, (partial row, CSR slot) of every neighbour of `last` (past CSR position
    `after` when given), thinned as `_thin` thins (`graph`: each partial row's graph), listing at most
    `_CHUNK_ROWS` of them at a time. Also which graphs were thinned: bool [G].

    The same rows and the same random draws as thinning the whole expansion at once (the keep probabilities
    depend only on each graph's count, and the uniform draws come chunk after chunk from one stream), so the
    peak holds what is kept rather than every neighbour of every partial instance.
    """
    start = indptr[last] if after is None else after + 1
    count = indptr[last + 1] - start  # [M] neighbours each partial row can grow by
    per_graph = np.bincount(graph, weights=count, minlength=num_graphs)  # [G] exact integers as floats
    if beam is None or per_graph.max(initial=0) <= beam:
        return np.repeat(np.arange(last.size), count), segment_positions(start, count), np.zeros(num_graphs, bool)
    keep_probability = np.minimum(1.0, beam / np.maximum(per_graph, 1))[graph]  # [M]
    ends = np.cumsum(count)
    rows, slots = [], []
    first = 0
    while first < last.size:
        listed = ends[first - 1] if first else 0
        stop = max(first + 1, int(np.searchsorted(ends, listed + _CHUNK_ROWS, side="right")))
        row = np.repeat(np.arange(first, stop), count[first:stop])
        kept = generator.random(row.size) < keep_probability[row]
        rows.append(row[kept])
        slots.append(segment_positions(start[first:stop], count[first:stop])[kept])
        first = stop
    return np.concatenate(rows), np.concatenate(slots), per_graph > beam


def _distinct_rows(rows: np.ndarray, graph: np.ndarray) -> np.ndarray:
    """`np.unique(rows, axis=0)` (`graph`: each row's graph), sorted a few graphs at a time to bound its copies.

    The same rows in the same order: each row holds ascending nodes of one graph, and graphs own consecutive
    node ids, so the lexicographic order lists the rows graph by graph.
    """
    if rows.shape[0] <= _CHUNK_ROWS:
        return np.unique(rows, axis=0)
    if bool(np.any(np.diff(graph) < 0)):
        order = np.argsort(graph, kind="stable")
        rows, graph = rows[order], graph[order]
    parts, first = [], 0
    while first < rows.shape[0]:
        stop = int(np.searchsorted(graph, graph[min(first + _CHUNK_ROWS, rows.shape[0]) - 1], side="right"))
        parts.append(np.unique(rows[first:stop], axis=0))
        first = stop
    return np.concatenate(parts)


def _paths_and_cycles(graphs: GraphSet, indptr: np.ndarray, indices: np.ndarray, adjacent: PairLookup,
                      path_caps: dict, cycle_caps: dict, beam: int | None,
                      generator: np.random.Generator) -> dict[str, np.ndarray]:
    """Induced paths and induced cycles of the wanted sizes, from partial induced paths grown level by level.

    A partial path p_0..p_{L-1} grows by a neighbour w of p_{L-1} off the path. If w touches no node p_0..p_{L-2}
    the longer path is induced (a path instance); if w touches p_0 and no other (L >= 2), p_0..p_{L-1} w is
    an induced cycle (a cycle instance), not grown further. While a graph's search is exhaustive, each of its
    instances is kept once, where it is found canonically: a path from its lower end, a cycle from its lowest
    node towards its lower neighbour (so once no path size is left only partial paths rooted at their lowest
    node grow). Once a graph has been thinned (the beam), every orientation counts and repeats are dropped,
    so that the thinned search wastes nothing. A size's instances are all found at one level, where they are
    capped per graph, so that only the kept ones are held while the search goes on.
    """
    longest = max(k - 1 for k in [*path_caps, *cycle_caps])  # an instance of k nodes grows from k - 1 of them
    partial = np.arange(graphs.num_nodes, dtype=np.int64)[:, None]  # [M, L] partial induced paths
    lowest = np.ones(partial.shape[0], dtype=bool)  # [M] is p_0 the path's lowest node
    thinned = np.zeros(graphs.num_graphs, dtype=bool)  # [G] graphs whose search is no longer exhaustive
    out: dict[str, np.ndarray] = {}

    def emit(name: str, cap: int | None, rows: np.ndarray, canonical: np.ndarray) -> None:
        """Keeps the canonical rows of exhaustive graphs and the distinct rows of thinned ones, capped per graph."""
        graph = graphs.node_graph[rows[:, 0]]  # every node of a row lies in one graph
        sampled = thinned[graph]
        rows = np.sort(rows, axis=1)
        parts = [rows[~sampled & canonical]]
        if sampled.any():
            parts.append(_distinct_rows(rows[sampled], graph[sampled]))
        rows = np.concatenate(parts)
        out[name] = _cap_per_graph(rows, graphs.node_graph[rows[:, 0]], cap, generator)

    for length in range(1, longest + 1):
        if length == 1:  # the partial paths are the nodes themselves (row v is node v)
            row, slot, thinned = _first_edges(graphs, indptr, None if beam is None else _OVERSAMPLE * beam,
                                              generator)
        else:
            row, slot, over = _expand_thinned(partial[:, -1], graphs.node_graph[partial[:, 0]], indptr,
                                              None if beam is None else _OVERSAMPLE * beam, graphs.num_graphs,
                                              generator)
            thinned |= over
        w = indices[slot]
        base = partial[row]  # [M', L]
        fresh = ~(base == w[:, None]).any(axis=1)
        base, w, row = base[fresh], w[fresh], row[fresh]
        touches = np.stack([adjacent(base[:, j], w) for j in range(length - 1)], axis=1) if length > 1 else (
            np.zeros((w.size, 0), dtype=bool))  # [M', L-1] chords to p_0..p_{L-2}
        size = length + 1
        if length >= 2 and size in cycle_caps:
            closes = touches[:, 0] & ~touches[:, 1:].any(axis=1)
            canonical = lowest[row] & (w > base[:, 0]) & (base[:, 1] < w)
            emit(f"cycle_{size}", cycle_caps[size], np.concatenate([base, w[:, None]], axis=1)[closes], canonical[closes])
        induced = ~touches.any(axis=1)
        grown = np.concatenate([base[induced], w[induced, None]], axis=1)  # [M'', L+1]
        grown_lowest = lowest[row[induced]] & (w[induced] > base[induced, 0])
        if size in path_caps:
            emit(f"path_{size}", path_caps[size], grown, grown[:, 0] < grown[:, -1])
        # paths still to come need every partial path; cycles only those rooted at their lowest node
        keep = np.ones(grown.shape[0], dtype=bool)
        if not any(k > size for k in path_caps):
            keep = grown_lowest | thinned[graphs.node_graph[grown[:, 0]]]
        kept, over = _thin(graphs.node_graph[grown[keep, 0]], beam, graphs.num_graphs, generator)
        thinned |= over
        partial, lowest = grown[keep][kept], grown_lowest[keep][kept]
        if partial.shape[0] == 0:
            break
    return out


def _stars(graphs: GraphSet, indptr: np.ndarray, indices: np.ndarray, adjacent: PairLookup, star_caps: dict,
           beam: int | None, generator: np.random.Generator) -> dict[str, np.ndarray]:
    """Induced stars: a centre and k pairwise non-adjacent neighbours, leaves taken in CSR order (each once),
    capped per graph."""
    # [M] one leaf so far, at CSR slot `last` (twice the beam drawn: about half the slots have no later one)
    centre, last, _ = _first_edges(graphs, indptr, None if beam is None else 2 * beam, generator)
    followed = last + 1 < indptr[centre + 1]  # another leaf can follow in the centre's list
    centre, last = centre[followed], last[followed]
    leaves = indices[last][:, None]  # [M, 1]
    out: dict[str, np.ndarray] = {}
    for count in range(2, max(star_caps) + 1):
        row, position, _ = _expand_thinned(centre, graphs.node_graph[centre], indptr,
                                           None if beam is None else _OVERSAMPLE * beam, graphs.num_graphs,
                                           generator, after=last)
        w = indices[position]
        ok = ~np.stack([adjacent(leaves[row, j], w) for j in range(count - 1)], axis=1).any(axis=1)
        row, position, w = row[ok], position[ok], w[ok]
        kept, _ = _thin(graphs.node_graph[centre[row]], beam, graphs.num_graphs, generator)
        row, position, w = row[kept], position[kept], w[kept]
        centre, last = centre[row], position
        leaves = np.concatenate([leaves[row], w[:, None]], axis=1)  # [M', count]
        if count in star_caps:
            rows = np.sort(np.concatenate([centre[:, None], leaves], axis=1), axis=1)
            out[f"star_{count}"] = _cap_per_graph(rows, graphs.node_graph[centre], star_caps[count], generator)
        if centre.size == 0:
            break
    return out


def _cap_per_graph(rows: np.ndarray, graph: np.ndarray, cap: int | None, generator: np.random.Generator) -> np.ndarray:
    """A uniformly random subset of at most `cap` rows of each graph, in the rows' order."""
    if cap is None or np.bincount(graph).max(initial=0) <= cap:
        return rows
    order = np.argsort(graph + generator.random(graph.size))  # by graph, random inside (one float key)
    start = np.searchsorted(graph[order], graph[order], side="left")
    chosen = np.sort(order[np.arange(order.size) - start < cap])
    return rows[chosen]


def _starts(graphs: GraphSet, cap: int | None, generator: np.random.Generator) -> np.ndarray:
    """Start nodes of the neighbourhood types: every node in a random order, or `cap` random nodes per graph."""
    starts = generator.permutation(graphs.num_nodes).astype(np.int64)
    if cap is None:
        return starts
    graph = graphs.node_graph[starts]
    order = np.argsort(graph, kind="stable")  # by graph, the random order inside
    rank = np.arange(order.size) - np.searchsorted(graph[order], graph[order], side="left")
    return starts[np.sort(order[rank < cap])]


def _distinct_sets(sizes: np.ndarray, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Drops repeated node sets (each kept at its first occurrence): (sizes, nodes) of the distinct ones.

    Rows are told apart by a 64-bit hash first (wrapping products with fixed odd multipliers); only rows
    whose hash repeats are compared exactly, so the result is exact and the exact comparison small.
    """
    if sizes.size == 0:
        return sizes, nodes
    width = int(sizes.max())
    padded = np.full((sizes.size, width), -1, dtype=np.int64)  # [R, w]
    column = np.arange(nodes.size) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    padded[np.repeat(np.arange(sizes.size), sizes), column] = nodes
    multipliers = np.random.default_rng(_HASH_SEED).integers(1, 2**62, width) * 2 + 1  # odd
    with np.errstate(over="ignore"):
        digest = (padded * multipliers).sum(axis=1)  # [R] wrapping int64 arithmetic
    _, first, counts = np.unique(digest, return_index=True, return_counts=True)
    keep = np.zeros(sizes.size, dtype=bool)
    keep[first[counts == 1]] = True
    shared = np.flatnonzero(np.isin(digest, digest[first[counts > 1]]))  # rows whose hash repeats
    if shared.size:
        _, exact_first = np.unique(padded[shared], axis=0, return_index=True)
        keep[shared[exact_first]] = True
    rows = padded[keep]
    return sizes[keep], rows[rows >= 0]
