"""Building the interaction graph from a loaded graph: graph edges, self-loops, expander, virtual nodes,
AnchorGT's anchor and k-hop edges, DeepGraph's substructure tokens and SAN's Laplacian eigenpairs."""

from __future__ import annotations

import time

import numpy as np
import torch
from torch_geometric.data import Data

from sgt_core.config.preprocess import AnchorsConfig, ExpanderConfig, LpeConfig
from sgt_core.errors import DatasetError
from sgt_core.preprocess.blocks import edge_block, merge_blocks
from sgt_core.preprocess.components import (
    AnchorEdges,
    Component,
    ComponentOutput,
    ExpanderEdges,
    GraphView,
    LaplacianEigenpairs,
    SelfLoops,
    SubstructureTokenEdges,
    VirtualNodes,
)
from sgt_core.preprocess.interaction_graph import EDGE_TYPES, NO_EDGE_ATTR, NODE_KINDS, InteractionGraph
from sgt_core.preprocess.many_graphs.layout import GraphSet
from sgt_core.preprocess.substructure_tokens import SubstructureTokens
from sgt_core.tasks import default_metric, task_kind

# The substructure tokens' random stream (the stage samples them): numpy SeedSequence entropy [seed, stream]
# (the anchors' is `components.anchors.ANCHOR_STREAM`; the expander keeps the plain seed it always had).
SUBSTRUCTURE_STREAM = 2


