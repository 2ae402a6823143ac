"""The compiled kernels with continuous edge features equal their torch implementations on graphs with hubs and
empty neighbourhoods, do not depend on the thread count, and refuse malformed features."""

from __future__ import annotations

import pytest
import torch

from sgt_core.kernels.library import cpu_kernels
from sgt_core.models import fused_edge_attention as edge_module
from sgt_core.models import fused_slot_attention as slot_module
from tests.kernels.test_library import compact, random_graph, slot_inputs
from tests.threads import torch_threads

pytestmark = pytest.mark.skipif(cpu_kernels() is None, reason="no C++ compiler here: the torch kernels run instead")

NUM_FEATURES, NUM_CODES = 8, 3


def features_for(shape, seed):
    """Confidence-like scores in [0, 1], zero on about half the rows (the edges the input graph lacks)."""
    generator = torch.Generator().manual_seed(seed)
    features = torch.rand(*shape, NUM_FEATURES, generator=generator)
    features[torch.rand(shape, generator=generator) < 0.5] = 0
    return features


def edge_tensors(num_nodes, width=8, seed=0):
    generator = torch.Generator().manual_seed(seed)
    tensors = [torch.randn(num_nodes, width, generator=generator) * 2 for _ in range(3)]
    tensors += [torch.randn(NUM_CODES + NUM_FEATURES, width, generator=generator),
                torch.randn(NUM_CODES + NUM_FEATURES, generator=generator)]
    return tensors


def run_edge(tensors, edge_index, code, in_degree, features, temperature, compiled, with_scores_grad=True):
    weights = torch.randn(tensors[0].shape, generator=torch.Generator().manual_seed(1))
    if compiled:
        leaves = [t.clone().requires_grad_() for t in tensors]
        out, scores = edge_module.fused_edge_attention(*leaves, edge_index, code, in_degree, temperature, 8.0,
                                                       features=features)
        ((out * weights).sum() + ((scores**2).sum() if with_scores_grad else 0)).backward()
        return out.detach(), scores.detach(), [leaf.grad for leaf in leaves]
    query, key, value, scale, bias = tensors
    graph = compact(edge_index, code, in_degree).tensors()
    key_value = torch.cat([key, value], dim=1)
    out, scores, inside = edge_module._edge_attention_torch(query, key_value, scale, bias, *graph, temperature, 8.0,
                                                            features)
    grad_query, grad_key_value, grad_scale, grad_bias = edge_module._edge_attention_backward_torch(
        weights, 2 * scores if with_scores_grad else None, query, key_value, scale, scores, inside, *graph,
        temperature, features)
    return out, scores, [grad_query, *grad_key_value.split(key.shape[1], dim=1), grad_scale, grad_bias]


@pytest.mark.parametrize("temperature", [1.0, 0.05])  # the second clips many logits
@pytest.mark.parametrize("with_scores_grad", [True, False])
def test_edge_attention_with_features_matches_the_torch_kernel(temperature, with_scores_grad):
    edge_index, code, in_degree = random_graph(300, 5000, NUM_CODES, seed=0)
    features = features_for((5000,), seed=2)
    tensors = edge_tensors(300)
    out, scores, grads = run_edge(tensors, edge_index, code, in_degree, features, temperature, True,
                                  with_scores_grad)
    ref_out, ref_scores, ref_grads = run_edge(tensors, edge_index, code, in_degree, features, temperature, False,
                                              with_scores_grad)
    assert torch.allclose(out, ref_out, atol=1e-5) and torch.allclose(scores, ref_scores, atol=1e-6)
    for grad, ref_grad in zip(grads, ref_grads, strict=True):
        assert torch.allclose(grad, ref_grad, rtol=1e-4, atol=1e-4 * ref_grad.abs().max().item())


def run_slot(tensors, neighbours, code, mask, heads, features, compiled):
    grad_out = torch.randn(tensors[0].shape, generator=torch.Generator().manual_seed(1))
    if compiled:
        leaves = [t.clone().requires_grad_() for t in tensors]
        out = slot_module.fused_slot_attention(*leaves, neighbours, code, mask, heads, features=features)
        (out * grad_out).sum().backward()
        return out.detach(), [leaf.grad for leaf in leaves]
    out, attention = slot_module._slot_attention_torch(*tensors, neighbours, code, mask, heads, features)
    query, key_value, scale, _bias = tensors
    return out, list(slot_module._slot_attention_backward_torch(grad_out, query, key_value, scale, neighbours, code,
                                                                attention, heads, features))


