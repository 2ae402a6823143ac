"""DeepNorm: its constants, the residual formula on a toy input, and the scaled initialisation."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from sgt_core.models.deep_norm import DeepNorm, deepnorm_constants, deepnorm_residual


def test_deepnorm_constants():
    alpha, beta = deepnorm_constants(12)
    assert math.isclose(alpha, 24**0.25) and math.isclose(beta, 96**-0.25)
    assert deepnorm_constants(1) == pytest.approx((2**0.25, 8**-0.25))
    with pytest.raises(ValueError):
        deepnorm_constants(0)


def test_deepnorm_residual_on_toy_input():
    x = torch.tensor([[1.0, 2.0, 3.0, 4.0]])
    g = torch.tensor([[0.5, -0.5, 0.0, 1.0]])
    alpha = 2.0
    h = alpha * x + g  # [[2.5, 3.5, 6.0, 9.0]]
    mean, var = h.mean(), h.var(unbiased=False)
    expected = (h - mean) / torch.sqrt(var + 1e-5)
    torch.testing.assert_close(deepnorm_residual(x, g, alpha), expected)
    # alpha = 1 is the ordinary Post-LN residual.
    torch.testing.assert_close(deepnorm_residual(x, g, 1.0), F.layer_norm(x + g, (4,)))

    block = DeepNorm(hidden=4, num_layers=6)
    with torch.no_grad():
        block.norm.weight.fill_(2.0)
        block.norm.bias.fill_(1.0)
    h = (12**0.25) * x + g
    expected = 2.0 * (h - h.mean()) / torch.sqrt(h.var(unbiased=False) + 1e-5) + 1.0
    torch.testing.assert_close(block(x, g), expected)


def test_deepnorm_init_scale():
    torch.manual_seed(0)
    block = DeepNorm(hidden=256, num_layers=12)
    linear = nn.Linear(256, 256)
    block.init_sublayer_(linear)
    target = block.beta * math.sqrt(2.0 / (256 + 256))  # Xavier-normal std times beta
    assert abs(linear.weight.std().item() - target) < 0.05 * target
    assert torch.count_nonzero(linear.bias) == 0
