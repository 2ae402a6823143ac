"""Temperature annealing, the warm-up cosine learning-rate schedule and our AdamW and Adam against torch's."""

from __future__ import annotations

import itertools

import pytest
import torch

from sgt_core.optim import Adam, AdamW, CosineWithWarmup
from sgt_core.schedules import temperature


def test_temperature_schedule():
    options = {"anneal": True, "initial_epochs": 5, "gamma": 0.99, "minimum": 0.05}
    assert [temperature(t, **options) for t in range(6)] == [1.0] * 6
    assert temperature(6, **options) == pytest.approx(0.99)
    assert temperature(105, **options) == pytest.approx(0.99**100)
    assert temperature(10_000, **options) == 0.05
    assert temperature(50, **{**options, "anneal": False}) == 1.0
    values = [temperature(t, **{**options, "gamma": 0.9}) for t in range(100)]
    assert all(a >= b for a, b in itertools.pairwise(values))


def test_cosine_with_warmup():
    optimizer = AdamW([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    scheduler = CosineWithWarmup(optimizer, warmup_epochs=4, epochs=20)
    rates = []
    for _ in range(20):
        rates.append(optimizer.lr)
        scheduler.step()
    assert rates[:4] == pytest.approx([0.2, 0.4, 0.6, 0.8])
    assert rates[4] == pytest.approx(1.0)
    assert all(a >= b for a, b in itertools.pairwise(rates[4:])) and rates[-1] < 0.01


def test_adamw_matches_torch_step_for_step():
    """Same update as torch.optim.AdamW (with its LambdaLR), including a parameter without a gradient."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.ReLU(), torch.nn.Linear(7, 3))
    unused = torch.nn.Parameter(torch.randn(4))  # never gets a gradient: must stay as it is
    reference = [p.detach().clone().requires_grad_() for p in [*model.parameters(), unused]]
    ours = AdamW([*model.parameters(), unused], lr=0.05, weight_decay=0.1)
    schedule = CosineWithWarmup(ours, warmup_epochs=2, epochs=10)
    theirs = torch.optim.AdamW(reference, lr=0.05, weight_decay=0.1)
    their_schedule = torch.optim.lr_scheduler.LambdaLR(theirs, schedule.factor)
    inputs, targets = torch.randn(32, 5), torch.randint(0, 3, (32,))
    for _ in range(10):
        for params, optimizer in ((list(model.parameters()), ours), (reference[:-1], theirs)):
            optimizer.zero_grad()  # set_to_none in both
            hidden = torch.relu(inputs @ params[0].t() + params[1])
            loss = torch.nn.functional.cross_entropy(hidden @ params[2].t() + params[3], targets)
            loss.backward()
            optimizer.step()
        schedule.step()
        their_schedule.step()
        for mine, reference_parameter in zip([*model.parameters(), unused], reference):
            torch.testing.assert_close(mine, reference_parameter, rtol=1e-6, atol=1e-7)
    assert ours.lr == pytest.approx(theirs.param_groups[0]["lr"])


def _linear_step(params: list[torch.Tensor], optimizer, inputs: torch.Tensor, targets: torch.Tensor) -> None:
    """One optimiser step on the cross-entropy of the linear map params = [weight, bias]."""
    optimizer.zero_grad()
    torch.nn.functional.cross_entropy(inputs @ params[0].t() + params[1], targets).backward()
    optimizer.step()


def test_adam_matches_torch_adam_step_for_step():
    """`Adam` (optimizer=adam) is torch.optim.Adam's L2 (weight_decay * w added to the gradient)."""
    torch.manual_seed(0)
    start = [p.detach() for p in torch.nn.Linear(6, 3).parameters()]
    inputs, targets = torch.randn(16, 6), torch.randint(0, 3, (16,))
    coupled, decoupled, reference = ([p.clone().requires_grad_() for p in start] for _ in range(3))
    optimizers = (Adam(coupled, lr=0.05, weight_decay=0.1),
                  AdamW(decoupled, lr=0.05, weight_decay=0.1),
                  torch.optim.Adam(reference, lr=0.05, weight_decay=0.1))
    for _ in range(8):
        for params, optimizer in zip((coupled, decoupled, reference), optimizers):
            _linear_step(params, optimizer, inputs, targets)
        for mine, reference_parameter in zip(coupled, reference):
            torch.testing.assert_close(mine, reference_parameter, rtol=1e-6, atol=1e-7)
    # and it is not AdamW's decay: the same steps with decoupled decay end elsewhere
    assert not torch.allclose(coupled[0], decoupled[0])


@pytest.mark.parametrize("decoupled", [False, True])
def test_parameter_groups_take_their_own_weight_decay_as_torch_does(decoupled):
    """A group's own "weight_decay" replaces the default for its parameters, in torch.optim's group form."""
    torch.manual_seed(0)
    start = [p.detach() for p in torch.nn.Linear(6, 3).parameters()]
    inputs, targets = torch.randn(16, 6), torch.randint(0, 3, (16,))
    ours_class = AdamW if decoupled else Adam
    ours, reference, uniform = ([p.clone().requires_grad_() for p in start] for _ in range(3))
    optimizers = (
        ours_class([{"params": [ours[0]], "weight_decay": 0.5}, {"params": iter([ours[1]])}], lr=0.05,
                   weight_decay=0.01),  # a group's params may be any iterable, as in torch
        (torch.optim.AdamW if decoupled else torch.optim.Adam)(
            [{"params": [reference[0]], "weight_decay": 0.5}, {"params": [reference[1]]}], lr=0.05, weight_decay=0.01),
        ours_class(uniform, lr=0.05, weight_decay=0.01),
    )
    for _ in range(8):
        for params, optimizer in zip((ours, reference, uniform), optimizers):
            _linear_step(params, optimizer, inputs, targets)
        for mine, reference_parameter in zip(ours, reference):
            torch.testing.assert_close(mine, reference_parameter, rtol=1e-6, atol=1e-7)
    assert not torch.allclose(ours[0], uniform[0])  # the weight's own decay acted


@pytest.mark.parametrize("optimizer_class", [AdamW, Adam])
def test_the_flat_step_gives_the_per_parameter_steps_bits(optimizer_class):
    """The usual step runs on flat buffers (`_flat_step`); it is the per-parameter path's arithmetic, bit for bit,
    and a step where a parameter has no gradient takes the per-parameter path on the same moments."""
    torch.manual_seed(0)
    start = [p.detach() for p in torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Linear(5, 3)).parameters()]
    flat, per_parameter = ([p.clone().requires_grad_() for p in start] for _ in range(2))
    optimizers = [optimizer_class(params, lr=0.05, weight_decay=0.1) for params in (flat, per_parameter)]
    optimizers[1]._flat = False  # the per-parameter ops throughout
    flat_steps = []
    flat_step = optimizers[0]._flat_step
    optimizers[0]._flat_step = lambda *args: (flat_steps.append(args), flat_step(*args))
    inputs, targets = torch.randn(16, 6), torch.randint(0, 3, (16,))
    for step in range(6):
        for params, optimizer in zip((flat, per_parameter), optimizers):
            optimizer.zero_grad()
            hidden = inputs @ params[0].t() + params[1]
            out = hidden @ params[2].t() + (params[3] if step != 3 else 0)  # step 3: the last bias gets none
            torch.nn.functional.cross_entropy(out, targets).backward()
            optimizer.step()
        for ours, reference in zip(flat, per_parameter, strict=True):
            assert torch.equal(ours, reference), step
    assert optimizers[0].steps == [6, 6, 6, 5]
    assert len(flat_steps) == 3  # steps 0-2 ran flat; from step 3 the step counts differ
