"""Failure behaviour: killed runs, concurrent runs on one artifacts root and MLflow store, untrusted files."""

from __future__ import annotations

import json
import os
import pickle
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from mlflow.tracking import MlflowClient

from flows.cli import main
from sgt_core.artifacts import MANIFEST_FILE, STAGING_PREFIX, ArtifactError, ArtifactStore
from sgt_core.estimate.outputs import ESTIMATOR_FILE, SCORES_FILE
from sgt_core.export.stage import run_export
from sgt_core.preprocess.interaction_graph import InteractionGraph
from sgt_core.preprocess.outputs import INTERACTION_GRAPH_FILE
from sgt_core.train.outputs import MODEL_FILE
from tests.conftest import REPO_ROOT, TINY_OVERRIDES

# Enough estimator epochs that the estimate stage lasts about a second even on an idle machine, so the
# test sees it running; the tiny config's other stages take a fraction of that.
LONG_ESTIMATE = [*TINY_OVERRIDES, "estimator.epochs=50"]
SUBPROCESS_TIMEOUT = 300  # seconds; starting Python, torch and Prefect on a busy 2-core machine is slow


def start_run(overrides: list[str], root: Path, env: dict[str, str], log: Path) -> subprocess.Popen:
    """`sgt run OVERRIDES` in a subprocess writing under `root`, its output going to `log`."""
    with open(log, "w") as output:
        return subprocess.Popen(
            [sys.executable, "-m", "flows.cli", "run", *overrides],
            cwd=REPO_ROOT, env={**env, "SGT_ARTIFACTS": str(root)}, stdout=output, stderr=subprocess.STDOUT,
        )


def finish(run: subprocess.Popen, log: Path) -> None:
    assert run.wait(timeout=SUBPROCESS_TIMEOUT) == 0, log.read_text()[-3000:]


def complete_folders(stage_dir: Path) -> list[Path]:
    return [path for path in stage_dir.glob("*") if (path / MANIFEST_FILE).is_file()]


def private_folders(root: Path) -> list[Path]:
    """Staging (`.tmp-*`) and retired (`.old-*`) folders in any stage's folder."""
    return [path for path in root.glob("*/.*") if path.is_dir()]


def pipeline_runs(root: Path) -> tuple[MlflowClient, list]:
    """The MLflow client of `root`'s store and its pipeline runs, newest first."""
    client = MlflowClient(f"sqlite:///{root.resolve() / 'mlflow.db'}")
    experiments = [experiment.experiment_id for experiment in client.search_experiments()]
    runs = client.search_runs(experiments, "tags.`sgt.stage` = 'pipeline'", order_by=["attributes.start_time DESC"])
    return client, runs