def build_interaction_graph(
    graph: Data,
    *,
    self_loops: bool,
    expander: ExpanderConfig | None,
    virtual_nodes: int,
    seed: int,
    anchors: AnchorsConfig | None = None,
    substructure_tokens: SubstructureTokens | None = None,
    lpe: LpeConfig | None = None,
    compact: bool = False,
) -> InteractionGraph:
    """Builds H = graph edges + self-loops + expander + virtual nodes + anchor/k-hop edges + tokens.

    Nodes: the n input nodes, then `virtual_nodes` virtual nodes per graph (graph by graph), then one token
    per substructure.

    H is the composition of small transforms (`components`: self-loops, expander, virtual nodes, anchors,
    substructure tokens, LPE), each returning its edge blocks, node fields and statistics. On a dataset of
    many graphs (`graph_ptr` with G > 1) every component is built inside each graph, vectorised across graphs
    (`many_graphs`), so no edge joins two graphs; on one graph (no `graph_ptr`, or G = 1) each builds what it
    always built, bit for bit (tests/preprocess/test_builder_one_graph_unchanged.py).

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
        expander: `preprocess.expander`, the random regular expander on the real nodes (its degree,
            near-Ramanujan check and `per_component`, see `hamiltonian_expander`); None or not enabled: none.
        virtual_nodes: virtual nodes per graph, each joined both ways to every real node of its graph.
        seed: seeds the expander and the anchors' tie-breaks.
        anchors: `preprocess.anchors`, AnchorGT's receptive field (`anchor` and `khop` edges with SPD
            buckets); None or not enabled: none.
        substructure_tokens: DeepGraph's tokens (from `sample_substructure_tokens`), each joined both ways
            to its members by `substructure` edges; None disables them.
        lpe: `preprocess.lpe`, SAN's LPE input: its `m` Laplacian eigenpairs per node; None or not enabled: none.
        compact: give `edge_index`, `edge_type`, `edge_spd`, `node_kind` and `token_type` in the dtypes
            `InteractionGraph.save` stores (int32, int8, int16, int8, int8) instead of int64, so a large
            graph is never held in int64 at all (the preprocess stage does this).

    Cost: O(N + E) time and memory for the edges (each block is bucketed by destination and the blocks
    are merged row by row, never sorted as a whole), plus the components' own costs: the expander's,
    and those of anchors, substructure tokens and the LPE, which are meant for graphs of moderate size (on
    many graphs: per graph, O(n^2) to O(n^3) each for a graph of n nodes, so linear in the dataset's size).
    """
    # A group switched off is read as no component at all (its other values are not checked then).
    expander, anchors, lpe = (group if group is not None and group.enabled else None for group in (expander, anchors, lpe))
    graph_edges = graph.edge_index.cpu().numpy()  # [2, E], a view
    if graph_edges.size and bool(np.any(graph_edges[0] == graph_edges[1])):
        raise DatasetError("graph.edge_index: has self-loops; the loaders remove them (the `self` type adds one)")
    view = GraphView(
        edges=graph_edges,
        num_real=graph.num_nodes,
        virtual_per_graph=virtual_nodes,
        num_tokens=substructure_tokens.num_tokens if substructure_tokens is not None else 0,
        graphs=GraphSet.from_union(graph.graph_ptr.numpy(), graph_edges) if num_graphs(graph) > 1 else None,
        seed=seed,
        # Each edge type becomes one sparse block (row dst, column src) whose values code the type and the SPD
        # bucket; `merge_blocks` adds them up. Only anchor and k-hop edges carry an SPD (int32 codes).
        code_dtype=np.int32 if anchors is not None else np.int8,
    )
    num_real, num_total = view.num_real, view.num_total
    started = time.perf_counter()
    blocks = [edge_block(graph_edges[0], graph_edges[1], "graph", num_total, view.code_dtype)]
    if blocks[0].nnz != graph_edges.shape[1]:
        raise DatasetError("graph.edge_index: repeats a (src, dst) pair; the loaders coalesce the input graph")
    stats: dict[str, float] = {"seconds_edges": time.perf_counter() - started}

    components: list[Component] = [component for component, on in (
        (SelfLoops(), self_loops),
        (ExpanderEdges(expander), expander is not None),
        (VirtualNodes(virtual_nodes), virtual_nodes > 0),
        (AnchorEdges(anchors), anchors is not None),
        (SubstructureTokenEdges(substructure_tokens), substructure_tokens is not None),
        (LaplacianEigenpairs(lpe), lpe is not None),
    ) if on]
    outputs: dict[str, ComponentOutput] = {}
    for component in components:  # in this order: the anchors read the expander's pairs
        output = outputs[component.name] = component(view, outputs)
        blocks += output.blocks
        output.blocks = []  # the merge frees each block as soon as it is added
        stats.update(output.stats)

    started = time.perf_counter()
    index_dtype = torch.int32 if compact and num_total < 2**31 else torch.int64
    edge_index, edge_type, edge_spd = merge_blocks(blocks, num_total, index_dtype, compact, with_spd=anchors is not None)
    stats["seconds_edges"] += time.perf_counter() - started

    added = num_total - num_real

    def pad(values: torch.Tensor, fill) -> torch.Tensor:
        if not added:
            return values  # nothing to add: no copy of a large feature matrix
        return torch.cat([values, values.new_full((added, *values.shape[1:]), fill)])

    small_dtype = torch.int8 if compact else torch.int64
    node_kind = torch.cat([
        torch.full((num_real,), NODE_KINDS.index("real"), dtype=small_dtype),
        torch.full((view.num_virtual,), NODE_KINDS.index("virtual"), dtype=small_dtype),
        torch.full((view.num_tokens,), NODE_KINDS.index("substructure"), dtype=small_dtype),
    ])  # [N]

    if substructure_tokens is not None:
        token_adjacency = torch.from_numpy(substructure_tokens.adjacency).float()  # [T, s*s]
        token_type = torch.from_numpy(substructure_tokens.selection.type_id).to(small_dtype)  # [T]
    else:
        token_adjacency, token_type = torch.zeros(0, 0), torch.zeros(0, dtype=small_dtype)

    if lpe is not None:
        spectrum = outputs["lpe"].fields  # [n, m] each: eigenvalues (a graph's on each of its rows), vectors, mask
        eigenvalues = pad(torch.from_numpy(spectrum["eigenvalues"]), 0.0)
        eigenvectors = pad(torch.from_numpy(spectrum["eigenvectors"]), 0.0)
        eigen_mask = pad(torch.from_numpy(spectrum["eigen_mask"]), False)  # added nodes have no spectrum: masked
    else:
        eigenvalues = eigenvectors = torch.zeros(num_total, 0)
        eigen_mask = torch.zeros(num_total, 0, dtype=torch.bool)
    del outputs

    targets = graph_targets(graph, added)
    features = edge_feature_columns(graph, edge_index, edge_type, num_total)
    x_cat = getattr(graph, "x_cat", None)
    x_cat = None if x_cat is None else pad(x_cat.long(), -1)
    if view.graphs is not None:
        node_graph = _node_graph(view, substructure_tokens)
    else:
        node_graph = torch.zeros(0, dtype=torch.int64)

    type_counts = torch.bincount(edge_type, minlength=len(EDGE_TYPES)).tolist()
    stats.update(
        num_real_nodes=num_real,
        num_nodes=num_total,
        num_edges=int(edge_type.numel()),
        mean_in_degree=edge_type.numel() / num_total,
        **{f"edges_{name}": int(count) for name, count in zip(EDGE_TYPES, type_counts)},
    )
    return InteractionGraph(
        x=pad(graph.x.float(), 0.0),
        **targets,
        node_kind=node_kind,
        edge_index=edge_index,
        edge_type=edge_type,
        edge_spd=edge_spd,
        num_spd_buckets=anchors.max_spd + 1 if anchors is not None else 0,
        token_adjacency=token_adjacency,
        token_type=token_type,
        eigenvalues=eigenvalues.float(),
        eigenvectors=eigenvectors.float(),
        eigen_mask=eigen_mask,
        num_real_nodes=num_real,
        num_outputs=output_width(graph),
        task=dataset_task(graph),
        metric=getattr(graph, "metric", None) or default_metric(dataset_task(graph), output_width(graph)),
        num_graphs=num_graphs(graph),
        node_graph=node_graph,
        x_cat=x_cat,
        x_cat_sizes=list(getattr(graph, "x_cat_sizes", None) or []),
        **features,
        notes=dict(getattr(graph, "notes", None) or {}),
        stats=stats,
    )


