"""The flow's cache keys: the stages' own, computed in a stage process that sees the flow's environment."""

from __future__ import annotations

import pytest

from flows.keys import run_keys
from sgt_core.config import compose_config
from sgt_core.kernels import library
from sgt_core.pipeline import stage_keys
from tests.conftest import TINY_OVERRIDES


@pytest.mark.parametrize("isolation", ["process", "inline"])
def test_the_flows_keys_are_the_stages_own(isolation):
    cfg = compose_config([*TINY_OVERRIDES, f"stage_isolation={isolation}"])
    assert run_keys(cfg) == stage_keys(cfg)


def test_the_keys_follow_the_kernels_the_stages_will_run(monkeypatch):
    """The stage processes take the flow's environment as it is when they start: switching the compiled kernels
    off there changes the keys of the stages that run them, as it changes what they run."""
    if library.backend() == "torch":
        pytest.skip("the compiled CPU kernels cannot be built here (no C++ compiler)")
    cfg = compose_config([*TINY_OVERRIDES, "stage_isolation=process"])
    compiled = run_keys(cfg)
    monkeypatch.setenv(library.SWITCH, "0")
    plain = run_keys(cfg)
    assert plain["preprocess"] == compiled["preprocess"]
    assert plain["estimate"] != compiled["estimate"] and plain["train"] != compiled["train"]
