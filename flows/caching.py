"""A stage's result in the artifact cache: served when whole at its key, else computed and moved into place whole."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from sgt_core.object_store import open_store
from sgt_core.pipeline import Stage, StageResult


class StageCache:
    """One stage's result in the artifact store, at the stage's key in this run's `keys`."""

    def __init__(self, cfg: dict, stage: Stage, keys: dict[str, str]) -> None:
        self.store = open_store(cfg["paths"]["artifacts"])
        self.stage, self.keys, self.key = stage, keys, keys[stage.name]

    @property
    def location(self) -> str:
        """Where the result lives, as shown to people (and tagged on its runs)."""
        return self.store.location(self.stage.name, self.key)

    def reuse(self, force: bool, checksums: bool) -> bool:
        """Whether a whole result at the key is served instead of computed; never when `force`d.

        File sizes are always checked, checksums too when asked (a later stage of this run will read the
        result); a damaged result is moved aside, so that the stage recomputes it.
        """
        return not force and self.store.reuse(self.stage.name, self.key, checksums=checksums)

    def cached(self) -> tuple[dict, str]:
        """The served result's metrics, and the MLflow run that computed it ("" where none is recorded)."""
        name = self.stage.name
        return self.store.metrics(name, self.key), self.store.manifest(name, self.key).get("mlflow_run_id", "")

    def compute(self, execute: Callable[[dict[str, Path], Path], dict], run_id: str, params: dict,
                replace: bool) -> dict:
        """Runs `execute(upstream folders, staging folder)` and moves what it wrote into place whole, with
        its metrics and a manifest naming its config and its MLflow run `run_id`; returns its metrics.

        With `replace` (a forced re-run) the result at the key is replaced; otherwise a concurrent run's
        result that got there first is kept.
        """
        name, upstream = self.stage.name, self.stage.upstream
        inputs = {stage: self.store.local(stage, self.keys[stage]) for stage in upstream}
        with self.store.writing(name, self.key, replace=replace) as staging:
            metrics = execute(inputs, staging)
            manifest = {"stage": name, "key": self.key, "upstream": {stage: self.keys[stage] for stage in upstream},
                        "config": params, "mlflow_run_id": run_id, "created": time.time()}
            self.store.finish(staging, metrics, manifest)
        return metrics

    def result(self, metrics: dict) -> StageResult:
        """The complete result as its trackers see it, from a local copy of its folder."""
        return self.stage.result(self.store.local(self.stage.name, self.key), metrics)
