"""Stages on Prefect work pools: the stage flow a worker runs, its deployments, and sending a stage to one.

With `orchestration=pools` the pipeline flow runs each stage as the deployment `sgt-stage/<stage>@<pool>`
on that stage's work pool and waits for it. The stage flow, in the worker's flow-run process, runs the
very `run_stage` of `orchestration=local` (cache lookup, atomic write, MLflow child run), so caching,
forced re-runs and the MLflow runs are the same; its child run also records where it ran (`sgt.worker`).
Its result comes back through the shared stores, not through Prefect: the child run's tags (cache hit,
key) and the artifact's `metrics.json`.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from datetime import UTC, datetime
from pathlib import Path

from prefect import flow, runtime

from flows.stage_run import run_stage
from flows.tracking import WORKER_TAG, Tracker
from sgt_core.errors import SGTError
from sgt_core.object_store import open_store
from sgt_core.pipeline import STAGE_BY_NAME, STAGES, stage_key

log = logging.getLogger("sgt")

STAGE_FLOW_NAME = "sgt-stage"
_POLL_SECONDS = 1.0  # how often the pipeline reads the state of the stage's flow run while it waits


class StageOnPoolFailed(SGTError):
    """A stage's flow run on a work pool failed, crashed, was cancelled, or was never taken by a worker."""


def deployment_name(stage: str, pool: str) -> str:
    """The stage's deployment on `pool` (a flow-run name under the flow `sgt-stage`)."""
    return f"{stage}@{pool}"


def _worker_tags() -> dict[str, str]:
    """Where this stage flow run runs: the work pool the API gave it to, this host and the worker's name."""
    from prefect.client.orchestration import get_client

    pool = "unknown"
    if runtime.flow_run.id:
        with get_client(sync_client=True) as client:
            pool = client.read_flow_run(runtime.flow_run.id).work_pool_name or pool
    # Workers pass their name to the flow-run process they start (Prefect's attribution variables).
    return {WORKER_TAG: f"{pool}@{socket.gethostname()}", "sgt.worker_name": os.environ.get("PREFECT__WORKER_NAME", "")}


@flow(name=STAGE_FLOW_NAME, persist_result=False)
def sgt_stage(stage: str, cfg: dict, keys: dict[str, str], force: bool = False, parent_run_id: str = "",
              verify_checksums: bool = False, workdir: str = "") -> dict:
    """Runs (or reuses) one pipeline stage on the worker that took this flow run, as its MLflow child run.

    Args:
        stage: preprocess, estimate, export or train.
        cfg: the pipeline's resolved configuration (artifacts root and MLflow store already absolute).
        keys: the pipeline's cache keys; this stage's own is recomputed here, where it runs (its kernels
            depend on this machine's device, its code on this checkout).
        force: recompute even when a complete artifact has the key (`stage=<this or an earlier stage>`).
        parent_run_id: the pipeline's MLflow run, parent of the child run recorded here.
        verify_checksums: check the checksums of a cached result (a later stage will read it).
        workdir: the pipeline's working directory: relative dataset paths resolve there when this machine
            has it (a shared file system, or the same checkout path).
    """
    if workdir and Path(workdir).is_dir():
        os.chdir(workdir)
    keys = {**keys, stage: stage_key(STAGE_BY_NAME[stage], cfg, keys)}
    tracker = Tracker(cfg, close_orphans=False)  # the pipeline's process closes orphans, once per run
    result = run_stage(stage, cfg, keys, force, parent_run_id, tracker, verify_checksums, _worker_tags())
    tracker.flush()  # the child run's files and plots, before the pipeline reads its outcome
    return {**result, "key": keys[stage]}


def register_stage_deployments(pools: dict[str, str]) -> list[str]:
    """Creates (or updates) each stage's deployment on its pool, creating missing pools as `process` pools.

    Needs a Prefect server (`$PREFECT_API_URL`). Returns the deployments' full names.
    """
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.deployments.runner import EntrypointType
    from prefect.exceptions import ObjectAlreadyExists, ObjectNotFound

    with get_client(sync_client=True) as client:
        for pool in sorted(set(pools.values())):
            try:
                client.read_work_pool(pool)
            except ObjectNotFound:
                try:
                    client.create_work_pool(WorkPoolCreate(name=pool, type="process"))
                except ObjectAlreadyExists:  # a worker or another run created it first
                    pass
    names = []
    for stage, pool in pools.items():
        # A module path, not a file: a worker imports the installed `flows` package wherever it runs.
        deployment = sgt_stage.to_deployment(
            name=deployment_name(stage, pool), work_pool_name=pool, entrypoint_type=EntrypointType.MODULE_PATH,
            parameters={"stage": stage}, tags=["sgt"],
            description=f"the pipeline's {stage} stage on the work pool {pool} (started by `sgt run`)",
        )
        deployment.apply()
        names.append(f"{STAGE_FLOW_NAME}/{deployment.name}")
    return names


def for_workers(cfg: dict) -> dict:
    """The configuration a worker gets: the artifacts root and the MLflow store as absolute locations."""
    from flows.locations import tracking_uri

    paths = dict(cfg["paths"])
    if "://" not in str(paths["artifacts"]):  # an object-store URL is the same everywhere already
        paths["artifacts"] = str(Path(paths["artifacts"]).resolve())
    return {**cfg, "paths": paths, "mlflow": {**cfg["mlflow"], "tracking_uri": tracking_uri(cfg)}}


