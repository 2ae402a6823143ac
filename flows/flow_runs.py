"""Prefect flow runs that outlive their process: each run names its process, the next run closes the dead ones.

Prefect marks a flow run's end from inside the process running it; a process killed outright (SIGKILL, out
of memory), or one whose Prefect server was gone when it ended, leaves its flow run RUNNING for good. So
every `sgt-pipeline` and `sgt-tune` flow run is tagged `sgt.host:<host>` and `sgt.pid:<pid>` as it starts,
and the next run on the same machine and Prefect server marks CRASHED those whose process no longer
exists, with their unfinished task runs and the flow runs they ran under (`sgt serve`'s `sgt-run`).
Flow runs of earlier versions carry no tags: their process is found through their MLflow runs.
"""

from __future__ import annotations

import logging
import os
import socket

from prefect import runtime
from prefect.client.orchestration import SyncPrefectClient, get_client
from prefect.client.schemas.filters import (
    FlowRunFilter,
    FlowRunFilterId,
    FlowRunFilterState,
    FlowRunFilterStateType,
    FlowRunFilterTags,
)
from prefect.client.schemas.objects import StateType
from prefect.exceptions import ObjectNotFound
from prefect.states import Crashed

from sgt_core.artifacts import process_exists

log = logging.getLogger("sgt")

HOST_TAG, PID_TAG = "sgt.host:", "sgt.pid:"
UNFINISHED = [StateType.RUNNING, StateType.PENDING, StateType.CANCELLING, StateType.PAUSED]
MESSAGE = "its process ended without reporting (killed, out of memory, or its Prefect server gone); found by a later sgt run"
LIMIT = 200  # unfinished flow runs of this machine looked at per run: more would be a leak of its own


def owner_tags() -> list[str]:
    return [f"{HOST_TAG}{socket.gethostname()}", f"{PID_TAG}{os.getpid()}"]


def claim_flow_run() -> None:
    """Tags the flow run this process is running with its host and pid (no-op outside a flow run)."""
    flow_run_id = runtime.flow_run.id
    if not flow_run_id:
        return
    with get_client(sync_client=True) as client:
        tags = client.read_flow_run(flow_run_id).tags
        client.update_flow_run(flow_run_id, tags=[*tags, *(tag for tag in owner_tags() if tag not in tags)])


def _dead_owner(tags: list[str]) -> bool | None:
    """Whether the tagged process is gone: True or False on this machine, None where the tags do not say."""
    host = next((tag.removeprefix(HOST_TAG) for tag in tags if tag.startswith(HOST_TAG)), None)
    pid = next((tag.removeprefix(PID_TAG) for tag in tags if tag.startswith(PID_TAG)), None)
    if host != socket.gethostname() or pid is None or not pid.isdigit():
        return None
    return int(pid) != os.getpid() and not process_exists(int(pid))


def crash_flow_runs_of_dead_processes(closed_runs: dict[str, dict[str, str]]) -> list[str]:
    """Marks CRASHED the unfinished flow runs (and their open task runs) whose process on this machine died.

    Found two ways: tagged flow runs whose `sgt.pid` no longer exists; and the flow runs named
    (`sgt.prefect_flow_run_id`) by the MLflow runs of dead pipelines that the tracker has just closed, for
    flow runs of earlier versions. A flow run recorded on another Prefect server is not found and skipped.
    Returns the ids it marked.
    """
    with get_client(sync_client=True) as client:
        tagged = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(tags=FlowRunFilterTags(all_=[owner_tags()[0]]),
                                          state=FlowRunFilterState(type=FlowRunFilterStateType(any_=UNFINISHED))),
            limit=LIMIT)
        pending = [str(run.id) for run in tagged if _dead_owner(run.tags)]
        pending += [tags["sgt.prefect_flow_run_id"] for tags in closed_runs.values()
                    if tags.get("sgt.prefect_flow_run_id")]
        crashed = _crash(client, pending)
    for flow_run_id in crashed:
        log.warning("marked the Prefect flow run %s of a dead process CRASHED", flow_run_id)
    return crashed


def _crash(client: SyncPrefectClient, pending: list[str]) -> list[str]:
    """Marks each unfinished flow run of `pending` CRASHED, its open task runs first, then the flow run it
    ran under (a subflow's parent died with it)."""
    crashed: list[str] = []
    while pending:
        flow_run_id = pending.pop()
        try:
            flow_run = client.read_flow_run(flow_run_id)
        except ObjectNotFound:
            continue
        if flow_run.state is None or flow_run.state.is_final() or str(flow_run.id) in crashed:
            continue
        task_runs = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run.id])))
        for task_run in task_runs:
            if task_run.state is not None and not task_run.state.is_final():
                client.set_task_run_state(task_run.id, Crashed(message=MESSAGE), force=True)
        client.set_flow_run_state(flow_run.id, Crashed(message=MESSAGE), force=True)
        crashed.append(str(flow_run.id))
        if flow_run.parent_task_run_id is not None:  # a subflow: its parent flow (`sgt-run`) died too
            pending.append(str(client.read_task_run(flow_run.parent_task_run_id).flow_run_id))
    return crashed
