"""`sum_messages`: the local branches' sum over kept edges, against autograd's formula, bit for bit."""

from __future__ import annotations

import pytest
import torch

from sgt_core.models.local.messages import sum_messages
from tests.models.local.graphs import HIDDEN
from tests.threads import torch_threads


@pytest.mark.parametrize("gather", ["index_select", "indexing"])
@pytest.mark.parametrize("weighted", [True, False])
def test_message_sum_equals_autograd_of_its_formula_bit_for_bit(gather, weighted):
    """`sum_messages` against the plain formula it replaces, outputs and both gradients identical: with
    index_select at any thread count (its backward is index_add_ as well), and with indexing (`x[source]`,
    the one-hop branches' formula before) on one thread, where autograd's accumulating index_put_ sums in
    the same order, so that rows recorded on one thread with the old formula still reproduce."""
    generator = torch.Generator().manual_seed(0)
    source = torch.randint(0, 50, (400,), generator=generator)
    target = torch.randint(0, 30, (400,), generator=generator).sort().values
    weight = torch.rand(400, 1, generator=generator) if weighted else None
    x = torch.randn(50, HIDDEN, generator=generator)
    into = torch.randn(30, HIDDEN, generator=generator)
    upstream = torch.randn(30, HIDDEN, generator=generator)

    def run(formula):
        x_leaf, into_leaf = x.clone().requires_grad_(), into.clone().requires_grad_()
        out = formula(x_leaf, into_leaf)
        out.backward(upstream)
        return out.detach(), x_leaf.grad, into_leaf.grad

    def plain(x_leaf, into_leaf):
        gathered = x_leaf[source] if gather == "indexing" else x_leaf.index_select(0, source)
        messages = gathered * weight if weighted else gathered
        return (into_leaf * 1).index_add_(0, target, messages)

    with torch_threads(1 if gather == "indexing" else max(torch.get_num_threads(), 2)):
        expected = run(plain)
        got = run(lambda x_leaf, into_leaf: sum_messages(x_leaf, source, target, weight,
                                                          into_leaf * 1))  # a leaf cannot be summed into
    for name, a, b in zip(("output", "x's gradient", "into's gradient"), got, expected):
        assert torch.equal(a, b), name
