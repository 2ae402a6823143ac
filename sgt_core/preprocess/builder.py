"""Building the interaction graph from a loaded graph: graph edges, self-loops, expander, virtual nodes,
AnchorGT's anchor and k-hop edges, DeepGraph's substructure tokens and SAN's Laplacian eigenpairs."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import numpy as np
import scipy.sparse
import scipy.sparse.csgraph
import torch
from torch import Tensor
from torch_geometric.data import Data

from sgt_core.errors import ConfigError
from sgt_core.preprocess.anchors import k_dominating_set, receptive_field_edges
from sgt_core.preprocess.expander import hamiltonian_expander
from sgt_core.preprocess.interaction_graph import EDGE_TYPES, NO_SPD, NODE_KINDS, InteractionGraph
from sgt_core.preprocess.laplacian import laplacian_eigenpairs
from sgt_core.preprocess.substructure_tokens import SubstructureTokens

# Independent random streams per component (numpy SeedSequence entropy [seed, stream]), so switching one
# component on or off never changes what another draws. The expander keeps the plain seed it always had.
_ANCHOR_STREAM = 1
SUBSTRUCTURE_STREAM = 2

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AnchorOptions:
    """The `preprocess.anchors` config group, minus `enabled` (see `anchors.receptive_field_edges`).

    Attributes:
        k: hop radius of the k-dominating set and of the k-hop edges.
        max_khop_per_node: most k-hop edges per node (nearest shells first, random in the last); None: all.
        max_anchors_per_node: most anchor edges per node (nearest anchors by SPD, random ties); None: all,
            as in AnchorGT.
        max_spd: last SPD bucket, shared by farther and unreachable anchors; k < max_spd.
    """

    k: int = 2
    max_khop_per_node: int | None = 32
    max_anchors_per_node: int | None = None
    max_spd: int = 8

    def __post_init__(self) -> None:
        if self.k < 1 or self.max_spd <= self.k:
            raise ConfigError(
                f"preprocess.anchors: need k >= 1 and max_spd > k; got k={self.k}, max_spd={self.max_spd}"
            )


def build_interaction_graph(
    graph: Data,
    *,
    self_loops: bool,
    expander_degree: int | None,
    ramanujan_slack: float,
    expander_max_tries: int,
    virtual_nodes: int,
    seed: int,
    per_component: bool = False,
    anchors: AnchorOptions | None = None,
    substructure_tokens: SubstructureTokens | None = None,
    lpe_eigenpairs: int | None = None,
) -> InteractionGraph:
    """Builds H = graph edges + self-loops + expander + virtual nodes + anchor/k-hop edges + tokens.

    Nodes: the n input nodes, then `virtual_nodes` virtual nodes, then one token per substructure.

    Every (dst, src) pair appears once, so reservoir sampling without replacement over a node's incoming
    edges never draws the same neighbour twice:

    - the input graph is coalesced and has no self-loops (the loaders guarantee it);
    - the expander is generated disjoint from the graph's edges and from self-loops, so it stays exactly
      d-regular;
    - anchor and k-hop edges are disjoint from graph and self pairs and from each other by construction
      (`anchors.receptive_field_edges`). They can coincide with expander pairs; precedence goes to the
      expander, and the coinciding anchor/k-hop pair is dropped (`anchor_khop_pairs_on_expander` counts
      them). Why not forbid them in the expander instead: uncapped anchors join every node to every
      anchor, so an anchor's forbidden degree would be n - 1 and no expander could exist; and the pair is
      still attended, through the expander edge, losing only its SPD encoding;
    - virtual nodes and substructure tokens are new nodes, joined only to real nodes.

    Args:
        graph: a validated graph from `sgt_core.data.load_dataset`.
        self_loops: add one `self` edge per node (added nodes included).
        expander_degree: even degree d of the random regular expander on the real nodes; None disables it.
        ramanujan_slack: accept the expander when its second-largest |eigenvalue| <= 2*sqrt(d-1) + slack.
        expander_max_tries: expanders generated before giving up.
        virtual_nodes: number of virtual nodes, each joined both ways to every real node.
        seed: seeds the expander and the anchors' tie-breaks.
        per_component: build one expander inside each connected component instead of one across all nodes.
        anchors: AnchorGT's receptive field (`anchor` and `khop` edges with SPD buckets); None disables it.
        substructure_tokens: DeepGraph's tokens (from `sample_substructure_tokens`), each joined both ways
            to its members by `substructure` edges; None disables them.
        lpe_eigenpairs: m, the Laplacian eigenpairs per node for SAN's LPE; None disables it.
    """
    num_real = graph.num_nodes
    num_tokens = substructure_tokens.num_tokens if substructure_tokens is not None else 0
    num_total = num_real + virtual_nodes + num_tokens
    graph_edges = graph.edge_index.cpu()
    # (edges [2, e], type id, SPD bucket [e] or None for NO_SPD)
    blocks: list[tuple[Tensor, int, Tensor | None]] = [(graph_edges, EDGE_TYPES.index("graph"), None)]
    stats: dict[str, float] = {}

    if self_loops:
        loop = torch.arange(num_total)
        blocks.append((torch.stack([loop, loop]), EDGE_TYPES.index("self"), None))

    expander_edges = None
    if expander_degree:
        log.info("preprocess: drawing the degree-%d expander", expander_degree)
        expander_edges, expander_stats = _expander_edges(
            graph_edges.numpy(), num_real, expander_degree, ramanujan_slack, expander_max_tries,
            per_component, np.random.default_rng(seed),
        )
        blocks.append((torch.from_numpy(expander_edges), EDGE_TYPES.index("expander"), None))
        stats.update(expander_stats)

    if virtual_nodes:
        real = torch.arange(num_real).repeat(virtual_nodes)  # [V * n]
        virtual = torch.arange(num_real, num_real + virtual_nodes).repeat_interleave(num_real)  # [V * n]
        both_ways = torch.cat([torch.stack([real, virtual]), torch.stack([virtual, real])], dim=1)
        blocks.append((both_ways, EDGE_TYPES.index("virtual"), None))

    if anchors is not None:
        started = time.perf_counter()
        log.info("preprocess: anchors (k=%d) and k-hop edges", anchors.k)
        generator = np.random.default_rng([seed, _ANCHOR_STREAM])
        anchor_blocks, anchor_stats = _receptive_field_blocks(
            graph_edges.numpy(), num_real, anchors, expander_edges, generator
        )
        blocks += anchor_blocks
        stats.update(anchor_stats, seconds_anchors=time.perf_counter() - started)

    if substructure_tokens is not None:
        # Token t is node num_real + virtual_nodes + t; members are input-graph nodes.
        selection = substructure_tokens.selection
        members = torch.from_numpy(selection.members)  # [M]
        tokens = num_real + virtual_nodes + torch.from_numpy(selection.instance_of_member)  # [M]
        both_ways = torch.cat([torch.stack([members, tokens]), torch.stack([tokens, members])], dim=1)
        blocks.append((both_ways, EDGE_TYPES.index("substructure"), None))
        stats.update(substructure_tokens.stats())

    edge_index = torch.cat([edges for edges, _, _ in blocks], dim=1)  # [2, E]
    edge_type = torch.cat([
        torch.full((edges.shape[1],), t, dtype=torch.long) for edges, t, _ in blocks
    ])  # [E]
    edge_spd = torch.cat([
        spd if spd is not None else torch.full((edges.shape[1],), NO_SPD, dtype=torch.long)
        for edges, _, spd in blocks
    ])  # [E]
    # Sort by (dst, src) so every node's incoming edges form one CSR segment.
    order = torch.argsort(edge_index[1] * num_total + edge_index[0])
    edge_index, edge_type, edge_spd = edge_index[:, order], edge_type[order], edge_spd[order]

    added = num_total - num_real

    def pad(values: Tensor, fill) -> Tensor:
        return torch.cat([values, values.new_full((added, *values.shape[1:]), fill)])

    node_kind = torch.cat([
        torch.full((num_real,), NODE_KINDS.index("real")),
        torch.full((virtual_nodes,), NODE_KINDS.index("virtual")),
        torch.full((num_tokens,), NODE_KINDS.index("substructure")),
    ])  # [N]

    if substructure_tokens is not None:
        token_adjacency = torch.from_numpy(substructure_tokens.adjacency).float()  # [T, s*s]
        token_type = torch.from_numpy(substructure_tokens.selection.type_id).long()  # [T]
    else:
        token_adjacency, token_type = torch.zeros(0, 0), torch.zeros(0, dtype=torch.long)

    if lpe_eigenpairs:
        started = time.perf_counter()
        log.info("preprocess: %d Laplacian eigenpairs for the LPE", lpe_eigenpairs)
        # [n, m] each: eigenvalues (the same on every row), eigenvector entries, padding mask
        values, vectors, mask = laplacian_eigenpairs(graph_edges.numpy(), num_real, lpe_eigenpairs)
        eigenvalues, eigenvectors = pad(torch.from_numpy(values), 0.0), pad(torch.from_numpy(vectors), 0.0)
        eigen_mask = pad(torch.from_numpy(mask), False)  # added nodes have no spectrum: fully masked
        stats.update(lpe_eigenpairs=int(mask[0].sum()) if num_real else 0,
                     seconds_lpe=time.perf_counter() - started)
    else:
        eigenvalues = eigenvectors = torch.zeros(num_total, 0)
        eigen_mask = torch.zeros(num_total, 0, dtype=torch.bool)

    type_counts = torch.bincount(edge_type, minlength=len(EDGE_TYPES))
    stats.update(
        num_real_nodes=num_real,
        num_nodes=num_total,
        num_edges=int(edge_type.numel()),
        mean_in_degree=edge_type.numel() / num_total,
        **{f"edges_{name}": int(count) for name, count in zip(EDGE_TYPES, type_counts)},
    )
    return InteractionGraph(
        x=pad(graph.x.float(), 0.0),
        y=pad(graph.y.long(), -1),
        train_mask=pad(graph.train_mask, False),
        val_mask=pad(graph.val_mask, False),
        test_mask=pad(graph.test_mask, False),
        node_kind=node_kind,
        edge_index=edge_index.contiguous(),
        edge_type=edge_type,
        edge_spd=edge_spd,
        num_spd_buckets=anchors.max_spd + 1 if anchors is not None else 0,
        token_adjacency=token_adjacency,
        token_type=token_type,
        eigenvalues=eigenvalues.float(),
        eigenvectors=eigenvectors.float(),
        eigen_mask=eigen_mask,
        num_real_nodes=num_real,
        num_classes=int(graph.num_classes),
        stats=stats,
    )


def _receptive_field_blocks(
    graph_edges: np.ndarray,
    num_nodes: int,
    options: AnchorOptions,
    expander_edges: np.ndarray | None,
    generator: np.random.Generator,
) -> tuple[list[tuple[Tensor, int, Tensor]], dict]:
    """AnchorGT's `anchor` and `khop` edge blocks with their SPD buckets, minus pairs the expander holds."""
    anchor_ids = k_dominating_set(graph_edges, num_nodes, options.k, generator)
    field = receptive_field_edges(
        graph_edges, num_nodes, anchor_ids, options.k, options.max_khop_per_node, generator,
        max_spd=options.max_spd, max_anchors_per_node=options.max_anchors_per_node,
    )
    # Expander pairs take precedence (it must stay d-regular): drop anchor/k-hop pairs it already holds.
    taken = np.sort(expander_edges[1] * num_nodes + expander_edges[0]) if expander_edges is not None else None
    blocks, dropped = [], 0
    for name in ("anchor", "khop"):
        edges, spd = field[f"{name}_edge_index"], field[f"{name}_spd"]  # [2, e], [e]
        if taken is not None and taken.size and edges.size:
            keys = edges[1] * num_nodes + edges[0]  # [e]
            position = np.minimum(np.searchsorted(taken, keys), taken.size - 1)
            fresh = taken[position] != keys  # [e]
            dropped += int(np.count_nonzero(~fresh))
            edges, spd = edges[:, fresh], spd[fresh]
        blocks.append((torch.from_numpy(edges), EDGE_TYPES.index(name), torch.from_numpy(spd)))
    field_stats = field["stats"]
    stats = {
        "num_anchors": field_stats["num_anchors"],
        # Table 3 of AnchorGT: the anchor count and the k-hop edges, as finally in the graph.
        "num_anchor_edges": int(blocks[0][0].shape[1]),
        "num_khop_edges": int(blocks[1][0].shape[1]),
        "num_khop_saturated_nodes": field_stats["num_khop_saturated_nodes"],
        "num_uncovered_nodes": field_stats["num_uncovered_nodes"],
        "anchor_khop_pairs_on_expander": dropped,
    }
    return blocks, stats


