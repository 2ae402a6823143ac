"""One stage of a run, here or on a worker: reused from the cache or run, and recorded as an MLflow child run."""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import time

from flows.isolation import run_stage_in_process
from flows.memory import MemorySampler
from flows.plots import memory_over_time, stage_figures
from flows.tracking import Tracker
from sgt_core.artifacts import open_store
from sgt_core.estimate.outputs import ESTIMATOR_FILE
from sgt_core.export.outputs import SCORES_DIR
from sgt_core.pipeline import STAGE_BY_NAME, stage_environment
from sgt_core.train.outputs import MODEL_FILE

log = logging.getLogger("sgt")

# What each stage contributes to MLflow as artifacts when it computes (not on cache hits, where the
# child run carries `sgt.artifact_dir` and `sgt.source_run_id` instead of a second copy).
_STAGE_ARTIFACTS = {"estimate": [ESTIMATOR_FILE], "export": [SCORES_DIR], "train": [MODEL_FILE]}


WORKER_TAG = "sgt.worker"  # where a stage ran: `<pool>@<host>` on a work pool, `local@<host>` in the flow


def run_stage(
    name: str, cfg: dict, keys: dict[str, str], force: bool, parent_run_id: str, tracker: Tracker,
    verify_checksums: bool = False, worker: dict[str, str] | None = None,
) -> dict:
    """Runs (or reuses) one stage and records it as a child MLflow run; returns the stage's metrics.

    A cached result is reused only when whole: file sizes are always checked, checksums too when a later
    stage of this run will read it (`verify_checksums`); a damaged one is moved aside and recomputed.
    `worker` holds the child run's tags saying where it ran (default: this host, in the flow's process).
    """
    stage, key = STAGE_BY_NAME[name], keys[name]
    store = open_store(cfg["paths"]["artifacts"])
    cache_hit = not force and store.reuse(name, key, checksums=verify_checksums)
    params = {section: cfg[section] for section in stage.config_sections}
    where = worker if worker is not None else {WORKER_TAG: f"local@{socket.gethostname()}"}
    run_id = tracker.start_stage(parent_run_id, name, key, cache_hit, params, where)
    started = time.perf_counter()
    try:
        if cache_hit:
            metrics = store.metrics(name, key)
            source_run = store.manifest(name, key).get("mlflow_run_id", "")
            log.info("%s: cached (key %s)", name, key)
        else:
            log.info("%s: running (key %s)", name, key)
            inputs = {upstream: store.local(upstream, keys[upstream]) for upstream in stage.upstream}
            with store.writing(name, key, replace=force) as staging:
                with MemorySampler() as memory:
                    if cfg["stage_isolation"] == "process":
                        metrics, stage_peak_mb = run_stage_in_process(name, cfg, inputs, staging, memory.follow)
                        if stage_peak_mb is not None:  # exact, where a 0.5 s sample can miss the peak
                            memory.record(stage_peak_mb)
                    else:
                        if stage_environment(stage, cfg):  # e.g. train.malloc_mmap_threshold_kb
                            log.warning("%s: not setting %s, which applies to a stage's own process only "
                                        "(stage_isolation=process)", name, ", ".join(stage_environment(stage, cfg)))
                        metrics = stage.run(cfg, inputs, staging)
                manifest = {"stage": name, "key": key, "upstream": {u: keys[u] for u in stage.upstream},
                            "config": params, "mlflow_run_id": run_id, "created": time.time()}
                store.finish(staging, metrics, manifest)
            source_run = run_id
        output = store.local(name, key)
        history_file = output / "history.json"
        history = json.loads(history_file.read_text()) if history_file.is_file() else None
        tracker.log_results(run_id, {**metrics, "stage_seconds": time.perf_counter() - started}, history)
        tracker.set_tags(run_id, {"sgt.artifact_dir": store.location(name, key), "sgt.source_run_id": source_run})
        if not cache_hit:  # a cache hit's plots and memory trace are on the run that computed it
            for artifact in _STAGE_ARTIFACTS.get(name, []):
                tracker.log_artifact(run_id, output / artifact, artifact if (output / artifact).is_dir() else None)
            tracker.log_metric_series(run_id, "rss_mb", memory.samples, memory.started_at)
            tracker.log_results(run_id, {"rss_peak_mb": memory.peak_mb})
            figures = stage_figures(name, output)
            figures["memory"] = memory_over_time(memory.samples, f"{name}: resident memory (RSS) over time")
            tracker.log_figures(run_id, figures)
    except BaseException:
        close_quietly(tracker, run_id)
        raise
    tracker.end(run_id)
    return {"metrics": metrics, "cache_hit": cache_hit, "path": store.location(name, key)}


def close_quietly(tracker: Tracker, run_id: str) -> None:
    """Marks a run FAILED if the store still takes writes: a full disk must not hide the stage's own error."""
    with contextlib.suppress(Exception):
        tracker.end(run_id, ok=False)