def run_stage_on_pool(name: str, cfg: dict, keys: dict[str, str], force: bool, parent_run_id: str,
                      tracker: Tracker, verify_checksums: bool = False) -> dict:
    """Runs stage `name` as a flow run of its deployment on its pool, waits for it, and reads its outcome.

    Returns what `run_stage` returns locally, plus the stage's key as the worker computed it.

    Raises:
        StageOnPoolFailed: the stage failed (with its error's message), its worker died, or no worker took it.
    """
    from prefect.deployments import run_deployment

    orchestration = cfg["orchestration"]
    pool = orchestration["pools"][name]
    parameters = {"stage": name, "cfg": for_workers(cfg), "keys": keys, "force": force,
                  "parent_run_id": parent_run_id, "verify_checksums": verify_checksums, "workdir": os.getcwd()}
    flow_run = run_deployment(f"{STAGE_FLOW_NAME}/{deployment_name(name, pool)}", parameters=parameters,
                              timeout=0, tags=["sgt"])  # timeout 0: we wait ourselves, watching the worker
    log.info("%s: sent to the work pool %s (flow run %s)", name, pool, flow_run.name)
    flow_run = _wait(flow_run.id, name, pool, orchestration)
    child = tracker.stage_run(parent_run_id, name)
    state = flow_run.state
    if not state.is_completed():
        if child is not None and child.info.status == "RUNNING":  # its process died without closing it
            tracker.end(child.info.run_id, ok=False)
        message = (state.message or "").removeprefix("Flow run encountered an exception: ")
        raise StageOnPoolFailed(f"{name}: its flow run {flow_run.name} on the work pool {pool} ended "
                                f"{state.type.value}: {message}")
    if child is None:
        raise StageOnPoolFailed(f"{name}: its flow run {flow_run.name} completed without an MLflow run under "
                                f"{parent_run_id} (does the worker reach the same MLflow store?)")
    key = child.data.tags["sgt.cache_key"]
    store = open_store(cfg["paths"]["artifacts"])
    return {"metrics": store.metrics(name, key), "cache_hit": child.data.tags["sgt.cache_hit"] == "true",
            "path": store.location(name, key), "key": key}


def _wait(flow_run_id, name: str, pool: str, orchestration: dict):
    """Polls the flow run until it ends; fails it when no worker takes it in time or its worker goes silent.

    A worker that is killed (or whose machine goes away) leaves its flow run RUNNING forever: Prefect
    notices nothing. Workers send heartbeats to the API, so a worker that missed `missed_heartbeats` of them
    is taken as dead, and its flow run is marked CRASHED here. Ctrl-C cancels the flow run on its worker.
    """
    from prefect.client.orchestration import get_client
    from prefect.states import Cancelling, Crashed

    started = time.monotonic()
    with get_client(sync_client=True) as client:
        try:
            while True:
                flow_run = client.read_flow_run(flow_run_id)
                if flow_run.state is not None and flow_run.state.is_final():
                    return flow_run
                worker_name = (flow_run.labels or {}).get("prefect.worker.name")
                if worker_name is None:  # not taken by a worker yet
                    if time.monotonic() - started > orchestration["start_timeout_s"]:
                        client.set_flow_run_state(flow_run_id, Crashed(message="no worker took it"), force=True)
                        raise StageOnPoolFailed(
                            f"{name}: no worker of the work pool {pool} took the stage within "
                            f"{orchestration['start_timeout_s']} s; start one with `sgt workers --pool {pool}`")
                else:
                    silence = _worker_silence(client, pool, worker_name, orchestration["missed_heartbeats"])
                    if silence is not None:
                        message = f"its worker {worker_name!r} sent no heartbeat for {silence}"
                        client.set_flow_run_state(flow_run_id, Crashed(message=message), force=True)
                        log.warning("%s: %s; marked its flow run CRASHED", name, message)
                time.sleep(_POLL_SECONDS)
        except BaseException:
            flow_run = client.read_flow_run(flow_run_id)
            if flow_run.state is not None and not flow_run.state.is_final():  # Ctrl-C: stop it on its worker
                client.set_flow_run_state(flow_run_id, Cancelling(message="the pipeline stopped"), force=True)
            raise


def _worker_silence(client, pool: str, worker_name: str, missed: int) -> str | None:
    """How long the worker has been silent, if longer than `missed` of its heartbeat intervals; else None."""
    worker = next((w for w in client.read_workers_for_work_pool(pool) if w.name == worker_name), None)
    if worker is None or worker.last_heartbeat_time is None:
        return None  # not registered yet: its first heartbeat is on its way
    interval = worker.heartbeat_interval_seconds or 30
    silent_s = (datetime.now(UTC) - worker.last_heartbeat_time).total_seconds()
    return f"{silent_s:.0f} s (heartbeat every {interval} s)" if silent_s > missed * interval else None


def stage_pools(cfg: dict) -> dict[str, str]:
    """Each stage's work pool, in pipeline order."""
    return {stage.name: cfg["orchestration"]["pools"][stage.name] for stage in STAGES}
