"""EstimatorAttention: the narrow network's one-head attention over every interaction-graph edge."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.utils import scatter, softmax


class EstimatorAttention(nn.Module):
    r"""One-head sparse attention with edge-type terms, normalised values and a temperature.

    Spexphormer (Shirzad et al., 2024), section 4. For an edge j -> i of type t:

    .. math::
        z_{ij} = \mathrm{clip}\Big(\big(\tfrac{(E_t \odot K_j)\cdot Q_i}{\sqrt{d}} + B_t\big) / \tau, \pm c\Big),
        \qquad a_{ij} = \mathrm{softmax}_{j \in \mathcal{N}_H(i)}(z_{ij}),
        \qquad \mathrm{out}_i = W_O \sum_j a_{ij}\, s\,\frac{V_j}{\lVert V_j \rVert_2}

    Normalising V makes a score comparable across neighbours: with unit-norm values, a larger a_ij
    really means a larger contribution; the learnable global scale s keeps accuracy (section 4).

    Args:
        width: feature width d (4 or 8 in the paper).
        num_edge_types: number of edge types t (size of E and B).
        logit_clip: c, the clipping bound on the tempered logits.

    Shapes:
        x [N, d], edge_index [2, E] (src, dst), edge_type [E] -> out [N, d], scores [E].
    """

    def __init__(self, width: int, num_edge_types: int, logit_clip: float = 8.0) -> None:
        super().__init__()
        self.width = width
        self.logit_clip = logit_clip
        self.query = nn.Linear(width, width)
        self.key = nn.Linear(width, width)
        self.value = nn.Linear(width, width)
        self.edge_scale = nn.Embedding(num_edge_types, width)  # E_t
        self.edge_bias = nn.Embedding(num_edge_types, 1)  # B_t
        self.value_scale = nn.Parameter(torch.empty(()))  # s
        self.out = nn.Linear(width, width)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for linear in (self.query, self.key, self.value, self.out):
            linear.reset_parameters()
        nn.init.ones_(self.edge_scale.weight)
        nn.init.zeros_(self.edge_bias.weight)
        nn.init.constant_(self.value_scale, math.sqrt(self.width))

    def forward(
        self, x: Tensor, edge_index: Tensor, edge_type: Tensor, temperature: float = 1.0
    ) -> tuple[Tensor, Tensor]:
        src, dst = edge_index
        query = self.query(x)[dst]  # [E, d]
        key = self.key(x)[src] * self.edge_scale(edge_type)  # [E, d]
        logits = (query * key).sum(-1) / math.sqrt(self.width) + self.edge_bias(edge_type).squeeze(-1)  # [E]
        logits = (logits / temperature).clamp(-self.logit_clip, self.logit_clip)
        scores = softmax(logits, dst, num_nodes=x.shape[0])  # [E], sums to 1 per destination
        value = self.value_scale * F.normalize(self.value(x), dim=-1)  # [N, d]
        messages = scores.unsqueeze(-1) * value[src]  # [E, d]
        out = scatter(messages, dst, dim=0, dim_size=x.shape[0], reduce="sum")  # [N, d]
        return self.out(out), scores
