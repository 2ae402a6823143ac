"""The compiled edge attention's compact edges: the grouping by source, the bounds checks, and int32 graphs."""

from __future__ import annotations

import pytest
import torch

from sgt_core.kernels.library import cpu_kernels
from sgt_core.models import AttentionScoreEstimator
from sgt_core.models.fused_edge_attention import compact_edges, fused_edge_attention

pytestmark = pytest.mark.skipif(cpu_kernels() is None, reason="no C compiler here: the torch kernels run instead")


def sorted_graph(num_nodes=200, num_edges=3000, num_codes=5, seed=0):
    generator = torch.Generator().manual_seed(seed)
    src = torch.randint(0, num_nodes, (num_edges,), generator=generator)
    dst = torch.randint(0, num_nodes - 2, (num_edges,), generator=generator)  # two nodes without edges
    order = torch.argsort(dst * num_nodes + src)
    edge_index = torch.stack([src[order], dst[order]])
    code = torch.randint(0, num_codes, (num_edges,), generator=generator)
    ptr = torch.cat([torch.zeros(1, dtype=torch.long), torch.bincount(edge_index[1], minlength=num_nodes).cumsum(0)])
    return edge_index, code, ptr


def test_grouping_by_source_is_the_stable_order():
    edge_index, code, ptr = sorted_graph()
    compact = compact_edges(edge_index, code, ptr, 5)
    order = torch.argsort(edge_index[0], stable=True)  # edges by source, ascending edge id within a source
    assert torch.equal(compact.source_dst.long(), edge_index[1][order])
    assert torch.equal(compact.source_code.long(), code[order])
    assert torch.equal(compact.source_edge.long(), order)
    counts = torch.bincount(edge_index[0], minlength=ptr.numel() - 1)
    assert torch.equal(compact.source_ptr, torch.cat([torch.zeros(1, dtype=torch.long), counts.cumsum(0)]))
    assert compact.src.dtype == torch.int32 and compact.code.dtype == torch.uint8


def test_compact_inputs_are_used_without_a_copy_but_never_keep_the_destinations_alive():
    edge_index, code, ptr = sorted_graph()
    edge_index, code = edge_index.to(torch.int32), code.to(torch.uint8)
    src = edge_index[0].clone()  # int32 sources of their own: used as they are
    compact = compact_edges(src.unsqueeze(0), code, ptr, 5)
    assert compact.src.data_ptr() == src.data_ptr() and compact.code.data_ptr() == code.data_ptr()
    # a row of a [2, E] index is copied, so that freeing the graph's edges frees the destinations too
    compact = compact_edges(edge_index, code, ptr, 5)
    assert compact.src.untyped_storage().nbytes() == 4 * edge_index.shape[1]
    assert torch.equal(compact.src, edge_index[0])


@pytest.mark.parametrize("bad, message", [
    ("source", r"source indices must lie in \[0, 200\)"),
    ("negative", r"source indices must lie in \[0, 200\)"),
    ("code", r"edge code indices must lie in \[0, 5\)"),
    ("ptr", "CSR offsets must rise from 0 to the edge count"),
    ("falling", "CSR offsets must rise from 0 to the edge count"),
])
def test_out_of_range_indices_are_refused_before_any_kernel_runs(bad, message):
    edge_index, code, ptr = sorted_graph()
    if bad == "source":
        edge_index[0, 7] = 200
    elif bad == "negative":
        edge_index[0, 7] = -1
    elif bad == "code":
        code[3] = 5
    elif bad == "ptr":
        ptr = ptr.clone()
        ptr[-1] -= 1
    else:
        ptr = ptr.clone()
        ptr[50] = ptr[52] + 1
    with pytest.raises(ValueError, match=message):
        compact_edges(edge_index, code, ptr, 5)


def test_too_many_codes_for_uint8_are_refused():
    edge_index, code, ptr = sorted_graph()
    with pytest.raises(ValueError, match="at most 256 edge codes"):
        compact_edges(edge_index, code, ptr, 300)
    compact = compact_edges(edge_index, code, ptr, 5)
    tensors = [torch.randn(200, 4) for _ in range(3)]
    with pytest.raises(ValueError, match="at most 256 edge codes"):
        fused_edge_attention(*tensors, torch.randn(300, 4), torch.randn(300), edge_index, code, ptr.diff(), 1.0, 8.0,
                             compact)


def test_an_estimator_on_compact_edges_equals_one_on_int64_edges():
    """The stages load int32 / int8 / int16 edges; scores and gradients must not depend on that."""
    edge_index, code, _ = sorted_graph(num_nodes=120, num_edges=2000, num_codes=3)
    edge_type, edge_spd = code, torch.randint(0, 4, code.shape, generator=torch.Generator().manual_seed(2))
    x, node_kind = torch.randn(120, 6), torch.zeros(120, dtype=torch.long)
    results = []
    for index_dtype, type_dtype, spd_dtype in ((torch.int64,) * 3, (torch.int32, torch.int8, torch.int16)):
        torch.manual_seed(0)
        model = AttentionScoreEstimator(in_features=6, num_outputs=3, width=8, num_layers=2, num_edge_types=3,
                                        num_node_kinds=1, num_spd_buckets=4, memory_efficient=True)
        edges = model.prepare(edge_index.to(index_dtype), edge_type.to(type_dtype), edge_spd.to(spd_dtype), 120)
        logits, scores = model(x, node_kind, edges, 0.7)
        logits.square().sum().backward()
        results.append((logits.detach(), [s.detach() for s in scores], [p.grad for p in model.parameters()]))
    (logits, scores, grads), (logits_c, scores_c, grads_c) = results
    assert torch.equal(logits, logits_c)
    assert all(torch.equal(a, b) for a, b in zip(scores, scores_c))
    assert all(torch.equal(a, b) for a, b in zip(grads, grads_c))
