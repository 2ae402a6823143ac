"""The estimator's attention: scores sum to 1 per destination, temperature sharpens, values are normalised."""

from __future__ import annotations

import math

import pytest
import torch
from torch_geometric.utils import scatter

from sgt_core.models import AttentionScoreEstimator, EstimatorAttention
from sgt_core.tasks import Task


def small_graph():
    # 5 nodes; node 4 has in-degree 1, node 0 in-degree 3
    edge_index = torch.tensor([[1, 2, 3, 0, 2, 3, 4, 0, 1, 3], [0, 0, 0, 1, 1, 2, 2, 3, 3, 4]])
    edge_type = torch.tensor([0, 1, 2, 0, 0, 1, 2, 0, 1, 2])
    return edge_index, edge_type


def test_scores_sum_to_one_per_destination():
    torch.manual_seed(0)
    edge_index, edge_type = small_graph()
    attention = EstimatorAttention(width=4, num_edge_types=3)
    out, scores = attention(torch.randn(5, 4), edge_index, edge_type, temperature=0.3)
    assert out.shape == (5, 4) and scores.shape == (10,)
    sums = scatter(scores, edge_index[1], dim=0, dim_size=5, reduce="sum")
    assert torch.allclose(sums, torch.ones(5), atol=1e-6)
    assert (scores > 0).all()


def test_matches_formula_on_one_node():
    torch.manual_seed(1)
    edge_index, edge_type = small_graph()
    attention = EstimatorAttention(width=4, num_edge_types=3, logit_clip=8.0)
    with torch.no_grad():
        attention.edge_scale.weight.normal_()
        attention.edge_bias.weight.normal_()
    x, tau = torch.randn(5, 4), 0.5
    out, scores = attention(x, edge_index, edge_type, temperature=tau)
    # node 0's incoming edges are the first three
    q = attention.query(x[0])
    logits = torch.stack([
        ((attention.edge_scale.weight[t] * attention.key(x[j])) @ q) / math.sqrt(4) + attention.edge_bias.weight[t, 0]
        for j, t in [(1, 0), (2, 1), (3, 2)]
    ])
    expected = torch.softmax((logits / tau).clamp(-8, 8), dim=0)
    assert torch.allclose(scores[:3], expected, atol=1e-6)
    values = torch.stack([attention.value(x[j]) for j in (1, 2, 3)])
    values = attention.value_scale * values / values.norm(dim=-1, keepdim=True)
    assert torch.allclose(out[0], attention.out(expected @ values), atol=1e-5)


def test_lower_temperature_sharpens():
    torch.manual_seed(2)
    edge_index, edge_type = small_graph()
    attention = EstimatorAttention(width=4, num_edge_types=3, logit_clip=8.0)
    x = torch.randn(5, 4)

    def entropy(tau):
        _, scores = attention(x, edge_index, edge_type, temperature=tau)
        return -(scores * scores.log()).sum()

    assert entropy(0.5) < entropy(1.0) < entropy(4.0)


def test_clip_bounds_the_logits():
    torch.manual_seed(2)
    edge_index, edge_type = small_graph()
    attention = EstimatorAttention(width=4, num_edge_types=3, logit_clip=8.0)
    _, scores = attention(torch.randn(5, 4) * 50, edge_index, edge_type, temperature=0.05)
    # logits within +-8: in node 0's 3-way softmax no score falls below e^-16 / (1 + 2)
    assert scores.min() >= math.exp(-16) / 3 * 0.999


@pytest.mark.parametrize("layer_norm", [True, False])
def test_estimator_returns_one_score_set_per_layer(layer_norm):
    edge_index, edge_type = small_graph()
    model = AttentionScoreEstimator(in_features=3, num_outputs=2, width=4, num_layers=3, num_edge_types=3,
                                    num_node_kinds=2, layer_norm=layer_norm)
    edges = model.prepare(edge_index, edge_type, None, 5)
    logits, layer_scores = model(torch.randn(5, 3), torch.zeros(5, dtype=torch.long), edges)
    assert logits.shape == (5, 2) and len(layer_scores) == 3
    for scores in layer_scores:
        assert torch.allclose(scatter(scores, edge_index[1], dim_size=5, reduce="sum"), torch.ones(5), atol=1e-6)


def test_estimator_starts_at_the_class_prior_and_still_passes_gradient_down():
    torch.manual_seed(0)
    edge_index, edge_type = small_graph()
    model = AttentionScoreEstimator(in_features=3, num_outputs=3, width=8, num_layers=2, num_edge_types=3,
                                    num_node_kinds=2)
    class_counts = torch.tensor([60, 30, 10])
    labels = torch.repeat_interleave(torch.arange(3), class_counts)
    model.start_at_prior(Task("node_classification", "accuracy", 3).prior(labels))
    logits, _ = model(torch.randn(5, 3), torch.zeros(5, dtype=torch.long), model.prepare(edge_index, edge_type, None, 5))
    prior = class_counts / class_counts.sum()
    assert torch.allclose(torch.softmax(model.head.bias, dim=0), prior.float(), atol=1e-6)
    # the scaled-down weights leave every node near the prior, not exactly on it
    assert torch.allclose(torch.softmax(logits, dim=1), prior.expand(5, 3).float(), atol=0.1)
    logits.logsumexp(1).sum().backward()
    assert model.layers[0].attention.query.weight.grad.abs().sum() > 0
