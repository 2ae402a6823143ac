"""One stage of a run, here or on a worker: served from the cache or computed, with its hooks around it."""

from __future__ import annotations

import logging
import time
from functools import partial
from pathlib import Path

from flows.caching import StageCache
from flows.hooks import StageHooks, StageRun
from flows.isolation import run_stage_in_process
from flows.memory import MemorySampler
from flows.plots import PlotHooks
from flows.stage_log import StageLog
from flows.tracking import MlflowHooks, Tracker
from sgt_core.pipeline import STAGE_BY_NAME, Stage, stage_environment

log = logging.getLogger("sgt")


def run_stage(
    name: str, cfg: dict, keys: dict[str, str], force: bool, parent_run_id: str, tracker: Tracker,
    verify_checksums: bool = False, worker: dict[str, str] | None = None,
) -> dict:
    """Runs (or reuses) one stage and records it as a child MLflow run; returns the stage's metrics.

    A cached result is reused only when whole: file sizes are always checked, checksums too when a later
    stage of this run will read it (`verify_checksums`); a damaged one is moved aside and recomputed.
    `worker` holds the child run's tags saying where it ran (default: this host, in the flow's process).
    The stage's uploads and plots go on `tracker`'s logging thread: its owner flushes it before its run ends.
    """
    stage = STAGE_BY_NAME[name]
    cache = StageCache(cfg, stage, keys)
    run = StageRun(stage, cache.key, cache.reuse(force, verify_checksums),
                   {section: cfg[section] for section in stage.config_sections})
    hooks: tuple[StageHooks, ...] = (MlflowHooks(tracker, parent_run_id, worker), StageLog(tracker, cache.store.root),
                                     PlotHooks(tracker, own_process=cfg["stage_isolation"] == "process"))
    try:
        for hook in hooks:
            hook.before_stage(run)
        started = time.perf_counter()
        if run.cache_hit:
            metrics, run.source_run_id = cache.cached()
            log.info("%s: cached (key %s)", name, run.key)
        else:
            log.info("%s: running (key %s)", name, run.key)
            run.memory = MemorySampler()
            metrics = cache.compute(partial(_execute, stage, cfg, run.memory), run.run_id, run.params, replace=force)
            run.source_run_id = run.run_id
        result = cache.result(metrics)
        run.location, run.seconds = cache.location, time.perf_counter() - started
        for hook in hooks:
            hook.after_stage(run, result)
    except BaseException as error:
        for hook in hooks:
            hook.on_stage_error(run, error)
        raise
    return {"metrics": metrics, "cache_hit": run.cache_hit, "path": run.location}


def _execute(stage: Stage, cfg: dict, memory: MemorySampler, inputs: dict[str, Path], out_dir: Path) -> dict:
    """Runs the stage function in a process of its own (stage_isolation=process) or in this one, sampled by `memory`."""
    with memory:
        if cfg["stage_isolation"] == "process":
            metrics, stage_peak_mb = run_stage_in_process(stage.name, cfg, inputs, out_dir, memory.follow)
            if stage_peak_mb is not None:  # exact, where a 0.5 s sample can miss the peak
                memory.record(stage_peak_mb)
            return metrics
        if stage_environment(stage, cfg):  # e.g. orchestration.train_malloc_mmap_threshold_kb
            log.warning("%s: not setting %s, which applies to a stage's own process only (stage_isolation=process)",
                        stage.name, ", ".join(stage_environment(stage, cfg)))
        return stage.run(cfg, inputs, out_dir)
