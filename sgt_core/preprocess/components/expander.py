"""Exphormer's random regular expander: one across the graph (or each component), or one per graph of many."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping

import numpy as np
import scipy.sparse
import scipy.sparse.csgraph

from sgt_core.config.preprocess import ExpanderConfig
from sgt_core.preprocess.blocks import table_block
from sgt_core.preprocess.components.base import ComponentOutput, GraphView
from sgt_core.preprocess.expander import hamiltonian_expander
from sgt_core.preprocess.many_graphs.expanders import expanders_per_unit

log = logging.getLogger(__name__)


class ExpanderEdges:
    """`expander` edges: d/2 random Hamiltonian cycles, near-Ramanujan checked (Exphormer Appendix C).

    One graph: one expander over all nodes, or one per connected component (`per_component`). Many graphs:
    one per graph as Exphormer builds them (or per connected component inside each graph with
    `per_component`), drawn for all graphs at once (`many_graphs.expanders.expanders_per_unit`); a graph too
    small or too dense for degree d gets a lower even degree, or the complete graph minus its own edges.

    Its output's `fields["pairs"]` holds the sorted keys dst * num_real + src of its pairs, for the anchors'
    precedence rule.
    """

    name = "expander"

    def __init__(self, config: ExpanderConfig) -> None:
        self.config = config

    def __call__(self, graph: GraphView, earlier: Mapping[str, ComponentOutput]) -> ComponentOutput:
        started = time.perf_counter()
        config = self.config
        log.info("preprocess: drawing the degree-%d expander", config.degree)
        generator = np.random.default_rng(graph.seed)  # the plain seed, as the expander always had
        n = graph.num_real
        if graph.graphs is None:
            table, stats = _expander_neighbours(graph.edges, n, config, generator)
            block = table_block(table, "expander", graph.num_total, graph.code_dtype)
            pairs = np.repeat(np.arange(n, dtype=np.int64), table.shape[1]) * n + table.ravel()  # sorted
        else:
            units, unit_ptr = _units(graph, config.per_component)
            drawn = expanders_per_unit(
                units, unit_ptr, graph.edges, config.degree, generator=generator,
                ramanujan_slack=config.ramanujan_slack, max_tries=config.max_tries,
                spectral_check_steps=config.spectral_check_steps)
            block = graph.block(drawn.src, drawn.dst, "expander")
            dst = np.repeat(np.arange(graph.num_total, dtype=np.int64), np.diff(block.indptr))
            pairs = dst * n + block.indices  # sorted: CSR rows ascend, columns ascend inside a row
            stats = drawn.stats(config.degree, config.ramanujan_slack)
            if config.per_component:
                stats["expander_components"] = int(unit_ptr.size - 1)
        stats["seconds_expander"] = time.perf_counter() - started
        return ComponentOutput(blocks=[block], stats=stats, fields={"pairs": pairs})


def _units(graph: GraphView, per_component: bool) -> tuple[np.ndarray, np.ndarray]:
    """The node sets that get one expander each: the graphs, or the connected components (inside graphs)."""
    if not per_component:
        return np.arange(graph.num_real), graph.graphs.ptr
    adjacency = scipy.sparse.csr_matrix(
        (np.ones(graph.edges.shape[1], dtype=np.int8), (graph.edges[0], graph.edges[1])),
        shape=(graph.num_real, graph.num_real))
    count, component = scipy.sparse.csgraph.connected_components(adjacency, directed=False)
    order = np.argsort(component, kind="stable")  # nodes grouped by component, ascending inside each
    return order, np.concatenate([[0], np.cumsum(np.bincount(component, minlength=count))])


def _expander_neighbours(
    graph_edges: np.ndarray,
    num_nodes: int,
    config: ExpanderConfig,
    generator: np.random.Generator,
) -> tuple[np.ndarray, dict]:
    """The expander as a neighbour table [n, d] (rows sorted), across all nodes or inside each component."""
    degree = config.degree
    options = {"ramanujan_slack": config.ramanujan_slack, "max_tries": config.max_tries,
               "spectral_check_steps": config.spectral_check_steps}  # `hamiltonian_expander`'s, same names
    if not config.per_component:
        expander = hamiltonian_expander(num_nodes, degree, generator=generator, forbidden_edge_index=graph_edges,
                                        **options)
        return expander.neighbours, {
            "expander_second_eigenvalue": expander.second_eigenvalue, "expander_bound": expander.bound,
            "expander_tries": expander.tries, "expander_lanczos_steps": expander.spectral.steps,
            "expander_lanczos_residual": expander.spectral.residual,
        }
    adjacency = scipy.sparse.coo_matrix(
        (np.ones(graph_edges.shape[1], dtype=np.int8), (graph_edges[0], graph_edges[1])),
        shape=(num_nodes, num_nodes),
    )
    num_components, component = scipy.sparse.csgraph.connected_components(adjacency, directed=False)
    order = np.argsort(component, kind="stable")  # nodes grouped by component, ascending inside each
    sizes = np.bincount(component, minlength=num_components)
    local = np.empty(num_nodes, dtype=np.int64)  # each node's id inside its component
    local[order] = np.arange(num_nodes) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    # Every edge joins two nodes of one component: group the edges by it once, in local ids.
    edge_component = component[graph_edges[0]]
    edge_sizes = np.bincount(edge_component, minlength=num_components)
    local_edges = local[graph_edges[:, np.argsort(edge_component, kind="stable")]]  # [2, E]
    table = np.empty((num_nodes, degree), dtype=np.int64)
    worst, bound = 0.0, float("nan")
    # A loop over components (each gets its own expander), never over nodes.
    components = zip(np.split(order, np.cumsum(sizes)[:-1]), np.split(local_edges, np.cumsum(edge_sizes)[:-1], axis=1))
    for members, forbidden in components:
        expander = hamiltonian_expander(members.size, degree, generator=generator, forbidden_edge_index=forbidden,
                                        **options)
        # members ascend, so mapping local ids to global ones keeps every row sorted
        table[members] = members[expander.neighbours]
        worst, bound = max(worst, expander.second_eigenvalue), expander.bound
    return table, {"expander_second_eigenvalue": worst, "expander_bound": bound,
                   "expander_components": num_components}
