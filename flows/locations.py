"""Where a run's MLflow records go, known without importing MLflow (the CLI checks it before anything starts)."""

from __future__ import annotations

import os
from pathlib import Path

from sgt_core.artifacts import is_url
from sgt_core.errors import ConfigError


def tracking_uri(cfg: dict) -> str:
    """Config value, else $MLFLOW_TRACKING_URI, else a sqlite file under the artifacts folder."""
    if cfg["mlflow"]["tracking_uri"]:
        return cfg["mlflow"]["tracking_uri"]
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return os.environ["MLFLOW_TRACKING_URI"]
    if is_url(cfg["paths"]["artifacts"]):
        raise ConfigError(f"mlflow.tracking_uri: must be set (or $MLFLOW_TRACKING_URI) when paths.artifacts is an "
                          f"object-store URL ({cfg['paths']['artifacts']}): the MLflow store cannot live there")
    return f"sqlite:///{Path(cfg['paths']['artifacts']).resolve() / 'mlflow.db'}"