def dataset_task(graph: Data) -> str:
    """The loaded dataset's task; loaders of one graph with class labels set none (node classification)."""
    return getattr(graph, "task", None) or "node_classification"


def output_width(graph: Data) -> int:
    """The networks' output columns: classes, or tasks for multi-label and regression targets."""
    return int(graph.num_classes) if task_kind(dataset_task(graph)) == "classification" else int(graph.num_tasks)


def num_graphs(graph: Data) -> int:
    """G: the graphs of a dataset of many (`graph_ptr`), else 1."""
    ptr = getattr(graph, "graph_ptr", None)
    return 1 if ptr is None else int(ptr.numel() - 1)


def graph_targets(graph: Data, added: int) -> dict[str, torch.Tensor]:
    """y and the split masks over the targets: per graph as loaded, or per node with added nodes appended
    (class -1, or unknown NaN rows, and in no split)."""
    names = ("y", "train_mask", "val_mask", "test_mask")
    if dataset_task(graph).startswith("graph") or not added:
        return {name: getattr(graph, name) for name in names}
    y = graph.y
    fill = -1 if y.dtype == torch.int64 else float("nan")
    padded = {"y": torch.cat([y, y.new_full((added, *y.shape[1:]), fill)])}
    return {**padded, **{name: torch.cat([getattr(graph, name), getattr(graph, name).new_zeros(added)])
                         for name in names[1:]}}


def edge_feature_columns(graph: Data, edge_index: torch.Tensor, edge_type: torch.Tensor,
                         num_nodes: int) -> dict:
    """The input graph's edge features on its edges of the interaction graph, NO_EDGE_ATTR / zero elsewhere.

    Categorical features become one code per edge, 1 + their mixed-radix code (`edge_attr`), so that an
    embedding table of `num_edge_attr_codes` rows reads them; continuous ones are carried as they are
    (`edge_features`). The loaded edges are sorted by (src, dst) (`build_graph_set`); the interaction
    graph's by (dst, src): each graph edge finds its row by a binary search over the loaded keys.
    """
    codes, floats = getattr(graph, "edge_attr_cat", None), getattr(graph, "edge_attr", None)
    if codes is None and floats is None:
        return {}
    loaded = graph.edge_index[0] * num_nodes + graph.edge_index[1]  # [E_in] sorted keys
    is_graph_edge = edge_type.long() == EDGE_TYPES.index("graph")  # [E]
    positions = is_graph_edge.nonzero().flatten()
    keys = edge_index[0].long()[positions] * num_nodes + edge_index[1].long()[positions]
    rows = torch.searchsorted(loaded, keys)  # [E_graph] the loaded row of each graph edge
    columns = {}
    if codes is not None:
        sizes = torch.tensor(graph.edge_attr_cat_sizes, dtype=torch.int64)
        radix = torch.cat([sizes.new_ones(1), sizes.cumprod(0)[:-1]])  # [Ce]
        edge_attr = torch.full((edge_type.numel(),), NO_EDGE_ATTR, dtype=torch.int64)
        edge_attr[positions] = 1 + (codes[rows].long() * radix).sum(1)
        columns.update(edge_attr=edge_attr, num_edge_attr_codes=1 + int(sizes.prod()))
    if floats is not None:
        edge_features = torch.zeros(edge_type.numel(), floats.shape[1])
        edge_features[positions] = floats[rows].float()
        columns["edge_features"] = edge_features
    return columns


def _node_graph(view: GraphView, tokens: SubstructureTokens | None) -> torch.Tensor:
    """The graph of every interaction-graph node: real nodes by `graph_ptr`, then each graph's virtual nodes,
    then tokens (each in its members' graph). int64 [N]."""
    real = view.node_graph  # [n]
    virtual = np.repeat(np.arange(view.num_graphs), view.virtual_per_graph)  # [G * k] graph by graph
    token = real[tokens.selection.members[tokens.selection.ptr[:-1]]] if tokens is not None else real[:0]  # [T]
    return torch.from_numpy(np.concatenate([real, virtual, token]).astype(np.int64))
