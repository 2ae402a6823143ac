"""SubstructureEncoder shapes, type embedding and errors."""

from __future__ import annotations

import pytest
import torch

from sgt_core.models.substructure_encoder import SubstructureEncoder
from sgt_core.preprocess.interaction_graph import SUBSTRUCTURE_TYPES


def test_encoder_shapes_and_type_embedding():
    torch.manual_seed(0)
    encoder = SubstructureEncoder(max_size=4, num_types=len(SUBSTRUCTURE_TYPES), hidden=8)
    adjacency = torch.zeros(3, 16)
    adjacency[0, [1, 4]] = 1.0  # one edge, both directions
    type_id = torch.tensor([0, 5, 17])
    out = encoder(adjacency, type_id)
    assert out.shape == (3, 8) and torch.isfinite(out).all()
    # Rows 1 and 2 share the (empty) adjacency, so only the type embedding tells them apart.
    assert not torch.allclose(out[1], out[2])
    same = encoder(adjacency[[1, 1]], torch.tensor([5, 5]))
    torch.testing.assert_close(same[0], same[1])
    out.sum().backward()
    assert encoder.type_embedding.weight.grad is not None


def test_encoder_reset_parameters_and_errors():
    encoder = SubstructureEncoder(max_size=3, num_types=4, hidden=6)
    with torch.no_grad():
        for p in encoder.parameters():
            p.fill_(7.0)
    encoder.reset_parameters()
    assert all((p != 7.0).any() for p in encoder.parameters())
    with pytest.raises(ValueError, match=r"\[T, 9\]"):
        encoder(torch.zeros(2, 16), torch.zeros(2, dtype=torch.long))
    with pytest.raises(ValueError, match="type_id"):
        encoder(torch.zeros(2, 9), torch.zeros(3, dtype=torch.long))