def stage_runs(client: MlflowClient, parent) -> dict:
    runs = client.search_runs([parent.info.experiment_id], f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
    return {run.data.tags["sgt.stage"]: run for run in runs}


# --- a run killed in the middle of a stage ----------------------------------------------------------------


@pytest.mark.e2e  # `sgt run` killed mid-stage, then run again: ~70 s on 2 shared cores
def test_killed_run_leaves_nothing_complete_and_the_next_run_resumes(pipeline_env, artifacts_dir, tmp_path, capsys):
    log = tmp_path / "killed.log"
    run = start_run(LONG_ESTIMATE, artifacts_dir, pipeline_env, log)
    try:
        deadline = time.monotonic() + SUBPROCESS_TIMEOUT
        # preprocess is complete and estimate is writing into its staging folder
        while not (complete_folders(artifacts_dir / "preprocess")
                   and list((artifacts_dir / "estimate").glob(f"{STAGING_PREFIX}*"))):
            assert run.poll() is None, f"the run ended before it could be killed:\n{log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, "the estimate stage never started"
            time.sleep(0.02)
    finally:
        run.send_signal(signal.SIGKILL)
        run.wait()

    assert not complete_folders(artifacts_dir / "estimate")
    assert private_folders(artifacts_dir)  # the killed writer's staging folder is left behind

    assert main(["run", *LONG_ESTIMATE]) == 0
    out = capsys.readouterr().out
    assert re.search(r"preprocess\s+cached", out) and re.search(r"estimate\s+ran", out), out
    client, (resumed, killed) = pipeline_runs(artifacts_dir)
    stages = stage_runs(client, resumed)
    assert resumed.info.status == "FINISHED"
    assert stages["preprocess"].data.tags["sgt.cache_hit"] == "true"
    assert stages["estimate"].data.tags["sgt.cache_hit"] == "false"
    assert stages["estimate"].info.status == "FINISHED"
    (estimate,) = complete_folders(artifacts_dir / "estimate")
    assert json.loads((estimate / MANIFEST_FILE).read_text())["mlflow_run_id"] == stages["estimate"].info.run_id
    assert not private_folders(artifacts_dir)  # the next write to each stage removed the dead writer's folder
    # SIGKILL left the killed run's MLflow runs RUNNING; the next run on this machine closed them
    assert killed.info.status == "KILLED"
    killed_stages = stage_runs(client, killed)
    assert killed_stages["estimate"].info.status == "KILLED"
    assert killed_stages["preprocess"].info.status == "FINISHED"
    # ... and marked its Prefect flow run, and the task run it was in, CRASHED instead of RUNNING forever
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    with get_client(sync_client=True) as prefect:
        flow_run_id = killed.data.tags["sgt.prefect_flow_run_id"]
        assert prefect.read_flow_run(flow_run_id).state.type.value == "CRASHED"
        task_runs = prefect.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])))
        states = {task_run.name.split("-")[0]: task_run.state.type.value for task_run in task_runs}
        assert states["preprocess"] == "COMPLETED" and states["estimate"] == "CRASHED"
        resumed_run = prefect.read_flow_run(resumed.data.tags["sgt.prefect_flow_run_id"])
        assert resumed_run.state.type.value == "COMPLETED"


# --- two runs at once on one artifacts root and one MLflow store -------------------------------------------

TRAIN_EPOCHS = (4, 5)  # the two configurations differ in train.epochs only: shared upstream keys, own train


@pytest.fixture(scope="module")
def concurrent_runs(pipeline_env, tmp_path_factory) -> Path:
    """Two `sgt run` processes started together on one artifacts root (and its sqlite store)."""
    root = tmp_path_factory.mktemp("concurrent") / "artifacts"
    tiny = [override for override in TINY_OVERRIDES if not override.startswith("train.epochs=")]
    logs = {epochs: root.parent / f"train_epochs_{epochs}.log" for epochs in TRAIN_EPOCHS}
    runs = {epochs: start_run([*tiny, f"train.epochs={epochs}"], root, pipeline_env, logs[epochs])
            for epochs in TRAIN_EPOCHS}
    for epochs, run in runs.items():
        finish(run, logs[epochs])
    return root


@pytest.mark.e2e  # the `concurrent_runs` fixture: two `sgt run` processes at once, ~90 s on 2 shared cores
def test_concurrent_runs_complete_their_own_stage_folders(concurrent_runs):
    root = concurrent_runs
    trains = complete_folders(root / "train")
    epochs = sorted(json.loads((path / MANIFEST_FILE).read_text())["config"]["train"]["epochs"] for path in trains)
    assert epochs == list(TRAIN_EPOCHS)  # one train folder per configuration, each with its own key
    for stage in ("preprocess", "estimate", "export"):  # same key for both: one result, kept whole
        (folder,) = complete_folders(root / stage)
        assert json.loads((folder / MANIFEST_FILE).read_text())["key"] == folder.name
    assert not private_folders(root)  # a run that lost the race for a key deleted its own copy


@pytest.mark.e2e
def test_concurrent_runs_keep_their_own_mlflow_runs(concurrent_runs):
    client, parents = pipeline_runs(concurrent_runs)
    assert sorted(parent.data.params["train.epochs"] for parent in parents) == [str(e) for e in TRAIN_EPOCHS]
    child_ids = set()
    for parent in parents:
        assert parent.info.status == "FINISHED"
        assert {"val_roc_auc", "test_roc_auc", "pipeline_seconds"} <= set(parent.data.metrics)
        stages = stage_runs(client, parent)
        assert set(stages) == {"preprocess", "estimate", "export", "train"}
        assert all(run.info.status == "FINISHED" for run in stages.values())
        child_ids |= {run.info.run_id for run in stages.values()}
        train = stages["train"]
        assert train.data.params["train.epochs"] == parent.data.params["train.epochs"]
        assert train.data.tags["sgt.cache_key"] == parent.data.tags["sgt.key.train"]
        manifest = json.loads((concurrent_runs / "train" / train.data.tags["sgt.cache_key"] / MANIFEST_FILE).read_text())
        assert manifest["mlflow_run_id"] == train.info.run_id
    assert len(child_ids) == 8  # no child run shared or lost


