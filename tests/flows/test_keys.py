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


def test_the_stages_server_parses_the_stages_import_closures_once():
    """The fork server imports flows.code_warm_up, so the processes it forks (the keys') find every stage's
    code files parsed already."""
    import importlib
    from multiprocessing import forkserver

    import flows.code_warm_up
    from flows.isolation import _context
    from sgt_core.code_version import code_files
    from sgt_core.pipeline import STAGES

    _context()
    assert "flows.code_warm_up" in forkserver._forkserver._preload_modules
    code_files.cache_clear()
    importlib.reload(flows.code_warm_up)
    warmed = code_files.cache_info()
    for stage in STAGES:
        code_files(stage.module)
    assert code_files.cache_info().hits == warmed.hits + len(STAGES) and code_files.cache_info().misses == warmed.misses
