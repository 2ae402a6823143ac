"""Same config and seed give identical attention scores on CPU; another seed gives different ones."""

from __future__ import annotations

import torch

from sgt_core.estimate.outputs import SCORES_FILE
from tests.stage_runner import run_stages


def scores(root, overrides=()):
    _, outputs, _ = run_stages(root, overrides, until="estimate")
    return torch.load(outputs["estimate"] / SCORES_FILE, weights_only=True)


def test_same_seed_same_scores(tmp_path):
    first, second = scores(tmp_path / "a"), scores(tmp_path / "b")
    assert first.shape[0] == 2 and torch.equal(first, second)
    assert not torch.equal(first, scores(tmp_path / "c", ["seed=1"]))
