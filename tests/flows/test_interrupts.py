"""Ctrl-C and SIGTERM stop a run at once: one `interrupted:` line, exit 130, nothing cached for the stage it was in,
its MLflow runs KILLED and its Prefect runs CRASHED; and the next run closes flow runs a dead process left open."""

from __future__ import annotations

import os
import re
import signal
import socket
import sqlite3
import subprocess
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from tests.flows.cli_process import (
    TEMPORARY,
    CliProcess,
    rank_process,
    session_env,
    still_running,
    temporary_server_env,
    tiny,
)

LONG_ESTIMATE = tiny("estimator.epochs=100000")  # the estimate stage runs until it is interrupted
STOPPED_WITHIN_S = 60  # the run prints its line in ~2 s; a busy machine's interpreter exit takes some more
INTERRUPTED = re.compile(r"^interrupted: (\w+) at epoch (\d+); nothing was cached for it$", re.MULTILINE)


def interrupt(cli: CliProcess, signum: int, group: bool, waitfor: str) -> tuple[int, list]:
    """Sends `signum` to `cli` (its whole process group, as a terminal's Ctrl-C does, or the process alone)
    once `waitfor` is printed; returns its exit status and the helper processes it had then."""
    try:
        cli.wait_for_line(waitfor)
        helpers = cli.descendants()
        (os.killpg if group else os.kill)(cli.pid, signum)
        return cli.finish(STOPPED_WITHIN_S), helpers
    finally:
        if cli.process.poll() is None:
            cli.kill_all()


def mlflow_states(artifacts: Path) -> dict[str, str]:
    client = MlflowClient(f"sqlite:///{artifacts / 'mlflow.db'}")
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()], "")
    return {run.data.tags["sgt.stage"]: run.info.status for run in runs}


def pipeline_run(artifacts: Path):
    client = MlflowClient(f"sqlite:///{artifacts / 'mlflow.db'}")
    (run,) = client.search_runs([e.experiment_id for e in client.search_experiments()], "tags.`sgt.stage` = 'pipeline'")
    return run


def assert_interrupted_in(output: str, stage: str) -> None:
    lines = [line for line in output.splitlines() if line.startswith(("interrupted:", "error:"))]
    assert len(lines) == 1 and INTERRUPTED.fullmatch(lines[0]), output[-3000:]
    assert INTERRUPTED.fullmatch(lines[0]).group(1) == stage
    assert "Traceback" not in output and "Crash detected" not in output, output[-3000:]


def test_ctrl_c_in_a_terminal_stops_the_run_and_its_temporary_server_records_it(temporary_prefect_home, tmp_path):
    """SIGINT to the process group, as Ctrl-C sends it: the stage process gets it too, the temporary Prefect
    server (a session of its own) does not, and lives until the run has recorded its end."""
    home, artifacts = temporary_prefect_home, tmp_path / "artifacts"
    cli = CliProcess(["run", *LONG_ESTIMATE, TEMPORARY, f"paths.artifacts={artifacts}"], temporary_server_env(home),
                     tmp_path / "run.log")
    status, helpers = interrupt(cli, signal.SIGINT, group=True, waitfor="estimate epoch 1/")
    assert status == 130
    assert_interrupted_in(cli.output(), "estimate")
    assert not list(artifacts.glob("*/.*")) and not list((artifacts / "estimate").iterdir())
    assert mlflow_states(artifacts) == {"pipeline": "KILLED", "preprocess": "FINISHED", "estimate": "KILLED"}
    flow_run_id = pipeline_run(artifacts).data.tags["sgt.prefect_flow_run_id"]
    with sqlite3.connect(home / "prefect.db") as database:  # the server is gone: its database remains
        (state,) = database.execute("SELECT state_type FROM flow_run WHERE id = ?", (flow_run_id,)).fetchone()
        tasks = dict(database.execute("SELECT name, state_type FROM task_run WHERE flow_run_id = ?",
                                      (flow_run_id,)).fetchall())
    assert state == "CRASHED"
    assert {name.split("-")[0]: state for name, state in tasks.items()} == {"preprocess": "COMPLETED", "estimate": "CRASHED"}
    assert still_running(helpers, 30) == []


