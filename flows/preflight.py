"""Checks a run before it starts: its config and dataset, before any stage runs or any run is recorded."""

from __future__ import annotations


def preflight(overrides: list[str]) -> dict:
    """Composes the run's config and checks it and its dataset (`check_run`); returns the config."""
    from sgt_core.config import compose_config

    return check_run(compose_config(overrides))


def check_run(cfg: dict) -> dict:
    """Checks a composed config and its dataset before any stage runs or any run is recorded; returns it."""
    from flows.tracking import tracking_uri
    from sgt_core.artifacts import open_store
    from sgt_core.pipeline import stage_keys

    keys = stage_keys(cfg)
    tracking_uri(cfg)  # an object-store artifacts root needs an MLflow store named elsewhere
    store = open_store(cfg["paths"]["artifacts"])
    if cfg["stage"] in ("all", "preprocess") and not (
        cfg["stage"] == "all" and store.is_complete("preprocess", keys["preprocess"])
    ):
        from sgt_core.data import load_dataset  # here: its loaders take seconds to import

        load_dataset(cfg["dataset"], seed=cfg["seed"])  # raises DatasetError naming the file and problem
    return cfg


def fully_cached(cfg: dict) -> bool:
    """Whether the run will compute nothing: every stage's artifact is in the store under its key."""
    from sgt_core.artifacts import open_store
    from sgt_core.pipeline import STAGES, stage_keys

    if cfg["stage"] != "all":
        return False
    store, keys = open_store(cfg["paths"]["artifacts"]), stage_keys(cfg)
    return all(store.is_complete(stage.name, keys[stage.name]) for stage in STAGES)
