"""The typed interaction graph H: the attention pattern both networks attend over (Exphormer section 3.2).

This module needs only torch, so the training stages load graphs without importing PyG or SciPy.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor

# Edge-type ids are global and fixed, so embeddings and exported names mean the same thing everywhere.
EDGE_TYPES: tuple[str, ...] = ("graph", "self", "expander", "virtual")
# Node kinds: real graph nodes and added ones, which get a learnable embedding instead of features.
NODE_KINDS: tuple[str, ...] = ("real", "virtual")
INTERACTION_GRAPH_FILE = "interaction_graph.pt"


@dataclass(frozen=True)
class InteractionGraph:
    """A graph's nodes plus the typed attention edges between them.

    Attributes:
        x: float32 [N, F] node features; rows of added nodes are zero.
        y: int64 [N] labels; -1 for added nodes.
        train_mask, val_mask, test_mask: bool [N]; always False for added nodes.
        node_kind: int64 [N] index into NODE_KINDS.
        edge_index: int64 [2, E] (src, dst), sorted by dst then src, so each node's incoming
            edges are one contiguous CSR segment (see `ptr`).
        edge_type: int64 [E] index into EDGE_TYPES.
        num_real_nodes: the first `num_real_nodes` rows are the input graph's nodes.
        num_classes: number of label classes.
    """

    x: Tensor
    y: Tensor
    train_mask: Tensor
    val_mask: Tensor
    test_mask: Tensor
    node_kind: Tensor
    edge_index: Tensor
    edge_type: Tensor
    num_real_nodes: int
    num_classes: int
    stats: dict = field(default_factory=dict)

    @property
    def num_nodes(self) -> int:
        return int(self.x.shape[0])

    @property
    def num_edges(self) -> int:
        return int(self.edge_index.shape[1])

    @property
    def ptr(self) -> Tensor:
        """CSR row pointer over destinations: node i's incoming edges are ptr[i]:ptr[i+1]. int64 [N+1]."""
        counts = torch.bincount(self.edge_index[1], minlength=self.num_nodes)
        return torch.cat([counts.new_zeros(1), counts.cumsum(0)])

    def edge_type_counts(self) -> dict[str, int]:
        counts = torch.bincount(self.edge_type, minlength=len(EDGE_TYPES))
        return {name: int(count) for name, count in zip(EDGE_TYPES, counts)}

    def save(self, path: Path) -> None:
        # Plain tensors and Python scalars only, so loading needs no unpickling (weights_only=True).
        torch.save({name: getattr(self, name) for name in self.__dataclass_fields__}, path)

    @classmethod
    def load(cls, path: Path) -> InteractionGraph:
        return cls(**torch.load(path, weights_only=True))