def featured_slot_inputs(**sizes):
    """`slot_inputs` with NUM_FEATURES feature rows after the code rows, and the slots' features."""
    tensors, neighbours, code, mask, heads = slot_inputs(**sizes)
    generator = torch.Generator().manual_seed(7)
    hidden = tensors[0].shape[1]
    tensors[2] = torch.cat([tensors[2], torch.randn(NUM_FEATURES, hidden, generator=generator)])
    tensors[3] = torch.cat([tensors[3], torch.randn(NUM_FEATURES, heads, generator=generator)])
    return tensors, neighbours, code, mask, heads, features_for(tuple(neighbours.shape), seed=3)


def test_slot_attention_with_features_matches_the_torch_kernel():
    tensors, neighbours, code, mask, heads, features = featured_slot_inputs()
    out, grads = run_slot(tensors, neighbours, code, mask, heads, features, compiled=True)
    ref_out, ref_grads = run_slot(tensors, neighbours, code, mask, heads, features, compiled=False)
    assert torch.equal(out[0], torch.zeros_like(out[0]))
    assert torch.allclose(out, ref_out, atol=1e-5)
    for grad, ref_grad in zip(grads, ref_grads, strict=True):
        assert torch.allclose(grad, ref_grad, atol=1e-4)


def test_results_with_features_do_not_depend_on_the_thread_count():
    edge_index, code, in_degree = random_graph(3000, 60000, NUM_CODES, seed=1)
    edge = (edge_tensors(3000), edge_index, code, in_degree, features_for((60000,), seed=4))
    slot = featured_slot_inputs(num_queries=2000, num_keys=3000)
    results = []
    for count in (1, 2, 3):
        with torch_threads(count):
            out, scores, grads = run_edge(*edge, 0.5, compiled=True)
            slot_out, slot_grads = run_slot(*slot, compiled=True)
        results.append([out, scores, *grads, slot_out, *slot_grads])
    for other in results[1:]:
        assert all(torch.equal(a, b) for a, b in zip(results[0], other, strict=True))


def test_zero_features_give_exactly_the_code_only_results():
    """All-zero features skip every feature row: the results are those without features, bit for bit."""
    edge_index, code, in_degree = random_graph(300, 5000, NUM_CODES, seed=0)
    tensors = edge_tensors(300)
    out, scores, grads = run_edge(tensors, edge_index, code, in_degree, torch.zeros(5000, NUM_FEATURES), 0.5, True)
    plain_tensors = [*tensors[:3], tensors[3][:NUM_CODES], tensors[4][:NUM_CODES]]
    plain_out, plain_scores, plain_grads = run_edge(plain_tensors, edge_index, code, in_degree, None, 0.5, True)
    assert torch.equal(out, plain_out) and torch.equal(scores, plain_scores)
    for grad, plain in zip(grads, plain_grads, strict=True):
        assert torch.equal(grad[: plain.shape[0]], plain)
    assert torch.equal(grads[3][NUM_CODES:], torch.zeros(NUM_FEATURES, 8))  # no feature, no gradient


def edge_operator_args(features):
    edge_index, code, in_degree = random_graph(40, 200, NUM_CODES, seed=0)
    query, key, value, scale, bias = edge_tensors(40)
    graph = compact(edge_index, code, in_degree).tensors()
    return (query, torch.cat([key, value], 1), scale, bias, *graph, 1.0, 8.0, features)


@pytest.mark.parametrize("features, message", [
    (torch.rand(199, NUM_FEATURES), r"features must have shape \[200, \*\]"),
    (torch.rand(200, NUM_FEATURES, dtype=torch.float64), "features must be torch.float32"),
    (torch.rand(200, 2 * NUM_FEATURES).t(), "features must"),  # wrong shape, and not contiguous
    (torch.rand(200, 20), "edge_scale must end with one row per feature column: 20 columns but 11 rows"),
])
def test_edge_attention_refuses_malformed_features(features, message):
    with pytest.raises(ValueError, match=message):
        edge_module._operators().edge_attention(*edge_operator_args(features))


def test_codes_must_not_reach_the_feature_rows():
    """With F feature columns the codes index the first rows - F rows only."""
    with pytest.raises(IndexError, match=r"code\[\d+\] = 2 is outside \[0, 2\)"):
        edge_module._operators().edge_attention(*edge_operator_args(torch.rand(200, NUM_FEATURES + 1)))
    tensors, neighbours, code, mask, heads, _features = featured_slot_inputs()
    with pytest.raises(IndexError, match=r"code\[\d+\] = 2 is outside \[0, 2\)"):
        slot_module._operators().slot_attention(*tensors, neighbours, code, mask, heads,
                                                torch.rand(*neighbours.shape, NUM_FEATURES + 1))
    with pytest.raises(ValueError, match=r"features must have shape \[200, 7, \*\]"):
        slot_module._operators().slot_attention(*tensors, neighbours, code, mask, heads,
                                                torch.rand(200, 6, NUM_FEATURES))
