"""Temperature annealing and the warm-up cosine learning-rate schedule."""

from __future__ import annotations

import pytest
import torch

from sgt_core.schedules import cosine_with_warmup, temperature


def test_temperature_schedule():
    options = dict(anneal=True, initial_epochs=5, gamma=0.99, minimum=0.05)
    assert [temperature(t, **options) for t in range(6)] == [1.0] * 6
    assert temperature(6, **options) == pytest.approx(0.99)
    assert temperature(105, **options) == pytest.approx(0.99**100)
    assert temperature(10_000, **options) == 0.05
    assert temperature(50, **{**options, "anneal": False}) == 1.0
    values = [temperature(t, **{**options, "gamma": 0.9}) for t in range(100)]
    assert all(a >= b for a, b in zip(values, values[1:]))


def test_cosine_with_warmup():
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    scheduler = cosine_with_warmup(optimizer, warmup_epochs=4, total_epochs=20)
    rates = []
    for _ in range(20):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert rates[:4] == pytest.approx([0.2, 0.4, 0.6, 0.8])
    assert rates[4] == pytest.approx(1.0)
    assert all(a >= b for a, b in zip(rates[4:], rates[5:])) and rates[-1] < 0.01
