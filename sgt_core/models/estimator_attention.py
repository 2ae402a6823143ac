"""EstimatorAttention: the narrow network's one-head attention over every interaction-graph edge."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn


# exp(30) times a million edges stays far inside float32's range, which the max-free softmax relies on.
MAX_LOGIT_CLIP = 30.0


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
        x [N, d], edge_index [2, E] (src, dst) sorted by dst, edge_type [E] -> out [N, d], scores [E].
    """

    def __init__(self, width: int, num_edge_types: int, logit_clip: float = 8.0) -> None:
        super().__init__()
        if not 0 < logit_clip <= MAX_LOGIT_CLIP:
            raise ValueError(f"logit_clip must be in (0, {MAX_LOGIT_CLIP}], got {logit_clip}")
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
        num_nodes, width = x.shape
        # Edges come sorted by destination (InteractionGraph's CSR order), so per-destination sums are
        # segment reductions: no atomics, and about 9x faster than index_add_ forward and backward.
        in_degree = torch.bincount(dst, minlength=num_nodes)  # [N]
        query = self.query(x).index_select(0, dst)  # [E, d]
        value = self.value_scale * F.normalize(self.value(x), dim=-1)  # [N, d]
        # One gather for keys and values together: the random-order gather is the costly one.
        key, value = torch.cat([self.key(x), value], dim=1).index_select(0, src).split(width, dim=1)  # [E, d] x2
        # (E_t ⊙ K_j)·Q_i + B_t for every type t at once is a small matmul, [E, d] @ [d, T] -> [E, T];
        # a one-hot mask then keeps each edge's own type. Its backward is elementwise, where an
        # embedding lookup or a gather would scatter E gradients every step (half the epoch's time).
        per_type = (query * key) @ self.edge_scale.weight.t() / math.sqrt(width)  # [E, T]
        per_type = per_type + self.edge_bias.weight.t()  # [E, T]
        own_type = F.one_hot(edge_type, self.edge_scale.num_embeddings).to(per_type.dtype)  # [E, T]
        logits = (per_type * own_type).sum(-1)  # [E]
        logits = (logits / temperature).clamp(-self.logit_clip, self.logit_clip)
        # Softmax over each destination's incoming edges. The clip bounds |logit| by c, so exp cannot
        # overflow and the usual per-segment max subtraction (a scatter-max pass) is unnecessary.
        weights = logits.exp()  # [E]
        totals = torch.segment_reduce(weights, "sum", lengths=in_degree)  # [N]
        scores = weights / totals.index_select(0, dst)  # [E], sums to 1 per destination
        out = torch.segment_reduce(scores.unsqueeze(-1) * value, "sum", lengths=in_degree)  # [N, d]
        return self.out(out), scores
