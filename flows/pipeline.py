"""The Prefect flow: one task per stage, each served from its cached artifact when its key matches."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from flows.memory import MemorySampler
from flows.plots import memory_over_time, stage_figures
from flows.tracking import Tracker
from sgt_core.artifacts import ArtifactStore
from sgt_core.config import STAGE_NAMES, compose_config
from sgt_core.estimate.stage import ESTIMATOR_FILE
from sgt_core.export.scores import SCORES_DIR
from sgt_core.pipeline import STAGE_BY_NAME, STAGES, stage_keys
from sgt_core.train.stage import MODEL_FILE

log = logging.getLogger("sgt")

# What each stage contributes to MLflow as artifacts when it computes (not on cache hits, where the
# child run carries `sgt.artifact_dir` and `sgt.source_run_id` instead of a second copy).
_STAGE_ARTIFACTS = {"estimate": [ESTIMATOR_FILE], "export": [SCORES_DIR], "train": [MODEL_FILE]}


def _run_stage(
    name: str, cfg: dict, keys: dict[str, str], force: bool, parent_run_id: str, tracker: Tracker
) -> dict:
    """Runs (or reuses) one stage and records it as a child MLflow run; returns the stage's metrics."""
    stage, key = STAGE_BY_NAME[name], keys[name]
    store = ArtifactStore(cfg["paths"]["artifacts"])
    cache_hit = store.is_complete(name, key) and not force
    params = {section: cfg[section] for section in stage.config_sections}
    run_id = tracker.start_stage(parent_run_id, name, key, cache_hit, params)
    started = time.perf_counter()
    try:
        if cache_hit:
            metrics = store.metrics(name, key)
            source_run = store.manifest(name, key).get("mlflow_run_id", "")
            log.info("%s: cached (key %s)", name, key)
        else:
            log.info("%s: running (key %s)", name, key)
            inputs = {upstream: store.path(upstream, keys[upstream]) for upstream in stage.upstream}
            with store.writing(name, key, replace=force) as staging:
                with MemorySampler() as memory:
                    metrics = stage.run(cfg, inputs, staging)
                manifest = {"stage": name, "key": key, "upstream": {u: keys[u] for u in stage.upstream},
                            "config": params, "mlflow_run_id": run_id, "created": time.time()}
                store.finish(staging, metrics, manifest)
            source_run = run_id
        output = store.path(name, key)
        history_file = output / "history.json"
        history = json.loads(history_file.read_text()) if history_file.is_file() else None
        tracker.log_results(run_id, {**metrics, "stage_seconds": time.perf_counter() - started}, history)
        tracker.set_tags(run_id, {"sgt.artifact_dir": str(output.resolve()), "sgt.source_run_id": source_run})
        if not cache_hit:  # a cache hit's plots and memory trace are on the run that computed it
            for artifact in _STAGE_ARTIFACTS.get(name, []):
                tracker.log_artifact(run_id, output / artifact, artifact if (output / artifact).is_dir() else None)
            tracker.log_metric_series(run_id, "rss_mb", memory.samples, memory.started_at)
            tracker.log_results(run_id, {"rss_peak_mb": memory.peak_mb})
            figures = stage_figures(name, output)
            figures["memory"] = memory_over_time(memory.samples, f"{name}: resident memory (RSS) over time")
            tracker.log_figures(run_id, figures)
    except BaseException:
        tracker.end(run_id, ok=False)
        raise
    tracker.end(run_id)
    return {"metrics": metrics, "cache_hit": cache_hit, "path": str(store.path(name, key))}


# One Prefect task per stage, so each appears by name in the Prefect UI. Caching is ours (artifact
# keys), not Prefect's, so Prefect's own input hashing is switched off.
STAGE_TASKS = {
    name: task(_run_stage, name=name, cache_policy=NO_CACHE, persist_result=False) for name in STAGE_NAMES
}


@flow(name="sgt-pipeline", persist_result=False)
def sgt_pipeline(overrides: list[str] | None = None) -> dict:
    """preprocess -> estimate -> export -> train, tracked as one MLflow parent run with a child per stage.

    Args:
        overrides: Hydra overrides, e.g. ["dataset=npz", "dataset.path=FILE", "train.epochs=50"].
    """
    cfg = compose_config(overrides)
    keys = stage_keys(cfg)
    force_from = STAGE_NAMES.index(cfg["stage"]) if cfg["stage"] != "all" else len(STAGE_NAMES)
    tracker = Tracker(cfg)
    parent_run_id = tracker.start_pipeline(cfg, keys)
    started = time.perf_counter()
    results = {}
    try:
        for index, stage in enumerate(STAGES):
            results[stage.name] = STAGE_TASKS[stage.name](
                stage.name, cfg, keys, index >= force_from, parent_run_id, tracker
            )
        train_metrics = results["train"]["metrics"]
        summary = {k: v for k, v in train_metrics.items() if k.startswith(("val_", "test_"))}
        tracker.log_results(parent_run_id, {**summary, "pipeline_seconds": time.perf_counter() - started})
        tracker.set_tags(parent_run_id, {
            "sgt.device": train_metrics.get("device", "cpu"),
            "sgt.cache_hits": ",".join(n for n, r in results.items() if r["cache_hit"]) or "none",
        })
    except BaseException:
        tracker.end(parent_run_id, ok=False)
        raise
    tracker.end(parent_run_id)
    return {"run_id": parent_run_id, "keys": keys, "stages": results, "metrics": summary,
            "tracking_uri": tracker.client.tracking_uri, "artifacts": str(Path(cfg["paths"]["artifacts"]).resolve())}
