"""The local message-passing branches (`model.local`), one class per convolution, PyG's layers in plain torch.

Each runs over the input graph's own edges among those a layer keeps, from the layer's input rows to its
queries: `forward(h [K, D], query_h [Q, D], layer, graph_degree [K]) -> [Q, D]`. `local_branch` builds the
one `model.local` names.
"""

from __future__ import annotations

from torch import nn

from sgt_core.models.local.appnp import APPNPBranch
from sgt_core.models.local.gatv2 import GATv2Branch
from sgt_core.models.local.gcn import GCNBranch
from sgt_core.models.local.gine import GINEBranch
from sgt_core.models.local.sage import SAGE_AGGREGATIONS, SAGEBranch

# `model.local`'s values but none, each the class it builds (sgt_core.config.model lists the same names)
LOCAL_BRANCHES: dict[str, type[nn.Module]] = {
    "gcn": GCNBranch,
    "sage": SAGEBranch,
    "gatv2": GATv2Branch,
    "appnp": APPNPBranch,
    "gine": GINEBranch,
}


def local_branch(local: str, hidden: int, heads: int, graph_edge_type: int = 0, aggregation: str = "mean",
                 steps: int | None = None, teleport: float | None = None, top_k: int | None = None,
                 num_edge_attr_codes: int = 0, edge_feature_dim: int = 0) -> nn.Module | None:
    """The branch `model.local` names, from the arguments it reads (the model's `local_*` keys); None for none.

    sage reads `aggregation`; gatv2 `heads` and `edge_feature_dim`; appnp `steps`, `teleport` and `top_k`;
    gine `num_edge_attr_codes` and `edge_feature_dim`; gcn none of them.
    """
    if local == "none":
        return None
    if local == "gcn":
        return GCNBranch(hidden, graph_edge_type)
    if local == "sage":
        return SAGEBranch(hidden, aggregation, graph_edge_type)
    if local == "gatv2":
        return GATv2Branch(hidden, heads, graph_edge_type, edge_feature_dim)
    if local == "appnp":
        if steps is None or teleport is None:
            raise ValueError(f"the appnp branch needs its steps and teleport, got steps={steps}, teleport={teleport}")
        return APPNPBranch(hidden, steps, teleport, top_k, graph_edge_type)
    if local == "gine":
        return GINEBranch(hidden, num_edge_attr_codes, graph_edge_type, edge_feature_dim)
    raise ValueError(f"local branch must be none or one of {', '.join(LOCAL_BRANCHES)}, got {local!r}")


__all__ = ["LOCAL_BRANCHES", "SAGE_AGGREGATIONS", "APPNPBranch", "GATv2Branch", "GCNBranch", "GINEBranch",
           "SAGEBranch", "local_branch"]