def _expander_edges(
    graph_edges: np.ndarray,
    num_nodes: int,
    degree: int,
    ramanujan_slack: float,
    max_tries: int,
    per_component: bool,
    generator: np.random.Generator,
) -> tuple[np.ndarray, dict]:
    """The expander's edges [2, n*d], across all nodes or inside each connected component."""
    if not per_component:
        expander = hamiltonian_expander(num_nodes, degree, generator=generator, forbidden_edge_index=graph_edges,
                                        ramanujan_slack=ramanujan_slack, max_tries=max_tries)
        return expander.edge_index, {"expander_second_eigenvalue": expander.second_eigenvalue,
                                     "expander_bound": expander.bound, "expander_tries": expander.tries}
    adjacency = scipy.sparse.coo_matrix(
        (np.ones(graph_edges.shape[1]), (graph_edges[0], graph_edges[1])), shape=(num_nodes, num_nodes)
    )
    num_components, component = scipy.sparse.csgraph.connected_components(adjacency, directed=False)
    order = np.argsort(component, kind="stable")  # nodes grouped by component
    sizes = np.bincount(component, minlength=num_components)
    blocks, worst, bound = [], 0.0, float("nan")
    # A loop over components (each gets its own expander), never over nodes.
    for members in np.split(order, np.cumsum(sizes)[:-1]):
        local = np.full(num_nodes, -1)
        local[members] = np.arange(members.size)
        inside = (local[graph_edges[0]] >= 0) & (local[graph_edges[1]] >= 0)
        expander = hamiltonian_expander(members.size, degree, generator=generator,
                                        forbidden_edge_index=local[graph_edges[:, inside]],
                                        ramanujan_slack=ramanujan_slack, max_tries=max_tries)
        blocks.append(members[expander.edge_index])
        worst, bound = max(worst, expander.second_eigenvalue), expander.bound
    return np.concatenate(blocks, axis=1), {"expander_second_eigenvalue": worst, "expander_bound": bound,
                                            "expander_components": num_components}
