"""The Prefect flow: one task per stage, each served from its cached artifact when its key matches."""

from __future__ import annotations

import logging
import time

from prefect import flow, runtime, task
from prefect.cache_policies import NO_CACHE

from flows.flow_runs import claim_flow_run, crash_flow_runs_of_dead_processes
from flows.interrupts import begin_run, in_stage, is_interrupt
from flows.keys import run_keys
from flows.stage_run import run_stage
from flows.tracking import Tracker
from sgt_core.artifacts import ArtifactStore
from sgt_core.config import STAGE_NAMES, compose_config
from sgt_core.object_store import open_store
from sgt_core.pipeline import STAGES, stage_key

log = logging.getLogger("sgt")


# The stage whose files `sgt scores` reads (the exported attention scores).
SCORES_STAGE = "export"


def reported_stages() -> set[str]:
    """The stages whose results a run reports: the last stage's (the run's metrics and checkpoint, which
    `sgt report` shows) and the scores `sgt scores` reads."""
    return {STAGES[-1].name, SCORES_STAGE}


def stages_to_checksum(store: ArtifactStore, keys: dict[str, str], force_from: int) -> set[str]:
    """The stages whose cached results are verified by checksum before they are served: the results this run
    will read as inputs (the upstreams of every stage it computes), and those it reports (`reported_stages`).

    A damaged one is moved aside and recomputed, so that a run never reports metrics beside a damaged or
    swapped file (sizes alone do not tell another run's checkpoint of the same shape).
    """
    computes = [index >= force_from or not store.is_complete(stage.name, keys[stage.name])
                for index, stage in enumerate(STAGES)]
    read = {upstream for stage, runs in zip(STAGES, computes) if runs for upstream in stage.upstream}
    return read | reported_stages()


def _stage_here_or_on_pool(name: str, cfg: dict, keys: dict[str, str], force: bool, parent_run_id: str,
                           tracker: Tracker, verify_checksums: bool = False) -> dict:
    """Runs the stage in this process (orchestration=local) or as a flow run on its work pool (pools)."""
    with in_stage(name):
        if cfg["orchestration"]["mode"] == "pools":
            from flows.pools import run_stage_on_pool

            return run_stage_on_pool(name, cfg, keys, force, parent_run_id, tracker, verify_checksums)
        return run_stage(name, cfg, keys, force, parent_run_id, tracker, verify_checksums)


def rekeyed(cfg: dict, keys: dict[str, str], name: str, key: str) -> dict[str, str]:
    """The keys with stage `name`'s replaced by the one its worker computed, and every later stage's redone."""
    keys = {**keys, name: key}
    for later in STAGES[STAGE_NAMES.index(name) + 1:]:
        keys[later.name] = stage_key(later, cfg, keys)
    return keys


def import_engines_early() -> None:
    """Imports Prefect's flow and task engines on a thread of their own: Prefect imports them at a process's first
    flow call (a second or two of CPU), which the run can spend while it waits for its checks instead."""
    import importlib
    import threading

    def import_engines() -> None:
        for module in ("prefect.flow_engine", "prefect.task_engine"):
            importlib.import_module(module)

    threading.Thread(target=import_engines, name="sgt-prefect-engines", daemon=True).start()


# One Prefect task per stage, so each appears by name in the Prefect UI. Caching is ours (artifact
# keys), not Prefect's, so Prefect's own input hashing is switched off.
STAGE_TASKS = {
    name: task(_stage_here_or_on_pool, name=name, cache_policy=NO_CACHE, persist_result=False)
    for name in STAGE_NAMES
}


@flow(name="sgt-pipeline", persist_result=False)
def sgt_pipeline(overrides: list[str] | None = None, parent_run_id: str | None = None,
                 tags: dict[str, str] | None = None) -> dict:
    """preprocess -> estimate -> export -> train, tracked as one MLflow parent run with a child per stage.

    Args:
        overrides: Hydra overrides, e.g. ["dataset=npz", "dataset.path=FILE", "train.epochs=50"].
        parent_run_id: an MLflow run (of the same experiment) to nest the pipeline's run under, e.g. the
            tuning run of `sgt tune`, whose trials are pipeline runs.
        tags: further tags of the pipeline's run (`sgt tune`'s `sgt.study`, `sgt.trial`).
    """
    begin_run()
    cfg = compose_config(overrides)
    keys = run_keys(cfg)
    force_from = STAGE_NAMES.index(cfg["stage"]) if cfg["stage"] != "all" else len(STAGE_NAMES)
    claim_flow_run()  # so that a later run can tell this one's flow run from a live one, should this process die
    tracker = Tracker(cfg)
    crash_flow_runs_of_dead_processes(tracker.closed_runs)
    if cfg["orchestration"]["mode"] == "pools":
        from flows.pools import register_stage_deployments, stage_pools

        register_stage_deployments(stage_pools(cfg))  # so that they match this run's pools
    nested = {"mlflow.parentRunId": parent_run_id} if parent_run_id else {}
    # The run's params and config.yaml hold what the pipeline reads: no stage reads `tune`, which `sgt tune`
    # logs on its tuning run.
    pipeline_run_id = tracker.start_pipeline(
        {section: value for section, value in cfg.items() if section != "tune"}, keys,
        {"sgt.prefect_flow_run_id": runtime.flow_run.id or "", **nested, **(tags or {})},
    )
    started = time.perf_counter()
    results = {}
    store = open_store(cfg["paths"]["artifacts"])
    try:
        checksummed = stages_to_checksum(store, keys, force_from)
        for index, stage in enumerate(STAGES):
            results[stage.name] = STAGE_TASKS[stage.name](
                stage.name, cfg, keys, index >= force_from, pipeline_run_id, tracker, stage.name in checksummed
            )
            worker_key = results[stage.name].pop("key", keys[stage.name])
            if worker_key != keys[stage.name]:  # a worker's device or code differs from this machine's
                keys = rekeyed(cfg, keys, stage.name, worker_key)
                tracker.set_tags(pipeline_run_id, {f"sgt.key.{name}": key for name, key in keys.items()})
        train_metrics = results["train"]["metrics"]
        summary = {k: v for k, v in train_metrics.items() if k.startswith(("val_", "test_"))}
        # The dataset's notes (e.g. a stand-in training set) travel with every run's results.
        notes = {k.removeprefix("note_"): v for k, v in results["preprocess"]["metrics"].items()
                 if k.startswith("note_")}
        tracker.set_tags(pipeline_run_id, {f"sgt.note.{name}": text for name, text in notes.items()})
        tracker.log_results(pipeline_run_id, {**summary, "pipeline_seconds": time.perf_counter() - started})
        tracker.set_tags(pipeline_run_id, {
            "sgt.device": train_metrics.get("device", "cpu"),
            "sgt.cache_hits": ",".join(n for n, r in results.items() if r["cache_hit"]) or "none",
        })
        tracker.flush()  # the stages' files and plots, logged while the later stages ran
    except BaseException as error:
        tracker.fail(pipeline_run_id, killed=is_interrupt(error))
        raise
    tracker.end(pipeline_run_id)
    return {"run_id": pipeline_run_id, "keys": keys, "stages": results, "metrics": summary, "notes": notes,
            "tracking_uri": tracker.client.tracking_uri, "artifacts": store.location()}