# SIGTERM takes the same path as SIGINT once the `sgt` process has it: its run is in `make test-all`.
@pytest.mark.parametrize("signum", [signal.SIGINT, pytest.param(signal.SIGTERM, marks=pytest.mark.e2e)],
                         ids=["sigint", "sigterm"])
def test_a_signal_to_the_sgt_process_alone_stops_its_stage_too(prefect_server, tmp_path, signum):
    """`kill -INT` or `kill -TERM` of the `sgt` process: it interrupts its stage process itself."""
    from prefect.client.orchestration import get_client

    artifacts = tmp_path / "artifacts"
    cli = CliProcess(["run", *LONG_ESTIMATE], session_env(artifacts), tmp_path / "run.log")
    status, helpers = interrupt(cli, signum, group=False, waitfor="estimate epoch 1/")
    assert status == 130
    assert_interrupted_in(cli.output(), "estimate")
    assert not list(artifacts.glob("*/.*")) and not list((artifacts / "estimate").iterdir())
    assert mlflow_states(artifacts) == {"pipeline": "KILLED", "preprocess": "FINISHED", "estimate": "KILLED"}
    with get_client(sync_client=True) as prefect:
        flow_run = prefect.read_flow_run(pipeline_run(artifacts).data.tags["sgt.prefect_flow_run_id"])
    assert flow_run.state.type.value == "CRASHED"
    assert still_running(helpers, 30) == []


@pytest.mark.e2e  # torchrun and two ranks on top of a run: ~2 minutes on 2 shared cores
def test_ctrl_c_stops_torchrun_and_its_ranks(prefect_server, tmp_path):
    artifacts = tmp_path / "artifacts"
    ddp = tiny("train.epochs=100000", "train.batch_size=16", "train.distributed.nproc_per_node=2")
    cli = CliProcess(["run", *ddp], session_env(artifacts), tmp_path / "run.log")
    try:
        cli.wait_for_line("train epoch 1/")
        cli.wait_for(lambda: rank_process(cli, 1) is not None, "rank 1")
    except AssertionError:
        cli.kill_all()
        raise
    status, helpers = interrupt(cli, signal.SIGINT, group=True, waitfor="train epoch 1/")
    assert status == 130
    assert_interrupted_in(cli.output(), "train")
    assert not list(artifacts.glob("*/.*")) and not list((artifacts / "train").iterdir())
    assert mlflow_states(artifacts)["train"] == "KILLED"
    assert still_running(helpers, 30) == []


def test_the_next_run_closes_a_flow_run_whose_process_died_whatever_mlflow_says(prefect_server):
    """A flow run left RUNNING with no MLflow run left open to point at it (an earlier version's Ctrl-C closed
    its MLflow runs while its Prefect server was already gone): found by its process's tags."""
    from prefect import flow
    from prefect.client.orchestration import get_client
    from prefect.states import Running

    from flows.flow_runs import HOST_TAG, PID_TAG, crash_flow_runs_of_dead_processes

    ended = subprocess.Popen(["true"])
    ended.wait()
    alive = subprocess.Popen(["sleep", "60"])
    try:
        with get_client(sync_client=True) as client:
            runs = {}
            for name, pid in (("dead", ended.pid), ("alive", alive.pid)):
                tags = [f"{HOST_TAG}{socket.gethostname()}", f"{PID_TAG}{pid}"]
                runs[name] = client.create_flow_run(flow(name=f"sgt-pipeline-{name}")(lambda: None), tags=tags)
                client.set_flow_run_state(runs[name].id, Running(), force=True)
            crashed = crash_flow_runs_of_dead_processes({})
            states = {name: client.read_flow_run(run.id).state.type.value for name, run in runs.items()}
    finally:
        alive.kill()
        alive.wait()
    assert str(runs["dead"].id) in crashed and str(runs["alive"].id) not in crashed
    assert states == {"dead": "CRASHED", "alive": "RUNNING"}

