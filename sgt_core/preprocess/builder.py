"""Building the interaction graph from a loaded graph: graph edges, self-loops, expander, virtual nodes,
AnchorGT's anchor and k-hop edges, DeepGraph's substructure tokens and SAN's Laplacian eigenpairs."""

from __future__ import annotations

import logging
import time

import numpy as np
import scipy.sparse
import scipy.sparse.csgraph
import torch
from torch_geometric.data import Data

from sgt_core.config.preprocess import AnchorsConfig, ExpanderConfig, LpeConfig
from sgt_core.errors import DatasetError
from sgt_core.preprocess.adjacency import sorted_csr
from sgt_core.preprocess.anchors import k_dominating_set, receptive_field_edges
from sgt_core.preprocess.expander import hamiltonian_expander
from sgt_core.preprocess.interaction_graph import (
    EDGE_TYPES,
    NO_EDGE_ATTR,
    NO_SPD,
    NODE_KINDS,
    InteractionGraph,
)
from sgt_core.preprocess.laplacian import laplacian_eigenpairs
from sgt_core.preprocess.substructure_tokens import SubstructureTokens
from sgt_core.tasks import default_metric, task_kind

# Independent random streams per component (numpy SeedSequence entropy [seed, stream]), so switching one
# component on or off never changes what another draws. The expander keeps the plain seed it always had.
_ANCHOR_STREAM = 1
SUBSTRUCTURE_STREAM = 2

log = logging.getLogger(__name__)

