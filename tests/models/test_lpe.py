"""Tests for SAN's learned positional encoding."""

import itertools

import numpy as np
import pytest
import torch

from sgt_core.errors import ConfigError
from sgt_core.models.lpe import LearnedPositionalEncoding
from sgt_core.preprocess.laplacian import laplacian_eigenpairs

M, K = 3, 8


def _inputs():
    """A four-node path 0-1-2-3 plus an isolated node, padded to M = 3 eigenpairs, and one empty row."""
    edge_index = np.array([[0, 1, 1, 2, 2, 3], [1, 0, 2, 1, 3, 2]])
    values, vectors, mask = laplacian_eigenpairs(edge_index, 5, M)
    values, vectors, mask = (torch.from_numpy(a) for a in (values, vectors, mask))
    mask[4, 1:] = False  # a partly padded row
    return values, vectors, mask


def _model(**kwargs):
    torch.manual_seed(0)
    return LearnedPositionalEncoding(M, K, **kwargs)


@pytest.mark.parametrize("layers", [1, 2])
def test_shape_and_finite(layers):
    lpe = _model(layers=layers).eval()
    out = lpe(*_inputs())
    assert out.shape == (5, K) and out.dtype == torch.float32 and torch.isfinite(out).all()


def test_permutation_equivariant():
    lpe = _model().eval()
    values, vectors, mask = _inputs()
    perm = torch.tensor([3, 0, 4, 2, 1])
    with torch.no_grad():
        out = lpe(values, vectors, mask)
        out_perm = lpe(values[perm], vectors[perm], mask[perm])
    torch.testing.assert_close(out_perm, out[perm])


def test_sign_flips_only_in_training():
    lpe = _model()
    values, vectors, mask = _inputs()
    lpe.eval()
    with torch.no_grad():
        reference = lpe(values, vectors, mask)
        torch.testing.assert_close(lpe(values, vectors, mask), reference)  # eval: no randomness
        # Outputs for all 2^M sign patterns, one sign per eigenvector shared by every node.
        patterns = [torch.tensor(s, dtype=torch.float32) for s in itertools.product([1.0, -1.0], repeat=M)]
        flipped = [lpe(values, vectors * s, mask) for s in patterns]
    lpe.train()
    changed = 0
    with torch.no_grad():
        for seed in range(12):
            torch.manual_seed(seed)
            out = lpe(values, vectors, mask)
            assert any(torch.allclose(out, f, atol=1e-6) for f in flipped), "not a shared per-vector flip"
            changed += not torch.allclose(out, reference, atol=1e-6)
    assert changed > 0


def test_fully_masked_rows_are_zero_with_finite_gradients():
    lpe = _model(layers=2)
    values, vectors, mask = _inputs()
    mask[1] = False
    mask[3] = False
    out = lpe(values, vectors, mask)
    assert torch.isfinite(out).all()
    assert torch.equal(out[1], torch.zeros(K)) and torch.equal(out[3], torch.zeros(K))
    out.square().sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in lpe.parameters() if p.grad is not None)


def test_reset_parameters_draws_distinct_layers_and_checks_arguments():
    lpe = _model(layers=2)
    first, second = lpe.encoder.layers
    assert not torch.equal(first.linear1.weight, second.linear1.weight)
    with pytest.raises(ConfigError, match="divisible"):
        LearnedPositionalEncoding(M, 6, heads=4)
    with pytest.raises(ValueError, match="shape"):
        lpe(torch.zeros(5, M + 1), torch.zeros(5, M + 1), torch.ones(5, M + 1, dtype=torch.bool))


@pytest.mark.parametrize("layers, heads", [(1, 2), (2, 4)])
def test_the_encoder_computes_what_torchs_transformer_encoder_computes(layers, heads):
    """The encoder layers run as batched products (`_encoder_layer`) with nn.TransformerEncoder's weights:
    the same outputs and weight gradients as the library's module, padding hidden alike."""
    lpe = _model(layers=layers, heads=heads).train()
    generator = torch.Generator().manual_seed(1)
    values, vectors = torch.rand(40, M, generator=generator), torch.randn(40, M, generator=generator)
    mask = torch.rand(40, M, generator=generator) > 0.3
    mask[:3] = False  # rows without a real eigenpair
    tokens = lpe.embed(torch.stack([values, vectors], dim=-1).masked_fill(~mask.unsqueeze(-1), 0.0))
    ignore = ~mask & mask.any(dim=1, keepdim=True)
    reference = lpe.encoder(tokens, src_key_padding_mask=ignore).masked_fill(~mask.unsqueeze(-1), 0.0).sum(1)
    reference_grads = torch.autograd.grad(reference.square().sum(), list(lpe.encoder.parameters()))
    ours = lpe.eval()(values, vectors, mask)  # eval: no random sign flips, so both see the same tokens
    our_grads = torch.autograd.grad(ours.square().sum(), list(lpe.encoder.parameters()))
    assert torch.allclose(ours, reference, atol=1e-5)
    for ours_grad, reference_grad in zip(our_grads, reference_grads, strict=True):
        assert torch.allclose(ours_grad, reference_grad, atol=1e-4)
