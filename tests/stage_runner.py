"""Runs the plain stage functions on a tiny config, without Prefect or MLflow, for stage-level tests."""

from __future__ import annotations

from pathlib import Path

from sgt_core.config import compose_config
from sgt_core.pipeline import STAGES
from tests.conftest import TINY_OVERRIDES


def run_stages(root: Path, overrides: list[str] = (), until: str = "train") -> tuple[dict, dict[str, Path]]:
    """Runs preprocess..`until` into root/<stage>/; returns the config and each stage's output folder."""
    cfg = compose_config([*TINY_OVERRIDES, *overrides])
    outputs: dict[str, Path] = {}
    for stage in STAGES:
        outputs[stage.name] = root / stage.name
        outputs[stage.name].mkdir(parents=True)
        stage.run(cfg, {name: outputs[name] for name in stage.upstream}, outputs[stage.name])
        if stage.name == until:
            break
    return cfg, outputs
