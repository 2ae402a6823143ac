"""Runs the plain stage functions in pipeline order, without Prefect or MLflow, for stage-level tests."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from sgt_core.config import compose_config
from sgt_core.pipeline import STAGES
from tests.conftest import TINY_OVERRIDES


def run_stages(root: Path, overrides: Sequence[str] = (), until: str = "train",
               base: Sequence[str] = TINY_OVERRIDES) -> tuple[dict, dict[str, Path], dict[str, dict]]:
    """Runs preprocess..`until` into root/<stage>/ on the config of `base` + `overrides` (tiny by default).

    Returns the config, each stage's output folder and each stage's metrics.
    """
    cfg = compose_config([*base, *overrides])
    outputs: dict[str, Path] = {}
    metrics: dict[str, dict] = {}
    for stage in STAGES:
        outputs[stage.name] = root / stage.name
        outputs[stage.name].mkdir(parents=True)
        metrics[stage.name] = stage.run(cfg, {name: outputs[name] for name in stage.upstream}, outputs[stage.name])
        if stage.name == until:
            break
    return cfg, outputs, metrics
