"""Exphormer's Hamiltonian-cycle expanders, one inside each graph (or component), drawn for all graphs at once."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import numpy as np
import torch

from sgt_core.errors import ConfigError
from sgt_core.preprocess.adjacency import segment_positions
from sgt_core.preprocess.expander import hamiltonian_expander
from sgt_core.preprocess.many_graphs import layout

__all__ = ["UnitExpanders", "expanders_per_unit"]

log = logging.getLogger(__name__)

# Rounds of swaps allowed for one cycle of a draw; a unit whose cycle still clashes after them is redrawn
# at the next lower degree (its degree was too tight for random cycles to fill).
_MAX_REPAIR_ROUNDS = 100
# Random swap partners scored per clash during repair.
_REPAIR_CANDIDATES = 16
# Clashes of one unit repaired per round, at most about n / _CLASH_SPACING of them: more would mostly overlap
# (each swap claims six positions) and be thrown away after being scored.
_CLASH_SPACING = 12
# Entries sum(n^2) of the per-pair bitmaps of one chunk of units (bool, two of them).
_BITMAP_ENTRIES = 1 << 25
_BIG = np.iinfo(np.int64).max // 4


@dataclass(frozen=True, eq=False)
class UnitExpanders:
    """The expander edges of every unit (graph or component) and how each unit's expander was obtained.

    Attributes:
        src: int64 [E_x] global node ids of the expander edges' sources, every undirected pair in both
            directions.
        dst: int64 [E_x] global node ids of their destinations.
        degree: int64 [U] the even degree each unit's expander has; 0 for a unit that got the complete graph
            minus its own edges (`complete`) or no expander at all.
        complete: bool [U] the unit got the complete graph minus its own edges (too small or too dense for a
            cycle: fewer than 3 nodes, or a node adjacent to all others but at most one).
        second_eigenvalue: float64 [U] second-largest |adjacency eigenvalue| of the accepted draw (NaN where it
            was not computed: degree 2, which always passes, and the complete graphs).
        over_bound: bool [U] no draw met the near-Ramanujan bound within max_tries; the last one was kept.
        tries: int64 [U] draws made.
    """

    src: np.ndarray
    dst: np.ndarray
    degree: np.ndarray
    complete: np.ndarray
    second_eigenvalue: np.ndarray
    over_bound: np.ndarray
    tries: np.ndarray

    def stats(self, degree: int, ramanujan_slack: float) -> dict[str, float]:
        """Counts of units by how they were served, and the worst spectral margin (<= 0: all within bound)."""
        checked = ~np.isnan(self.second_eigenvalue)
        bound = 2.0 * np.sqrt(np.maximum(self.degree - 1, 0)) + ramanujan_slack  # [U]
        full = checked & (self.degree == degree)
        margins = (self.second_eigenvalue - bound)[checked]
        return {
            "expander_graphs": int(self.degree.size),
            "expander_reduced_degree_graphs": int(np.count_nonzero((self.degree < degree) & (self.degree >= 2))),
            "expander_complete_graphs": int(np.count_nonzero(self.complete)),
            "expander_empty_graphs": int(np.count_nonzero((self.degree == 0) & ~self.complete)),
            "expander_over_bound_graphs": int(np.count_nonzero(self.over_bound)),
            "expander_max_tries": int(self.tries.max(initial=0)),
            "expander_second_eigenvalue": float(self.second_eigenvalue[full].max(initial=0.0)),
            "expander_bound": 2.0 * math.sqrt(degree - 1) + ramanujan_slack,
            "expander_worst_margin": float(margins.max()) if margins.size else 0.0,
        }


def expanders_per_unit(
    unit_nodes: np.ndarray,
    unit_ptr: np.ndarray,
    edge_index: np.ndarray,
    degree: int,
    *,
    generator: np.random.Generator,
    ramanujan_slack: float = 0.1,
    max_tries: int = 20,
    spectral_check_steps: int = 100,
) -> UnitExpanders:
    """One random near-Ramanujan expander inside every unit: Exphormer's Hamiltonian-cycle variant (Appendix C).

    A unit is a set of nodes (a graph of a dataset of many, or a connected component); no expander edge
    joins two units. Unit u of n nodes gets the union of d_u / 2 random Hamiltonian cycles, disjoint from the
    unit's own edges, from self-loops and from each other (so it is exactly d_u-regular), where d_u is the
    largest even degree <= `degree` that its edges leave room for (n - 1 - its largest node degree). The
    cycles of all units are drawn at once, as batched random permutations, and repaired by vectorised swaps
    (the one-graph `expander._repair_cycle` rule: a clashing edge's endpoint swapped with the best of a few
    random partners, all units and all non-overlapping clashes in the same round). A unit whose cycles still
    clash after `_MAX_REPAIR_ROUNDS` rounds is redrawn at degree d_u - 2; a draw whose second-largest
    |eigenvalue| exceeds 2 * sqrt(d_u - 1) + ramanujan_slack (exact: a batched dense `eigvalsh` per size) is
    redrawn; only the failing units are redrawn, up to `max_tries` draws per unit, after which the last draw
    is kept and counted (`over_bound`; a dataset of thousands of graphs should not fail on one).

    Units of fewer than 3 nodes, or whose edges leave no room for even one cycle, get the complete graph
    minus their own edges (every pair an expander could add); so do units whose degree fell to 0 or whose
    tries ran out before any complete draw. Units above `layout.DENSE_MAX_NODES` nodes are drawn one by one
    by the one-graph `hamiltonian_expander` (with its Lanczos check, `spectral_check_steps`).

    Cost: O(sum of n_u^2) memory per chunk of units and O(sum of d_u * n_u + E) work per draw, plus one
    dense eigendecomposition per unit and draw (O(n_u^3)); rounds of repair are Python steps, units never.

    Args:
        unit_nodes: int64 [N'] the units' nodes, unit by unit, ascending inside each unit.
        unit_ptr: int64 [U+1] unit u holds unit_nodes[unit_ptr[u]:unit_ptr[u+1]] (non-empty).
        edge_index: int [2, E] global edges, both directions, never joining two units; no self-loops.
        degree: the even degree d wanted.
        generator: the only source of randomness.
        ramanujan_slack: as `hamiltonian_expander`'s.
        max_tries: as `hamiltonian_expander`'s.
        spectral_check_steps: as `hamiltonian_expander`'s.
    """
    sizes = np.diff(unit_ptr)  # [U]
    num_units = sizes.size
    num_nodes = int(max(unit_nodes.max(initial=-1), edge_index.max(initial=-1))) + 1
    unit_of = np.full(num_nodes, -1, dtype=np.int64)
    unit_of[unit_nodes] = np.repeat(np.arange(num_units), sizes)
    local = np.zeros(num_nodes, dtype=np.int64)
    local[unit_nodes] = np.arange(unit_nodes.size) - np.repeat(unit_ptr[:-1], sizes)
    src = edge_index[0]
    node_degree = np.bincount(src, minlength=num_nodes)  # simple graph: neighbours per node
    busiest = np.maximum.reduceat(node_degree[unit_nodes], unit_ptr[:-1]) if num_units else sizes  # [U]
    room = sizes - 1 - busiest
    target = np.minimum(degree, room - room % 2)  # [U] largest even degree the unit leaves room for
    target[sizes < 3] = 0

    result_degree = np.zeros(num_units, dtype=np.int64)
    complete = np.zeros(num_units, dtype=bool)
    second = np.full(num_units, np.nan)
    over = np.zeros(num_units, dtype=bool)
    tries = np.zeros(num_units, dtype=np.int64)
    edge_unit = unit_of[src]  # [E]
    edge_ptr = np.concatenate([[0], np.cumsum(np.bincount(edge_unit, minlength=num_units))])  # [U+1]
    if edge_unit.size > 1 and bool(np.any(edge_unit[1:] < edge_unit[:-1])):  # graphs' edges come grouped
        edge_index = edge_index[:, np.argsort(edge_unit, kind="stable")]
    local_edges = local[edge_index]  # [2, E] grouped by unit
    parts_src, parts_dst = [], []

    large = np.flatnonzero(sizes > layout.DENSE_MAX_NODES)
    for unit in large.tolist():  # rare: the one-graph expander, one unit at a time
        forbidden = local_edges[:, edge_ptr[unit] : edge_ptr[unit + 1]]
        nodes = unit_nodes[unit_ptr[unit] : unit_ptr[unit + 1]]
        d = int(target[unit])
        while d >= 2:
            try:
                drawn = hamiltonian_expander(int(sizes[unit]), d, generator=generator, forbidden_edge_index=forbidden,
                                             ramanujan_slack=ramanujan_slack, max_tries=max_tries,
                                             spectral_check_steps=spectral_check_steps)
            except ConfigError:
                d -= 2  # too tight for random cycles (or no draw within the bound): a lower degree
                continue
            table = drawn.neighbours
            parts_src.append(nodes[table.ravel()])
            parts_dst.append(np.repeat(nodes, d))
            result_degree[unit], second[unit], tries[unit] = d, drawn.second_eigenvalue, drawn.tries
            break
        # a large unit without room for one cycle gets no expander (its complement would be ~n^2 / 2 edges)

    small = np.flatnonzero(sizes <= layout.DENSE_MAX_NODES)
    for chunk in _chunks(small, sizes):
        drawn = _draw_chunk(chunk, sizes[chunk], target[chunk], local_edges, edge_ptr, generator,
                            ramanujan_slack, max_tries)
        unit, a, b = drawn.pairs
        nodes_start = unit_ptr[chunk][unit]
        parts_src.append(unit_nodes[nodes_start + b])
        parts_dst.append(unit_nodes[nodes_start + a])
        result_degree[chunk], complete[chunk], second[chunk] = drawn.degree, drawn.complete, drawn.second
        over[chunk], tries[chunk] = drawn.over, drawn.tries
    empty = np.empty(0, dtype=np.int64)
    return UnitExpanders(
        src=np.concatenate(parts_src) if parts_src else empty,
        dst=np.concatenate(parts_dst) if parts_dst else empty,
        degree=result_degree, complete=complete, second_eigenvalue=second, over_bound=over, tries=tries,
    )


def _chunks(units: np.ndarray, sizes: np.ndarray) -> list[np.ndarray]:
    """Consecutive runs of `units` whose bitmaps (sum of n^2 entries) stay within _BITMAP_ENTRIES."""
    if units.size == 0:
        return []
    cumulative = np.cumsum(sizes[units].astype(np.int64) ** 2)
    cuts = np.searchsorted(cumulative, np.arange(1, int(cumulative[-1] // _BITMAP_ENTRIES) + 1) * _BITMAP_ENTRIES)
    return [part for part in np.split(units, np.unique(cuts)) if part.size]


@dataclass
class _Drawn:
    pairs: tuple[np.ndarray, np.ndarray, np.ndarray]  # (unit index in chunk, a, b) local ids: edge a <- b
    degree: np.ndarray
    complete: np.ndarray
    second: np.ndarray
    over: np.ndarray
    tries: np.ndarray


class _Bitmaps:
    """Per-unit n x n pair bitmaps of a chunk, back to back: `static` (own edges and the diagonal, which the
    expander must avoid) and `taken` (static plus the cycles drawn so far)."""

    def __init__(self, sizes: np.ndarray, local_edges: np.ndarray, edge_ptr: np.ndarray, units: np.ndarray) -> None:
        self.sizes = sizes.astype(np.int64)
        squares = self.sizes**2
        self.base = np.concatenate([[0], np.cumsum(squares)[:-1]]).astype(np.int64)  # [K]
        self.static = np.zeros(int(squares.sum()), dtype=bool)
        counts = edge_ptr[units + 1] - edge_ptr[units]
        if units.size and units[-1] - units[0] + 1 == units.size:  # consecutive units: one slice of edges
            a, b = local_edges[:, edge_ptr[units[0]] : edge_ptr[units[-1] + 1]]
        else:
            a, b = local_edges[:, segment_positions(edge_ptr[units], counts)]
        self.static[np.repeat(self.base, counts) + a * np.repeat(self.sizes, counts) + b] = True
        diagonal_row = np.repeat(np.arange(units.size), self.sizes)
        diagonal = segment_positions(np.zeros(units.size, dtype=np.int64), self.sizes)  # 0..n-1 per unit
        self.static[self.base[diagonal_row] + diagonal * (self.sizes[diagonal_row] + 1)] = True
        self.taken = self.static.copy()

    def region(self, units: np.ndarray) -> np.ndarray:
        """Flat positions of the given units' bitmaps."""
        return segment_positions(self.base[units], self.sizes[units] ** 2)

    def index(self, unit: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return self.base[unit] + a * self.sizes[unit] + b


def _draw_chunk(units: np.ndarray, sizes: np.ndarray, target: np.ndarray, local_edges: np.ndarray,
                edge_ptr: np.ndarray, generator: np.random.Generator, slack: float, max_tries: int) -> _Drawn:
    """Draws the expanders of one chunk of small units; failing units are redrawn until max_tries."""
    k = units.size
    maps = _Bitmaps(sizes, local_edges, edge_ptr, units)
    degree = target.astype(np.int64).copy()
    second = np.full(k, np.nan)
    over = np.zeros(k, dtype=bool)
    tries = np.zeros(k, dtype=np.int64)
    complete = degree < 2
    pending = np.flatnonzero(~complete)
    while pending.size:
        tries[pending] += 1
        region = maps.region(pending)
        maps.taken[region] = maps.static[region]
        ok = _draw_cycles(maps, pending, degree[pending] // 2, generator)  # [P]
        degree[pending[~ok]] -= 2  # cycles could not be completed: a lower degree next
        drawn = pending[ok]
        value = _second_eigenvalues(maps, drawn, degree[drawn])  # [D], NaN for degree 2
        bound = 2.0 * np.sqrt(degree[drawn] - 1.0) + slack
        passed = np.isnan(value) | (value <= bound)
        second[drawn] = value
        exhausted = tries >= max_tries
        over[drawn[~passed & exhausted[drawn]]] = True  # the last draw is kept
        retry = np.concatenate([drawn[~passed & ~exhausted[drawn]], pending[~ok]])
        give_up = retry[(degree[retry] < 2) | exhausted[retry]]
        complete[give_up] = True
        pending = np.sort(retry[(degree[retry] >= 2) & ~exhausted[retry]])
    # The complete graph minus the unit's own edges: every pair outside `static`.
    full = np.flatnonzero(complete)
    degree[full] = 0
    second[full] = np.nan
    maps.taken[maps.region(full)] = True
    flat = np.flatnonzero(maps.taken & ~maps.static)  # ascending: unit by unit, row by row
    unit = np.searchsorted(maps.base, flat, side="right") - 1
    offset = flat - maps.base[unit]
    a, b = np.divmod(offset, maps.sizes[unit])
    return _Drawn((unit, a, b), degree, complete, second, over, tries)


def _draw_cycles(maps: _Bitmaps, units: np.ndarray, cycles: np.ndarray, generator: np.random.Generator) -> np.ndarray:
    """Adds `cycles[i]` edge-disjoint random Hamiltonian cycles to unit units[i]'s `taken` bitmap, all units at
    once; returns which units got all of theirs (the others' bitmaps hold a partial draw)."""
    ok = np.ones(units.size, dtype=bool)
    for c in range(int(cycles.max(initial=0))):
        active = np.flatnonzero(ok & (cycles > c))
        if active.size == 0:
            break
        order, unit_of, nxt, prv = _random_cycles(maps.sizes[units[active]], generator)
        done = _repair(maps, units[active], order, unit_of, nxt, prv, generator)  # [A]
        ok[active[~done]] = False
        # write the completed cycles: both directions of every edge (order[j], order[nxt[j]])
        keep = done[unit_of]
        unit = units[active][unit_of[keep]]
        a, b = order[keep], order[nxt[keep]]
        maps.taken[maps.index(unit, a, b)] = True
        maps.taken[maps.index(unit, b, a)] = True
    return ok


def _random_cycles(sizes: np.ndarray, generator: np.random.Generator):
    """Uniform random cyclic orders of each unit's nodes, back to back: order [T] (local ids), the unit of each
    position [T], and each position's successor and predecessor on its unit's cycle."""
    count = sizes.size
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])  # [A]
    unit_of = np.repeat(np.arange(count), sizes)  # [T]
    # argsort of unit + U[0, 1): positions grouped by unit, uniformly shuffled inside each
    order = np.argsort(unit_of + generator.random(unit_of.size), kind="stable") - starts[unit_of]  # [T]
    position = np.arange(unit_of.size)
    last = position == (starts + sizes - 1)[unit_of]
    nxt = np.where(last, starts[unit_of], position + 1)
    first = position == starts[unit_of]
    prv = np.where(first, (starts + sizes - 1)[unit_of], position - 1)
    return order, unit_of, nxt, prv


def _repair(maps: _Bitmaps, units: np.ndarray, order: np.ndarray, unit_of: np.ndarray, nxt: np.ndarray,
            prv: np.ndarray, generator: np.random.Generator) -> np.ndarray:
    """Swaps nodes of the cycles (in place) until no edge clashes with `taken`; bool [A] units without clashes.

    Each round, every clashing edge (order[i], order[p]), p = nxt[i], proposes swapping order[p] with the best
    of `_REPAIR_CANDIDATES` random positions r of its unit (the fewest clashes among the four edges the swap
    changes, ties at random), as the one-graph repair does; the proposals touching disjoint positions are
    applied together (each claims i, p, p's successor, r and r's neighbours; the lowest of a random priority
    wins), and only the changed edges are re-checked. Candidates r in {i, p, nxt[p]} are skipped: for the others
    the four changed edges are distinct, (o[i], o[r]), (o[r], o[nxt p]), (o[prv r], o[p]) and (o[p], o[nxt r]),
    replacing edges i, p, prv r and r, whose clashes are already known. A round costs O(its clashes), not
    O(positions): the clashing positions are kept as a list, and the claims array is reset where it was used.
    """
    sizes = maps.sizes[units]
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    base = maps.base[units]

    def clashes(unit: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return maps.taken[base[unit] + a * sizes[unit] + b]

    clash = clashes(unit_of, order, order[nxt])  # [T] edge j = (order[j], order[nxt[j]])
    pending = np.flatnonzero(clash)  # [K] the clashing positions
    per_round = np.maximum(4, sizes // _CLASH_SPACING)  # [A] clashes a unit repairs per round
    free = np.iinfo(np.int64).max
    owner = np.full(order.size, free, dtype=np.int64)  # claims of the round's proposals, reset after each
    rechecked = np.zeros(order.size, dtype=bool)  # marks the round's re-checked positions, reset after each
    for _ in range(_MAX_REPAIR_ROUNDS):
        if pending.size == 0:
            break
        i, unit = pending, unit_of[pending]  # [K]
        count = np.bincount(unit, minlength=units.size)  # [A]
        if np.any(count > per_round):  # a random share of a crowded unit's clashes (the rest wait a round)
            chosen = generator.random(i.size) < (per_round / np.maximum(count, 1))[unit]
            i, unit = i[chosen], unit[chosen]
        p = nxt[i]
        n = sizes[unit][:, None]  # [K, 1]
        r = starts[unit][:, None] + (generator.random((i.size, _REPAIR_CANDIDATES)) * n).astype(np.int64)  # [K, C]
        before = clash[p][:, None].astype(np.int64) + clash[prv[r]] + clash[r]  # [K, C] (edge i clashes too)
        at = base[unit][:, None]  # [K, 1]
        o_i, o_p, o_after_p = order[i][:, None], order[p][:, None], order[nxt[p]][:, None]
        o_r = order[r]
        taken = maps.taken
        after = (taken[at + o_i * n + o_r].astype(np.int64) + taken[at + o_r * n + o_after_p]
                 + taken[at + order[prv[r]] * n + o_p] + taken[at + o_p * n + order[nxt[r]]])  # [K, C]
        special = (r == i[:, None]) | (r == p[:, None]) | (r == nxt[p][:, None])
        score = np.where(special, _BIG, after - before - 1) + generator.random(r.shape)  # random ties
        pick = np.argmin(score, axis=1)
        usable = ~special[np.arange(i.size), pick]
        i, p, best = i[usable], p[usable], r[np.arange(r.shape[0]), pick][usable]
        # Non-overlapping proposals only: each claims the positions whose entries or edges it changes.
        claims = np.stack([i, p, nxt[p], prv[best], best, nxt[best]], axis=1)  # [K', 6]
        priority = generator.permutation(i.size)
        np.minimum.at(owner, claims.ravel(), np.repeat(priority, 6))
        accept = (owner[claims] == priority[:, None]).all(axis=1)
        owner[claims.ravel()] = free
        i, p, best = i[accept], p[accept], best[accept]
        order[p], order[best] = order[best], order[p]
        recheck = np.concatenate([i, p, prv[best], best])  # distinct: the claims are disjoint
        clash[recheck] = clashes(unit_of[recheck], order[recheck], order[nxt[recheck]])
        # the clashes now: the re-checked edges that clash, and the pending ones no swap changed
        rechecked[recheck] = True
        pending = np.concatenate([pending[~rechecked[pending]], recheck[clash[recheck]]])
        rechecked[recheck] = False
    remaining = np.bincount(unit_of[pending], minlength=units.size)
    return remaining == 0


def _second_eigenvalues(maps: _Bitmaps, units: np.ndarray, degree: np.ndarray) -> np.ndarray:
    """Second-largest |adjacency eigenvalue| of each unit's drawn expander (exact, batched `eigvalsh` per
    size, the batches side by side on the cores); NaN for degree 2 (a cycle: |eigenvalues| <= 2 < the bound,
    always accepted)."""
    value = np.full(units.size, np.nan)
    checked = np.flatnonzero(degree > 2)
    sizes = maps.sizes[units[checked]]
    batches = []
    for n in np.unique(sizes).tolist():
        same = checked[sizes == n]
        step = max(1, layout.BLOCK_ENTRIES // (n * n))
        batches += [(n, same[start : start + step]) for start in range(0, same.size, step)]

    def solve(batch: tuple[int, np.ndarray]) -> None:
        n, part = batch
        region = maps.region(units[part])
        expander = (maps.taken[region] & ~maps.static[region]).reshape(part.size, n, n)  # [B, n, n]
        magnitudes = torch.linalg.eigvalsh(torch.from_numpy(expander).double()).abs()  # [B, n]
        value[part] = magnitudes.sort(dim=1).values[:, -2].numpy()  # the parts are disjoint

    layout.solve_in_threads(solve, batches)
    return value