# Edge values in the merge: type + 1 + _TYPE_SLOTS * SPD bucket (see _merge_blocks), so (value - 1) splits
# into the type (remainder) and the SPD bucket (quotient).
_TYPE_SLOTS = len(EDGE_TYPES)


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
        expander: `preprocess.expander`, the random regular expander on the real nodes (its degree,
            near-Ramanujan check and `per_component`, see `hamiltonian_expander`); None or not enabled: none.
        virtual_nodes: number of virtual nodes, each joined both ways to every real node.
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
    and those of anchors, substructure tokens and the LPE, which are meant for graphs of moderate size.
    """
    # A group switched off is read as no component at all (its other values are not checked then).
    expander, anchors, lpe = (group if group is not None and group.enabled else None for group in (expander, anchors, lpe))
    num_real = graph.num_nodes
    num_tokens = substructure_tokens.num_tokens if substructure_tokens is not None else 0
    num_total = num_real + virtual_nodes + num_tokens
    graph_edges = graph.edge_index.cpu().numpy()  # [2, E], a view
    if graph_edges.size and bool(np.any(graph_edges[0] == graph_edges[1])):
        raise DatasetError("graph.edge_index: has self-loops; the loaders remove them (the `self` type adds one)")
    # Each edge type becomes one sparse block (row dst, column src) whose values code the type and the SPD
    # bucket; `_merge_blocks` adds them up. Only anchor and k-hop edges carry an SPD (int32 codes).
    code_dtype = np.int32 if anchors is not None else np.int8
    started = time.perf_counter()
    blocks = [_edge_block(graph_edges[0], graph_edges[1], "graph", num_total, code_dtype)]
    if blocks[0].nnz != graph_edges.shape[1]:
        raise DatasetError("graph.edge_index: repeats a (src, dst) pair; the loaders coalesce the input graph")
    stats: dict[str, float] = {"seconds_edges": time.perf_counter() - started}

    if self_loops:
        loop = np.arange(num_total)
        blocks.append(_edge_block(loop, loop, "self", num_total, code_dtype))

    expander_table = None
    if expander is not None:
        started = time.perf_counter()
        log.info("preprocess: drawing the degree-%d expander", expander.degree)
        expander_table, expander_stats = _expander_neighbours(graph_edges, num_real, expander,
                                                              np.random.default_rng(seed))
        blocks.append(_table_block(expander_table, "expander", num_total, code_dtype))
        stats.update(expander_stats, seconds_expander=time.perf_counter() - started)

    if virtual_nodes:
        real = np.arange(num_real)
        virtual = np.arange(num_real, num_real + virtual_nodes)
        # virtual -> real (dst real) and real -> virtual (dst virtual), each in (dst, src) order
        blocks.append(_edge_block(np.tile(virtual, num_real), np.repeat(real, virtual_nodes), "virtual", num_total,
                                  code_dtype))
        blocks.append(_edge_block(np.tile(real, virtual_nodes), np.repeat(virtual, num_real), "virtual", num_total,
                                  code_dtype))

    if anchors is not None:
        started = time.perf_counter()
        log.info("preprocess: anchors (k=%d) and k-hop edges", anchors.k)
        generator = np.random.default_rng([seed, _ANCHOR_STREAM])
        anchor_blocks, anchor_stats = _receptive_field_blocks(
            graph_edges, num_real, anchors, expander_table, generator
        )
        blocks += [_edge_block(src, dst, name, num_total, code_dtype, spd) for name, src, dst, spd in anchor_blocks]
        stats.update(anchor_stats, seconds_anchors=time.perf_counter() - started)

    if substructure_tokens is not None:
        # Token t is node num_real + virtual_nodes + t; members are input-graph nodes.
        selection = substructure_tokens.selection
        members = selection.members  # [M]
        tokens = num_real + virtual_nodes + selection.instance_of_member  # [M]
        blocks.append(_edge_block(members, tokens, "substructure", num_total, code_dtype))
        blocks.append(_edge_block(tokens, members, "substructure", num_total, code_dtype))
        stats.update(substructure_tokens.stats())

    started = time.perf_counter()
    index_dtype = torch.int32 if compact and num_total < 2**31 else torch.int64
    edge_index, edge_type, edge_spd = _merge_blocks(blocks, num_total, index_dtype, compact,
                                                    with_spd=anchors is not None)
    del expander_table
    stats["seconds_edges"] += time.perf_counter() - started

    added = num_total - num_real

    def pad(values: torch.Tensor, fill) -> torch.Tensor:
        if not added:
            return values  # nothing to add: no copy of a large feature matrix
        return torch.cat([values, values.new_full((added, *values.shape[1:]), fill)])

    small_dtype = torch.int8 if compact else torch.int64
    node_kind = torch.cat([
        torch.full((num_real,), NODE_KINDS.index("real"), dtype=small_dtype),
        torch.full((virtual_nodes,), NODE_KINDS.index("virtual"), dtype=small_dtype),
        torch.full((num_tokens,), NODE_KINDS.index("substructure"), dtype=small_dtype),
    ])  # [N]

    if substructure_tokens is not None:
        token_adjacency = torch.from_numpy(substructure_tokens.adjacency).float()  # [T, s*s]
        token_type = torch.from_numpy(substructure_tokens.selection.type_id).to(small_dtype)  # [T]
    else:
        token_adjacency, token_type = torch.zeros(0, 0), torch.zeros(0, dtype=small_dtype)

    if lpe is not None:
        started = time.perf_counter()
        log.info("preprocess: %d Laplacian eigenpairs for the LPE", lpe.m)
        # [n, m] each: eigenvalues (the same on every row), eigenvector entries, padding mask
        values, vectors, mask = laplacian_eigenpairs(graph_edges, num_real, lpe.m)
        eigenvalues, eigenvectors = pad(torch.from_numpy(values), 0.0), pad(torch.from_numpy(vectors), 0.0)
        eigen_mask = pad(torch.from_numpy(mask), False)  # added nodes have no spectrum: fully masked
        stats.update(lpe_eigenpairs=int(mask[0].sum()) if num_real else 0,
                     seconds_lpe=time.perf_counter() - started)
    else:
        eigenvalues = eigenvectors = torch.zeros(num_total, 0)
        eigen_mask = torch.zeros(num_total, 0, dtype=torch.bool)

    targets = graph_targets(graph, added)
    features = edge_feature_columns(graph, edge_index, edge_type, num_total)
    x_cat = getattr(graph, "x_cat", None)
    x_cat = None if x_cat is None else pad(x_cat.long(), -1)
    if num_graphs(graph) > 1:
        node_graph = _node_graph(graph, virtual_nodes, substructure_tokens)
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


def _node_graph(graph: Data, virtual_nodes: int, tokens: SubstructureTokens | None) -> torch.Tensor:
    """The graph of every interaction-graph node: real nodes by `graph_ptr`, then virtual nodes, then tokens
    (each in its members' graph)."""
    sizes = graph.graph_ptr.diff()
    real = torch.repeat_interleave(torch.arange(sizes.numel()), sizes)  # [n]
    if virtual_nodes:
        raise NotImplementedError("virtual nodes on a dataset of many graphs: one set per graph (to come)")
    if tokens is None:
        return real
    first_member = torch.from_numpy(tokens.selection.members[tokens.selection.ptr[:-1]]).long()  # [T]
    return torch.cat([real, real[first_member]])


def _receptive_field_blocks(
    graph_edges: np.ndarray,
    num_nodes: int,
    anchors: AnchorsConfig,
    expander_table: np.ndarray | None,
    generator: np.random.Generator,
) -> tuple[list[tuple[str, np.ndarray, np.ndarray, np.ndarray]], dict]:
    """AnchorGT's `anchor` and `khop` edges (type name, src, dst, SPD bucket), minus pairs the expander holds."""
    anchor_ids = k_dominating_set(graph_edges, num_nodes, anchors.k, generator)
    field = receptive_field_edges(
        graph_edges, num_nodes, anchor_ids, anchors.k, anchors.max_khop_per_node, generator,
        max_spd=anchors.max_spd, max_anchors_per_node=anchors.max_anchors_per_node,
    )
    # Expander pairs take precedence (it must stay d-regular): drop anchor/k-hop pairs it already holds.
    # The table's rows are sorted, so its (dst, src) keys come out sorted.
    taken = None
    if expander_table is not None:
        dst = np.repeat(np.arange(num_nodes, dtype=np.int64), expander_table.shape[1])
        taken = dst * num_nodes + expander_table.ravel()
    blocks = []
    dropped = 0
    for name in ("anchor", "khop"):
        edges, spd = field[f"{name}_edge_index"], field[f"{name}_spd"]  # [2, e], [e]
        if taken is not None and taken.size and edges.size:
            keys = edges[1] * num_nodes + edges[0]  # [e]
            position = np.minimum(np.searchsorted(taken, keys), taken.size - 1)
            fresh = taken[position] != keys  # [e]
            dropped += int(np.count_nonzero(~fresh))
            edges, spd = edges[:, fresh], spd[fresh]
        blocks.append((name, edges[0], edges[1], spd))
    field_stats = field["stats"]
    stats = {
        "num_anchors": field_stats["num_anchors"],
        # Table 3 of AnchorGT: the anchor count and the k-hop edges, as finally in the graph.
        "num_anchor_edges": int(blocks[0][1].size),
        "num_khop_edges": int(blocks[1][1].size),
        "num_khop_saturated_nodes": field_stats["num_khop_saturated_nodes"],
        "num_uncovered_nodes": field_stats["num_uncovered_nodes"],
        "anchor_khop_pairs_on_expander": dropped,
    }
    return blocks, stats


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


def _edge_block(
    src: np.ndarray, dst: np.ndarray, type_name: str, num_nodes: int, code_dtype: type, spd: np.ndarray | None = None
) -> scipy.sparse.csr_matrix:
    """One edge type's block: CSR [N, N], row dst and column src, valued type + 1 + _TYPE_SLOTS * spd."""
    code = np.full(src.size, EDGE_TYPES.index(type_name) + 1, dtype=code_dtype)
    if spd is not None:
        code += spd.astype(code_dtype) * _TYPE_SLOTS
    return sorted_csr(dst, src, code, num_nodes)


def _table_block(table: np.ndarray, type_name: str, num_nodes: int, code_dtype: type) -> scipy.sparse.csr_matrix:
    """The block of a neighbour table whose row v lists v's sources ascending (v < its rows): CSR as is."""
    rows, width = table.shape
    indptr = np.full(num_nodes + 1, rows * width, dtype=np.int64)
    indptr[: rows + 1] = np.arange(0, rows * width + 1, width)
    code = np.full(rows * width, EDGE_TYPES.index(type_name) + 1, dtype=code_dtype)
    return scipy.sparse.csr_matrix((code, table.ravel(), indptr), shape=(num_nodes, num_nodes))


def _merge_blocks(
    blocks: list[scipy.sparse.csr_matrix], num_nodes: int, index_dtype: torch.dtype, compact: bool, with_spd: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The union of disjoint edge blocks, sorted by (dst, src): edge_index [2, E], edge_type [E], edge_spd [E].

    The blocks (`_edge_block`: a counting sort over destinations, and none for a block already in that
    order, as all but the input graph's are) have sorted rows, so adding them merges rows in one linear
    pass: O(N + E) overall, with no sort of all edges. A block's values are type + 1 + _TYPE_SLOTS * spd,
    never 0, which the sum would drop. Every (dst, src) pair occurs once in all blocks together (a repeat
    would merge two entries, which the entry count catches).

    Empties `blocks`, so that each block is freed as soon as it is merged.
    """
    small_dtype, spd_dtype = (np.int8, np.int16) if compact else (np.int64, np.int64)
    # Smallest first: every addition copies the running total, which then grows as slowly as it can.
    blocks[:] = sorted((block for block in blocks if block.nnz), key=lambda block: block.nnz, reverse=True)
    expected = sum(block.nnz for block in blocks)
    if not blocks:
        return (torch.zeros(2, 0, dtype=index_dtype), torch.from_numpy(np.zeros(0, small_dtype)),
                torch.from_numpy(np.zeros(0, spd_dtype)))
    total = blocks.pop()
    while blocks:
        total = total + blocks.pop()
    if total.nnz != expected:  # pragma: no cover - the blocks are disjoint by construction
        raise RuntimeError("internal error: two interaction-graph edge blocks share a (dst, src) pair")
    numpy_index = np.int32 if index_dtype == torch.int32 else np.int64
    edge_index = np.empty((2, total.nnz), dtype=numpy_index)
    edge_index[0] = total.indices
    edge_index[1] = np.repeat(np.arange(num_nodes, dtype=numpy_index), np.diff(total.indptr))
    code = total.data
    del total
    code -= 1
    edge_type = (code % _TYPE_SLOTS if with_spd else code).astype(small_dtype)
    edge_spd = (code // _TYPE_SLOTS).astype(spd_dtype) if with_spd else np.full(code.size, NO_SPD, spd_dtype)
    return torch.from_numpy(edge_index), torch.from_numpy(edge_type), torch.from_numpy(edge_spd)
