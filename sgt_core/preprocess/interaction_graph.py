"""The typed interaction graph H: the attention pattern both networks attend over (Exphormer section 3.2).

This module needs only torch (and the NumPy-only substructure vocabulary), so the training stages load
graphs without importing PyG or SciPy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor

from sgt_core.tasks import Task

# Edge-type ids are global and fixed, so embeddings and exported names mean the same thing everywhere.
# New types are appended, never inserted, so existing ids keep their meaning.
EDGE_TYPES: tuple[str, ...] = ("graph", "self", "expander", "virtual", "anchor", "khop", "substructure")
GRAPH_EDGE_TYPE = EDGE_TYPES.index("graph")  # the input graph's own edges: the local branch's and the degree signal's
# Node kinds: real graph nodes and added ones (virtual nodes, substructure tokens), which get a learnable
# embedding instead of features; tokens also get an encoding of their substructure.
NODE_KINDS: tuple[str, ...] = ("real", "virtual", "substructure")
CYCLE_SIZES: tuple[int, ...] = tuple(range(3, 9))  # nodes on the cycle
STAR_LEAVES: tuple[int, ...] = tuple(range(2, 7))  # leaves around the centre (leaves + 1 nodes)
PATH_SIZES: tuple[int, ...] = tuple(range(4, 9))  # nodes on the path
# Substructure token types (DeepGraph). Type ids are global and fixed, so a type embedding means the same
# thing for every graph.
SUBSTRUCTURE_TYPES: tuple[str, ...] = (
    *(f"cycle_{k}" for k in CYCLE_SIZES),
    *(f"star_{k}" for k in STAR_LEAVES),
    *(f"path_{k}" for k in PATH_SIZES),
    "hop2",
    "random_walk",
)
# edge_spd value of edges without a distance encoding (every type but anchor and khop).
NO_SPD = 0
# The dtypes `InteractionGraph.save` stores these integer fields in (about a third of int64's bytes for the
# edges); `load` widens them back to int64, so the estimate and train stages see the dtypes they always did.
STORED_DTYPES: dict[str, torch.dtype] = {
    "edge_index": torch.int32,
    "edge_type": torch.int8,
    "edge_spd": torch.int16,
    "edge_attr": torch.int16,
    "node_kind": torch.int8,
    "token_type": torch.int8,
    "node_graph": torch.int32,
    "x_cat": torch.int16,
}
# The fields `InteractionGraph.load(..., compact=True)` leaves as stored: the per-edge ones.
COMPACT_EDGE_FIELDS: tuple[str, ...] = ("edge_index", "edge_type", "edge_spd", "edge_attr")
# edge_attr's code of an edge without categorical features (every edge but the input graph's own).
NO_EDGE_ATTR = 0


@dataclass(frozen=True)
class InteractionGraph:
    """A graph's nodes plus the typed attention edges between them; for a dataset of many graphs, the
    disjoint union of each graph's own interaction graph, no edge joining two graphs.

    Node order: the input graph's nodes (graph by graph), then virtual nodes (each graph's own, graph by
    graph), then substructure tokens (graph by graph).

    Targets are one per node for node tasks and one per graph for graph tasks (`task`); the split masks
    are over the same targets.

    Attributes:
        x: float32 [N, F] continuous node features (F may be 0); rows of added nodes are zero.
        y: node tasks: int64 [N] class ids (-1 for added nodes), or float32 [N, T] multi-label targets
            (NaN: unknown, and on added nodes); graph tasks: int64 [G] class ids or float32 [G, T].
        train_mask: bool over the targets, [N] (always False for added nodes) or [G].
        val_mask: bool over the targets, as `train_mask`.
        test_mask: bool over the targets, as `train_mask`.
        node_kind: int64 [N] index into NODE_KINDS.
        edge_index: int64 [2, E] (src, dst), sorted by dst then src, so each node's incoming
            edges are one contiguous CSR segment (see `ptr`).
        edge_type: int64 [E] index into EDGE_TYPES.
        edge_spd: int64 [E] shortest-path-distance bucket of anchor and khop edges (AnchorGT's
            relative encoding): the SPD itself, 2..max_spd, where max_spd also stands for "farther or
            unreachable"; NO_SPD (0) on every other edge. Buckets 1 and 0 never meet a real SPD bucket,
            since an SPD-1 pair is a graph edge and an SPD-0 pair a self edge.
        num_spd_buckets: rows of an SPD embedding table (max_spd + 1); 0 when no edge has an SPD.
        token_adjacency: float32 [T, s*s] each substructure token's induced adjacency in degree-ordered
            DFS order, padded to s x s and flattened (DeepGraph); [0, 0] without tokens.
        token_type: int64 [T] index into `SUBSTRUCTURE_TYPES`; token t is node N - T + t.
        eigenvalues: float32 [N, m] the m lowest Laplacian eigenvalues of the input graph per node (SAN's
            LPE input); m = 0 when the LPE is off.
        eigenvectors: float32 [N, m] each node's entries of those eigenvectors.
        eigen_mask: bool [N, m] False on padding (fewer than m eigenpairs) and on every added node's row.
        num_real_nodes: the first `num_real_nodes` rows are the input graph's nodes.
        num_outputs: the networks' output columns: classes, or tasks T (multi-label, regression).
        task: the dataset's task (`sgt_core.tasks`).
        metric: the metric that selects the best epoch (`sgt_core.tasks`).
        num_graphs: G, the graphs of the dataset (1 for one graph).
        node_graph: int64 [N] the graph of every node, added nodes included; [0] when G = 1.
        x_cat: int64 [N, C] categorical node features (atom types), -1 on added nodes; [N, 0] without.
        x_cat_sizes: each categorical column's vocabulary size (C entries).
        edge_attr: int64 [E] code of each edge's categorical features (bond types): NO_EDGE_ATTR (0) on
            every edge but the input graph's own, 1 + the features' mixed-radix code there; [0] without.
        num_edge_attr_codes: rows of an edge-feature table (1 + the product of the vocabularies); 0 without.
        edge_features: float32 [E, Fe] continuous edge features (zero on added edges); [E, 0] without.
        notes: short facts every report of a run on this graph carries (e.g. which training set was used).

    The int64 fields above are what `load` gives; a graph built with `build_interaction_graph(...,
    compact=True)` (the preprocess stage's) holds them in the narrower `STORED_DTYPES` instead.
    """

    x: Tensor
    y: Tensor
    train_mask: Tensor
    val_mask: Tensor
    test_mask: Tensor
    node_kind: Tensor
    edge_index: Tensor
    edge_type: Tensor
    edge_spd: Tensor
    num_spd_buckets: int
    token_adjacency: Tensor
    token_type: Tensor
    eigenvalues: Tensor
    eigenvectors: Tensor
    eigen_mask: Tensor
    num_real_nodes: int
    num_outputs: int
    task: str = "node_classification"
    metric: str = "accuracy"
    num_graphs: int = 1
    node_graph: Tensor = field(default_factory=lambda: torch.zeros(0, dtype=torch.int64))
    x_cat: Tensor | None = None
    x_cat_sizes: list = field(default_factory=list)
    edge_attr: Tensor = field(default_factory=lambda: torch.zeros(0, dtype=torch.int64))
    num_edge_attr_codes: int = 0
    edge_features: Tensor | None = None
    notes: dict = field(default_factory=dict)
    stats: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Fields a graph built before they existed (or by a test by hand) leaves at their "none" forms.
        if self.x_cat is None:
            object.__setattr__(self, "x_cat", torch.zeros(self.num_nodes, 0, dtype=torch.int64))
        if self.edge_features is None:
            object.__setattr__(self, "edge_features", torch.zeros(self.num_edges, 0))

    @property
    def num_nodes(self) -> int:
        return int(self.x.shape[0])

    @property
    def num_edges(self) -> int:
        return int(self.edge_index.shape[1])

    @property
    def num_tokens(self) -> int:
        return int(self.token_type.shape[0])

    @property
    def graph_level(self) -> bool:
        """Whether targets belong to graphs (one per graph) rather than to nodes."""
        return self.task.startswith("graph")

    def task_spec(self, regression_loss: str = "l1", classification_loss: str = "cross_entropy") -> Task:
        """The task both stages train and evaluate by (loss, metrics, direction)."""
        return Task(self.task, self.metric, self.num_outputs, regression_loss, classification_loss)

    @property
    def ptr(self) -> Tensor:
        """CSR row pointer over destinations: node i's incoming edges are ptr[i]:ptr[i+1]. int64 [N+1]."""
        counts = torch.bincount(self.edge_index[1], minlength=self.num_nodes)
        return torch.cat([counts.new_zeros(1), counts.cumsum(0)])

    def model_input_sizes(self) -> dict[str, int]:
        """The sizes both networks' constructors take from the graph, as keyword arguments.

        A component that is off gives 0 (no SPD terms, no LPE, no token encoder).
        """
        return {
            "in_features": int(self.x.shape[1]),
            "num_outputs": self.num_outputs,
            "categorical_sizes": list(self.x_cat_sizes),
            "num_edge_attr_codes": self.num_edge_attr_codes,
            "edge_feature_dim": int(self.edge_features.shape[1]),
            "num_edge_types": len(EDGE_TYPES),
            "num_node_kinds": len(NODE_KINDS),
            "num_spd_buckets": self.num_spd_buckets,
            "lpe_eigenpairs": int(self.eigenvalues.shape[1]),
            "token_size": math.isqrt(self.token_adjacency.shape[1]) if self.num_tokens else 0,
            "num_token_types": len(SUBSTRUCTURE_TYPES),
        }

    def edge_type_counts(self) -> dict[str, int]:
        counts = torch.bincount(self.edge_type, minlength=len(EDGE_TYPES))
        return {name: int(count) for name, count in zip(EDGE_TYPES, counts)}

    def save(self, path: Path) -> None:
        """Writes the fields, the integer ones in `STORED_DTYPES` wherever their values fit."""
        fields = {name: getattr(self, name) for name in self.__dataclass_fields__}
        for name, dtype in STORED_DTYPES.items():
            if _fits(fields[name], dtype):
                fields[name] = fields[name].to(dtype)  # no copy when it already has that dtype
        # Plain tensors and Python scalars only, so loading needs no unpickling (weights_only=True).
        torch.save(fields, path)

    @classmethod
    def load(cls, path: Path, compact: bool = False) -> InteractionGraph:
        """Reads a saved graph, its integer fields widened to int64 (one at a time, to bound the peak).

        With `compact`, the per-edge fields (`COMPACT_EDGE_FIELDS`) stay in the dtypes they were stored in:
        the estimate stage reads them so, since at 200 M attention edges int64 would take 5 GB more.
        """
        fields = torch.load(path, weights_only=True)
        for name in STORED_DTYPES:
            if not (compact and name in COMPACT_EDGE_FIELDS):
                fields[name] = fields[name].long()
        return cls(**fields)


def _fits(values: Tensor, dtype: torch.dtype) -> bool:
    """Whether every value lies in the integer dtype's range (one pass over the tensor)."""
    if values.numel() == 0 or values.dtype == dtype:
        return True
    low, high = torch.aminmax(values)
    info = torch.iinfo(dtype)
    return info.min <= int(low) and int(high) <= info.max
