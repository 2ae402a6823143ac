"""Building the interaction graph from a loaded graph: graph edges, self-loops, expander, virtual nodes."""

from __future__ import annotations

import numpy as np
import scipy.sparse
import scipy.sparse.csgraph
import torch
from torch import Tensor
from torch_geometric.data import Data

from sgt_core.preprocess.expander import hamiltonian_expander
from sgt_core.preprocess.interaction_graph import EDGE_TYPES, NODE_KINDS, InteractionGraph


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
) -> InteractionGraph:
    """Builds H = graph edges + self-loops + expander + virtual nodes, each edge tagged with its type.

    Duplicates between types cannot arise, by construction: the input graph is coalesced and has no
    self-loops (the loaders guarantee it), the expander is generated disjoint from the graph's edges and
    from self-loops (so it stays exactly d-regular, and a (dst, src) pair never appears twice), and
    virtual nodes are new nodes. Every pair therefore appears once, and reservoir sampling without
    replacement over a node's incoming edges never draws the same neighbour twice.

    Args:
        graph: a validated graph from `sgt_core.data.load_dataset`.
        self_loops: add one `self` edge per node (added nodes included).
        expander_degree: even degree d of the random regular expander on the real nodes; None disables it.
        ramanujan_slack: accept the expander when its second-largest |eigenvalue| <= 2*sqrt(d-1) + slack.
        expander_max_tries: expanders generated before giving up.
        virtual_nodes: number of virtual nodes, each joined both ways to every real node.
        seed: seeds the expander.
        per_component: build one expander inside each connected component instead of one across all nodes.
    """
    num_real = graph.num_nodes
    num_total = num_real + virtual_nodes
    graph_edges = graph.edge_index.cpu()
    blocks: list[tuple[Tensor, int]] = [(graph_edges, EDGE_TYPES.index("graph"))]
    stats: dict[str, float] = {}

    if self_loops:
        loop = torch.arange(num_total)
        blocks.append((torch.stack([loop, loop]), EDGE_TYPES.index("self")))

    if expander_degree:
        expander_edges, expander_stats = _expander_edges(
            graph_edges.numpy(), num_real, expander_degree, ramanujan_slack, expander_max_tries,
            per_component, np.random.default_rng(seed),
        )
        blocks.append((torch.from_numpy(expander_edges), EDGE_TYPES.index("expander")))
        stats.update(expander_stats)

    if virtual_nodes:
        real = torch.arange(num_real).repeat(virtual_nodes)  # [V * n]
        virtual = torch.arange(num_real, num_total).repeat_interleave(num_real)  # [V * n]
        both_ways = torch.cat([torch.stack([real, virtual]), torch.stack([virtual, real])], dim=1)
        blocks.append((both_ways, EDGE_TYPES.index("virtual")))

    edge_index = torch.cat([edges for edges, _ in blocks], dim=1)  # [2, E]
    edge_type = torch.cat([torch.full((edges.shape[1],), t, dtype=torch.long) for edges, t in blocks])
    # Sort by (dst, src) so every node's incoming edges form one CSR segment.
    order = torch.argsort(edge_index[1] * num_total + edge_index[0])
    edge_index, edge_type = edge_index[:, order], edge_type[order]

    added = num_total - num_real

    def pad(values: Tensor, fill) -> Tensor:
        return torch.cat([values, values.new_full((added, *values.shape[1:]), fill)])

    node_kind = torch.cat(
        [torch.zeros(num_real, dtype=torch.long), torch.full((added,), NODE_KINDS.index("virtual"))]
    )
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
        num_real_nodes=num_real,
        num_classes=int(graph.num_classes),
        stats=stats,
    )


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
