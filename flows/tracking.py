"""The MLflow tracking layer: runs, params, metrics and artifacts; stages never import MLflow."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import yaml
from mlflow.entities import Metric, Param, RunTag
from mlflow.tracking import MlflowClient

from sgt_core.pipeline import dataset_id

_BATCH = 100  # MLflow accepts at most 100 params per log_batch call


def flatten(value, prefix: str = "") -> dict[str, str]:
    """Nested config -> {"a.b.c": "value"}; lists stay whole (e.g. model.degrees=[12, 5, 5, 5])."""
    if isinstance(value, dict):
        items: dict[str, str] = {}
        for key, inner in value.items():
            items.update(flatten(inner, f"{prefix}{key}."))
        return items
    return {prefix.rstrip("."): json.dumps(value) if isinstance(value, list) else str(value)}


def tracking_uri(cfg: dict) -> str:
    """Config value, else $MLFLOW_TRACKING_URI, else a sqlite file under the artifacts folder."""
    if cfg["mlflow"]["tracking_uri"]:
        return cfg["mlflow"]["tracking_uri"]
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return os.environ["MLFLOW_TRACKING_URI"]
    return f"sqlite:///{Path(cfg['paths']['artifacts']).resolve() / 'mlflow.db'}"


class Tracker:
    """Creates the pipeline's parent run and one nested child run per stage, through MlflowClient.

    The client API (explicit run ids, no active-run stack) keeps tracking correct whichever thread
    Prefect runs a task in, and lets two pipelines share one store without touching each other's runs.
    """

    def __init__(self, cfg: dict) -> None:
        artifacts = Path(cfg["paths"]["artifacts"]).resolve()
        artifacts.mkdir(parents=True, exist_ok=True)
        self.client = MlflowClient(tracking_uri(cfg))
        name = cfg["mlflow"]["experiment"] or f"sgt-{dataset_id(cfg)}"
        experiment = self.client.get_experiment_by_name(name)
        if experiment is None:
            try:
                self.experiment_id = self.client.create_experiment(
                    name, artifact_location=(artifacts / "mlruns").as_uri()
                )
            except Exception:  # another process created it first
                self.experiment_id = self.client.get_experiment_by_name(name).experiment_id
        else:
            self.experiment_id = experiment.experiment_id

    def start_pipeline(self, cfg: dict, keys: dict[str, str]) -> str:
        run = self.client.create_run(
            self.experiment_id,
            run_name=f"pipeline-{keys['train'][:8]}",
            tags={"sgt.stage": "pipeline", **{f"sgt.key.{stage}": key for stage, key in keys.items()}},
        )
        self._log_params(run.info.run_id, flatten(cfg))
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "config.yaml"
            path.write_text(yaml.safe_dump(cfg, sort_keys=False))
            self.client.log_artifact(run.info.run_id, str(path))
        return run.info.run_id

    def start_stage(self, parent_run_id: str, stage: str, key: str, cache_hit: bool, params: dict) -> str:
        run = self.client.create_run(
            self.experiment_id,
            run_name=stage,
            tags={
                "mlflow.parentRunId": parent_run_id,
                "sgt.stage": stage,
                "sgt.cache_hit": str(cache_hit).lower(),
                "sgt.cache_key": key,
            },
        )
        self._log_params(run.info.run_id, flatten(params))
        return run.info.run_id

    def log_results(self, run_id: str, metrics: dict, history: list[dict] | None = None) -> None:
        """Numbers become metrics (history rows per epoch, as steps); strings become `sgt.*` tags."""
        values = [Metric(k, float(v), 0, 0) for k, v in metrics.items() if isinstance(v, (int, float))]
        for row in history or []:
            step = int(row["epoch"])
            values += [Metric(k, float(v), 0, step) for k, v in row.items() if k != "epoch"]
        for start in range(0, len(values), 1000):
            self.client.log_batch(run_id, metrics=values[start:start + 1000])
        for key, value in metrics.items():
            if isinstance(value, str):
                self.client.set_tag(run_id, f"sgt.{key}", value)

    def set_tags(self, run_id: str, tags: dict[str, str]) -> None:
        self.client.log_batch(run_id, tags=[RunTag(k, str(v)) for k, v in tags.items()])

    def log_artifact(self, run_id: str, path: Path, artifact_path: str | None = None) -> None:
        if path.is_dir():
            self.client.log_artifacts(run_id, str(path), artifact_path)
        else:
            self.client.log_artifact(run_id, str(path), artifact_path)

    def end(self, run_id: str, ok: bool = True) -> None:
        self.client.set_terminated(run_id, "FINISHED" if ok else "FAILED")

    def _log_params(self, run_id: str, params: dict[str, str]) -> None:
        items = [Param(k, v[:6000]) for k, v in params.items()]
        for start in range(0, len(items), _BATCH):
            self.client.log_batch(run_id, params=items[start:start + _BATCH])
