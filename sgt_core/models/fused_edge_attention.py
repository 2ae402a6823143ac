"""fused_edge_attention: the estimator's edge softmax attention as the `sgt::edge_attention` operator."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch
from torch import Tensor

from sgt_core.kernels import operators
from sgt_core.kernels.library import loaded

# Edges per chunk. Every per-edge intermediate lives for one chunk only, so the transient memory is a
# few [CHUNK_EDGES, d] tensors (~2 MB each at d = 8) whatever the graph's size, and a chunk's working
# set stays in the CPU caches (measured no slower than whole-graph tensors on Minesweeper,
# benchmarks/results/2026-11-27-moved-figures.md). Chunks end on destination boundaries, so each node's
# softmax lies within one chunk.
CHUNK_EDGES = 1 << 16
# On CUDA a chunk is one launch of each kernel, not a cache-sized piece: at the CPU's sizes the wide
# network's epoch is tens of thousands of launches and the GPU waits on them (figures in
# benchmarks/results/2026-11-27-moved-figures.md). There chunks are sized by bytes: one [items, d] intermediate of at most this many bytes, so the
# transient memory stays a few of them (~1.5 GB at most) whatever the graph's size.
CUDA_CHUNK_BYTES = 1 << 28


def chunk_items(cpu_items: int, item_bytes: int, device: torch.device) -> int:
    """Items (edges, query slots) per chunk: `cpu_items` on the CPU; on CUDA as many as keep one
    intermediate of `item_bytes` per item within CUDA_CHUNK_BYTES, and never fewer than the CPU's."""
    return cpu_items if device.type != "cuda" else max(cpu_items, CUDA_CHUNK_BYTES // max(item_bytes, 1))


def destination_chunks(in_degree: Tensor, chunk_edges: int | None = None) -> list[tuple[int, int, int, int]]:
    """(first node, end node, first edge, end edge) of consecutive chunks of about `chunk_edges` edges.

    Edges are sorted by destination, so a run of whole nodes is a contiguous run of edges; a node with
    more than `chunk_edges` incoming edges gets a chunk of its own.
    """
    chunk_edges = chunk_edges or CHUNK_EDGES
    ptr = torch.zeros(in_degree.numel() + 1, dtype=torch.int64, device=in_degree.device)
    torch.cumsum(in_degree, 0, out=ptr[1:])
    num_edges = int(ptr[-1])
    targets = torch.arange(chunk_edges, max(num_edges, chunk_edges), chunk_edges, device=in_degree.device)
    # the first node whose edges start at or after each target: chunk boundaries on whole nodes
    cuts = torch.searchsorted(ptr, targets).unique().tolist()
    nodes = [0, *[c for c in cuts if 0 < c < in_degree.numel()], in_degree.numel()]
    ptr_list = ptr[nodes].tolist()
    return [(nodes[i], nodes[i + 1], ptr_list[i], ptr_list[i + 1]) for i in range(len(nodes) - 1)
            if ptr_list[i + 1] > ptr_list[i] or nodes[i + 1] > nodes[i]]


def _edge_chunks(in_degree: Tensor, key_value: Tensor) -> list[tuple[int, int, int, int]]:
    """`destination_chunks` at the size for key_value's device: one gathered key_value row per edge."""
    chunk_edges = chunk_items(CHUNK_EDGES, key_value.element_size() * key_value.shape[1], key_value.device)
    return destination_chunks(in_degree, chunk_edges)


def _local_destinations(lengths: Tensor) -> Tensor:
    """Each edge's destination within its chunk, from the chunk's in-degrees: int64 [e]."""
    return torch.repeat_interleave(torch.arange(lengths.numel(), device=lengths.device), lengths)


def _split_tables(edge_scale, edge_bias, features):
    """The tables' C code rows and F feature rows (`features` [.., F] or None: F = 0)."""
    num_codes = edge_scale.shape[0] - (0 if features is None else features.shape[-1])
    return num_codes, edge_scale[num_codes:], None if edge_bias is None else edge_bias[num_codes:]


def _edge_terms(edge_scale, edge_bias, code_c, features_c, feature_scale, feature_bias):
    """A chunk's per-edge E rows [e, d] and B values [e] (B None: E only): its code rows, plus with features
    f [e, F] the feature rows' combination f W (Spexphormer's W_E f, W_B f)."""
    scale_e = edge_scale.index_select(0, code_c)  # [e, d]
    bias_e = None if edge_bias is None else edge_bias.index_select(0, code_c)  # [e]
    if features_c is not None:
        scale_e = scale_e + features_c @ feature_scale  # [e, F] @ [F, d]
        bias_e = None if bias_e is None else bias_e + features_c @ feature_bias  # [e]
    return scale_e, bias_e


def _edge_attention_torch(query, key_value, edge_scale, edge_bias, ptr, src, code, source_ptr, source_edge,
                          source_dst, source_code, temperature, clip, features=None):
    """`sgt::edge_attention` in torch, one chunk of edges at a time: the CUDA path, and the CPU's without
    the compiled kernels. The source grouping is for the compiled backward pass; this one does not read it.
    With `features` [E, F] the tables end with F feature rows (`fused_edge_attention`).

    Autograd over these ops would keep about a dozen [E, d]-sized intermediates per layer (gathered queries,
    keys, values, products, one-hots, ...), hundreds of bytes per edge: on Tolokers (1.4M attention edges)
    gigabytes. The operator's backward pass recomputes the gathers from the node-level tensors instead, so
    only the scores and a clip mask (5 bytes per edge) are kept between the passes.
    """
    num_nodes, width = query.shape
    scale = 1.0 / math.sqrt(width)
    in_degree = ptr.diff()  # [N]
    out = query.new_zeros(num_nodes, width)
    scores = query.new_empty(src.numel())
    inside = torch.empty(src.numel(), dtype=torch.bool, device=src.device)  # where the clip passes gradient
    _num_codes, feature_scale, feature_bias = _split_tables(edge_scale, edge_bias, features)
    for first_node, end_node, first, end in _edge_chunks(in_degree, key_value):
        lengths = in_degree[first_node:end_node]
        src_c, dst_c, code_c = src[first:end], _local_destinations(lengths), code[first:end].long()
        key_e, value_e = key_value.index_select(0, src_c).split(width, dim=1)  # [e, d] x2
        query_e = query[first_node:end_node].index_select(0, dst_c)  # [e, d]
        scale_e, bias_e = _edge_terms(edge_scale, edge_bias, code_c, None if features is None else features[first:end],
                                      feature_scale, feature_bias)  # [e, d], [e]
        raw = (query_e * key_e * scale_e).sum(-1)  # [e]
        tempered = (raw * scale + bias_e) / temperature  # [e]
        inside[first:end] = tempered.abs() < clip
        # |logit| <= clip, so exp cannot overflow and no per-segment max is needed
        weights = tempered.clamp_(-clip, clip).exp_()  # [e]
        totals = torch.segment_reduce(weights, "sum", lengths=lengths)  # [n]
        chunk_scores = torch.div(weights, totals.index_select(0, dst_c), out=scores[first:end])  # [e]
        out[first_node:end_node] = torch.segment_reduce(chunk_scores.unsqueeze(1) * value_e, "sum", lengths=lengths)
    return out, scores, inside


def _edge_attention_backward_torch(grad_out, grad_scores, query, key_value, edge_scale, scores, inside, ptr, src,
                                   code, source_ptr, source_edge, source_dst, source_code, temperature, features=None):
    """`sgt::edge_attention_backward` in torch, chunk by chunk: gradients of query, key_value, E and B (their
    code rows, then with `features` their feature rows: f_j times the code rows' terms)."""
    width = query.shape[1]
    num_codes, feature_scale, _ = _split_tables(edge_scale, None, features)
    scale = 1.0 / math.sqrt(width)
    in_degree = ptr.diff()  # [N]
    grad_query = torch.zeros_like(query)
    grad_key_value = torch.zeros_like(key_value)  # keys and values are both gathered by src
    grad_edge_scale = torch.zeros_like(edge_scale)
    grad_edge_bias = query.new_zeros(edge_scale.shape[0])
    for first_node, end_node, first, end in _edge_chunks(in_degree, key_value):
        lengths, scores_c = in_degree[first_node:end_node], scores[first:end]
        src_c, dst_c, code_c = src[first:end], _local_destinations(lengths), code[first:end].long()
        grad_out_e = grad_out[first_node:end_node].index_select(0, dst_c)  # [e, d]
        key_e, value_e = key_value.index_select(0, src_c).split(width, dim=1)  # [e, d] x2
        # d loss / d score of each edge, through the messages and (if used) the scores output
        grad_score = (grad_out_e * value_e).sum(-1)  # [e]
        if grad_scores is not None:
            grad_score += grad_scores[first:end]
        # softmax backward within each destination's segment
        expected = torch.segment_reduce(scores_c * grad_score, "sum", lengths=lengths)  # [n]
        grad_logit = scores_c * (grad_score - expected.index_select(0, dst_c))  # [e]
        grad_logit = grad_logit * inside[first:end] / temperature  # [e] gradient of the bias term
        grad_raw = (grad_logit * scale).unsqueeze(1)  # [e, 1]
        query_e = query[first_node:end_node].index_select(0, dst_c)  # [e, d]
        features_c = None if features is None else features[first:end]  # [e, F]
        scale_e, _ = _edge_terms(edge_scale, None, code_c, features_c, feature_scale, None)  # [e, d]
        grad_query[first_node:end_node] = torch.segment_reduce(grad_raw * key_e * scale_e, "sum", lengths=lengths)
        grad_key_value.index_add_(
            0, src_c, torch.cat([grad_raw * query_e * scale_e, scores_c.unsqueeze(1) * grad_out_e], dim=1)
        )
        # C is tiny, so a one-hot matmul beats index_add_'s serial scatter into a handful of rows
        own_code = torch.nn.functional.one_hot(code_c, num_codes).to(query.dtype)  # [e, C]
        grad_terms = grad_raw * query_e * key_e  # [e, d] the gradient of the edge's E row
        grad_edge_scale[:num_codes] += own_code.t() @ grad_terms  # [C, d]
        grad_edge_bias[:num_codes] += torch.bincount(code_c, weights=grad_logit, minlength=num_codes).to(query.dtype)
        if features_c is not None:  # the feature rows': f_j times the edge's terms
            grad_edge_scale[num_codes:] += features_c.t() @ grad_terms  # [F, d]
            grad_edge_bias[num_codes:] += features_c.t() @ grad_logit  # [F]
    return grad_query, grad_key_value, grad_edge_scale, grad_edge_bias


def _edges_by_source_torch(ptr, src, code):
    """`sgt::edges_by_source` in torch: a stable sort of the edges by source."""
    num_nodes = ptr.numel() - 1
    order = torch.argsort(src.long(), stable=True)  # [E] edge ids by source, ascending within a source
    source_ptr = torch.zeros(num_nodes + 1, dtype=torch.int64, device=ptr.device)
    torch.cumsum(torch.bincount(src.long(), minlength=num_nodes), 0, out=source_ptr[1:])
    dst = _local_destinations(ptr.diff())  # [E]
    return source_ptr, order.to(INDEX_DTYPE), dst[order].to(INDEX_DTYPE), code[order]


def _setup_context(ctx, inputs, output):
    query, key_value, edge_scale, _edge_bias, *graph, temperature, _clip, features = inputs
    _out, scores, inside = output
    ctx.save_for_backward(query, key_value, edge_scale, scores, inside, *graph, features)
    ctx.temperature = temperature
    ctx.set_materialize_grads(False)  # no [E] zeros when the scores take no gradient


def _backward(ctx, grad_out, grad_scores, _grad_inside):
    query, key_value, edge_scale, scores, inside, *graph, features = ctx.saved_tensors
    grad_out = torch.zeros_like(query) if grad_out is None else grad_out.contiguous()
    grad_scores = None if grad_scores is None else grad_scores.contiguous()
    grads = operators().edge_attention_backward(grad_out, grad_scores, query, key_value, edge_scale, scores,
                                                 inside, *graph, ctx.temperature, features)
    return *grads, *([None] * 10)  # the graph, temperature, clip and features take none


@functools.cache
def _operators():
    """`torch.ops.sgt` with the edge operators' torch implementations (every device but the compiled
    CPU one) registered, and their autograd where the C++ library (which has its own) is not loaded."""
    ops = operators()
    torch.library.register_kernel("sgt::edges_by_source", None, _edges_by_source_torch)
    torch.library.register_kernel("sgt::edge_attention", None, _edge_attention_torch)
    torch.library.register_kernel("sgt::edge_attention_backward", None, _edge_attention_backward_torch)
    if not loaded():  # the C++ library registers its own (sgt_core/kernels/autograd.cpp, "Autograd")
        torch.library.register_autograd("sgt::edge_attention", _backward, setup_context=_setup_context)
    return ops


# The compiled kernels index with int32 and read codes as uint8: 4 + 1 bytes per edge where int64 would
# take 16, which is gigabytes at Amazon2M's 200 M attention edges.
INDEX_DTYPE, CODE_DTYPE = torch.int32, torch.uint8


@dataclass(frozen=True)
class CompactEdges:
    """Destination-sorted edges as `sgt::edge_attention` reads them, with their grouping by source.

    It depends only on the graph and the edge codes, so a caller with several layers or epochs over one
    graph builds it once (`compact_edges`): 5 bytes per edge for the sources and codes, 9 for the
    grouping by source, which the backward pass sweeps over.

    Attributes:
        ptr: int64 [N + 1] destination i's edges are ptr[i]:ptr[i+1].
        src: int32 [E] sources; code: uint8 [E] codes (rows of the E and B tables).
        source_ptr: int64 [N + 1] source j's edges are entries source_ptr[j]:source_ptr[j+1] of:
        source_dst: int32 [E] their destinations, and source_code: uint8 [E] their codes.
        source_edge: int32 [E] each entry's edge id (its place in the destination order).
    """

    ptr: Tensor
    src: Tensor
    code: Tensor
    source_ptr: Tensor
    source_dst: Tensor
    source_code: Tensor
    source_edge: Tensor

    def tensors(self) -> tuple[Tensor, ...]:
        """The graph arguments of `sgt::edge_attention` and its backward pass, in their order."""
        return self.ptr, self.src, self.code, self.source_ptr, self.source_edge, self.source_dst, self.source_code


def compact_edges(edge_index: Tensor, edge_code: Tensor, ptr: Tensor, num_codes: int) -> CompactEdges:
    """Checks that every index fits and groups the edges by source, in O(N + E).

    The indices are checked here, before they are narrowed to int32 / uint8 (a wider value would wrap
    into range); the operators check the narrowed ones again before every call. Int32 sources of their
    own storage and uint8 codes are used without a copy.
    """
    num_nodes, src = ptr.numel() - 1, edge_index[0]
    if max(num_nodes, src.numel()) > torch.iinfo(INDEX_DTYPE).max:
        raise ValueError(f"the attention operators index with int32: {num_nodes} nodes and {src.numel()} "
                         "edges do not fit")
    if num_codes > torch.iinfo(CODE_DTYPE).max + 1:
        raise ValueError(f"the attention operators take at most 256 edge codes, got {num_codes}")
    if int(ptr[0]) != 0 or int(ptr[-1]) != src.numel() or bool((ptr.diff() < 0).any()):
        raise ValueError(f"the CSR offsets must rise from 0 to the edge count; they cover {int(ptr[0])}.."
                         f"{int(ptr[-1])} for {src.numel()} edges")
    for name, values, bound in (("source", src, num_nodes), ("edge code", edge_code, num_codes)):
        if values.numel() and not (0 <= int(values.min()) and int(values.max()) < bound):
            raise ValueError(f"{name} indices must lie in [0, {bound})")
    src, code = src.to(INDEX_DTYPE).contiguous(), edge_code.to(CODE_DTYPE).contiguous()
    if src.untyped_storage().nbytes() > src.numel() * src.element_size():
        # A row of the caller's [2, E] edge index: copied, so that the compact edges never keep the
        # destinations' row alive (a caller holding only these can free the graph's edges).
        src = src.clone()
    source_ptr, source_edge, source_dst, source_code = _operators().edges_by_source(ptr.contiguous(), src, code)
    return CompactEdges(ptr=ptr.contiguous(), src=src, code=code, source_ptr=source_ptr, source_dst=source_dst,
                        source_code=source_code, source_edge=source_edge)


def fused_edge_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    edge_scale: Tensor,
    edge_bias: Tensor,
    edge_index: Tensor,
    edge_code: Tensor,
    in_degree: Tensor,
    temperature: float,
    clip: float,
    compact: CompactEdges | None = None,
    features: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    r"""Edge softmax attention: for an edge j -> i with code c (its edge type, or type and distance) and,
    optionally, continuous features f (F of them),

    \[
    E_{ij} = E_c + \sum_k f_k E_{C+k}, \qquad B_{ij} = B_c + \sum_k f_k B_{C+k},
    \]

    \[
    a_{ij} = \mathrm{softmax}_j\Big(\mathrm{clip}\big(((E_{ij} \odot K_j)\cdot Q_i / \sqrt{d} + B_{ij}) / \tau,
    \pm\,clip\big)\Big), \qquad \mathrm{out}_i = \sum_j a_{ij} V_j
    \]

    The tables' last F rows are the columns of Spexphormer's W_E [d, F] and W_B [1, F] (section 3: E = W_E f,
    B = W_B f), so that a code, a one-hot feature, and the continuous features are one linear map.

    Args:
        query: float [N, d] node projections Q.
        key: float [N, d] node projections K.
        value: float [N, d] node projections V (already normalised and scaled).
        edge_scale: float [C + F, d] E per edge code, then per feature.
        edge_bias: float [C + F] B per edge code, then per feature.
        edge_index: integer [2, E] (src, dst) sorted by dst.
        edge_code: integer [E] in [0, C); only read to build `compact` when it is missing.
        in_degree: int64 [N] incoming edges per node (the CSR segment lengths).
        temperature: tau.
        clip: bound on the tempered logits (<= 30 so exp cannot overflow).
        compact: `compact_edges(edge_index, edge_code, ...)`, which a caller with several layers or
            epochs over one graph builds once.
        features: float [E, F] each edge's continuous features, in edge order, the query's dtype (None: F = 0).
            They take no gradient.

    Returns:
        out [N, d] and scores [E] (summing to 1 per destination).

    It runs `sgt::edge_attention`: the compiled kernel on the CPU (one sweep over the destinations with
    every per-edge value in registers, about 10x faster than torch), `_edge_attention_torch` elsewhere.
    Between the passes it keeps the scores and clip mask, 5 bytes per edge; the features are the caller's
    tensor, shared by every layer, and each pass forms an edge's terms from them again: no per-edge E rows
    are ever stored.
    """
    num_codes = edge_scale.shape[0] - (0 if features is None else features.shape[1])
    if compact is None:
        ptr = torch.zeros(in_degree.numel() + 1, dtype=torch.int64, device=in_degree.device)
        torch.cumsum(in_degree, 0, out=ptr[1:])
        compact = compact_edges(edge_index, edge_code, ptr, num_codes)
    elif num_codes > torch.iinfo(CODE_DTYPE).max + 1:
        raise ValueError(f"the attention operators take at most 256 edge codes, got {num_codes}")
    key_value = torch.cat([key, value], dim=1)  # [N, 2d]: a key and its value on one cache line
    out, scores, _inside = _operators().edge_attention(
        query.contiguous(), key_value, edge_scale.contiguous(), edge_bias.contiguous(), *compact.tensors(),
        float(temperature), float(clip), None if features is None else features.contiguous())
    return out, scores
