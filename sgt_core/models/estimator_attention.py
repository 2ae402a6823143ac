"""EstimatorAttention: the narrow network's one-head attention over every interaction-graph edge."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from sgt_core.models.edge_codes import (
    code_tables,
    combined_code,
    one_hot_code_tables,
    one_hot_codes,
    used_codes,
)
from sgt_core.models.fused_edge_attention import CODE_DTYPE, CompactEdges, compact_edges, fused_edge_attention

# exp(30) times a million edges stays far inside float32's range, which the max-free softmax relies on.
MAX_LOGIT_CLIP = 30.0
# The codes the fused kernels read (uint8): a larger code space is renumbered over the codes that occur.
COMPACT_CODES = torch.iinfo(CODE_DTYPE).max + 1


@dataclass(frozen=True)
class AttentionEdges:
    """An interaction graph's edges in the forms the attention reads, derived once per graph.

    Every layer and every epoch attends over the same edges, so the degrees, CSR offsets, per-edge codes
    and (for the memory-efficient path) the compact sources and the grouping by source are computed once
    (`EstimatorAttention.prepare`) instead of once per layer and epoch.

    Attributes:
        edge_index: [2, E] sorted by dst, as the graph holds it; None with `compact`, which holds all the
            fused operator reads, so that a caller can let the graph's own edge tensors go (7 bytes per
            edge for a compact graph).
        edge_type: [E] as the graph holds it; None with `compact`, as `edge_index`.
        edge_spd: [E] as the graph holds it, or None; None with `compact`, as `edge_index`.
        in_degree: int64 [N] incoming edges per destination (the CSR segments' lengths).
        ptr: int64 [N + 1] the CSR segments over destinations.
        code: [E] each edge's row in the fused kernels' E and B tables (`combined_code`, renumbered over
            `rows` when they are given).
        with_spd: whether the codes include the SPD bucket (`code_tables` then adds its rows).
        compact: the int32 / uint8 edges and their grouping by source that `sgt::edge_attention` reads;
            None on the plain autograd path.
        edge_attr: [E] as the graph holds it, or None; None with `compact`, as `edge_index`.
        with_attr: whether the codes include the feature code (`code_tables` then adds its rows).
        rows: int64 [C'] the full table's rows that `code` numbers 0..C'-1, where the full table would
            exceed the kernels' 256 codes (`used_codes`); None: `code` is the full table's row.
        features: float [E, Fe] each edge's continuous features (zero on every edge but the input graph's
            own), or None where the graph or the model has none. Every layer reads the same tensor.
    """

    edge_index: Tensor | None
    edge_type: Tensor | None
    edge_spd: Tensor | None
    in_degree: Tensor
    ptr: Tensor
    code: Tensor
    with_spd: bool
    compact: CompactEdges | None
    edge_attr: Tensor | None = None
    with_attr: bool = False
    rows: Tensor | None = None
    features: Tensor | None = None


class EdgeTypedAttention(nn.Module):
    """The parameters both attentions share: query, key, value and output projections, and edge-type terms.

    E_t scales the keys and B_t adds to the logits, a row per edge type t; with `num_spd_buckets` > 1,
    E^spd_b and B^spd_b add to them for shortest-path-distance bucket b > 0, with rows for buckets 1.. only:
    bucket 0 (no encoding) is a fixed zero; with `num_edge_attr_codes` > 1, E^attr_a and B^attr_a add to
    them for an input-graph edge of feature code a > 0 (its bond type: Exphormer feeds dataset edge
    features to the local edges' attention), code 0 (none) a fixed zero (`sgt_core.models.edge_codes`).
    With `edge_feature_dim` Fe > 0, an edge's continuous features f [Fe] (zero on every edge but the input
    graph's own) add W_E f and W_B f (Spexphormer section 3: E = W_E ℰ, B = W_B ℰ), so that an edge of code
    c has the terms E_c + W_E f and B_c + W_B f. E starts at one, B and every added table (W_E and W_B too)
    at zero: a fresh model computes what one without those terms does.

    Args:
        width: feature width (the heads side by side).
        bias_width: columns of B, B^spd and B^attr: one per head.
        num_edge_types: edge types t (rows of E and B).
        num_spd_buckets: SPD buckets b = 0..num_spd_buckets-1 (0 or 1: no SPD terms).
        value_scale: a learned scale s of the values, starting at sqrt(width) (the estimator's).
        num_edge_attr_codes: edge-feature codes a = 0..num_edge_attr_codes-1 (0 or 1: no feature terms).
        edge_feature_dim: Fe, continuous edge-feature columns (0: none): W_E [width, Fe], W_B [bias_width, Fe].
    """

    def __init__(self, width: int, bias_width: int, num_edge_types: int, num_spd_buckets: int,
                 value_scale: bool = False, num_edge_attr_codes: int = 0, edge_feature_dim: int = 0) -> None:
        super().__init__()
        self.width = width
        self.query = nn.Linear(width, width)
        self.key = nn.Linear(width, width)
        self.value = nn.Linear(width, width)
        self.edge_scale = nn.Embedding(num_edge_types, width)  # E_t
        self.edge_bias = nn.Embedding(num_edge_types, bias_width)  # B_t
        spd_rows = num_spd_buckets - 1
        self.spd_scale = nn.Parameter(torch.empty(spd_rows, width)) if spd_rows > 0 else None  # E^spd_b
        self.spd_bias = nn.Parameter(torch.empty(spd_rows, bias_width)) if spd_rows > 0 else None  # B^spd_b
        attr_rows = num_edge_attr_codes - 1
        self.attr_scale = nn.Parameter(torch.empty(attr_rows, width)) if attr_rows > 0 else None  # E^attr_a
        self.attr_bias = nn.Parameter(torch.empty(attr_rows, bias_width)) if attr_rows > 0 else None  # B^attr_a
        features = edge_feature_dim > 0
        self.feature_scale = nn.Parameter(torch.empty(width, edge_feature_dim)) if features else None  # W_E
        self.feature_bias = nn.Parameter(torch.empty(bias_width, edge_feature_dim)) if features else None  # W_B
        self.value_scale = nn.Parameter(torch.empty(())) if value_scale else None  # s
        self.out = nn.Linear(width, width)

    def reset_parameters(self) -> None:
        for linear in (self.query, self.key, self.value, self.out):
            linear.reset_parameters()
        nn.init.ones_(self.edge_scale.weight)
        nn.init.zeros_(self.edge_bias.weight)
        for table in (self.spd_scale, self.spd_bias, self.attr_scale, self.attr_bias, self.feature_scale,
                      self.feature_bias):
            if table is not None:
                nn.init.zeros_(table)
        if self.value_scale is not None:
            nn.init.constant_(self.value_scale, math.sqrt(self.width))

    @property
    def num_spd(self) -> int:
        """S: the SPD buckets of the code space (1: no SPD terms)."""
        return 1 if self.spd_scale is None else self.spd_scale.shape[0] + 1

    @property
    def num_attr(self) -> int:
        """A: the edge-feature codes of the code space (1: no feature terms)."""
        return 1 if self.attr_scale is None else self.attr_scale.shape[0] + 1

    def tables(self, with_spd: bool = True, with_attr: bool = True) -> tuple[Tensor, Tensor]:
        """E and B for every code (`code_tables`), without the SPD or feature terms where the edges lack them."""
        return code_tables(self.edge_scale.weight, self.edge_bias.weight,
                           self.spd_scale if with_spd else None, self.spd_bias,
                           self.attr_scale if with_attr else None, self.attr_bias)

    def one_hot_tables(self, with_features: bool = False) -> tuple[Tensor, Tensor]:
        """E and B rows in `one_hot_codes`' column order, then (`with_features`) W_E^T and W_B^T: the rows
        that `with_feature_columns`' extra columns weigh."""
        scale, bias = one_hot_code_tables(self.edge_scale.weight, self.edge_bias.weight, self.spd_scale,
                                          self.spd_bias, self.attr_scale, self.attr_bias)
        return self.with_feature_rows(scale, bias) if with_features else (scale, bias)

    def reads_features(self, features: Tensor | None) -> bool:
        """Whether the continuous features given (None, or [*, Fe]) add terms: the model has W_E and W_B."""
        return features is not None and self.feature_scale is not None and features.shape[-1] > 0

    def with_feature_rows(self, scale: Tensor, bias: Tensor) -> tuple[Tensor, Tensor]:
        """The code tables [C, d], [C, h] followed by W_E^T [Fe, d] and W_B^T [Fe, h]: the [C + Fe] rows that
        the fused operators read with the edges' features (an edge's terms: its code row plus f W^T)."""
        return torch.cat([scale, self.feature_scale.t()]), torch.cat([bias, self.feature_bias.t()])


def with_feature_columns(codes: Tensor, features: Tensor | None) -> Tensor:
    """One-hot code columns [*, C] (int) followed by the continuous features [*, Fe] as float columns: a
    code is a one-hot feature, so an edge's terms are one linear map of [one-hot | f] (Spexphormer's E = W_E ℰ,
    B = W_B ℰ), the rows of `one_hot_tables(with_features=True)`."""
    if features is None:
        return codes
    return torch.cat([codes.to(features.dtype), features], dim=-1)


class EstimatorAttention(EdgeTypedAttention):
    r"""One-head sparse attention with edge-type terms, normalised values and a temperature.

    Spexphormer (Shirzad et al., 2024), section 4. For an edge j -> i of type t, with E_ij = E_t and
    B_ij = B_t plus the distance, code and continuous-feature terms below where they are on:

    \[
    z_{ij} = \mathrm{clip}\Big(\big(\tfrac{(E_{ij} \odot K_j)\cdot Q_i}{\sqrt{d}} + B_{ij}\big) / \tau, \pm c\Big),
    \qquad a_{ij} = \mathrm{softmax}_{j \in \mathcal{N}_H(i)}(z_{ij}),
    \qquad \mathrm{out}_i = W_O \sum_j a_{ij}\, s\,\frac{V_j}{\lVert V_j \rVert_2}
    \]

    Normalising V makes a score comparable across neighbours: with unit-norm values, a larger a_ij
    really means a larger contribution; the learnable global scale s keeps accuracy (section 4).

    With `num_spd_buckets` > 0, an edge with shortest-path-distance bucket b > 0 (AnchorGT's relative
    encoding on anchor and k-hop edges) adds learnable terms to both: E_t + E^spd_b and B_t + B^spd_b.
    Bucket 0 means "no distance encoding" and adds nothing. E^spd and B^spd start at zero.

    With `edge_feature_dim` Fe > 0, an edge's continuous features f [Fe] (ogbn-proteins' 8 confidence
    scores; zero on added edges) add W_E f [d] to its E and W_B f [1] to its B (Spexphormer section 3), both
    starting at zero. The fused path forms them per edge inside the kernels from the [E, Fe] features that
    every layer shares: no [E, d] tensor of per-edge terms, so the features cost 4 Fe bytes per edge for
    the whole network (the graph's own tensor) and nothing more per layer.

    Args:
        width: feature width d (4 or 8 in the paper).
        num_edge_types: number of edge types t (size of E and B).
        logit_clip: c, the clipping bound on the tempered logits.
        num_spd_buckets: SPD buckets b = 0..num_spd_buckets-1 (0 or 1: no SPD terms).
        memory_efficient: compute through `fused_edge_attention` (the `sgt::edge_attention` operator),
            which keeps 5 bytes per edge for the backward pass instead of ~200 (compiled on the CPU,
            chunked torch elsewhere); False runs the plain autograd version below, its reference.
        num_edge_attr_codes: categorical edge-feature codes (0 or 1: none), see `EdgeTypedAttention`.
        edge_feature_dim: Fe, continuous edge-feature columns (0: none).

    Shapes:
        x [N, d], edge_index [2, E] (src, dst) sorted by dst, edge_type [E], edge_spd [E] or None,
        edge_attr [E] or None, edge_features float [E, Fe] or None -> out [N, d], scores [E].
    """

    def __init__(
        self,
        width: int,
        num_edge_types: int,
        logit_clip: float = 8.0,
        num_spd_buckets: int = 0,
        memory_efficient: bool = False,
        num_edge_attr_codes: int = 0,
        edge_feature_dim: int = 0,
    ) -> None:
        if not 0 < logit_clip <= MAX_LOGIT_CLIP:
            raise ValueError(f"logit_clip must be in (0, {MAX_LOGIT_CLIP}], got {logit_clip}")
        super().__init__(width, 1, num_edge_types, num_spd_buckets, value_scale=True,
                         num_edge_attr_codes=num_edge_attr_codes, edge_feature_dim=edge_feature_dim)
        self.memory_efficient = memory_efficient
        self.logit_clip = logit_clip
        self.reset_parameters()

    def prepare(self, edge_index: Tensor, edge_type: Tensor, edge_spd: Tensor | None, num_nodes: int,
                edge_attr: Tensor | None = None, edge_features: Tensor | None = None) -> AttentionEdges:
        """The `AttentionEdges` of a graph for this layer and every layer configured like it.

        The memory-efficient path gets the compact edges that `sgt::edge_attention` reads, on any device.
        `edge_features` [E, Fe] are kept as they are (no copy when contiguous), where the model reads them.
        """
        features = edge_features.contiguous() if self.reads_features(edge_features) else None
        in_degree = torch.bincount(edge_index[1], minlength=num_nodes)  # [N]
        ptr = torch.zeros(num_nodes + 1, dtype=torch.int64, device=edge_index.device)
        torch.cumsum(in_degree, 0, out=ptr[1:])
        with_spd = edge_spd is not None and self.spd_scale is not None
        with_attr = edge_attr is not None and self.attr_scale is not None
        code = combined_code(edge_type, edge_spd if with_spd else None, edge_attr if with_attr else None,
                             self.num_spd if with_spd else 1, self.num_attr if with_attr else 1)
        num_codes = self.edge_scale.num_embeddings * (self.num_spd if with_spd else 1) * (
            self.num_attr if with_attr else 1)
        if self.memory_efficient:
            code, rows = used_codes(code, num_codes, COMPACT_CODES)
            compact = compact_edges(edge_index, code, ptr, num_codes if rows is None else rows.numel())
            return AttentionEdges(None, None, None, in_degree, ptr, compact.code, with_spd, compact,
                                  with_attr=with_attr, rows=rows, features=features)
        return AttentionEdges(edge_index, edge_type, edge_spd, in_degree, ptr, code, with_spd, None,
                              edge_attr=edge_attr, with_attr=with_attr, features=features)

    def forward(
        self,
        x: Tensor,
        edge_index: Tensor,
        edge_type: Tensor,
        temperature: float = 1.0,
        edge_spd: Tensor | None = None,
        edges: AttentionEdges | None = None,
        edge_attr: Tensor | None = None,
        edge_features: Tensor | None = None,
    ) -> tuple[Tensor, Tensor]:
        num_nodes, width = x.shape
        if edges is None:  # callers with several layers over one graph prepare it once
            edges = self.prepare(edge_index, edge_type, edge_spd, num_nodes, edge_attr, edge_features)
        features = None if edges.features is None else edges.features.to(x.dtype)  # [E, Fe]: no copy in float32
        if self.memory_efficient:
            return self._forward_fused(x, edges, temperature, features)
        src, dst = edge_index.long()  # the reference path: plain autograd on small graphs
        query = self.query(x).index_select(0, dst)  # [E, d]
        value = self.value_scale * F.normalize(self.value(x), dim=-1)  # [N, d]
        # One gather for keys and values together: the random-order gather is the costly one.
        key, value = torch.cat([self.key(x), value], dim=1).index_select(0, src).split(width, dim=1)  # [E, d] x2
        # (E_c ⊙ K_j)·Q_i + B_c for every code c (each type t, then each SPD bucket b > 0) at once is a
        # small matmul, [E, d] @ [d, C] -> [E, C]; a one-hot mask then keeps each edge's own type and
        # bucket, and summing them gives (E_t + E^spd_b) and B_t + B^spd_b. Its backward is elementwise,
        # where an embedding lookup or a gather would scatter E gradients every step (half the epoch's time).
        # Continuous features are further columns, weighing the rows W_E^T and W_B^T: (E_c + W_E f) and
        # B_c + W_B f (`with_feature_columns`).
        scale, bias = self.one_hot_tables(features is not None)  # [C (+ Fe), d], [C (+ Fe), 1]
        per_code = (query * key) @ scale.t() / math.sqrt(width) + bias.t()  # [E, C (+ Fe)]
        codes = one_hot_codes(edge_type, edge_spd if edges.with_spd else None,
                              edges.edge_attr if edges.with_attr else None, self.edge_scale.num_embeddings,
                              self.num_spd, self.num_attr)  # [E, C]
        codes = with_feature_columns(codes, features).to(per_code.dtype)  # [E, C (+ Fe)]
        logits = (per_code * codes).sum(-1)  # [E]
        logits = (logits / temperature).clamp(-self.logit_clip, self.logit_clip)
        # Softmax over each destination's incoming edges. The clip bounds |logit| by c, so exp cannot
        # overflow and the usual per-segment max subtraction (a scatter-max pass) is unnecessary.
        weights = logits.exp()  # [E]
        # Edges come sorted by destination (InteractionGraph's CSR order), so per-destination sums are
        # segment reductions: no atomics, and faster than index_add_ forward and backward.
        totals = torch.segment_reduce(weights, "sum", lengths=edges.in_degree)  # [N]
        scores = weights / totals.index_select(0, dst)  # [E], sums to 1 per destination
        out = torch.segment_reduce(scores.unsqueeze(-1) * value, "sum", lengths=edges.in_degree)  # [N, d]
        return self.out(out), scores

    def _forward_fused(self, x: Tensor, edges: AttentionEdges, temperature: float,
                       features: Tensor | None) -> tuple[Tensor, Tensor]:
        """The same attention through the fused kernel: one code per edge (`combined_code`), and the
        features' rows W_E^T, W_B^T after the code rows, which the kernel weighs by each edge's features."""
        value = self.value_scale * F.normalize(self.value(x), dim=-1)  # [N, d]
        scale, bias = self.tables(edges.with_spd, edges.with_attr)  # [C, d], [C, 1]
        if edges.rows is not None:  # the codes number only the rows the graph uses
            scale, bias = scale.index_select(0, edges.rows), bias.index_select(0, edges.rows)
        if features is not None:
            scale, bias = self.with_feature_rows(scale, bias)  # [C + Fe, d], [C + Fe, 1]
        out, scores = fused_edge_attention(
            self.query(x), self.key(x), value, scale, bias.squeeze(1), edges.edge_index, edges.code,
            edges.in_degree, temperature, self.logit_clip, edges.compact, features,
        )
        return self.out(out), scores