# --- the artifact store on its own ---------------------------------------------------------------------------


def test_second_writer_of_a_key_keeps_the_first_result(tmp_path):
    store = ArtifactStore(tmp_path)
    with store.writing("estimate", "k") as second:  # started first, finishes last
        with store.writing("estimate", "k") as first:
            store.finish(first, {"writer": 1}, {"writer": 1})
        store.finish(second, {"writer": 2}, {"writer": 2})
    assert store.metrics("estimate", "k") == {"writer": 1}
    assert os.listdir(tmp_path / "estimate") == ["k"]


def test_failed_write_leaves_nothing(tmp_path):
    store = ArtifactStore(tmp_path)
    with pytest.raises(RuntimeError), store.writing("train", "k") as staging:
        (staging / "model.pt").write_bytes(b"partial")
        raise RuntimeError("stage failed")
    assert not store.is_complete("train", "k") and os.listdir(tmp_path / "train") == []


def test_only_dead_writers_folders_are_removed(tmp_path):
    ended = subprocess.Popen(["true"])
    ended.wait()
    host = socket.gethostname()
    dead = tmp_path / "export" / f"{STAGING_PREFIX}a-0123abcd-{ended.pid}@{host}"
    live = tmp_path / "export" / f"{STAGING_PREFIX}b-0123abcd-{os.getpid()}@{host}"
    elsewhere = tmp_path / "export" / f"{STAGING_PREFIX}c-0123abcd-1@another-host"
    for folder in (dead, live, elsewhere):
        folder.mkdir(parents=True)
    store = ArtifactStore(tmp_path)
    with store.writing("export", "d") as staging:
        store.finish(staging, {}, {})
    assert not dead.exists() and live.exists() and elsewhere.exists()


def test_forced_rewrite_replaces_the_result(tmp_path):
    store = ArtifactStore(tmp_path)
    for writer in (1, 2):
        with store.writing("train", "k", replace=True) as staging:
            store.finish(staging, {"writer": writer}, {})
    assert store.metrics("train", "k") == {"writer": 2}
    assert os.listdir(tmp_path / "train") == ["k"]


# --- untrusted files are never unpickled ------------------------------------------------------------------


class _Payload:
    """Unpickling this runs `marker.touch()`: a stand-in for arbitrary code in a malicious checkpoint."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return Path.touch, (self.marker,)


@pytest.mark.e2e
def test_checkpoints_load_without_unpickling_code(concurrent_runs):
    for stage, name in (("estimate", ESTIMATOR_FILE), ("train", MODEL_FILE), ("estimate", SCORES_FILE)):
        for folder in complete_folders(concurrent_runs / stage):
            checkpoint = torch.load(folder / name, weights_only=True)
            assert isinstance(checkpoint, torch.Tensor) or checkpoint["state_dict"], name


def test_malicious_pickle_in_an_artifact_fails_instead_of_running(tmp_path):
    marker = tmp_path / "payload_ran"
    pickle.loads(pickle.dumps(_Payload(marker)))
    assert marker.exists()  # the payload is live: plain unpickling runs it
    marker.unlink()

    preprocess, estimate = tmp_path / "preprocess", tmp_path / "estimate"
    preprocess.mkdir(), estimate.mkdir()
    torch.save({"edge_index": _Payload(marker)}, preprocess / INTERACTION_GRAPH_FILE)
    torch.save(_Payload(marker), estimate / SCORES_FILE)
    with pytest.raises(pickle.UnpicklingError, match="Weights only load failed"):
        InteractionGraph.load(preprocess / INTERACTION_GRAPH_FILE)
    with pytest.raises(ArtifactError, match="Weights only load failed"):  # naming the file, as a stage's input
        run_export({}, {"preprocess": preprocess, "estimate": estimate}, tmp_path / "export")
    assert not marker.exists()
